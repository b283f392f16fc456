# BullMQ destinations against BullMQ itself: npm bullmq (test/node), its
# migrations run by BullMQ as a role that is not a superuser, its Worker
# processing what the relay added. The relay adds each job with BullMQ's
# add_job in the transaction that marks its event delivered, so a job
# exists if and only if its event is marked:
#   - OUTBOX_BULLMQ_EVENTS events (2,000 here; ci/slow.sh runs 10,000),
#     the relay killed with SIGKILL five times and the server stopped
#     once in immediate mode during the flow: exactly one job per event,
#     its id the event_id, and a Worker processes each once;
#   - add_job runs as the role that owns it, never as the relay's
#     superuser;
#   - a job BullMQ's schema refuses (a constraint) is that event's failed
#     attempt, retried and dead-lettered alone, while the others go on;
#   - a schema migrated for another BullMQ major, and a dropped one:
#     refused when a destination is written, and at send time a failed
#     attempt with the reason, the relay running on.
# Ordered destinations, fan-out and templates: 112_bullmq_routing.pl.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxBullmq;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

require_kind('bullmq');

my $n = $ENV{OUTBOX_BULLMQ_EVENTS} // 2000;
die "OUTBOX_BULLMQ_EVENTS must be a number of events, at least 1,000\n"
  unless $n =~ /^[0-9]+$/ && $n >= 1000;

my ($node, $conn) = bullmq_node('bullmq', 'outbox.max_attempts' => 5, restart_after_crash => 'on');
my %conn = %$conn;

# who adds jobs: a statement trigger on BullMQ's table notes current_user
$node->safe_psql('postgres', q{
	CREATE TABLE job_adders (who name);
	GRANT INSERT ON job_adders TO queue_owner;
	CREATE FUNCTION note_adder() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN INSERT INTO public.job_adders VALUES (current_user); RETURN NULL; END$$;
	CREATE TRIGGER note_adder AFTER INSERT ON bullmq.job
		FOR EACH STATEMENT EXECUTE FUNCTION note_adder()});

# an outbox_admin that may not use BullMQ's schema may not point a
# destination at it: the relay adds the jobs as add_job's owner
$node->safe_psql('postgres', 'CREATE ROLE adm IN ROLE outbox_admin');
my ($rc, $out, $err) = $node->psql('postgres', q{
	SET ROLE adm;
	INSERT INTO outbox_destinations (name, kind, event_types, options)
	VALUES ('borrowed', 'bullmq', 'order.*', '{"queue": "orders"}')}, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/42501: permission denied for the BullMQ schema of the destination/,
	'an admin without USAGE on the schema is refused');
is($node->safe_psql('postgres', q{
	GRANT USAGE ON SCHEMA bullmq TO adm;
	SET ROLE adm;
	INSERT INTO outbox_destinations (name, kind, event_types, options)
	VALUES ('borrowed', 'bullmq', 'none.*', '{"queue": "orders"}') RETURNING name;
	RESET ROLE;
	DELETE FROM outbox_destinations WHERE name = 'borrowed';
	REVOKE USAGE ON SCHEMA bullmq FROM adm}), 'borrowed', 'and accepted with it');

# a schema whose owner is not add_job's could replace what add_job calls
is($node->psql('postgres', q{
	BEGIN;
	CREATE ROLE other;
	ALTER SCHEMA bullmq OWNER TO other;
	INSERT INTO outbox_destinations (name, kind, event_types, options)
	VALUES ('mixed', 'bullmq', 'order.*', '{"queue": "orders"}')}), 3,
	'a schema owned by another role than add_job is refused');

# written against a schema of another major: refused, naming both
($rc, $out, $err) = $node->psql('postgres', q{
	BEGIN;
	UPDATE bullmq.migration SET min_client_version = 7
	 WHERE version = (SELECT max(version) FROM bullmq.migration);
	INSERT INTO outbox_destinations (name, kind, event_types, options)
	VALUES ('q7', 'bullmq', 'order.*', '{"queue": "orders"}');
	ROLLBACK}, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/0A000: the BullMQ schema of the destination is for BullMQ 7 clients \(schema version \d+\)/,
	'a schema for BullMQ 7 is refused when written');
like($err, qr/outbox knows BullMQ 6, schema versions 1 to 11 \(BullMQ 6\.7\) and later ones of BullMQ 6\. Check with: SELECT max\(version\), max\(min_client_version\) FROM <schema>\.migration;/,
	'the refusal names the versions known and how to check');

$node->safe_psql('postgres', q{
	INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES
	('jobs', 'bullmq', 'order.*',
	 '{"queue": "orders", "attempts": 3, "backoff_type": "fixed", "backoff_delay_ms": 1000,
	   "remove_on_fail_seconds": 3600}')});

# Exactly once through crashes. A trigger makes each job take 2 ms to add,
# so that the relay spends its time inside claims, where the kills land.
$node->safe_psql('postgres', q{
	CREATE FUNCTION slow_add() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN PERFORM pg_sleep(0.002); RETURN NULL; END$$;
	CREATE TRIGGER slow_add AFTER INSERT ON bullmq.job
		FOR EACH ROW EXECUTE FUNCTION slow_add()});
$node->safe_psql('postgres', qq{
	SELECT count(outbox_emit('order.step', jsonb_build_object('n', g), 'order', (g % 20)::text))
	  FROM generate_series(1, $n) g});

my $jobs = "SELECT count(*) FROM bullmq.job WHERE queue = 'orders'";
my $kills = 0;
for my $round (1 .. 6)
{
	my $threshold = int($n * $round / 8);
	$node->poll_query_until('postgres', "SELECT ($jobs) >= $threshold") or die "no progress to $threshold jobs";
	if ($round == 6)
	{
		$node->stop('immediate');
		$node->start;
		note("server stopped in immediate mode after $threshold jobs, and started");
		next;
	}
	my $pid = relay_pid($node, 'postgres');
	next if $pid eq '';
	my $offset = -s $node->logfile;
	kill 'KILL', $pid or die "kill $pid: $!";
	$kills++;
	$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
	wait_relay($node, 'postgres', $pid) or die 'no relay after the crash restart';
}
cmp_ok($kills, '>=', 5, "the relay was killed $kills times during the flow");
ok($node->poll_query_until('postgres', 'SELECT count(*) = 0 FROM outbox WHERE delivered_at IS NULL'),
	'every event delivered');
is($node->safe_psql('postgres', $jobs), $n, "$n jobs for $n events");
is($node->safe_psql('postgres', q{
		SELECT count(*) FROM outbox o JOIN bullmq.job j ON j.queue = 'orders' AND j.id = o.event_id::text}),
	$n, 'each job\'s id is its event\'s event_id');
is($node->safe_psql('postgres', q{
		SELECT count(*) FROM bullmq.job
		 WHERE queue = 'orders' AND (name <> 'order.step' OR max_attempts <> 3 OR data ? 'payload'
		    OR opts <> '{"attempts": 3, "backoff": {"type": "fixed", "delay": 1000},
		                 "removeOnFail": {"age": 3600}}')}),
	'0', 'each job: the event type as its name, the payload as its data, the destination\'s options');
is($node->safe_psql('postgres', 'SELECT string_agg(DISTINCT who, \',\') FROM job_adders'),
	'queue_owner', 'add_job ran as its owner, never as the relay\'s superuser');
$node->safe_psql('postgres', 'DROP TRIGGER slow_add ON bullmq.job');

my $worked = node_json('bullmq_tool.js', { command => 'work', connection => \%conn,
	queue => 'orders', count => $n, concurrency => 8, timeout_ms => 120_000 }, 'bullmq', 'pg');
my %seen;
$seen{ $_->{id} }++ for @{ $worked->{jobs} };
is(scalar keys %seen, $n, "a BullMQ Worker processed $n jobs");
is(scalar(grep { $seen{$_} > 1 } keys %seen), 0, 'none of them twice');

# A job BullMQ's table refuses: that event's failed attempts, alone
my $relay = relay_pid($node, 'postgres');
$node->safe_psql('postgres', q{
	ALTER TABLE bullmq.job ADD CONSTRAINT no_poison CHECK (name <> 'order.poison') NOT VALID;
	SELECT outbox_emit('order.before', '{}', 'p', '1'), outbox_emit('order.poison', '{}', 'p', '2'),
	       outbox_emit('order.after', '{}', 'p', '3')});
ok($node->poll_query_until('postgres', q{
		SELECT dead_at IS NOT NULL FROM outbox WHERE event_type = 'order.poison'}),
	'the refused event is dead-lettered');
is($node->safe_psql('postgres', q{
		SELECT attempts || ' ' || (last_error LIKE '%violates check constraint "no_poison"%')
		  FROM outbox WHERE event_type = 'order.poison'}),
	'5 true', 'after its 5 attempts, with BullMQ\'s table\'s words');
note($node->safe_psql('postgres', "SELECT last_error FROM outbox WHERE event_type = 'order.poison'"));
is($node->safe_psql('postgres', q{
		SELECT string_agg(event_type, ',' ORDER BY event_type) FROM outbox o
		  JOIN bullmq.job j ON j.id = o.event_id::text WHERE o.aggregate_type = 'p'}),
	'order.after,order.before', 'the events beside it became jobs');
is(relay_pid($node, 'postgres'), $relay, 'the relay ran on, the same process');
$node->safe_psql('postgres', 'ALTER TABLE bullmq.job DROP CONSTRAINT no_poison');

# A session with temporary tables (one could stand for BullMQ's job table
# and run its triggers as add_job's owner) adds no job; the worker does
is($node->safe_psql('postgres', q{
	BEGIN;
	CREATE TEMP TABLE job (queue text, id text);
	SELECT outbox_emit('order.temp', '{}', 't', '1') IS NOT NULL AS emitted;
	SELECT delivered FROM outbox_relay();
	SELECT attempts || ' ' || last_error FROM outbox WHERE event_type = 'order.temp';
	COMMIT}),
	"t\n0\n0 BullMQ jobs are not added from a session that has temporary tables; the relay worker adds them",
	'outbox_relay() in a session with temporary tables adds no job, and counts no attempt');
ok($node->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM bullmq.job j JOIN outbox o ON j.id = o.event_id::text
		 WHERE o.event_type = 'order.temp' AND o.delivered_at IS NOT NULL}),
	'the relay worker adds it');

# The schema migrated for another major while events flow: failed
# attempts naming it, no job; back to BullMQ 6's: delivered
$node->safe_psql('postgres', q{
	UPDATE bullmq.migration SET min_client_version = 7
	 WHERE version = (SELECT max(version) FROM bullmq.migration);
	SELECT outbox_emit('order.later', '{}', 'v', '1')});
ok($node->poll_query_until('postgres', q{
		SELECT last_error LIKE 'the BullMQ schema of the destination is for BullMQ 7 clients (schema version %): outbox knows BullMQ 6,%'
		  FROM outbox WHERE event_type = 'order.later'}),
	'a schema now for BullMQ 7: the event fails, with the reason');
is($node->safe_psql('postgres', q{
		SELECT count(*) FROM bullmq.job j JOIN outbox o ON j.id = o.event_id::text
		 WHERE o.event_type = 'order.later'}), '0', 'no job for it');
is($node->safe_psql('postgres', q{
		UPDATE outbox_destinations SET event_types = event_types WHERE name = 'jobs' RETURNING name}),
	'jobs', 'the destination can still be changed (to disable it, say) while its schema is refused');
$node->safe_psql('postgres', q{
	UPDATE bullmq.migration SET min_client_version = 6;
	SELECT outbox_redeliver(event_id) FROM outbox WHERE event_type = 'order.later'});
ok($node->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM bullmq.job j JOIN outbox o ON j.id = o.event_id::text
		 WHERE o.event_type = 'order.later' AND o.delivered_at IS NOT NULL}),
	'back on BullMQ 6\'s ledger: delivered');

# BullMQ's schema dropped: failed attempts naming it, the relay running on
$relay = relay_pid($node, 'postgres');
$node->safe_psql('postgres', q{
	DROP SCHEMA bullmq CASCADE;
	SELECT outbox_emit('order.orphan', '{}')});
ok($node->poll_query_until('postgres', q{
		SELECT last_error = 'the BullMQ schema of the destination does not exist: BullMQ''s migrations create it: runMigrations(), or migrate: true on BullMQ''s connection, in this database.'
		  FROM outbox WHERE event_type = 'order.orphan'}),
	'a dropped schema: the event fails, with the reason');
is(relay_pid($node, 'postgres'), $relay, 'the relay ran on, the same process');
done_testing();
