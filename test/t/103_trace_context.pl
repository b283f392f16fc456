# The trace context of the transaction that writes an event reaches its
# consumers: set with SET LOCAL outbox.traceparent / outbox.tracestate,
# taken by an emit in a trigger, and read at the endpoint by a real
# OpenTelemetry consumer (the W3C propagator of npm @opentelemetry/core,
# test/trace_check.js) from the webhook's HTTP headers and, through the
# npm cloudevents SDK, from the Distributed Tracing extension of every
# CloudEvents form (structured, binary, batch). A retry carries the same
# trace; a destination whose event_headers forwards none carries none.
# Every destination of a fanned-out event gets the same trace. A value
# that is not W3C Trace Context, set or given, is dropped with a WARNING
# and the event delivered without a trace.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $trace_id = '4bf92f3577b34da6a3ce929d0e0e4736';
my $traceparent = "00-$trace_id-00f067aa0ba902b7-01";

my $node = outbox_node('trace');
my $sink = start_sink();
sub sql { return $node->safe_psql('postgres', $_[0]); }
sql(sprintf(q{
	INSERT INTO outbox_destinations (name, event_types, url, format, events_per_request, event_headers, enabled) VALUES
		('plain', 'tp.plain', '%s', 'envelope', 1, NULL, false),
		('ce', 'tp.ce', '%s', 'cloudevents', 1, NULL, true),
		('bin', 'tp.bin', '%s', 'cloudevents-binary', 1, NULL, true),
		('batch', 'tp.batch', '%s', 'cloudevents', 10, NULL, false),
		('none', 'tp.none', '%s', 'cloudevents', 1, '{}', true),
		('fan1', 'tp.fan', '%s', 'envelope', 1, NULL, true),
		('fan2', 'tp.fan', '%s', 'cloudevents', 1, NULL, true),
		('bad', 'tp.bad', '%s', 'cloudevents', 1, NULL, true);
	CREATE TABLE orders (id int PRIMARY KEY);
	CREATE FUNCTION orders_emit() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
	    PERFORM outbox_emit('tp.batch', jsonb_build_object('order', NEW.id));
	    RETURN NEW;
	END $$;
	CREATE TRIGGER orders_emit AFTER INSERT ON orders FOR EACH ROW EXECUTE FUNCTION orders_emit();},
	map { $sink->url("/$_") } qw(plain ce bin batch none fan1 fan2 bad)));

# one transaction, its trace context set once; the batch's events come
# from a trigger
my $plain_id = sql(qq{
	BEGIN;
	SET LOCAL outbox.traceparent = '$traceparent';
	SET LOCAL outbox.tracestate = 'rojo=00f067aa0ba902b7';
	SELECT outbox_emit('tp.ce', '{"n": 1}');
	SELECT outbox_emit('tp.bin', '{"n": 2}');
	SELECT outbox_emit('tp.none', '{"n": 3}');
	INSERT INTO orders SELECT generate_series(1, 3);
	SELECT outbox_emit('tp.plain', '{"n": 4}');
	COMMIT;});
($plain_id) = $plain_id =~ /([0-9a-f-]{36})\s*$/;
# the webhook fails its first attempt: the retry must carry the same trace
$sink->control(fail => { $plain_id => 1 });
sql(q{UPDATE outbox_destinations SET enabled = true WHERE name IN ('plain', 'batch')});
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) = 7 FROM outbox WHERE event_type LIKE 'tp.%' AND delivered_at IS NOT NULL}),
	'all 7 events delivered');

# what an OpenTelemetry consumer reads from a request
sub consumer
{
	my ($req) = @_;
	return node_json('trace_check.js', { headers => $req->{headers}, body => $req->{body} },
		'@opentelemetry/core', 'cloudevents');
}

my @plain = @{ $sink->requests('/plain') };
is(scalar(@plain), 2, 'the webhook got its event twice: a failure, then the retry');
for my $i (0, 1)
{
	is(consumer($plain[$i])->{headers}, $trace_id, "attempt " . ($i + 1) . ": the traceparent header holds the trace");
	is($plain[$i]{headers}{tracestate}, 'rojo=00f067aa0ba902b7', "attempt " . ($i + 1) . ": and the tracestate");
}

my ($ce) = @{ $sink->requests('/ce') };
my $got = consumer($ce);
is($got->{headers}, $trace_id, 'structured CloudEvent: the HTTP header holds the trace');
is_deeply($got->{cloudevents}, [$trace_id], 'and the CloudEvent\'s traceparent attribute');
like($ce->{body}, qr/"tracestate": "rojo=00f067aa0ba902b7"/, 'with its tracestate attribute');

my ($bin) = @{ $sink->requests('/bin') };
$got = consumer($bin);
is($bin->{headers}{'ce-traceparent'}, $traceparent, 'binary CloudEvent: ce-traceparent as set');
is_deeply($got->{cloudevents}, [$trace_id], 'read as the CloudEvent\'s attribute');
is($got->{headers}, $trace_id, 'and the HTTP header');

my @batch = @{ $sink->requests('/batch') };
is(scalar(@batch), 1, 'the trigger\'s 3 events went in one batch');
$got = consumer($batch[0]);
is_deeply($got->{cloudevents}, [ ($trace_id) x 3 ], 'each CloudEvent of the batch carries the trace');

my ($none) = @{ $sink->requests('/none') };
$got = consumer($none);
is($got->{headers}, undef, 'a destination forwarding no event headers sends no traceparent');
is_deeply($got->{cloudevents}, [undef], 'nor the CloudEvent attribute');

# fan-out: both destinations that take the event get the writer's trace
sql(qq{
	BEGIN;
	SET LOCAL outbox.traceparent = '$traceparent';
	SELECT outbox_emit('tp.fan', '{"n": 5}');
	COMMIT;});
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 2 FROM outbox WHERE event_type = 'tp.fan' AND delivered_at IS NOT NULL}),
	'the fanned-out event delivered to both destinations');
is(consumer($sink->requests('/fan1')->[0])->{headers}, $trace_id, 'fan-out: the first destination gets the trace');
is_deeply(consumer($sink->requests('/fan2')->[0])->{cloudevents}, [$trace_id],
	'and the second, in its CloudEvent');

# not W3C Trace Context: set in the transaction, or given as a header
my ($rc, $out, $err) = $node->psql('postgres', q{
	BEGIN;
	SET LOCAL outbox.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7';
	SELECT outbox_emit('tp.bad', '{"n": 6}');
	SELECT outbox_emit('tp.bad', '{"n": 7}', NULL, NULL, '{"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}');
	COMMIT;});
is($rc, 0, 'malformed trace contexts do not fail the writer');
my @warnings = $err =~ /WARNING:  ([^\n]*)/g;
is_deeply(\@warnings, [
		'outbox.traceparent is not a W3C trace context: the event is written without it',
		'event header traceparent is not a W3C trace context: the event is written without it' ],
	'each is dropped with a WARNING');
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 2 FROM outbox WHERE event_type = 'tp.bad' AND delivered_at IS NOT NULL}),
	'both events delivered');
# read as sent: a consumer would also refuse the all-zero trace id
my @bad = @{ $sink->requests('/bad') };
is_deeply([ map { exists $_->{headers}{traceparent} ? 1 : 0 } @bad ], [ 0, 0 ], 'without a traceparent header');
is_deeply([ map { $_->{body} =~ /traceparent/ ? 1 : 0 } @bad ], [ 0, 0 ],
	'nor a CloudEvents traceparent attribute');

$sink->stop;
$node->stop;
done_testing();
