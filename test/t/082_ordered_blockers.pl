# Ordered destinations, with four relays per database: what holds a
# key's events back, and what must not:
#   1. key heads whose requests the endpoint holds: only they are in
#      flight to it, the key's other events wait, held, and an unordered
#      destination delivers meanwhile (outbox_blocked_keys shows the keys);
#   2. kill -9 of a relay in the middle of that flow: after the crash
#      restart the heads in flight are sent again first, nothing is lost,
#      and each key's order holds;
#   3. outbox_relay() in a session whose transaction stays open meets an
#      event held back by one a relay has in flight: it holds it without
#      locking the blocker, and no relay waits for a lock;
#   4. an event whose blocker an open transaction has locked is held for
#      a moment rather than claimed again and again.
# Failures, a poison event and redelivery: 080_ordered_delivery.pl; the
# order is checked as that file says (check_order in
# test/perl/OutboxOrdered.pm).
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxOrdered;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($node, $sink) = ordered_node('ordered');

# 1. an ordered destination whose key heads hang does not hold back another
# destination: with the requests of 5 keys held by the endpoint, only those
# 5 are in flight to it, its 995 other events wait, held, and 500 events of
# an unordered destination are delivered meanwhile
$sink->paths('/ord' => { hold => 1 });
$node->safe_psql('postgres', q{
	SELECT count(outbox_emit('ord.hang', jsonb_build_object('i', i), 'order', 'h' || (i % 5)))
	  FROM generate_series(1, 1000) i});
ok( wait_until(sub { $sink->stats('/ord')->{in_flight} == 5 }), 'the 5 key heads are in flight');
emit($node, 'postgres', 'flat.x', 500);
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 500 FROM outbox WHERE event_type = 'flat.x' AND delivered_at IS NOT NULL"),
	'the unordered destination delivers its 500 events meanwhile');
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 995 FROM outbox WHERE event_type = 'ord.hang' AND held_by IS NOT NULL}),
	'the 995 others wait, held, out of the claims\' way');
is($sink->stats('/ord')->{in_flight}, 5, 'still only one request per key in flight');
is($node->safe_psql('postgres', q{
		SELECT count(*) || '/' || sum(waiting) FROM outbox_blocked_keys
		 WHERE destination = 'ord' AND state = 'in flight'}),
	'5/995', 'outbox_blocked_keys shows the 5 keys, each held by its event in flight');

# 2. kill -9 of a relay in the middle of that flow: a crash restart; the
# heads in flight are sent again first, and nothing is lost
$sink->paths('/ord' => { delay_ms => 5 });
ok( $node->poll_query_until('postgres',
		"SELECT count(*) >= 100 FROM outbox WHERE event_type = 'ord.hang' AND delivered_at IS NOT NULL"),
	'the flow resumes');
my $victim = $node->safe_psql('postgres', q{
	SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox relay' AND datname = 'postgres' LIMIT 1});
my $offset = -s $node->logfile;
kill 'KILL', $victim;
$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
ok( poll_after_crash($node, 'postgres',
		"SELECT count(*) = 1000 FROM outbox WHERE event_type = 'ord.hang' AND delivered_at IS NOT NULL"),
	'after the crash restart, all 1,000 are delivered')
  or diag($node->safe_psql('postgres', q{
	SELECT o.id, o.aggregate_id, o.held_by, o.next_attempt_at - now(), o.attempts, o.last_error,
	       b.delivered_at IS NOT NULL AS blocker_delivered
	  FROM outbox o LEFT JOIN outbox b ON b.id = o.held_by
	 WHERE o.event_type = 'ord.hang' AND o.delivered_at IS NULL ORDER BY o.id LIMIT 20}),
	$node->safe_psql('postgres', 'SELECT * FROM outbox_in_flight'),
	$node->safe_psql('postgres', 'SELECT * FROM outbox_relay_stats()'));
like(slurp_file($node->logfile), qr/terminated by signal 9/, 'the server went through a crash restart');
is(check_order($node, $sink, '/ord', 'ord.hang', 'crash'), 1000, 'all 1,000 arrived with a 2xx answer');

# 3. outbox_relay() in a session whose transaction stays open meets an
# event held back by one that a relay has in flight: it must not lock that
# event, or the relay could not record its outcome (it would wait for the
# session) and would stop for every destination
$sink->paths('/ord' => { hold => 1 });
$node->safe_psql('postgres', q{
	SELECT outbox_emit('ord.solo', '{"n": 1}', 'order', 'solo');
	SELECT outbox_emit('ord.solo', '{"n": 2}', 'order', 'solo');});
ok(wait_until(sub { $sink->stats('/ord')->{in_flight} == 1 }), 'a relay sends the first event of the key');
my ($first, $second) = split /
/, $node->safe_psql('postgres',
	"SELECT id FROM outbox WHERE event_type = 'ord.solo' ORDER BY id");
my $session = $node->background_psql('postgres');
# the session makes the second due and claims it itself (its update keeps
# the relays' claims off the row)
$session->query_safe(qq{
	BEGIN;
	UPDATE outbox SET next_attempt_at = now() WHERE id = $second;
	SELECT * FROM outbox_relay(10);});
is($session->query_safe("SELECT held_by FROM outbox WHERE id = $second"), $first,
	'outbox_relay() holds the second event for the first');
$sink->paths('/ord' => {});
ok($node->poll_query_until('postgres', "SELECT delivered_at IS NOT NULL FROM outbox WHERE id = $first"),
	'the relay records the first one\'s delivery while the session is still open');
is($node->safe_psql('postgres', q{
		SELECT count(*) FROM pg_stat_activity
		 WHERE backend_type = 'outbox relay' AND wait_event_type = 'Lock'}),
	'0', 'no relay waits for a lock');
$session->query_safe('COMMIT');
$session->quit;
ok($node->poll_query_until('postgres', "SELECT delivered_at IS NOT NULL FROM outbox WHERE id = $second"),
	'the second is delivered after it');
is(check_order($node, $sink, '/ord', 'ord.solo', 'outbox_relay() beside the relays'), 2, 'both arrived');

# 4. an event whose blocker another transaction has locked (here an
# operator's open transaction) is held for a moment rather than claimed
# again and again: a relay that skips the locked row still holds the event
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT outbox_emit('ord.locked', '{"n": 1}', 'order', 'locked');
	UPDATE outbox SET next_attempt_at = now() + interval '1 hour', attempts = 1
	 WHERE event_type = 'ord.locked';
	COMMIT;});
my $head = $node->safe_psql('postgres', "SELECT id FROM outbox WHERE event_type = 'ord.locked'");
my $operator = $node->background_psql('postgres');
$operator->query_safe("BEGIN; SELECT id FROM outbox WHERE id = $head FOR UPDATE;");
$node->safe_psql('postgres', q{SELECT outbox_emit('ord.locked', '{"n": 2}', 'order', 'locked')});
my $next = $node->safe_psql('postgres', "SELECT max(id) FROM outbox WHERE event_type = 'ord.locked'");
ok( $node->poll_query_until('postgres', qq{
		SELECT held_by = $head AND next_attempt_at < now() + interval '1 minute'
		  FROM outbox WHERE id = $next}),
	'the event is held for its locked blocker, for a moment only');
$operator->query_safe('ROLLBACK');
$operator->quit;

$sink->stop;
$node->stop;
done_testing();
