# BullMQ destinations as routing makes use of them, against BullMQ itself
# (test/perl/OutboxBullmq.pm):
#   - an ordered destination and a Worker of concurrency 1: each key's
#     jobs processed in the order of its events;
#   - fan-out to a BullMQ queue (the envelope as the job's data, a job
#     name of the destination's) and a webhook: each gets every event;
#   - the trace context of the emitting transaction (SET LOCAL
#     outbox.traceparent) in the job's opts.telemetry.metadata, where
#     BullMQ's OpenTelemetry integration (npm bullmq-otel) reads it: the
#     trace id a W3C propagator extracts there (test/trace_check.js) is
#     the writer's, and so is the trace of the span the integration opens
#     for the job in a Worker;
#   - a template of the queue's name: each event in the queue its fields
#     make; one whose field is missing, or whose name BullMQ refuses,
#     dead-lettered at once with the reason.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxBullmq;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

require_kind('bullmq');

my ($node, $conn) = bullmq_node('bullmq_routing');
my %conn = %$conn;

# An ordered destination and a Worker of concurrency 1: each key in order
$node->safe_psql('postgres', q{
	INSERT INTO outbox_destinations (name, kind, event_types, ordered, options)
	VALUES ('steps', 'bullmq', 'step.*', true, '{"queue": "steps"}');
	SELECT count(outbox_emit('step.done', jsonb_build_object('n', g), 'flow', (g % 10)::text))
	  FROM generate_series(1, 300) g});
ok($node->poll_query_until('postgres', q{
		SELECT count(*) = 300 FROM outbox WHERE event_type = 'step.done' AND delivered_at IS NOT NULL}),
	'300 events of 10 keys delivered to the ordered queue');
my $worked = node_json('bullmq_tool.js', { command => 'work', connection => \%conn,
	queue => 'steps', count => 300, concurrency => 1, timeout_ms => 60_000 }, 'bullmq', 'pg');
my (%last, $out_of_order);
for my $job (@{ $worked->{jobs} })
{
	my $key = $job->{data}{n} % 10;
	$out_of_order++ if defined $last{$key} && $job->{data}{n} < $last{$key};
	$last{$key} = $job->{data}{n};
}
is(scalar @{ $worked->{jobs} }, 300, 'the Worker processed 300 jobs');
is($out_of_order // 0, 0, 'each key\'s jobs in the order of its events');

# Fan-out: a BullMQ queue (the envelope as the job's data) and a webhook
my $sink = start_sink();
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, kind, event_types, options)
	VALUES ('fan_jobs', 'bullmq', 'fan.*', '{"queue": "fan", "job_data": "envelope", "job_name": "fanned"}');
	INSERT INTO outbox_destinations (name, event_types, url) VALUES ('fan_hook', 'fan.*', '%s');
	SELECT count(outbox_emit('fan.out', jsonb_build_object('n', g), 'fan', g::text))
	  FROM generate_series(1, 100) g}, $sink->url('/fan')));
ok($sink->wait_delivered(100, '/fan'), 'the webhook got 100 events');
ok($node->poll_query_until('postgres', "SELECT count(*) = 100 FROM bullmq.job WHERE queue = 'fan'"),
	'the queue got 100 jobs');
my @events = split /\n/, $node->safe_psql('postgres',
	"SELECT DISTINCT event_id FROM outbox WHERE event_type = 'fan.out' ORDER BY 1");
is_deeply($sink->delivered_ids('/fan'), \@events, 'the webhook: each event, once');
is($node->safe_psql('postgres', q{
		SELECT count(*) FROM bullmq.job
		 WHERE queue = 'fan' AND name = 'fanned' AND data->>'id' = id AND data->>'type' = 'fan.out'
		   AND data->>'aggregate_id' = data->'payload'->>'n'}),
	'100', 'the queue: each event\'s envelope as its job\'s data, under the job name set');

# The writer's trace context, from the job a Worker processes
my $trace_id = '4bf92f3577b34da6a3ce929d0e0e4736';
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, kind, event_types, options)
	VALUES ('traced', 'bullmq', 'traced.*', '{"queue": "traced"}');
	BEGIN;
	SET LOCAL outbox.traceparent = '00-$trace_id-00f067aa0ba902b7-01';
	SET LOCAL outbox.tracestate = 'vendor=1';
	SELECT outbox_emit('traced.done', '{}');
	COMMIT;
	-- one claim: the first event's trace context must not reach the second
	BEGIN;
	SELECT outbox_emit('traced.given', '{}', NULL, NULL, '{"traceparent": "00-$trace_id-00f067aa0ba902b7-00"}');
	SELECT outbox_emit('traced.untraced', '{}');
	COMMIT;});
my $traced = node_json('bullmq_tool.js', { command => 'work', connection => \%conn,
	queue => 'traced', count => 3, timeout_ms => 30_000, telemetry => JSON::PP::true },
	'bullmq', 'pg', 'bullmq-otel', '@opentelemetry/context-async-hooks');
my %job = map { ($_->{name} => $_) } @{ $traced->{jobs} };
is(join(' ', sort keys %job), 'traced.done traced.given traced.untraced',
	'a Worker with BullMQ\'s OpenTelemetry integration processed the three jobs');
# bullmq-otel's metadata: the text of a JSON object of propagation headers
my %metadata = map { ($_ => JSON::PP::decode_json($job{$_}{telemetry}{metadata} // 'null')) }
  qw(traced.done traced.given);
is_deeply($metadata{'traced.done'}, { traceparent => "00-$trace_id-00f067aa0ba902b7-01",
		tracestate => 'vendor=1' }, 'the job carries the trace context in opts.telemetry.metadata');
is(node_json('trace_check.js', { headers => $metadata{'traced.done'}, body => '' },
		'@opentelemetry/core')->{headers}, $trace_id, 'where a W3C propagator finds the writer\'s trace id');
is($job{'traced.done'}{trace_id}, $trace_id,
	'the span BullMQ\'s integration opens for the job continues the writer\'s trace');
is_deeply($metadata{'traced.given'}, { traceparent => "00-$trace_id-00f067aa0ba902b7-00" },
	'a trace context given as the event\'s header');
is($job{'traced.given'}{trace_id}, $trace_id, 'its job\'s span continues it too');
ok(!defined $job{'traced.untraced'}{telemetry} && !defined $job{'traced.untraced'}{trace_id},
	'an event without trace context, after them in the same claim: no telemetry, no trace');

# A template of the queue's name: each event's queue from its fields; one
# whose field is missing or makes a name BullMQ refuses fails for good
$node->safe_psql('postgres', q{
	INSERT INTO outbox_destinations (name, kind, event_types, options)
	VALUES ('per_tenant', 'bullmq', 'tenant.*', '{"queue": "tenant-{aggregate_type}"}');
	SELECT outbox_emit('tenant.event', '{}', 'acme', '1'), outbox_emit('tenant.event', '{}', 'globex', '2'),
	       outbox_emit('tenant.event', '{}', NULL, '3'), outbox_emit('tenant.event', '{}', 'a:b', '4'),
	       outbox_emit('tenant.event', '{}', repeat('t', 1020), '5')});
ok($node->poll_query_until('postgres', q{
		SELECT count(*) = 5 FROM outbox
		 WHERE event_type = 'tenant.event' AND (delivered_at IS NOT NULL OR dead_at IS NOT NULL)}),
	'the template\'s events delivered or dead-lettered');
is($node->safe_psql('postgres', q{
		SELECT string_agg(j.queue, ',' ORDER BY j.queue) FROM bullmq.job j
		  JOIN outbox o ON j.id = o.event_id::text WHERE o.event_type = 'tenant.event'}),
	'tenant-acme,tenant-globex', 'each event in its tenant\'s queue');
is($node->safe_psql('postgres', q{
		SELECT string_agg(attempts || ' ' || last_error, E'\n' ORDER BY id) FROM outbox
		 WHERE event_type = 'tenant.event' AND dead_at IS NOT NULL}),
	"1 the queue template uses aggregate_type, which the event does not have\n"
	  . "1 the queue name built from the event's fields has \":\", which BullMQ refuses\n"
	  . "1 the queue name built from the event's fields is longer than 1024 bytes",
	'a missing field, a name BullMQ refuses and one too long: dead-lettered at once, with the reason');

# A lock of BullMQ's held elsewhere (obliterate holds this one): add_job
# waits at most the destination's timeout_ms, the event's attempt fails
# with the reason, and it is delivered once the lock is gone
$node->safe_psql('postgres', q{
	INSERT INTO outbox_destinations (name, kind, event_types, timeout_ms, options)
	VALUES ('locked', 'bullmq', 'lock.*', 300, '{"queue": "locked"}')});
my $holder = $node->background_psql('postgres');
$holder->query_safe(q{BEGIN; SELECT pg_advisory_xact_lock(hashtext('bullmq:finalization'), hashtext('locked'))});
$node->safe_psql('postgres', q{SELECT outbox_emit('lock.wait', '{}')});
ok($node->poll_query_until('postgres', q{
		SELECT last_error LIKE '%canceling statement due to % timeout' FROM outbox WHERE event_type = 'lock.wait'}),
	'add_job waited for the lock no longer than timeout_ms: a failed attempt');
$holder->query_safe('COMMIT');
$holder->quit;
ok($node->poll_query_until('postgres', q{
		SELECT delivered_at IS NOT NULL FROM outbox WHERE event_type = 'lock.wait'}),
	'delivered once the lock is released');

# A call that takes longer than timeout_ms is ended; one whose error
# message is huge leaves 1 kB of it in last_error and the log
$node->safe_psql('postgres', q{
	CREATE FUNCTION lock_games() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF NEW.name = 'lock.sleep' THEN PERFORM pg_sleep(30); END IF;
		IF NEW.name = 'lock.loud' THEN RAISE EXCEPTION '%', repeat('E', 100000); END IF;
		RETURN NEW;
	END$$;
	CREATE TRIGGER lock_games BEFORE INSERT ON bullmq.job FOR EACH ROW EXECUTE FUNCTION lock_games();
	SELECT outbox_emit('lock.sleep', '{}'), outbox_emit('lock.loud', '{}')});
ok($node->poll_query_until('postgres', q{
		SELECT bool_and(attempts >= 1) FROM outbox WHERE event_type IN ('lock.sleep', 'lock.loud')}),
	'both fail their first attempts');
is($node->safe_psql('postgres', q{
		SELECT string_agg(event_type || ': ' || CASE WHEN length(last_error) > 1100 THEN 'long'
		                  ELSE replace(last_error, repeat('E', 1024), 'E*1024') END, E'\n' ORDER BY event_type)
		  FROM outbox WHERE event_type IN ('lock.sleep', 'lock.loud')}),
	"lock.loud: could not claim the event: E*1024... (98976 bytes more)\n"
	  . 'lock.sleep: could not claim the event: canceling statement due to statement timeout',
	'the sleeping call ended at timeout_ms; the loud one cut to 1 kB');
$node->safe_psql('postgres', 'DROP TRIGGER lock_games ON bullmq.job');

done_testing();
