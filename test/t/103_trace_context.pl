# The trace context of the transaction that writes an event reaches its
# consumers: set with SET LOCAL outbox.traceparent / outbox.tracestate,
# taken by an emit in a trigger, and read at the endpoint by a real
# OpenTelemetry consumer (the W3C propagator of npm @opentelemetry/core,
# test/trace_check.js) from the webhook's HTTP headers and, through the
# npm cloudevents SDK, from the Distributed Tracing extension of every
# CloudEvents form (structured, binary, batch). A retry carries the same
# trace; a destination whose event_headers forwards none carries none.
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
		('none', 'tp.none', '%s', 'cloudevents', 1, '{}', true);
	CREATE TABLE orders (id int PRIMARY KEY);
	CREATE FUNCTION orders_emit() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
	    PERFORM outbox_emit('tp.batch', jsonb_build_object('order', NEW.id));
	    RETURN NEW;
	END $$;
	CREATE TRIGGER orders_emit AFTER INSERT ON orders FOR EACH ROW EXECUTE FUNCTION orders_emit();},
	map { $sink->url("/$_") } qw(plain ce bin batch none)));

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

$sink->stop;
$node->stop;
done_testing();
