# A time limit measures the endpoint, never the relay's own lateness.
#   a. the relay is held up in a step (its outcomes wait for a table lock)
#      for longer than outbox.http_timeout while requests are in flight and
#      their 2xx answers arrive: once it goes on, every answer is read and
#      recorded; no event is timed out, none is sent twice
#   b. an endpoint that does not answer is still cut off at the limit, by
#      the relay's own clock: the exact last_error
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use List::Util qw(max);
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = outbox_node('late',
	'outbox.http_timeout' => "'3s'",
	'outbox.max_attempts' => 1);
my $sink = start_sink();
ok(wait_relay($node, 'postgres'), 'relay runs');
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES
	    ('late', 'late.*', '%s'), ('hang', 'hang.*', '%s')},
	$sink->url('/late'), $sink->url('/hang')));

###
### a. answers read late
###
# the session that will hold the relay up, connected beforehand: the held
# requests' time limit runs until the relay is held up
my $locker = $node->background_psql('postgres');
$sink->paths('/late' => { hold => JSON::PP::true });
emit($node, 'postgres', 'late.x', 50);
ok(wait_until(sub { $sink->stats('/late')->{arrived} >= 16 }), 'a: the first requests are in flight');

# hold the relay's next step: its outcomes wait for this lock
$locker->query_safe('BEGIN; LOCK TABLE outbox IN EXCLUSIVE MODE');
$sink->paths('/late' => { delay_ms => 20 });
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE backend_type = 'outbox relay' AND wait_event_type = 'Lock'}),
	'a: the relay waits for the lock');
# the requests it started before are answered meanwhile, and their answers
# wait in its sockets for longer than the 3 s limit
my $answered;
ok(wait_until(sub {
	my @done = grep { defined $_->{answered_at} && $_->{status} == 200 } @{ $sink->arrivals('/late') };
	$answered = scalar @done;
	return 0 unless $answered >= 16 && $sink->stats('/late')->{in_flight} == 0;
	return time() - max(map { $_->{answered_at} } @done) > 4.0;
}), 'a: answers wait 4 s unread');
note("a: $answered answers sent before the relay went on");
$locker->query_safe('COMMIT');
$locker->quit;

ok($node->poll_query_until('postgres',
	"SELECT count(*) = 50 FROM outbox WHERE event_type = 'late.x' AND delivered_at IS NOT NULL"),
	'a: every event delivered');
is($node->safe_psql('postgres',
	"SELECT count(*) FILTER (WHERE attempts <> 1 OR last_error IS NOT NULL OR dead_at IS NOT NULL) FROM outbox WHERE event_type = 'late.x'"),
	'0', 'a: each in one attempt, none timed out');
is($sink->stats('/late')->{requests}, 50, 'a: 50 requests for 50 events: none sent twice');

###
### b. an endpoint that does not answer is cut off at the limit
###
$sink->paths('/hang' => { hold => JSON::PP::true });
my ($hang) = @{ emit($node, 'postgres', 'hang.x', 1) };
ok($node->poll_query_until('postgres',
	"SELECT dead_at IS NOT NULL FROM outbox WHERE event_id = '$hang'"),
	'b: the event without an answer is dead-lettered');
is($node->safe_psql('postgres', "SELECT attempts || ' ' || last_error FROM outbox WHERE event_id = '$hang'"),
	'1 HTTP request failed: timed out after 3000 ms with 0 bytes of the answer received',
	'b: timed out at the limit');

$sink->stop;
$node->stop;
done_testing();
