# Ordered destinations, with four relays per database: the events of one
# aggregate reach the endpoint one at a time, in id order, through
#   1. random failures (2,000 events over 50 keys, 20 % answered 503),
#      every relay taking part;
#   2. a poison event, dead-lettered, that blocks its key only until it
#      is skipped, and is shown in outbox_blocked_keys;
#   3. the redelivery of two events of one key dead-lettered while the
#      destination was not ordered: again in id order.
# Blocked key heads, a crash restart and locks: 082_ordered_blockers.pl.
#
# The order is checked on what the endpoint saw (check_order in
# test/perl/OutboxOrdered.pm): per key, the first arrival of each event
# (duplicates removed by webhook-id) is in strictly increasing id order,
# and it came after the 2xx answer to the event before it, or its last
# answer if it never had one (a skipped dead event): never two of a key in
# flight at once.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxOrdered;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($node, $sink) = ordered_node('ordered');
my $relays = $OutboxOrdered::relays;

# 1. 2,000 events over 50 keys, in 10 transactions, to an endpoint that
# answers 20 % of requests with 503 at random
$sink->control(seed => 20);
$sink->paths('/ord' => { fail_rate => 0.2 });
for my $t (1 .. 10)
{
	$node->safe_psql('postgres', qq{
		SELECT count(outbox_emit('ord.step', jsonb_build_object('t', $t, 'i', i), 'order', (i % 50)::text))
		  FROM generate_series(1, 200) i});
}
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 2000 FROM outbox WHERE event_type = 'ord.step' AND delivered_at IS NOT NULL"),
	'all 2,000 events are delivered');
my $failures = grep { $_->{status} == 503 } @{ $sink->requests('/ord') };
note("503 answers: $failures");
ok($failures > 100, 'the endpoint failed some of the requests');
is(check_order($node, $sink, '/ord', 'ord.step', 'random failures'), 2000, 'all 2,000 arrived with a 2xx answer');
is($node->safe_psql('postgres', q{
		SELECT count(DISTINCT relay) FROM (
		    SELECT relay FROM outbox_relay_stats() WHERE delivered > 0) r}),
	$relays, 'every relay took part');

# 2. a poison event (a 400 answer dead-letters it) blocks its key only;
# skipping it lets the key go on, in order
my @poison_ids = map { $node->safe_psql('postgres', 'SELECT gen_random_uuid()') } 1 .. 3;
$sink->control(fail => { $poison_ids[0] => 1 }, fail_status => 400);
$node->safe_psql('postgres', qq{
	INSERT INTO outbox (event_id, event_type, payload, aggregate_type, aggregate_id) VALUES
	    ('$poison_ids[0]', 'pz.step', '{"n": 1}', 'order', 'poisoned'),
	    ('$poison_ids[1]', 'pz.step', '{"n": 2}', 'order', 'poisoned'),
	    ('$poison_ids[2]', 'pz.step', '{"n": 3}', 'order', 'poisoned');
	SELECT count(outbox_emit('pz.step', jsonb_build_object('n', i), 'order', 'healthy'))
	  FROM generate_series(1, 5) i;});
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) FILTER (WHERE aggregate_id = 'healthy' AND delivered_at IS NOT NULL) = 5
		   AND count(*) FILTER (WHERE aggregate_id = 'poisoned' AND dead_at IS NOT NULL) = 1
		  FROM outbox WHERE event_type = 'pz.step'}),
	'the other key is delivered; the poison event is dead-lettered');
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM outbox_blocked_keys
		 WHERE aggregate_id = 'poisoned' AND state = 'dead' AND waiting = 2}),
	'outbox_blocked_keys shows the key, held by a dead event, 2 waiting');
is(scalar(grep { $_->{webhook_id} eq $poison_ids[1] || $_->{webhook_id} eq $poison_ids[2] } @{ $sink->arrivals('/pz') }),
	0, 'the events after the poison were never sent');
is($node->safe_psql('postgres', "SELECT outbox_skip_dead('$poison_ids[0]')"), 't', 'the dead event is skipped');
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 2 FROM outbox WHERE aggregate_id = 'poisoned' AND delivered_at IS NOT NULL}),
	'the events after it are delivered');
is(check_order($node, $sink, '/pz', 'pz.step', 'poison'), 7, 'seven events of the two keys arrived with a 2xx answer');

# 3. two events of one key dead-lettered while the destination was not
# ordered: redelivered once it is, they go again in id order
$node->safe_psql('postgres', "UPDATE outbox_destinations SET ordered = false WHERE name = 'pz'");
my @dead_ids = map { $node->safe_psql('postgres', 'SELECT gen_random_uuid()') } 1 .. 2;
$sink->control(fail => { $dead_ids[0] => 1, $dead_ids[1] => 1 }, fail_status => 400);
$node->safe_psql('postgres', qq{
	INSERT INTO outbox (event_id, event_type, payload, aggregate_type, aggregate_id) VALUES
	    ('$dead_ids[0]', 'pz.redo', '{"n": 1}', 'order', 'redo'),
	    ('$dead_ids[1]', 'pz.redo', '{"n": 2}', 'order', 'redo')});
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM outbox WHERE event_type = 'pz.redo' AND dead_at IS NOT NULL"),
	'both events of the key are dead-lettered');
$node->safe_psql('postgres', "UPDATE outbox_destinations SET ordered = true WHERE name = 'pz'");
my $before = scalar @{ $sink->arrivals('/pz') };
is($node->safe_psql('postgres', 'SELECT outbox_redeliver_dead()'), '2', 'both are redelivered');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM outbox WHERE event_type = 'pz.redo' AND delivered_at IS NOT NULL"),
	'both are delivered');
my @redo = grep { $_->{webhook_id} eq $dead_ids[0] || $_->{webhook_id} eq $dead_ids[1] }
  @{ $sink->arrivals('/pz') }[ $before .. $#{ $sink->arrivals('/pz') } ];
is(join(',', map { $_->{webhook_id} eq $dead_ids[0] ? 1 : 2 } @redo), '1,2', 'the redelivery sends them once each, in id order');
ok($redo[1]{received_at} > $redo[0]{answered_at}, 'the second only after the first was answered');

$sink->stop;
$node->stop;
done_testing();
