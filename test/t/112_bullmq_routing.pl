# BullMQ destinations as routing makes use of them, against BullMQ itself
# (test/perl/OutboxBullmq.pm):
#   - an ordered destination and a Worker of concurrency 1: each key's
#     jobs processed in the order of its events;
#   - fan-out to a BullMQ queue (the envelope as the job's data, a job
#     name of the destination's) and a webhook: each gets every event;
#   - a template of the queue's name: each event in the queue its fields
#     make; one whose field is missing, or whose name BullMQ refuses,
#     dead-lettered at once with the reason.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

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

# A template of the queue's name: each event's queue from its fields; one
# whose field is missing or makes a name BullMQ refuses fails for good
$node->safe_psql('postgres', q{
	INSERT INTO outbox_destinations (name, kind, event_types, options)
	VALUES ('per_tenant', 'bullmq', 'tenant.*', '{"queue": "tenant-{aggregate_type}"}');
	SELECT outbox_emit('tenant.event', '{}', 'acme', '1'), outbox_emit('tenant.event', '{}', 'globex', '2'),
	       outbox_emit('tenant.event', '{}', NULL, '3'), outbox_emit('tenant.event', '{}', 'a:b', '4')});
ok($node->poll_query_until('postgres', q{
		SELECT count(*) = 4 FROM outbox
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
	  . '1 the queue name built from the event\'s fields has ":", which BullMQ refuses',
	'a missing field and a refused name: dead-lettered at once, with the reason');

done_testing();
