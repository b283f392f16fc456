# JetStream destinations against a real nats-server on 127.0.0.1 with file
# storage: 10,000 events stored exactly once each; an ordered destination's
# events in id order per aggregate; the message's headers (none that steers
# the broker) and body; subjects built from templates, and events whose
# fields make an invalid one; the duplicate window warning.
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
# at the default retry schedule (backoff from 1 s, 10 attempts of up to
# 5 s), a resend can come 9 min 21 s after the first attempt
$nats->add_stream('ORDERS', 'orders.>', duplicates_ms => 15 * 60 * 1000);
$nats->add_stream('KEYED', 'keyed.>', duplicates_ms => 15 * 60 * 1000);
$nats->add_stream('SHORT', 'short.>', duplicates_ms => 1000);
$nats->add_stream('DEFAULT', 'default.>');
my $url = $nats->plain_url;

my $node = outbox_node('jetstream', 'outbox.batch_size' => 500, 'outbox.backoff_base' => "'1s'");
my $log_start = -s $node->logfile;
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream, headers)
	VALUES ('orders', 'order.*', '$url', 'orders.{event_type}', 'ORDERS', '{"X-Team": "core"}');
	-- headers the rules now refuse, as a row written before them has them
	SET session_replication_role = replica;
	UPDATE outbox_destinations
	   SET headers = headers || '{"Nats-Rollup": "all", "Nats-Expected-Last-Sequence": "1", "X-Ref": "Nats-Msg-Id"}'
	 WHERE name = 'orders';
	RESET session_replication_role;
	INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream, ordered)
	VALUES ('keyed', 'item.*', '$url', 'keyed.{aggregate_type}.{aggregate_id}', 'KEYED', true);
});

# The events of type $type, as "event_id" => id.
sub ids_of
{
	my ($type) = @_;
	my %ids = map { split /\|/ } split /\n/,
	  $node->safe_psql('postgres', "SELECT event_id, id FROM outbox WHERE event_type = '$type'");
	return \%ids;
}

# 1. 10,000 events, one destination: exactly one message per event_id.
$node->safe_psql('postgres', q{
	SELECT count(outbox_emit('order.created', jsonb_build_object('n', g), 'order', g::text))
	  FROM generate_series(1, 10000) g});
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 10000 FROM outbox WHERE event_type = 'order.created' AND delivered_at IS NOT NULL"),
	'10,000 events delivered');
my $msgs = $nats->messages('ORDERS');
is(scalar @$msgs, 10000, 'the stream holds 10,000 messages');
my %stored;
$stored{ $_->{headers}{'Nats-Msg-Id'} }++ for @$msgs;
my $ids = ids_of('order.created');
is_deeply([ sort keys %stored ], [ sort keys %$ids ], 'one message per event_id: the events\' ids');
is((grep { $_ != 1 } values %stored), 0, 'no event_id stored twice');
is((grep { $_->{subject} ne 'orders.order.created' } @$msgs), 0, 'subject from the template: orders.{event_type}');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM outbox WHERE event_type = 'order.created' AND attempts <> 1"),
	'0', 'each sent once (no failed attempt)');

# 2. The message: headers and body.
my $event_id = $node->safe_psql('postgres', q{
	SELECT outbox_emit('order.paid', '{"amount": 12}', 'order', 'o-7',
	                   '{"x-trace": "t-1", "x-nats-msg-id": "forged", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}')});
ok( $node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$event_id'"),
	'event with headers delivered');
my ($msg) = grep { $_->{headers}{'Nats-Msg-Id'} eq $event_id } @{ $nats->messages('ORDERS', 1) };
my %h = %{ $msg->{headers} };
is($h{'Outbox-Event-Id'}, $event_id, 'Outbox-Event-Id');
is($h{'Outbox-Event-Type'}, 'order.paid', 'Outbox-Event-Type');
is($h{'Outbox-Aggregate-Type'}, 'order', 'Outbox-Aggregate-Type');
is($h{'Outbox-Aggregate-Id'}, 'o-7', 'Outbox-Aggregate-Id');
is($h{'Outbox-Attempt'}, '1', 'Outbox-Attempt');
is($h{'Content-Type'}, 'application/json', 'Content-Type');
is($h{'x-trace'}, 't-1', "the event's own header");
ok(defined $h{traceparent}, 'traceparent');
is($h{'X-Team'}, 'core', "the destination's header");
is_deeply([ grep { /nats/i && $_ ne 'Nats-Msg-Id' && $_ ne 'Nats-Expected-Stream' } sort keys %h ], [],
	'no Nats-* header of the destination or the event, nor one ending in nats-msg-id');
ok(!exists $h{'X-Ref'}, "no destination header whose value holds nats-");
is($h{'Nats-Expected-Stream'}, 'ORDERS', 'the stream is expected');
my $body = decode_json($msg->{data});
is($body->{id}, $event_id, 'the body is the envelope: id');
is($body->{payload}{amount}, 12, 'the body is the envelope: payload');
is($nats->count('ORDERS'), 10001, 'Nats-Rollup was not forwarded: nothing purged');

# 3. An ordered destination: 10,000 events over 100 aggregates, written
# interleaved in 10 transactions; per aggregate, stream order is id order.
for my $t (0 .. 9)
{
	$node->safe_psql('postgres', qq{
		SELECT count(outbox_emit('item.changed', jsonb_build_object('n', g), 'item', 'k' || (g % 100)))
		  FROM generate_series($t * 1000 + 1, ($t + 1) * 1000) g});
}
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 10000 FROM outbox WHERE event_type = 'item.changed' AND delivered_at IS NOT NULL"),
	'10,000 ordered events delivered');
$msgs = $nats->messages('KEYED');
is(scalar @$msgs, 10000, 'the ordered stream holds 10,000 messages');
$ids = ids_of('item.changed');
my (%last, %seen);
my $out_of_order = 0;
for my $m (@$msgs)
{
	my $id = $ids->{ $m->{headers}{'Nats-Msg-Id'} } // die 'unknown event';
	$seen{$id}++;
	$out_of_order++ if defined $last{ $m->{subject} } && $last{ $m->{subject} } > $id;
	$last{ $m->{subject} } = $id;
}
is(scalar keys %seen, 10000, 'one message per event');
is($out_of_order, 0, 'per aggregate, the stream has the events in id order');
is(scalar keys %last, 100, 'one subject per aggregate: keyed.{aggregate_type}.{aggregate_id}');

# 4. Fields that make an invalid subject: dead-lettered at once, the reason in last_error.
$node->safe_psql('postgres', q{
	SELECT outbox_emit('item.bad', '{}', 'item', 'a b');
	SELECT outbox_emit('item.bad', '{}', 'item', 'a.*');
	SELECT outbox_emit('item.bad', '{}', 'item', 'a..b');
	SELECT outbox_emit('item.bad', '{}', NULL, NULL);
	SELECT outbox_emit('item.bad', '{}', 'item', E'a\tb')});
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 5 FROM outbox WHERE event_type = 'item.bad' AND dead_at IS NOT NULL"),
	'events whose subject is invalid are dead-lettered');
is( $node->safe_psql('postgres',
		"SELECT string_agg(attempts || ' ' || last_error, E'\\n' ORDER BY id) FROM outbox WHERE event_type = 'item.bad'"),
	join("\n",
		"1 the subject built from the event's fields is not a valid NATS subject: it has a space or a control character",
		"1 the subject built from the event's fields is not a valid NATS subject: it has a wildcard (* or >)",
		"1 the subject built from the event's fields is not a valid NATS subject: it has an empty token (a dot at either end, or two in a row)",
		"1 the subject template uses aggregate_type, which the event does not have",
		"1 the subject built from the event's fields is not a valid NATS subject: it has a space or a control character"),
	'each with its reason, after one attempt');

# A subject over nats-server's control line: a long template and the
# longest fields an event may have.
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream)
	VALUES ('long', 'long.*', '$url', 'keyed.' || repeat('p', 960) || '.{event_type}.{aggregate_type}.{aggregate_id}', 'KEYED');
	SELECT outbox_emit('long.' || repeat('e', 1019), '{}', repeat('t', 1024), repeat('i', 1024));
	SELECT outbox_emit('long.' || repeat('e', 1019), '{}', repeat('t', 1024), repeat('i', 823))});
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM outbox WHERE event_type LIKE 'long.%' AND (dead_at IS NOT NULL OR delivered_at IS NOT NULL)"),
	'events with long subjects are done');
is( $node->safe_psql('postgres',
		"SELECT string_agg(coalesce(last_error, 'delivered'), ' / ' ORDER BY id) FROM outbox WHERE event_type LIKE 'long.%'"),
	'the subject built for the event is longer than 3840 bytes / delivered',
	'a subject of 4,041 bytes is dead-lettered, one of 3,840 delivered');

# 5. Streams whose duplicate window is shorter than the retry schedule
# (1 s, and the default 2 min): a warning in the log and in the
# destination's last_error; delivery goes on.
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream)
	VALUES ('short', 'short.*', '$url', 'short.events', 'SHORT'),
	       ('default', 'default.*', '$url', 'default.events', 'DEFAULT');
	SELECT outbox_emit('short.one', '{}');
	SELECT outbox_emit('default.one', '{}')});
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM outbox WHERE event_type IN ('short.one', 'default.one') AND delivered_at IS NOT NULL"),
	'delivered to the streams with short windows');
my $log = slurp_file($node->logfile, $log_start);
like($log,
	qr/WARNING:  outbox destination "short": stream "SHORT" deduplicates for 1 s, but a resend can come up to 9 min after the first attempt: past the window, consumers must deduplicate by event_id\n.*HINT:  Raise the stream's duplicate_window to 9 min or more, or lower outbox.max_attempts or outbox.backoff_max./,
	'the 1 s window is warned about in the log, with a hint');
like($log,
	qr/WARNING:  outbox destination "default": stream "DEFAULT" deduplicates for 2 min, but a resend can come up to 9 min after the first attempt/,
	'the default window too, at the default schedule');
is( $node->safe_psql('postgres',
		"SELECT string_agg(destination || ': ' || last_error, E'\\n' ORDER BY destination) FROM outbox_destination_stats() WHERE destination IN ('short', 'default')"),
	join("\n",
		'default: stream "DEFAULT" deduplicates for 2 min, but a resend can come up to 9 min after the first attempt: past the window, consumers must deduplicate by event_id',
		'short: stream "SHORT" deduplicates for 1 s, but a resend can come up to 9 min after the first attempt: past the window, consumers must deduplicate by event_id'),
	"and in the destinations' last_error");
unlike($log, qr/outbox destination "(orders|keyed)": stream/,
	'no warning for a window longer than the schedule (15 min)');
is( $node->safe_psql('postgres',
		"SELECT last_error IS NULL FROM outbox_destination_stats() WHERE destination = 'orders'"),
	't', 'nor a last_error');

# outbox_jetstream_check(): the same check at will, before any event flows.
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream)
	VALUES ('unused', 'unused.*', '$url', 'default.unused', 'DEFAULT')});
is( $node->safe_psql('postgres', q{
		SELECT d, c.stream, c.duplicate_window, c.max_age, c.retry_span, c.exactly_once, c.problem
		  FROM unnest(ARRAY['orders', 'short', 'unused']) d, LATERAL outbox_jetstream_check(d) c}),
	join("\n",
		'orders|ORDERS|00:15:00||00:09:21|t|',
		'short|SHORT|00:00:01||00:09:21|f|stream "SHORT" deduplicates for 1 s, but a resend can come up to 9 min after the first attempt: past the window, consumers must deduplicate by event_id',
		'unused|DEFAULT|00:02:00||00:09:21|f|stream "DEFAULT" deduplicates for 2 min, but a resend can come up to 9 min after the first attempt: past the window, consumers must deduplicate by event_id'),
	'outbox_jetstream_check(): window, span, and whether resends fall within it');

is_deeply([ relay_warnings($node) ], [], 'no unexpected warning from the relay');

done_testing();
