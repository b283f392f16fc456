# The kafka kind against librdkafka's mock Kafka cluster (3 brokers on
# 127.0.0.1, test/kafka_mock.c; no Kafka broker is installable here), read
# back with Debian's kcat: 10,000 events become 10,000 messages, each
# event_id once, keyed by aggregate with a key's messages in order within
# its partition, with the headers the README names; CloudEvents in the
# Kafka binding's binary (ce_* headers, partitionkey the key) and
# structured modes; errors the brokers return (NOT_LEADER_FOR_PARTITION,
# REQUEST_TIMED_OUT: retried by the producer, delivered once; message too
# large: dead-lettered), a topic that does not exist and no broker at all
# are each a clear last_error, and the relay keeps running through them.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxKafka;
use OutboxRabbitmq qw(last_error_of);
use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

require_kind('kafka');
plan skip_all => 'kcat or librdkafka-dev is not installed (ci/deps.sh installs them)'
  unless kafka_available();

my $kafka = start_kafka();
$kafka->command("topic $_") for ('orders 3', 'ce 1', 'ces 1', 'big 1', 'flaky 1');

my $node = outbox_node('kafka');
ok(wait_relay($node, 'postgres'), 'relay runs');

sub destination
{
	my ($name, $types, %options) = @_;
	my $format = delete $options{format} // 'envelope';
	my $timeout = delete $options{timeout_ms} // 'NULL';
	$node->safe_psql('postgres', sprintf(q{
		INSERT INTO outbox_destinations (name, kind, event_types, format, timeout_ms, options)
		VALUES ('%s', 'kafka', '%s', '%s', %s, '%s')}, $name, $types, $format, $timeout, $kafka->options(%options)));
}

sub send_event
{
	my ($type, $payload) = @_;
	$node->safe_psql('postgres', "SELECT outbox_emit('$type', '$payload')");
}

sub delivered
{
	my ($type, $n) = @_;
	return $node->poll_query_until('postgres',
		"SELECT count(*) = $n FROM outbox WHERE event_type = '$type' AND delivered_at IS NOT NULL");
}

# 10,000 events of 50 aggregates, with a trace context and an x-* header
destination('orders', 'order.*', topic => 'orders');
$node->safe_psql('postgres', q{UPDATE outbox_destinations SET headers = '{"tenant": "acme"}' WHERE name = 'orders'});
my $traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
$node->safe_psql('postgres', qq{
	SELECT count(outbox_emit('order.placed', jsonb_build_object('n', g), 'order', (g % 50)::text,
		jsonb_build_object('x-custom', 'yes', 'traceparent', '$traceparent')))
	  FROM generate_series(1, 10000) g});
ok(delivered('order.placed', 10000), '10,000 events delivered (acknowledged by the brokers)');
my $got = $kafka->consume('orders');
my %ids;
$ids{ $_->{headers}{'outbox-event-id'} }++ for @$got;
is_deeply([ sort keys %ids ],
	[ sort split /\n/, $node->safe_psql('postgres', "SELECT event_id FROM outbox WHERE event_type = 'order.placed'") ],
	'10,000 messages, their outbox-event-id headers the event_ids');
is(scalar(grep { $_ > 1 } values %ids), 0, 'each event_id once');

my (%partitions, %last, $disorder);
for my $m (sort { $a->{partition} <=> $b->{partition} || $a->{offset} <=> $b->{offset} } @$got)
{
	my $n = decode_json($m->{payload})->{payload}{n};
	$partitions{ $m->{key} }{ $m->{partition} } = 1;
	$disorder++ if defined $last{ $m->{key} } && $n < $last{ $m->{key} };
	$last{ $m->{key} } = $n;
}
is(scalar(grep { keys %{ $partitions{$_} } != 1 } keys %partitions), 0,
	"each key's messages in one partition (the key: the aggregate_id)");
is($disorder // 0, 0, "a key's messages in the order emitted, within its partition");
cmp_ok(scalar(keys %{ { map { $_->{partition} => 1 } @$got } }), '>', 1, 'the keys spread over partitions');

my $m = (sort { $a->{offset} <=> $b->{offset} } grep { $_->{key} eq '7' } @$got)[0];
my $event_id = $node->safe_psql('postgres',
	"SELECT event_id FROM outbox WHERE event_type = 'order.placed' AND aggregate_id = '7' ORDER BY id LIMIT 1");
is_deeply($m->{headers}, {
		'outbox-event-id' => $event_id, 'outbox-event-type' => 'order.placed',
		'outbox-aggregate-type' => 'order', 'outbox-aggregate-id' => '7', 'outbox-attempt' => '1',
		'content-type' => 'application/json', tenant => 'acme', 'x-custom' => 'yes',
		traceparent => $traceparent },
	"the relay's headers, the destination's and the event's, its trace context");
is(decode_json($m->{payload})->{id}, $m->{headers}{'outbox-event-id'}, 'the value is the envelope');

# CloudEvents: binary (ce_* headers) and structured, partitionkey the key
destination('ce', 'ce.bin', topic => 'ce', format => 'cloudevents-binary');
destination('ces', 'ce.str', topic => 'ces', format => 'cloudevents');
$node->safe_psql('postgres', qq{
	SELECT outbox_emit('ce.bin', '{"a": 1}', 'order', '7', '{"traceparent": "$traceparent"}');
	BEGIN;
	SET LOCAL outbox.traceparent = '$traceparent';
	SELECT outbox_emit('ce.str', '{"a": 2}', 'order', '8');
	COMMIT;});
ok(delivered('ce.bin', 1) && delivered('ce.str', 1), 'CloudEvents delivered');
my ($bin) = @{ $kafka->consume('ce') };
my $bin_id = $node->safe_psql('postgres', "SELECT event_id FROM outbox WHERE event_type = 'ce.bin'");
is_deeply([ @{ $bin->{headers} }{qw(ce_id ce_type ce_specversion ce_subject ce_partitionkey ce_traceparent content-type)},
		$bin->{key}, $bin->{payload} ],
	[ $bin_id, 'ce.bin', '1.0', 'order/7', 'order/7', $traceparent, 'application/json', 'order/7', '{"a": 1}' ],
	'binary mode: ce_* headers, the payload as the value, partitionkey the key');
my ($str) = @{ $kafka->consume('ces') };
is_deeply([ decode_json($str->{payload})->{type}, $str->{headers}{'content-type'}, $str->{key} ],
	[ 'ce.str', 'application/cloudevents+json', 'order/8' ], 'structured mode');
# an OpenTelemetry consumer (test/trace_check.js, W3C propagator) reads the
# trace from the headers, and through the cloudevents SDK's Kafka binding
# from the binary mode's ce_traceparent
is_deeply(node_json('trace_check.js', { headers => $bin->{headers}, body => $bin->{payload}, key => $bin->{key},
			binding => 'kafka' }, '@opentelemetry/core', 'cloudevents'),
	{ headers => '4bf92f3577b34da6a3ce929d0e0e4736', cloudevents => ['4bf92f3577b34da6a3ce929d0e0e4736'] },
	'the trace id, read by OpenTelemetry from the headers and from the CloudEvent');
is_deeply(node_json('trace_check.js', { headers => $str->{headers}, body => $str->{payload}, key => $str->{key},
			binding => 'kafka' }, '@opentelemetry/core', 'cloudevents'),
	{ headers => '4bf92f3577b34da6a3ce929d0e0e4736', cloudevents => ['4bf92f3577b34da6a3ce929d0e0e4736'] },
	'structured mode: the trace set in the writer\'s transaction, in the headers and the CloudEvent');

# a key template, and the errors librdkafka's retries absorb: delivered once, first attempt
destination('flaky', 'flaky.*', topic => 'flaky', key => '{event_type}');
$kafka->command('errors 0 6 6 7');    # Produce: NOT_LEADER_FOR_PARTITION twice, REQUEST_TIMED_OUT
send_event('flaky.one', '{}');
ok(delivered('flaky.one', 1), 'delivered through NOT_LEADER_FOR_PARTITION and REQUEST_TIMED_OUT');
my $flaky = $kafka->consume('flaky');
is_deeply([ scalar(@$flaky), $flaky->[0]{key}, $node->safe_psql('postgres', "SELECT attempts FROM outbox WHERE event_type = 'flaky.one'") ],
	[ 1, 'flaky.one', 1 ], 'one message, keyed by the template, on the first attempt');

# too large: refused by librdkafka (max_message_bytes) or by the broker: dead-lettered
destination('big', 'big.*', topic => 'big', max_message_bytes => 1000);
send_event('big.local', sprintf('{"s": "%s"}', 'x' x 2000));
like(last_error_of($node, 'big.local'), qr/librdkafka did not take the message: .*too large/i,
	'a message over max_message_bytes: refused');
$kafka->command('errors 0 10');       # Produce: MESSAGE_TOO_LARGE
send_event('big.broker', '{}');
like(last_error_of($node, 'big.broker'), qr/Kafka did not take the message: Broker: Message size too large/,
	"the broker's MESSAGE_TOO_LARGE");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM outbox WHERE event_type LIKE 'big.%' AND dead_at IS NOT NULL AND attempts = 1"),
	'both dead-lettered at once: retrying cannot help');

# SASL's settings reach librdkafka (the mock has no SASL: authentication
# fails); the password is in no log line and no last_error
my $log_offset = -s $node->logfile;
destination('sasl', 'sasl.*', topic => 'flaky', timeout_ms => 1000, security_protocol => 'sasl_plaintext',
	sasl_mechanism => 'PLAIN', sasl_username => 'relay', sasl_password => 'kafka-s3cret-7q');
send_event('sasl.one', '{}');
like(last_error_of($node, 'sasl.one'), qr/^Kafka did not acknowledge the message within the time limit of 1000 ms$/,
	'SASL that fails: a failed attempt');
ok(wait_until(sub { log_since($node, $log_offset) =~ /LOG:  Kafka destination "sasl": .*SASL/ }),
	"librdkafka's reason in the server log");
my $server_lines = log_since($node, $log_offset);
$server_lines =~ s/^.*statement: .*\n(?:\t.*\n)*//mg;    # the test's own statements, logged
unlike($server_lines . $node->safe_psql('postgres', 'SELECT string_agg(last_error, $$ $$) FROM outbox'),
	qr/kafka-s3cret-7q/, 'the SASL password in no log line and no last_error');

# a topic built from an event's fields never reaches Kafka's internal topics
destination('hostile', 'hostile.*', topic => '{aggregate_type}');
$node->safe_psql('postgres', q{
	SELECT outbox_emit('hostile.internal', '{}', '__consumer_offsets', '1');
	SELECT outbox_emit('hostile.space', '{}', 'a b', '1')});
is(last_error_of($node, 'hostile.internal') . ' / ' . last_error_of($node, 'hostile.space'),
	'the topic built for the event is not a Kafka topic name / the topic built for the event is not a Kafka topic name',
	'a topic built as __consumer_offsets or with a space: refused');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM outbox WHERE event_type LIKE 'hostile.%' AND dead_at IS NOT NULL AND attempts = 1"),
	'and dead-lettered at once');

# no broker at all; a topic that does not exist (librdkafka's mock creates
# any topic a client asks about, so the brokers answer UNKNOWN_TOPIC_OR_PART
# to every produce request from here on)
$node->safe_psql('postgres', q{
	INSERT INTO outbox_destinations (name, kind, event_types, timeout_ms, options)
	VALUES ('down', 'kafka', 'down.*', 1000, '{"bootstrap_servers": "127.0.0.1:1", "topic": "t"}')});
send_event('down.one', '{}');
like(last_error_of($node, 'down.one'), qr/^Kafka did not acknowledge the message within the time limit of 1000 ms$/,
	'no broker: a failed attempt');
destination('nowhere', 'nowhere.*', topic => 'missing', timeout_ms => 2000);
$kafka->command('errors 0 ' . join(' ', (3) x 64));
send_event('nowhere.one', '{}');
like(last_error_of($node, 'nowhere.one'),
	qr/^Kafka did not (take the message: .*Unknown topic|acknowledge the message within the time limit of 2000 ms)/,
	'an unknown topic: a failed attempt');
is($node->safe_psql('postgres', "SELECT count(*) FROM outbox WHERE event_type IN ('nowhere.one', 'down.one') AND delivered_at IS NULL AND dead_at IS NULL"),
	'2', 'neither delivered; both to be retried');
is(relay_pid($node, 'postgres') > 0 ? 1 : 0, 1, 'the relay still runs');

# the README's example, as written but for the servers
$kafka->command('clear 0');    # what is left of the errors pushed above
$node->safe_psql('postgres', "DELETE FROM outbox_destinations WHERE name = 'orders'");
my $readme = readme_sql(q{VALUES ('orders-topic', 'kafka'});
$readme =~ s/127\.0\.0\.1:9092/$kafka->{bootstraps}/ or die 'the README\'s servers changed';
$readme =~ s/outbox\.outbox_/outbox_/g;    # installed in public here
$node->safe_psql('postgres', $readme);
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox WHERE payload->>'order' = '42' AND delivered_at IS NOT NULL"),
	"the README's example delivered");
my @readme_m = grep { ($_->{headers}{'outbox-event-type'} // '') eq 'order.placed' && exists decode_json($_->{payload})->{payload}{order} }
  @{ $kafka->consume('orders') };
is_deeply([ map { [ $_->{key}, decode_json($_->{payload})->{payload}{order} ] } @readme_m ], [ [ '42', 42 ] ],
	"the README's event in topic orders, key 42");

$kafka->stop;
done_testing();
