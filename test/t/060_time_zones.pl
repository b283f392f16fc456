# The relay, the SQL functions and the view with the server in a zone whose
# clocks went forward an hour two days ago (a POSIX rule made from the
# current date) and sessions in another zone (Asia/Kathmandu, +05:45): the
# envelope's created_at is UTC with Z, the relay's delays are absolute, and
# retention and replay bounds are absolute too.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use List::Util qw(min);
use POSIX qw(strftime);
use Time::HiRes qw(time);
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

# UTC, then UTC+1 from two days ago (the rule's time is standard time)
my @change = gmtime(time() - 2 * 86400);
my $zone = sprintf('XST0XDT,M%d.%d.%d/%s,M%d.1.0',
	$change[4] + 1, min(int(($change[3] - 1) / 7) + 1, 5), $change[6],
	strftime('%H:%M:%S', @change), ($change[4] + 1 + 5) % 12 + 1);
my $node = outbox_node('zones',
	timezone => "'$zone'",
	'outbox.backoff_base' => "'20min'",
	'outbox.backoff_max' => "'20min'");
# sessions get another zone; the relay drops database settings
$node->safe_psql('postgres', q{ALTER DATABASE postgres SET timezone = 'Asia/Kathmandu'});
is($node->safe_psql('postgres', 'SHOW timezone'), 'Asia/Kathmandu', 'sessions run in Asia/Kathmandu');
is( $node->safe_psql('postgres', qq{
		SET timezone = '$zone';
		SELECT extract(epoch FROM now() - (now() - interval '3 days'))::int / 3600}),
	'71', "the server's zone had a clock change within the last three days");
my $pid = wait_relay($node, 'postgres');
ok($pid, 'relay runs');

my $sink = start_sink();
my $url = $sink->url('/hook');
$node->safe_psql('postgres', qq{INSERT INTO outbox_destinations (name, event_types, url) VALUES ('hook', 'task.*', '$url')});

# the envelope: created_at in UTC, with Z, the same instant as the row's
my ($id) = @{ emit($node, 'postgres', 'task.created', 1) };
ok($sink->wait_delivered(1), 'delivered');
my $created = decode_json($sink->delivered->[0]{body})->{created_at};
like($created, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/, "created_at is UTC with Z ($created)");
is($node->safe_psql('postgres', "SELECT created_at = '$created' FROM outbox WHERE event_id = '$id'"),
	't', 'and the instant of the row');

# a failed attempt: next_attempt_at is the logged delay after the attempt,
# in absolute time
$sink->control(status => 503);
my $offset = -s $node->logfile;
my $t0 = time();
my ($failing) = @{ emit($node, 'postgres', 'task.failing', 1) };
ok( $node->poll_query_until('postgres',
		"SELECT attempts = 1 AND NOT (id, attempts) IN (SELECT f.id, f.attempts FROM outbox_in_flight j, unnest(j.ids, j.attempts) AS f(id, attempts)) FROM outbox WHERE event_id = '$failing'"),
	'the failed attempt is recorded');
my $t1 = time();
my ($delay_ms) = log_since($node, $offset) =~ /event $failing .*\n.*retried in (\d+) ms/;
ok($delay_ms >= 600_000 && $delay_ms <= 1_200_000, "the delay is the backoff: $delay_ms ms");
my $next = $node->safe_psql('postgres',
	"SELECT extract(epoch FROM next_attempt_at) FROM outbox WHERE event_id = '$failing'");
cmp_ok($next, '>=', $t0 + $delay_ms / 1000 - 0.01, 'next attempt no earlier than the delay after the attempt');
cmp_ok($next, '<=', $t1 + $delay_ms / 1000 + 0.01, 'nor later');

# an event without a destination, created three days ago: parked for an hour
$t0 = time();
$node->safe_psql('postgres', q{
	INSERT INTO outbox (event_type, payload, created_at, next_attempt_at)
	VALUES ('lost.old', '{}', now() - interval '72 hours', now())});
ok( $node->poll_query_until('postgres',
		q{SELECT last_error IS NOT NULL FROM outbox WHERE event_type = 'lost.old'}),
	'the unroutable event is parked');
$t1 = time();
$next = $node->safe_psql('postgres',
	q{SELECT extract(epoch FROM next_attempt_at) FROM outbox WHERE event_type = 'lost.old'});
ok($next >= $t0 + 3600 - 0.01 && $next <= $t1 + 3600 + 0.01, 'for one hour of absolute time');

# the view, in the session's zone: the instants of the rows
is( $node->safe_psql('postgres', q{
		SELECT string_agg(event_type || ':' || pending || ':' || retrying || ':' || unroutable || ':'
		                  || (oldest_pending = (SELECT min(created_at) FROM outbox o
		                                         WHERE o.event_type = s.event_type
		                                           AND o.delivered_at IS NULL)), ',' ORDER BY event_type)
		  FROM outbox_status s}),
	'lost.old:1:0:1:true,task.failing:1:1:0:true', 'outbox_status');

# replay by a range given in UTC: the delivered event and nothing else
my $since = strftime('%Y-%m-%d %H:%M:%SZ', gmtime(time() - 3600));
$sink->control(status => 200);
is($node->safe_psql('postgres', "SELECT outbox_redeliver('$since', 'infinity')"), '1', 'one event replayed');
ok($sink->wait_delivered(2), 'and delivered again');
is(decode_json($sink->delivered->[1]{body})->{created_at}, $created, 'with the same created_at');

# inbox_purge('3 days') in the server's zone and in the session's
for my $tz ($zone, 'Asia/Kathmandu')
{
	is( $node->safe_psql('postgres', qq{
			SET timezone = '$tz';
			DELETE FROM inbox;
			INSERT INTO inbox (consumer, event_id, processed_at) VALUES
				('younger', gen_random_uuid(), now() - interval '71 hours 30 minutes'),
				('older', gen_random_uuid(), now() - interval '72 hours 30 minutes');
			SELECT inbox_purge('3 days');
			SELECT string_agg(consumer, ',') FROM inbox}),
		"1\nyounger", "inbox_purge('3 days') purges what is older than 72 hours, zone $tz");
}
is(relay_pid($node, 'postgres'), $pid, 'the same relay throughout');

$sink->stop;
$node->stop;
done_testing();
