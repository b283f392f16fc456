# The relay's memory budget (OUTBOX_RELAY_BYTES, 256 MB): events are held
# in flight only while what they cost fits it, so a writer cannot make the
# relay hold gigabytes; events within the limits are never failed for it,
# only claimed later; and other destinations keep flowing meanwhile.
#
# Six events whose envelope is 96 MB each (a 16 MB string of control
# characters, each escaped to six bytes) go to an endpoint that holds every
# request until the test releases it. Each costs about 208 MB in the relay
# (its body twice, and its payload), so one is in flight at a time: the
# test releases them one by one and sees exactly one more arrive each time.
# Small events to another destination are delivered while a large one is
# held, and outbox_relay_stats shows what the relay holds. The relay's peak
# memory is a figure for bench/bench.py, not a test.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $nbig = 6;
my $node = outbox_node('budget', 'outbox.http_timeout' => "'180s'");
my $sink = start_sink();
my $pid = wait_relay($node, 'postgres');
ok($pid, 'relay runs');

$sink->paths('/big' => { hold => JSON::PP::true });
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES
	    ('big', 'big.*', '%s'), ('small', 'small.*', '%s')},
	$sink->url('/big'), $sink->url('/small')));

$node->safe_psql('postgres', qq{
	SELECT outbox_emit('big.created', jsonb_build_array(repeat(chr(1), 16 * 1024 * 1024)))
	  FROM generate_series(1, $nbig)});
is( $node->safe_psql('postgres', q{
		SELECT _outbox_payload_text_bytes(payload) FROM outbox WHERE event_type = 'big.created' LIMIT 1}),
	6 * 16 * 1024 * 1024 + 4, 'each big event is 96 MB of JSON text');

# The events of one destination the relay holds (in its in-flight set).
sub in_flight
{
	my ($type) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT count(*) FROM outbox_in_flight j, unnest(j.ids) AS u(id)
		  JOIN outbox o ON o.id = u.id WHERE o.event_type = '$type'});
}

for my $k (1 .. $nbig)
{
	ok(wait_until(sub { $sink->stats('/big')->{arrived} >= $k }), "big event $k arrives");
	is(in_flight('big.created'), 1, "big event $k: the only big one in flight");
	is($sink->stats('/big')->{in_flight}, 1, "big event $k: the only big request");
	if ($k == 1)
	{
		# a large event does not hold back another destination's
		my $ids = emit($node, 'postgres', 'small.created', 200);
		ok( $node->poll_query_until('postgres',
				"SELECT count(*) = 0 FROM outbox WHERE event_type = 'small.created' AND delivered_at IS NULL"),
			'small events delivered while a big one is held');
		is(in_flight('big.created'), 1, 'still one big event in flight');
		# what outbox_relay_stats shows for a memory alert: one big event's
		# cost, over half of the budget and within it
		is( $node->safe_psql('postgres', q{
				SELECT held_bytes > memory_budget / 2 AND held_bytes <= memory_budget,
				       memory_full_since <= now()
				  FROM outbox_relay_stats()}),
			't|t', 'outbox_relay_stats: the big event held is over half of the memory budget, '
			  . 'and claims leave the others out for it');
	}
	$sink->control(release => '/big');
}
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM outbox WHERE event_type = 'big.created' AND delivered_at IS NULL"),
	'every big event delivered');
is( $node->safe_psql('postgres', q{
		SELECT string_agg(DISTINCT attempts::text || '/' || (dead_at IS NULL)::text, ',')
		  FROM outbox WHERE event_type = 'big.created'}),
	'1/true', 'each in one attempt: none failed or dead-lettered for the budget');
is($sink->stats('/big')->{requests}, $nbig, "$nbig requests, one per big event");
is(relay_pid($node, 'postgres'), $pid, 'the same relay throughout');
ok( $node->poll_query_until('postgres',
		'SELECT held_bytes = 0 AND memory_full_since IS NULL FROM outbox_relay_stats()'),
	'outbox_relay_stats: nothing held once every event is delivered, and the budget not full');

$sink->stop;
$node->stop;
done_testing();
