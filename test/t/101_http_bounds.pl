# What a relay holds for a webhook that is slow or hangs: each claim takes
# no more of a destination's events than it can start within a second (its
# connections, times the requests each finishes in a second by the
# destination's average), and an event that still finds no connection free
# within its time limit goes back to the table, not sent, no attempt
# counted. outbox.http_max_connections 4, outbox.batch_size 1000, time
# limit 1 s. Sampled from the journal: events in flight and the age of the
# oldest claim, by the server's clock. 1.1 claimed whole backlogs: 120
# events to a 300 ms endpoint were in flight for 9 s.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $conns = 4;
my $node = outbox_node('httpbounds', 'outbox.batch_size' => 1000,
	'outbox.http_max_connections' => $conns, 'outbox.backoff_base' => "'200ms'",
	'outbox.backoff_max' => "'1s'");
my $sink = start_sink();
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, event_types, url, timeout_ms) VALUES
	    ('slow', 'slow.*', '%s', 1000), ('flip', 'flip.*', '%s', 1000)},
	$sink->url('/slow'), $sink->url('/flip')));

# a slow endpoint: 300 ms an answer, so 3 rounds a second on 4 connections;
# measured first (a destination the relay has not measured yet has no
# limit: what finds no connection within its time limit goes back)
$sink->paths('/slow' => { delay_ms => 300 });
$node->safe_psql('postgres', "SELECT outbox_emit('slow.warm', '{}') FROM generate_series(1, 4)");
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 4 FROM outbox WHERE event_type = 'slow.warm' AND delivered_at IS NOT NULL"),
	'the relay measured the slow endpoint');
$node->safe_psql('postgres',
	"SELECT count(outbox_emit('slow.flow', jsonb_build_object('n', g))) FROM generate_series(1, 120) g");
my (undef, $most, $oldest) = in_flight_sample($node, 'slow.flow', 5);
diag(sprintf('slow endpoint: at most %d events in flight, the oldest claim %.3f s old', $most, $oldest));
cmp_ok($most, '>', 0, 'events were in flight to the slow endpoint');
cmp_ok($most, '<=', $conns * 4,
	"at most what 4 connections start in a second at 300 ms ($most of 120)");
my $bound = time_bound(2);
cmp_ok($oldest, '<', $bound,
	sprintf('no claim in flight longer than the time limit and a second (%.3f s < %g s)', $oldest, $bound));
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 120 FROM outbox WHERE event_type = 'slow.flow' AND delivered_at IS NOT NULL"),
	'all 120 delivered');
is($node->safe_psql('postgres', "SELECT max(attempts) FROM outbox WHERE event_type = 'slow.flow'"),
	'1', 'each at its first attempt: none waited past its time limit');
is(scalar(@{ $sink->delivered_ids('/slow') }), 124, 'one request per event');

# A fast endpoint (so the claim may take a whole backlog) that hangs once
# the claim has its events: those that find no connection free within
# their time limit go back, not sent, with no attempt counted.
$node->safe_psql('postgres',
	"SELECT count(outbox_emit('flip.warm', jsonb_build_object('n', g))) FROM generate_series(1, 40) g");
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 40 FROM outbox WHERE event_type = 'flip.warm' AND delivered_at IS NOT NULL"),
	'the fast endpoint took its first events');
$sink->paths('/flip' => { delay_ms => 5000 });
$node->safe_psql('postgres',
	"SELECT count(outbox_emit('flip.flow', jsonb_build_object('n', g))) FROM generate_series(1, 100) g");
(undef, $most, $oldest) = in_flight_sample($node, 'flip.flow', 4);
diag(sprintf('hung endpoint: at most %d events in flight, the oldest claim %.3f s old', $most, $oldest));
cmp_ok($most, '>', $conns, "the claim before it hung took more than $conns events ($most)");
$bound = time_bound(3);
cmp_ok($oldest, '<', $bound,
	sprintf('no claim in flight longer than twice the time limit and a second (%.3f s < %g s)',
		$oldest, $bound));
my ($not_sent, $counted) = split /\|/, $node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE last_error = 'not sent: no connection was free for it within its time limit of 1000 ms'
	                          AND attempts = 0),
	       count(*) FILTER (WHERE last_error LIKE 'HTTP request failed: timed out after 1000 ms%' AND attempts > 0)
	  FROM outbox WHERE event_type = 'flip.flow'});
cmp_ok($not_sent, '>', 0, "events that waited past their time limit went back not sent, uncounted ($not_sent)");
cmp_ok($counted, '>', 0, "those whose request started timed out, counted ($counted)");

# the endpoint answers again: all delivered
$sink->paths('/flip' => { delay_ms => 0 });
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 100 FROM outbox WHERE event_type = 'flip.flow' AND delivered_at IS NOT NULL"),
	'all 100 delivered once the endpoint answers');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_in_flight'), '0', 'nothing left in flight');

$sink->stop;
$node->stop;
done_testing();
