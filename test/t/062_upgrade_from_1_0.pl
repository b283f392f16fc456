# The upgrade from 1.0, as the README's Upgrading section says to do it:
# a server runs the released 1.0 (built from the repository's history) with
# delivered, pending, retrying and dead events; the new build is installed;
# ALTER EXTENSION UPDATE before the restart is refused with one message
# that says to restart; after the restart the relay pauses until ALTER
# EXTENSION UPDATE, while the application keeps emitting; then every event
# comes through, and pg_dump of the upgraded database restores cleanly.
#
# The server runs from a copy of the installation under this test's
# directory, into which 1.0 and then the new build are installed
# (test/perl/OutboxUpgrade.pm). The 1.0 source comes from ci/check.sh
# (OUTBOX_1_0_SRC, extracted with git archive).
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxTest;
use OutboxUpgrade;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $src = release_source('1.0');
my $inst = OutboxUpgrade->new;
my $tmp = $inst->tmp;
$inst->install_release('1.0', $src);

my $node = $inst->node('upgrade');
$node->init;
# settings 1.0 knows; retries an hour apart, so that the retrying events wait
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'outbox'
outbox.databases = 'postgres'
outbox.poll_interval = '200ms'
outbox.backoff_base = '1h'
outbox.backoff_max = '1h'
max_worker_processes = 16
jit = off
});
$node->start;
$node->safe_psql('postgres', 'CREATE SCHEMA outbox; CREATE EXTENSION outbox SCHEMA outbox');
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'outbox'}),
	'1.0', 'the extension is 1.0');

my $sink = start_sink();
my $hook = $sink->url('/hook');
# delivered (ok.*), retrying (retry.*: nothing listens on port 1), dead
# (big.*: too large for NOTIFY), pending (pend.*: no destination)
$node->safe_psql('postgres', qq{
	INSERT INTO outbox.outbox_destinations (name, event_types, url, channel) VALUES
		('hook', 'ok.*', '$hook', NULL),
		('down', 'retry.*', 'http://127.0.0.1:1/', NULL),
		('note', 'big.*', NULL, 'outbox_big');
	SELECT outbox.outbox_emit('ok.before', jsonb_build_object('n', g)) FROM generate_series(1, 3) g;
	SELECT outbox.outbox_emit('retry.before', jsonb_build_object('n', g)) FROM generate_series(1, 2) g;
	SELECT outbox.outbox_emit('big.before', jsonb_build_object('pad', repeat('x', 9000))) FROM generate_series(1, 2) g;
	SELECT outbox.outbox_emit('pend.before', jsonb_build_object('n', g)) FROM generate_series(1, 2) g;
	-- a webhook that 1.0 turned into a channel in place, with an event
	-- delivered to it while it was a webhook (as the 1.0 relay records it)
	INSERT INTO outbox.outbox_destinations (name, event_types, url) VALUES
		('turned', 'turn.*', 'http://127.0.0.1:1/');
	INSERT INTO outbox.outbox (event_type, payload, delivered_at, attempts, destination)
		VALUES ('turn.before', '{"private": "WEBHOOK_ONLY"}', now(), 1, 'turned');
	UPDATE outbox.outbox_destinations SET url = NULL, channel = 'turned_channel' WHERE name = 'turned';});
my $states = q{
	SELECT string_agg(event_type || ':' || CASE WHEN delivered_at IS NOT NULL THEN 'delivered'
	                                            WHEN dead_at IS NOT NULL THEN 'dead'
	                                            WHEN attempts > 0 THEN 'retrying'
	                                            ELSE 'pending' END, ',' ORDER BY id)
	  FROM outbox.outbox};
my $before = 'ok.before:delivered,' x 3 . 'retry.before:retrying,' x 2
  . 'big.before:dead,' x 2 . 'pend.before:pending,pend.before:pending,turn.before:delivered';
ok( $node->poll_query_until('postgres', qq{
		SELECT ($states) = '$before' AND (SELECT bool_and(last_error IS NOT NULL) FROM outbox.outbox
		                                   WHERE event_type = 'pend.before')}),
	'1.0 delivered, retries, dead-lettered and parked events');

# the new build installed, no restart yet: the update is refused, and says why
$inst->install_new;
my ($ret, $out, $err) = $node->psql('postgres', 'ALTER EXTENSION outbox UPDATE');
isnt($ret, 0, 'ALTER EXTENSION UPDATE before the restart fails');
like($err, qr/ERROR:  the outbox library loaded in this server is older than version 1\.1/,
	'with one message: the library loaded is older');
like($err, qr/HINT:  Restart the server, then run ALTER EXTENSION outbox UPDATE again\./,
	'which says to restart');
unlike($err, qr/could not find function/, 'not "could not find function"');
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'outbox'}),
	'1.0', 'the extension is still 1.0, unchanged');
my ($still) = split /\n/, $node->safe_psql('postgres', q{SELECT outbox.outbox_emit('ok.still', '{}')});
ok($sink->wait_delivered(4), 'the 1.0 relay still delivers meanwhile');

# the restart: the 1.1 library, the SQL objects of 1.0
my $offset = -s $node->logfile;
$node->restart;
ok( wait_until(sub {
		log_since($node, $offset) =~ /WARNING:  outbox relay paused: the extension's SQL objects are version 1\.0, the library is version 1\.2\n.*HINT:  Run ALTER EXTENSION outbox UPDATE in this database\./
	}),
	'the relay pauses, saying to run ALTER EXTENSION UPDATE');
($ret, $out, $err) = $node->psql('postgres', 'SELECT * FROM outbox.outbox_relay()');
like($err, qr/ERROR:  the extension's SQL objects are version 1\.0, the library is version 1\.2\n.*HINT:  Run ALTER EXTENSION outbox UPDATE in this database\./s,
	'outbox_relay() fails with the same message');
my ($during) = split /\n/, $node->safe_psql('postgres', q{SELECT outbox.outbox_emit('ok.during', '{}')});
ok($during, 'the application emits meanwhile');

$node->safe_psql('postgres', 'ALTER EXTENSION outbox UPDATE');
is($node->safe_psql('postgres', q{
		SELECT extversion || ' ' || outbox.outbox_library_version() FROM pg_extension WHERE extname = 'outbox'}),
	'1.2 1.2', 'the SQL objects and the library are 1.2');
ok($sink->wait_delivered(5), 'the relay resumes: the event emitted meanwhile arrives');

# catch-up of the channel that was a webhook in 1.0 does not show what the
# webhook was sent; what the channel is sent from now on, it does
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.outbox_catch_up('turned', 'c', '7 days')}),
	'0', "catch-up does not expose the webhook's deliveries of 1.0 under the channel's name");
my ($turn_after) = split /\n/, $node->safe_psql('postgres', q{SELECT outbox.outbox_emit('turn.after', '{}')});
ok($node->poll_query_until('postgres',
	"SELECT delivered_at IS NOT NULL FROM outbox.outbox WHERE event_id = '$turn_after'"),
	'the channel is sent a new event');
is($node->safe_psql('postgres', q{SELECT string_agg(event_id::text, ',') FROM outbox.outbox_catch_up('turned', 'c', '7 days')}),
	$turn_after, 'and catch-up returns it, only it');

# every event of 1.0 comes through: the retrying ones made due, the dead
# ones routed to a webhook (a destination's kind cannot change: a new one)
# and redelivered, the pending ones given a
# destination
$node->safe_psql('postgres', qq{
	UPDATE outbox.outbox_destinations SET url = '$hook' WHERE name = 'down';
	DELETE FROM outbox.outbox_destinations WHERE name = 'note';
	INSERT INTO outbox.outbox_destinations (name, event_types, url) VALUES ('note-hook', 'big.*', '$hook');
	INSERT INTO outbox.outbox_destinations (name, event_types, url) VALUES ('later', 'pend.*', '$hook');
	SELECT outbox.outbox_redeliver(event_id) FROM outbox.outbox WHERE event_type = 'retry.before';
	SELECT outbox.outbox_redeliver_dead();});
ok( $node->poll_query_until('postgres',
		q{SELECT bool_and(delivered_at IS NOT NULL) FROM outbox.outbox}),
	'every event is delivered');
my @ids = sort split /\n/, $node->safe_psql('postgres',
	q{SELECT event_id FROM outbox.outbox WHERE event_type NOT LIKE 'turn.%'});
is_deeply([ sort keys %{ count_by_id($sink->delivered) } ], \@ids,
	'the endpoint received each of the 11 events');
is(scalar @ids, 11, '11 events in all');
my ($late) = grep { decode_json($_->{body})->{type} eq 'pend.before' } @{ $sink->delivered };
like(decode_json($late->{body})->{created_at}, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/,
	'the 1.1 envelope: created_at in UTC with Z');

# pg_dump of the upgraded database restores cleanly, rows included
my $rows = q{
	SELECT (SELECT string_agg(concat_ws('/', id, event_id, event_type, attempts, delivered_at,
	                                    dead_at, redelivered_at, last_error), ',' ORDER BY id)
	          FROM outbox.outbox)
	    || (SELECT string_agg(concat_ws('/', name, event_types, url, channel), ',' ORDER BY name)
	          FROM outbox.outbox_destinations)};
my $dump = "$tmp/upgraded.dump";
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $node->connstr('postgres') ], 'pg_dump');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_checks_all(
	[ 'pg_restore', '--exit-on-error', '-d', $node->connstr('restored'), $dump ],
	0, [qr/^$/], [qr/^$/], 'pg_restore: no error, no warning');
is($node->safe_psql('restored', $rows), $node->safe_psql('postgres', $rows),
	'events and destinations restored as they were');
is($node->safe_psql('restored', q{SELECT extversion FROM pg_extension WHERE extname = 'outbox'}),
	'1.2', 'the restored extension is 1.2');
$node->safe_psql('restored', q{SELECT outbox.outbox_emit('ok.restored', '{}')});
is($node->safe_psql('restored', q{SELECT count(*) FROM outbox.outbox}), '14',
	'the restored database takes new events');

$sink->stop;
$node->stop;
done_testing();
