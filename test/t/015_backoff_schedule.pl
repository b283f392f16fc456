# A failing event is retried on its backoff schedule even when the relay
# polls once an hour: after each step the relay reads the next due time with
# a fresh snapshot and sleeps until then, not until the next poll.
#
# The endpoint answers 503 to everything; outbox.backoff_base is 1 s and
# outbox.backoff_max 8 s, so after attempt n the next one is due after
# 1 s * 2^(n-1) (1, 2, 4 s) with "equal jitter": between half and all of
# that. Each gap between two requests, as the sink timed their arrival, must
# lie within [0.5 * expected - 0.3 s, expected + 1.5 s]: the slack covers the
# time a request takes and a loaded machine, not a relay that waits for its
# poll (an hour) or retries at once.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('schedule',
	'outbox.poll_interval' => "'1h'",
	'outbox.backoff_base' => "'1s'",
	'outbox.backoff_max' => "'8s'");
my $sink = start_sink();
my $url = $sink->url('/hook');
my $pid = wait_relay($node, 'postgres');
ok($pid, 'relay runs');

$node->safe_psql('postgres', "INSERT INTO outbox_destinations (name, url) VALUES ('hook', '$url')");
$sink->control(status => 503);

# the COMMIT wakes the relay for the first attempt; the others come from
# its schedule alone
my ($id) = @{ emit($node, 'postgres', 'task.created', 1) };
ok(wait_until(sub { $sink->stats('/hook')->{requests} >= 4 }), 'four attempts arrived');
ok( $node->poll_query_until('postgres',
		"SELECT attempts = 4 AND NOT (id, attempts) IN (SELECT f.id, f.attempts FROM outbox_in_flight j, unnest(j.ids, j.attempts) AS f(id, attempts)) FROM outbox WHERE event_id = '$id'"),
	'the fourth attempt is recorded');

my $requests = $sink->requests('/hook');
my @ours = grep { $_->{webhook_id} eq $id } @$requests;
is(scalar @ours, scalar @$requests, 'every request is for the event');
my @gaps = (gaps(\@ours))[ 0 .. 2 ];
my @expected = (1, 2, 4);
diag(sprintf('gaps between attempts 1-2, 2-3, 3-4: %.2f s, %.2f s, %.2f s (expected 0.5-1, 1-2, 2-4 s)', @gaps));
for my $i (0 .. 2)
{
	my ($lo, $hi) = (0.5 * $expected[$i] - 0.3, $expected[$i] + time_bound(1.5));
	cmp_ok($gaps[$i], '>=', $lo, sprintf('attempt %d came at least %.1f s after attempt %d', $i + 2, $lo, $i + 1));
	cmp_ok($gaps[$i], '<=', $hi, sprintf('attempt %d came at most %.1f s after attempt %d', $i + 2, $hi, $i + 1));
}

my ($attempts, $error, $dead, $next) = split /\|/, $node->safe_psql('postgres', qq{
	SELECT attempts, last_error, dead_at IS NOT NULL,
	       extract(epoch FROM next_attempt_at - now()) BETWEEN 0 AND 8.5
	  FROM outbox WHERE event_id = '$id'});
like($error, qr/^HTTP status 503/, 'last_error keeps the status');
is($dead, 'f', 'not dead-lettered');
is($next, 't', 'the fifth attempt is scheduled within backoff_max');

# the endpoint recovers: the fifth attempt delivers the event
$sink->control(status => 200);
ok( $node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL AND attempts = 5 FROM outbox WHERE event_id = '$id'"),
	'delivered by the fifth attempt, on schedule');
is(relay_pid($node, 'postgres'), $pid, 'the same relay throughout');

$sink->stop;
$node->stop;
done_testing();
