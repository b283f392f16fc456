# A transaction that writes a long run of events of one aggregate to an
# ordered destination, with four relays per database:
#   1. the events after the first are written held, each for the one
#      before it (src/emit_hold.c), so no claim walks them: the events of
#      other aggregates written after them, in the same transaction, are
#      delivered while the run is still almost all as written (a claim
#      that met them would rewrite each, holding it: 20,000 row updates
#      before the first of the others, as 1.1 did);
#   2. runs of two keys, interleaved, written over two transactions (the
#      second's first event of a key is held by the claim, not at emit),
#      reach the endpoint one at a time, in id order;
#   3. a writer never waits for a lock on the destinations to hold.
# A run through a crash restart: 082_ordered_blockers.pl; through random
# failures and a dead-lettered head: 080_ordered_delivery.pl.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxOrdered;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($node, $sink) = ordered_node('long_runs');

# 1. 20,000 events of one aggregate, then 20 of 20 others, in one
# transaction; its xid tells a row as written from one rewritten since
my $out = $node->safe_psql('postgres', q{
	BEGIN;
	SELECT count(outbox_emit('ord.run', jsonb_build_object('i', i), 'order', 'hot'))
	  FROM generate_series(1, 20000) i;
	SELECT count(outbox_emit('ord.others', jsonb_build_object('i', i), 'order', 'k' || i))
	  FROM generate_series(1, 20) i;
	SELECT xid(pg_current_xact_id());
	COMMIT});
my $xid = (split /\n/, $out)[-1];
like($xid, qr/^\d+$/, 'the transaction that wrote them has an xid');
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 20 FROM outbox WHERE event_type = 'ord.others' AND delivered_at IS NOT NULL}),
	'the 20 events of other aggregates are delivered');
my $rewritten = $node->safe_psql('postgres', qq{
	SELECT count(*) FROM outbox WHERE aggregate_id = 'hot' AND xmin <> '$xid'::xid});
note("rows of the run rewritten by then: $rewritten");
ok($rewritten < 2000, "the run was not walked: $rewritten of its 20,000 rows rewritten by then");
is( $node->safe_psql('postgres', qq{
		SELECT (count(*) >= 18000)
		       || '/' || count(*) FILTER (WHERE held_by IS DISTINCT FROM before)
		       || '/' || count(*) FILTER (WHERE before IS NULL)
		       || '/' || count(*) FILTER (WHERE next_attempt_at <= now() AND before IS NOT NULL)
		  FROM (SELECT held_by, next_attempt_at,
		               lag(id) OVER (ORDER BY id) AS before, xmin AS x
		          FROM outbox WHERE aggregate_id = 'hot') r
		 WHERE x = '$xid'::xid}),
	'true/0/0/0', 'the rows as written (most of the run) are each held for the one before it, not due, and the first is not among them');

# the rest of the run, once the destination is not ordered: every event
# held is released at once (a change of destinations) and delivered
$node->safe_psql('postgres', q{UPDATE outbox_destinations SET ordered = false WHERE name = 'ord'});
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 20000 FROM outbox WHERE event_type = 'ord.run' AND delivered_at IS NOT NULL}),
	'all 20,000 are delivered once the destination is not ordered');
$node->safe_psql('postgres', q{UPDATE outbox_destinations SET ordered = true WHERE name = 'ord'});

# 2. two keys, interleaved, 150 events each over two transactions
for my $t (1 .. 2)
{
	$node->safe_psql('postgres', qq{
		SELECT count(outbox_emit('ord.pair', jsonb_build_object('t', $t, 'i', i), 'order', 'p' || (i % 2)))
		  FROM generate_series(1, 150) i});
}
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 300 FROM outbox WHERE event_type = 'ord.pair' AND delivered_at IS NOT NULL}),
	'all 300 events of the two runs are delivered');
is(check_order($node, $sink, '/ord', 'ord.pair', 'two runs'), 300, 'all 300 arrived with a 2xx answer, in order');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM outbox WHERE event_type = 'ord.pair' AND held_by IS NOT NULL}),
	'0', 'nothing is left held');

# 3. a writer never waits for a lock on the destinations: while another
# session holds ACCESS EXCLUSIVE on them (the relays wait), a run is
# written at once (lock_timeout would fail it) and not held
my $locker = $node->background_psql('postgres');
$locker->query_safe('BEGIN; LOCK TABLE outbox_destinations IN ACCESS EXCLUSIVE MODE;');
is( $node->safe_psql('postgres', q{
		SET lock_timeout = '2s';
		SELECT count(outbox_emit('ord.locked', jsonb_build_object('i', i), 'order', 'lk'))
		  FROM generate_series(1, 3) i}),
	'3', 'a run is written while another session holds the destinations');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FILTER (WHERE held_by IS NOT NULL) || '/' || count(*)
		  FROM outbox WHERE event_type = 'ord.locked'}),
	'0/3', 'none of it is held as written');
$locker->query_safe('ROLLBACK');
$locker->quit;
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 3 FROM outbox WHERE event_type = 'ord.locked' AND delivered_at IS NOT NULL}),
	'the run is delivered once the lock is gone');

done_testing();
