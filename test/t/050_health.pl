# Relay and destination health in SQL, from shared memory: a relay whose
# every step fails shows the error within a second; a relay that exits
# shows "restarting" with the time of its next start and keeps its counters
# when it is back; relays that cannot start say why; destinations count
# their outcomes; outbox_stats_reset() starts them again.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('health');
my $sink = start_sink();
my $url = $sink->url('/hook');
my $pid = wait_relay($node, 'postgres');
ok($pid, 'relay runs');

sub sql { my ($text) = @_; return $node->safe_psql('postgres', $text); }

ok( $node->poll_query_until('postgres',
		"SELECT state IN ('running', 'idle') AND pid = $pid FROM outbox_relay_stats() WHERE relay = 0"),
	'the relay row shows it up, with its pid');

############################################################################
# Outcomes, per relay and per destination.
sql(qq{INSERT INTO outbox_destinations (name, event_types, url) VALUES ('hooks', 'task.*', '$url')});
emit($node, 'postgres', 'task.created', 5);
ok($sink->wait_delivered(5), 'five events delivered');
ok( $node->poll_query_until('postgres', q{
		SELECT delivered = 5 AND failed = 0 AND last_success_at IS NOT NULL
		       AND latency_p50_ms >= 0 AND latency_p99_ms >= latency_p50_ms
		  FROM outbox_destination_stats() WHERE destination = 'hooks'}),
	'the destination counts five deliveries, with a latency');
is(sql(q{SELECT delivered, failed, passes > 0, last_pass_at IS NOT NULL FROM outbox_relay_stats() WHERE relay = 0}),
	'5|0|t|t', 'the relay counts them too, and its passes');
is(sql(q{SELECT max(count) FROM outbox_destination_latency() WHERE destination = 'hooks'}),
	'5', 'the last latency bucket holds every delivery');

# a failing endpoint: a failed attempt with its error
$sink->paths('/hook' => { status => 503 });
emit($node, 'postgres', 'task.failed', 1);
ok( $node->poll_query_until('postgres', q{
		SELECT failed >= 1 AND last_error LIKE 'HTTP status 503%' AND last_failure_at IS NOT NULL
		  FROM outbox_destination_stats() WHERE destination = 'hooks'}),
	'a failed attempt is counted with its error');

# an answer that quotes the event (here its header, echoed back) is in the
# event's last_error, which outbox_admin reads, but not in the statistics:
# they have the error alone
$sink->control(echo => ['x-card']);
sql(q{SELECT outbox_emit('task.card', '{}', headers => '{"x-card": "4111 1111 1111 1111"}')});
ok( $node->poll_query_until('postgres', q{
		SELECT last_error LIKE 'HTTP status 503: x-card: 4111 1111 1111 1111%' FROM outbox WHERE event_type = 'task.card'}),
	"the event's last_error quotes the answer");
is(sql(q{SET ROLE outbox_admin; SELECT last_error FROM outbox_destination_stats() WHERE destination = 'hooks'}),
	'HTTP status 503', 'outbox_admin reads the error there, not the answer');
# outbox_monitor reads counts, times and states, and no error text at all:
# one can carry a broker's words or an event's fields
is(sql(q{SET ROLE outbox_monitor; SELECT failed > 0, last_failure_at IS NOT NULL, last_error IS NULL
           FROM outbox_destination_stats() WHERE destination = 'hooks'}),
	't|t|t', 'outbox_monitor reads the counts and times, without the error text');

# dead letters are counted apart, among the failures: a 400 dead-letters at
# once, while the 503s above are retried
$sink->paths('/hook' => { status => 503 }, '/bad' => { status => 400 });
sql(sprintf(q{INSERT INTO outbox_destinations (name, event_types, url) VALUES ('bad', 'bad.*', '%s')},
	$sink->url('/bad')));
emit($node, 'postgres', 'bad.request', 2);
ok( $node->poll_query_until('postgres', q{
		SELECT failed = 2 AND dead_lettered = 2 FROM outbox_destination_stats() WHERE destination = 'bad'}),
	'two failed attempts that dead-lettered their events are counted as dead letters');
is(sql(q{SELECT dead_lettered FROM outbox_destination_stats() WHERE destination = 'hooks'}), '0',
	'failed attempts that are retried are not');
$sink->control(echo => []);
sql(q{DELETE FROM outbox_destinations; DELETE FROM outbox});
$sink->paths();

############################################################################
# The issue's case: a column the relay needs is renamed. Every step fails,
# the relay goes on, and the error is in SQL within a second.
my $t0 = sql(q{SELECT clock_timestamp()});
sql(q{BEGIN;
	SELECT outbox_emit('c12', '{}');
	ALTER TABLE outbox RENAME COLUMN delivered_at TO delivered_at_x;
	COMMIT;});
ok( $node->poll_query_until('postgres', qq{
		SELECT last_error LIKE '%delivered_at%' AND last_error_at >= '$t0'
		  FROM outbox_relay_stats() WHERE relay = 0}),
	'the relay shows the error of its failing steps');
SKIP:
{
	skip 'timings are not representative under the sanitizers', 1
	  if $ENV{OUTBOX_TEST_SANITIZER};
	is(sql(qq{SELECT last_error_at - '$t0' < interval '1 second' FROM outbox_relay_stats() WHERE relay = 0}),
		't', 'within a second of the commit');
}
is(sql(q{SELECT pending FROM outbox_status WHERE event_type = 'c12'}), '1', 'the event is pending');
is(sql(qq{SELECT state IN ('running', 'idle') AND pid = $pid FROM outbox_relay_stats() WHERE relay = 0}),
	't', 'the same relay is still up');
sql(q{ALTER TABLE outbox RENAME COLUMN delivered_at_x TO delivered_at});
sql(q{DELETE FROM outbox});

############################################################################
# A relay that exits: restarting, with the time of its next start; it
# exits twice within a minute, so its second restart waits 2 s. Its row
# and counters survive.
sql(qq{SELECT pg_terminate_backend($pid)});
my $pid2 = wait_relay($node, 'postgres', $pid);
ok($pid2, 'the relay is started again');
sql(qq{SELECT pg_terminate_backend($pid2)});
ok( $node->poll_query_until('postgres', q{
		SELECT state = 'restarting' AND pid IS NULL AND next_start > now()
		  FROM outbox_relay_stats() WHERE relay = 0}),
	'between two runs it is restarting, with a next start ahead');
my $pid3 = wait_relay($node, 'postgres', $pid2);
ok($pid3, 'and it is back');
ok( $node->poll_query_until('postgres', qq{
		SELECT state IN ('running', 'idle') AND pid = $pid3
		  FROM outbox_relay_stats() WHERE relay = 0}),
	'running again under its new pid');
is(sql(q{SELECT restarts, delivered, last_error LIKE '%delivered_at%' FROM outbox_relay_stats() WHERE relay = 0}),
	'2|5|t', 'its counters and last error survived two restarts');

############################################################################
# Relays that cannot start say why: 16 relays do not fit in 16 worker
# processes with the launcher. A database that does not exist has a row
# for those who may see all databases.
sql(q{ALTER SYSTEM SET outbox.relays_per_database = 16;
	ALTER SYSTEM SET outbox.databases = 'postgres, no_such_db'});
$node->reload;
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) > 0 FROM outbox_relay_stats()
		 WHERE state = 'not started' AND reason LIKE 'no background worker slot is free%'
		   AND next_start IS NOT NULL}),
	'relays without a worker slot are not started, and say why');
is(sql(q{SELECT state, reason LIKE 'no such database%' FROM outbox_relay_stats(true) WHERE database = 'no_such_db'}),
	'not started|t', 'a missing database is listed with the reason');
is(sql(q{SELECT count(*) FROM outbox_relay_stats() WHERE database = 'no_such_db'}),
	'0', 'but not among the rows of the current database');
sql(q{ALTER SYSTEM RESET outbox.relays_per_database;
	ALTER SYSTEM RESET outbox.databases});
$node->reload;
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM outbox_relay_stats(true)}),
	'relays above a lowered count and missing databases are dropped');

############################################################################
# Every destination gets a row while outbox.max_destination_stats (1,024)
# has room, whatever database it is of: 200 destinations of one database,
# each with an outcome through outbox_relay() (1.1 kept 128 a database,
# and counted the others in their relay's totals only). TAP 102 fills it.
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', q{
	CREATE EXTENSION outbox;
	INSERT INTO outbox_destinations (name, event_types, channel)
	SELECT 'fill' || i, 'fill.' || i, 'fill' FROM generate_series(1, 200) i;
	SELECT count(outbox_emit('fill.' || i, '{}')) FROM generate_series(1, 200) i});
is($node->safe_psql('other', q{SELECT delivered FROM outbox_relay(1000)}), '200',
	'another database delivers to 200 destinations');
is($node->safe_psql('other', q{SELECT count(*), count(destination) FROM outbox_destination_stats()}),
	'200|200', 'and holds a row for each of them, no overflow row');
sql(qq{INSERT INTO outbox_destinations (name, event_types, url) VALUES ('later', 'later.*', '$url')});
emit($node, 'postgres', 'later.created', 1);
ok( $node->poll_query_until('postgres',
		q{SELECT delivered = 1 FROM outbox_destination_stats() WHERE destination = 'later'}),
	'a new destination of this database still gets a row');
$node->safe_psql('other', q{SELECT outbox_stats_reset()});
is($node->safe_psql('other', q{SELECT count(*) FROM outbox_destination_stats()}), '0',
	'the other database\'s reset frees its rows');
is(sql(q{SELECT count(*) FROM outbox_destination_stats() WHERE destination = 'later'}), '1',
	'and only its own');

############################################################################
# Reset.
sql(q{SELECT outbox_stats_reset()});
is(sql(q{SELECT count(*) FROM outbox_destination_stats()}), '0', 'reset drops the destinations');
is(sql(q{SELECT restarts, delivered, failed, last_error IS NULL FROM outbox_relay_stats() WHERE relay = 0}),
	'0|0|0|t', 'and zeroes the relay counters');

$sink->stop;
$node->stop;
done_testing();
