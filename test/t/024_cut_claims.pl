# A claim cut short with nothing left in flight claims again at once. With
# outbox.batch_size (10000) above the in-flight set's room (4096 per
# database), each claim is cut to the room; one whose events all went at
# COMMIT, or were held, has no outcome coming to wake the relay, and used
# to wait for outbox.poll_interval (here an hour) or the next commit:
#   a. 10,000 events at a NOTIFY destination, emitted in one transaction:
#      all delivered once, with no commit after theirs
#   b. an ordered NOTIFY destination, 5,000 events of one aggregate then
#      one event each of ten others: the ten are delivered, each once, and
#      the backlog in the end, in order
#   c. after a claim cut by the memory budget, the relay claims again at
#      once too
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('cut_claims',
	'outbox.batch_size' => 10000,
	'outbox.poll_interval' => "'1h'");
ok(wait_relay($node, 'postgres'), 'the relay runs');
$node->safe_psql('postgres',
	"INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('n', '*', 'cut_claims')");

# a. one transaction, then nothing commits while the relay drains it
$node->safe_psql('postgres',
	"SELECT count(outbox_emit('a.x', jsonb_build_object('n', g))) FROM generate_series(1, 10000) g");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM outbox WHERE event_type = 'a.x' AND delivered_at IS NULL"),
	'a: the 10,000 events are delivered without another commit or poll');
is($node->safe_psql('postgres', q{
		SELECT count(*), min(attempts), max(attempts), count(DISTINCT destination)
		  FROM outbox WHERE event_type = 'a.x'}),
	'10000|1|1|1', 'a: each once, at the destination');

# b. the backlog of one aggregate is held a cut claim at a time; the other
# aggregates' events, emitted after it, are heads and go in the meantime
$node->safe_psql('postgres', q{
	UPDATE outbox_destinations SET ordered = true WHERE name = 'n';
	BEGIN;
	SELECT count(outbox_emit('b.x', jsonb_build_object('n', g), 'task', 'k'))
	  FROM generate_series(1, 5000) g;
	SELECT count(outbox_emit('b.x', jsonb_build_object('n', g), 'task', 'other' || g))
	  FROM generate_series(1, 10) g;
	COMMIT;
});
ok($node->poll_query_until('postgres', q{
		SELECT count(*) = 10 FROM outbox
		 WHERE event_type = 'b.x' AND aggregate_id <> 'k' AND delivered_at IS NOT NULL}),
	'b: the events of the other ten aggregates are delivered');
is($node->safe_psql('postgres', q{
		SELECT string_agg(attempts::text, ',') FROM outbox
		 WHERE event_type = 'b.x' AND aggregate_id <> 'k'}),
	join(',', (1) x 10), 'b: each of the ten once');
# k's events go one at a time, in order, each released by the one before
ok($node->poll_query_until('postgres', q{
		SELECT count(*) = 0 FROM outbox WHERE event_type = 'b.x' AND delivered_at IS NULL}),
	'b: the backlog of k is delivered in the end');
is($node->safe_psql('postgres', q{
		SELECT count(*) FROM (
		    SELECT id < lag(id) OVER (ORDER BY delivered_at, id DESC) AS out_of_order
		      FROM outbox WHERE event_type = 'b.x' AND aggregate_id = 'k'
				 AND delivered_at IS NOT NULL) s
		 WHERE out_of_order}),
	'0', 'b: k in id order');

# c. payloads of 288 kB: the memory budget (256 MB for a claim's events)
# cuts a claim of 1,000 of them, which all go at COMMIT (in the reference
# form: each is over NOTIFY's 8000 bytes)
$node->safe_psql('postgres', q{
	UPDATE outbox_destinations SET ordered = false WHERE name = 'n';
	SELECT count(outbox_emit('c.x', jsonb_build_object('n', g, 'pad', repeat(md5(g::text), 9000))))
	  FROM generate_series(1, 1000) g;
});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM outbox WHERE event_type = 'c.x' AND delivered_at IS NULL"),
	'c: the 1,000 events are delivered without another commit or poll');
is($node->safe_psql('postgres',
		"SELECT count(*), max(attempts) FROM outbox WHERE event_type = 'c.x'"),
	'1000|1', 'c: each once');

$node->stop;
done_testing();
