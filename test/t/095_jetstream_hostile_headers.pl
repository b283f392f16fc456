# What an event's writer puts in its headers and fields cannot be read by
# nats-server as the relay's own headers. The server finds a header by the
# first occurrence of its name anywhere in the header block, and takes it
# as absent when that occurrence does not start a line; libnats writes the
# headers in hash order. So an event header whose name or value holds
# Nats-Msg-Id or Nats-Expected-Stream, or an event_type or aggregate_id
# that does (the relay copies them into Outbox-* headers), could hide the
# relay's: every redelivery stored another copy, and a message for stream
# S1 could land in S2. Against a real nats-server on 127.0.0.1:
#   a. four such events, each redelivered three times: the stream holds
#      exactly one message per event, and none of the hostile headers
#   b. an event with 40 hostile headers for stream S1, whose subject S2
#      takes: S2 never stores it (the server refuses: not the expected
#      stream), attempt after attempt
#   c. a PubAck that names another stream (a core NATS responder forges
#      one): the event is dead after exactly one attempt, last_error
#      naming the stream that answered and why it is not retried
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxNats;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $nats = start_nats();
$nats->add_stream('HDR', 'hdr.>', duplicates_ms => 15 * 60 * 1000);
$nats->add_stream('S1', 's1.>', duplicates_ms => 15 * 60 * 1000);
$nats->add_stream('S2', 'steer.>', duplicates_ms => 15 * 60 * 1000);
my $url = $nats->plain_url;

my $node = outbox_node('jshostile');
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream) VALUES
	    ('hdr', 'hdr.*', '$url', 'hdr.events', 'HDR'),
	    ('steer', 'steer.*', '$url', 'steer.x', 'S1'),
	    ('forged', 'forged.*', '$url', 'forged.x', 'S1');
});

# a. Hostile header values and names, and fields copied into headers.
my $hostile = 'Nats-Msg-Id Nats-Expected-Stream';
my @ids = split /\n/, $node->safe_psql('postgres', qq{
	SELECT outbox_emit('hdr.value', '{"case": "value"}', NULL, NULL,
	                   '{"x-ref": "$hostile", "x-other": "nats-msg-id", "x-kept": "kept"}');
	SELECT outbox_emit('hdr.name', '{"case": "name"}', NULL, NULL,
	                   '{"X-Delta-Nats-Msg-Id-Ref": "1", "x-nats-expected-stream-ref": "2"}');
	SELECT outbox_emit('hdr.aggregate', '{"case": "aggregate"}', '$hostile', '$hostile');
	SELECT outbox_emit('hdr.$hostile', '{"case": "event_type"}');
});
is(scalar @ids, 4, 'a: four events');
my $in = join(', ', map { "'$_'" } @ids);

# Waits until the four events are delivered for the $n-th time.
sub delivered_times
{
	my ($n) = @_;
	return $node->poll_query_until('postgres', qq{
		SELECT count(*) = 4 FROM outbox
		 WHERE event_id IN ($in) AND delivered_at IS NOT NULL AND attempts = $n});
}
ok(delivered_times(1), 'a: delivered');
for my $round (2 .. 4)
{
	$node->safe_psql('postgres', "SELECT outbox_redeliver(e) FROM unnest(ARRAY[$in]::uuid[]) e");
	ok(delivered_times($round), "a: redelivered, round $round");
}
my $msgs = $nats->messages('HDR', 1);
my %stored;
$stored{ $_->{headers}{'Nats-Msg-Id'} // 'none' }++ for @$msgs;
is(scalar @$msgs, 4, 'a: the stream holds exactly 4 messages after 4 deliveries of each event');
is_deeply([ sort keys %stored ], [ sort @ids ], 'a: one message per event_id');

my %by_case = map { (JSON::PP::decode_json($_->{data})->{payload}{case} => $_) } @$msgs;
my %h = %{ $by_case{value}{headers} };
is_deeply([ grep { /nats/i && $_ ne 'Nats-Msg-Id' && $_ ne 'Nats-Expected-Stream' } sort keys %h ], [],
	'a: the relay\'s own Nats-* headers only');
ok(!exists $h{'x-ref'} && !exists $h{'x-other'}, 'a: headers whose value names nats- are not forwarded');
is($h{'x-kept'}, 'kept', 'a: the others are');
is_deeply([ grep { /nats/i && $_ ne 'Nats-Msg-Id' && $_ ne 'Nats-Expected-Stream' } sort keys %{ $by_case{name}{headers} } ],
	[], 'a: headers whose name holds nats- are not forwarded');
my $agg = $by_case{aggregate};
ok(!exists $agg->{headers}{'Outbox-Aggregate-Id'} && !exists $agg->{headers}{'Outbox-Aggregate-Type'},
	'a: Outbox-Aggregate-* omitted when the field holds nats-');
is(JSON::PP::decode_json($agg->{data})->{aggregate_id}, $hostile, 'a: the envelope still carries the field');
ok(!exists $by_case{event_type}{headers}{'Outbox-Event-Type'}, 'a: Outbox-Event-Type likewise');
# nats-server's own header names, anywhere in the block, other than in the relay's two headers
my @steering = grep {
	my $m = $_;
	my $block = join("\n", map { "$_: $m->{headers}{$_}" } sort keys %{ $m->{headers} });
	my $count = () = $block =~ /nats-/gi;
	$count != 2;
} @$msgs;
is(scalar @steering, 0, "a: in every message, nats- appears in the relay's two headers only");

# b. 40 hostile headers on an event for S1 whose subject S2 takes.
my $forty = '{' . join(', ', map { sprintf('"x-h%02d": "%s"', $_, $hostile) } 1 .. 40) . '}';
my $steer_id = $node->safe_psql('postgres', "SELECT outbox_emit('steer.one', '{}', NULL, NULL, '$forty')");
ok( $node->poll_query_until('postgres',
		"SELECT attempts >= 3 OR delivered_at IS NOT NULL OR dead_at IS NOT NULL FROM outbox WHERE event_id = '$steer_id'"),
	'b: three attempts made');
is($nats->count('S2'), 0, 'b: stream S2, which takes the subject, stored nothing');
is($nats->count('S1'), 0, 'b: nor S1');
is( $node->safe_psql('postgres',
		"SELECT delivered_at IS NULL AND dead_at IS NULL, last_error FROM outbox WHERE event_id = '$steer_id'"),
	't|JetStream refused the message (error 10060): expected stream does not match',
	'b: each attempt refused by the server, and retried');
$node->safe_psql('postgres', "SELECT outbox_cancel('$steer_id', 'test done')");

# c. A PubAck that names another stream: dead at once.
my $responder = $nats->responder('forged.x', '{"stream": "S2", "seq": 7}');
my $forged_id = $node->safe_psql('postgres', "SELECT outbox_emit('forged.one', '{}')");
ok( $node->poll_query_until('postgres',
		"SELECT dead_at IS NOT NULL OR attempts >= 2 FROM outbox WHERE event_id = '$forged_id'"),
	'c: the event is done or tried again');
is( $node->safe_psql('postgres',
		"SELECT attempts, dead_at IS NOT NULL, last_error FROM outbox WHERE event_id = '$forged_id'"),
	'1|t|the PubAck came from stream "S2", not from the destination\'s stream "S1": not retried, as each retry could store another copy there',
	'c: dead after exactly one attempt, naming the stream that answered');
$responder->kill_kill;

is_deeply([ relay_warnings($node) ], [], 'no unexpected warning from the relay');

done_testing();
