# Webhooks in batches (outbox_destinations.events_per_request), what
# becomes of a batch: an outcome applies to every event of its request (a
# 503 sends the same events again under the same webhook-id, a 410
# disables the destination and leaves each event pending, its outcome
# logged for each), and a kill -9 of the relay while a batch waits for its
# answer counts each of its events once as cut off and sends them again,
# in one request. What the requests carry: 039_batches_requests.pl.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxBatches;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($node, $sink) = batches_node('batches');
my ($ids, $reqs);

############################################################################
# an outcome is every event's: a 503 fails the batch, all are sent again

$sink->control(paths => { '/fail' => { script => [ { status => 503 } ] } });
$ids = backlog($node, 'fail.%', q{SELECT outbox_emit('fail.x', jsonb_build_object('n', g)) FROM generate_series(1, 4) g});
$reqs = requests_of($sink, '/fail');
is(join(',', map { $_->{status} } @$reqs), '503,200', '503: the batch, then again');
is($reqs->[1]{headers}{'webhook-id'}, $reqs->[0]{headers}{'webhook-id'}, '503: the same webhook-id again');
is($reqs->[1]{body} =~ s/"attempt": 2/"attempt": 1/gr, $reqs->[0]{body}, '503: the same events, the attempt counted');
is($node->safe_psql('postgres', q{SELECT string_agg(DISTINCT attempts || ' ' || (last_error IS NULL), ',') FROM outbox WHERE event_type = 'fail.x'}),
	'2 true', '503: two attempts each, the error cleared by the delivery');

# 410 Gone: every event of the batch stays pending, the destination disabled
$sink->control(paths => { '/fail' => { status => 410 } });
set_databases($node, '');
ok(wait_no_relay($node, 'postgres'), '410: relay stopped');
$ids = emit($node, 'postgres', 'fail.gone', 3);
set_databases($node, 'postgres');
ok($node->poll_query_until('postgres', q{SELECT NOT enabled FROM outbox_destinations WHERE name = 'fail'}),
	'410: the destination is disabled');
# then they wait, as unroutable, for the destination to be enabled again
ok($node->poll_query_until('postgres', q{
		SELECT count(*) = 3 FROM outbox
		 WHERE event_type = 'fail.gone' AND attempts = 1 AND dead_at IS NULL AND delivered_at IS NULL
		   AND last_error = 'no enabled destination matches the event type'}),
	'410: each event of the batch pending, its attempt counted');
my $log = slurp_file($node->logfile);
is(scalar(grep { $log =~ /could not deliver event $_ to destination "fail": HTTP status 410 \(Gone/ } @$ids), 3,
	'410: the outcome logged for each event');
is(scalar(grep { $_->{status} == 410 } @{ $sink->requests('/fail') }), 1, '410: in one request');

############################################################################
# kill -9 while a batch waits for its answer

$sink->paths('/crash' => { hold => JSON::PP::true });
set_databases($node, '');
ok(wait_no_relay($node, 'postgres'), 'crash: relay stopped');
$ids = emit($node, 'postgres', 'crash.x', 10);
my $offset = -s $node->logfile;
set_databases($node, 'postgres');
my $pid = wait_relay($node, 'postgres');
ok(wait_until(sub { @{ $sink->arrivals('/crash') } >= 1 }), 'crash: the batch is sent and held');
kill 'KILL', $pid or die "kill $pid: $!";
$sink->paths('/crash' => {});
$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
ok(wait_relay($node, 'postgres', $pid), 'crash: a new relay after the crash restart');
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 10 FROM outbox WHERE event_type = 'crash.x' AND delivered_at IS NOT NULL}),
	'crash: every event delivered');
like(log_since($node, $offset), qr/outbox relay counted 10 attempts that no outcome recorded/,
	'crash: the 10 attempts cut off are counted');
is($node->safe_psql('postgres', q{SELECT string_agg(DISTINCT attempts::text, ',') FROM outbox WHERE event_type = 'crash.x'}), '2',
	'crash: two attempts each, the one cut off and the delivery');
my @sent = sort { $a->{received_at} <=> $b->{received_at} } @{ $sink->arrivals('/crash') };
is(scalar(@sent), 2, 'crash: the batch was sent twice in all');
is(join(',', map { $_->{id} } @{ decode_json($sent[1]{body}) }), join(',', @$ids),
	'crash: the second time, the same events in one request');
is($sent[1]{headers}{'webhook-id'}, $sent[0]{headers}{'webhook-id'}, 'crash: with the same webhook-id');

done_testing();
