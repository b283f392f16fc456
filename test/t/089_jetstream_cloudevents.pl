# CloudEvents over JetStream, in the NATS protocol binding's structured
# mode (its only one: "the NATS message payload MUST be the JSON event
# format"): a destination with format cloudevents publishes each event as
# one, Content-Type application/cloudevents+json, which the npm
# cloudevents SDK (test/cloudevents_check.js) reads and validates as a
# receiver does; the source is the destination's cloudevents_source or
# the database's; the aggregate becomes subject and partitionkey; the
# message keeps its Nats-Msg-Id (the event_id), and a redelivery is the
# same event. The writer's trace context (SET LOCAL outbox.traceparent)
# reaches the consumer, read with the W3C propagator of npm
# @opentelemetry/core (test/trace_check.js). The binary mode is refused for
# JetStream (the binding has none), and cloudevents_source for a kind that
# sends no CloudEvents.
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
$nats->add_stream('CE', 'ce.>', duplicates_ms => 15 * 60 * 1000);
my $url = $nats->plain_url;
my $node = outbox_node('jsce');
sub sql { return $node->safe_psql('postgres', $_[0]); }
sql(qq{
	INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream,
	                                 format, cloudevents_source)
	VALUES ('orders', 'order.*', '$url', 'ce.orders', 'CE', 'cloudevents', 'https://shop.example/orders'),
	       ('plain', 'note.*', '$url', 'ce.notes', 'CE', 'cloudevents', NULL)});

# The SDK's reading of a message, its Content-Type as the binding's.
sub sdk
{
	my ($msg) = @_;
	return node_json('cloudevents_check.js',
		{ headers => { 'content-type' => $msg->{headers}{'Content-Type'} }, body => $msg->{data} },
		'cloudevents');
}

my $id1 = sql(q{SELECT outbox_emit('order.created', '{"total": 12.5, "note": "café"}', 'order', 'o-1')});
my $id2 = sql(q{SELECT outbox_emit('note.added', '[1, 2]')});
ok($node->poll_query_until('postgres', 'SELECT count(*) = 2 FROM outbox WHERE delivered_at IS NOT NULL'),
	'both events delivered');
my %by_id = map { ($_->{headers}{'Nats-Msg-Id'} => $_) } @{ $nats->messages('CE', 1) };
is(scalar(keys %by_id), 2, 'two messages, one per event_id');

my $m1 = $by_id{$id1};
is($m1->{headers}{'Content-Type'}, 'application/cloudevents+json', 'labelled as the JSON event format');
my $r1 = sdk($m1);
is($r1->{error}, undef, 'the SDK reads the message');
is_deeply($r1->{valid}, [JSON::PP::true], 'and finds a valid CloudEvent');
my $e1 = $r1->{events}[0];
is_deeply(
	[ @$e1{qw(specversion id source type subject partitionkey datacontenttype)} ],
	[ '1.0', $id1, 'https://shop.example/orders', 'order.created', 'order/o-1', 'order/o-1', 'application/json' ],
	'its attributes: the event_id, the destination\'s source, the type, the aggregate');
is_deeply($e1->{data}, { total => 12.5, note => "caf\x{e9}" }, 'its data is the payload, in UTF-8');
ok(defined $e1->{time} && $e1->{time} =~ /Z$/, 'its time is created_at in UTC');

my $e2 = sdk($by_id{$id2})->{events}[0];
is($e2->{source}, '/outbox/postgres', 'without cloudevents_source: the database\'s source');
ok(!exists $e2->{subject}, 'no aggregate: no subject');
is_deeply($e2->{data}, [ 1, 2 ], 'a JSON array payload as data');

# a redelivery is the same event, deduplicated by the stream
sql(qq{SELECT outbox_redeliver('$id1'::uuid)});
ok($node->poll_query_until('postgres', "SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$id1'"),
	'redelivered');
my @again = grep { $_->{headers}{'Nats-Msg-Id'} eq $id1 } @{ $nats->messages('CE', 1) };
is(scalar(@again), 1, 'the stream still holds it once (the same Nats-Msg-Id)');

# the writer's trace context, as an OpenTelemetry consumer reads it from
# the message: its traceparent header, and the CloudEvent's attribute
my $trace_id = '4bf92f3577b34da6a3ce929d0e0e4736';
my ($id3) = sql(qq{
	BEGIN;
	SET LOCAL outbox.traceparent = '00-$trace_id-00f067aa0ba902b7-01';
	SELECT outbox_emit('order.traced', '{}', 'order', 'o-3');
	COMMIT;}) =~ /([0-9a-f-]{36})/;
ok($node->poll_query_until('postgres', "SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$id3'"),
	'a traced event delivered');
my ($m3) = grep { $_->{headers}{'Nats-Msg-Id'} eq $id3 } @{ $nats->messages('CE', 1) };
my $seen = node_json('trace_check.js',
	{ headers => { 'content-type' => $m3->{headers}{'Content-Type'},
			traceparent => $m3->{headers}{traceparent} }, body => $m3->{data} },
	'@opentelemetry/core', 'cloudevents');
is($seen->{headers}, $trace_id, 'its traceparent message header holds the writer\'s trace');
is_deeply($seen->{cloudevents}, [$trace_id], 'and so does the CloudEvent\'s traceparent attribute');

# refused when written
my ($rc, $out, $err) = $node->psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream, format)
	VALUES ('bin', 'b.*', '$url', 'ce.b', 'CE', 'cloudevents-binary')});
like($err, qr/ERROR:\s+destination format is not valid/, 'the binary mode is not a JetStream format');
($rc, $out, $err) = $node->psql('postgres', q{
	INSERT INTO outbox_destinations (name, event_types, channel, cloudevents_source)
	VALUES ('chan', 'c.*', 'chan', '/x')});
like($err, qr/ERROR:\s+destination cloudevents_source is for a destination that can send CloudEvents/,
	'a NOTIFY channel takes no cloudevents_source');

$node->stop;
done_testing();
