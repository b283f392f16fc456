# The upgrade from 1.1, as the README's Upgrading section says to do it,
# with events of every kind pending across it: a server runs the released
# 1.1 (built from the repository's history) with a webhook, a NOTIFY
# channel, a JetStream stream (a real nats-server) and an ordered webhook,
# some of their events delivered, others waiting, one retrying, one dead
# and one that no destination takes. This file checks the upgrade's
# statements:
#   - with the new build installed under the running server, ALTER
#     EXTENSION UPDATE and CREATE EXTENSION (in another database) are
#     refused, saying to restart, and change nothing; the 1.1 relay still
#     delivers;
#   - after the restart the relay pauses, saying to run ALTER EXTENSION
#     UPDATE, and so does outbox_relay();
#   - ALTER EXTENSION UPDATE makes the SQL objects 1.2, like the library,
#     and every event but the dead one is delivered then; CREATE EXTENSION
#     in the other database makes 1.2;
#   - an event written under 1.1 that waited, unroutable, across the
#     upgrade goes to a destination of a kind 1.1 did not have: Kafka
#     (librdkafka's mock cluster, test/perl/OutboxKafka.pm), when built.
# What becomes of each event, and pg_dump of the upgraded database:
# 064_upgrade_from_1_1_events.pl.
#
# The server runs from a copy of the installation under this test's
# directory, into which 1.1 and then the new build are installed
# (test/perl/OutboxUpgrade.pm, the scenario in test/perl/OutboxUpgrade11.pm).
# The 1.1 source comes from ci/check.sh (OUTBOX_1_1_SRC, extracted with git
# archive).
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxKafka;
use OutboxUpgrade11;
use PostgreSQL::Test::Utils;
use Test::More;

my $u = start_1_1();
my $node = $u->{node};
my $version = $OutboxUpgrade11::version;
$node->safe_psql('postgres', 'CREATE DATABASE other');
# under 1.1, an event for a kind it does not have: it waits, unroutable
my $waiting = emit_one($node, 'kafka.waiting', '{"n": 1}', 'order', '7');

# the new build installed, no restart yet: the update is refused, says why,
# and changes nothing
my $objects = q{
	SELECT (SELECT string_agg(pg_describe_object(classid, objid, objsubid), ',' ORDER BY 1)
	          FROM pg_depend
	         WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'outbox') AND deptype = 'e')
	    || pg_get_indexdef('outbox.outbox_key_idx'::regclass)
	    || pg_get_viewdef('outbox._outbox_pending'::regclass)
	    || pg_get_viewdef('outbox.outbox_status'::regclass)};
my $objects_11 = $node->safe_psql('postgres', $objects);
$u->{inst}->install_new;
my $older = qr/ERROR:  55000: the outbox library loaded in this server is older than version 1\.2\n/;
my $again = qr/HINT:  Restart the server, then run the statement again \(CREATE EXTENSION outbox, or ALTER EXTENSION outbox UPDATE\)\./;
my ($ret, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\nALTER EXTENSION outbox UPDATE");
isnt($ret, 0, 'ALTER EXTENSION UPDATE before the restart fails');
like($err, $older, 'with SQLSTATE 55000: the library loaded is older than 1.2');
like($err, $again, 'which says to restart, then run the statement again');
unlike($err, qr/could not find function/, 'not "could not find function"');
is($node->safe_psql('postgres', $version), '1.1', 'the extension is still 1.1');
is($node->safe_psql('postgres', $objects), $objects_11, 'its objects are those of 1.1, unchanged');
($ret, $out, $err) = $node->psql('other', "\\set VERBOSITY verbose\nCREATE EXTENSION outbox");
isnt($ret, 0, 'CREATE EXTENSION in another database before the restart fails');
like($err, $older, 'the same way');
like($err, $again, 'its hint says to run the statement again');
is($node->safe_psql('other', q{SELECT count(*) FROM pg_extension WHERE extname = 'outbox'}),
	'0', 'and leaves no extension behind');
still_delivers($u);

# the restart: the relay pauses, and outbox_relay() says the same
restart_paused($u);
($ret, $out, $err) = $node->psql('postgres', 'SELECT * FROM outbox.outbox_relay()');
like($err, qr/ERROR:  the extension's SQL objects are version 1\.1, the library is version 1\.2\n.*HINT:  Run ALTER EXTENSION outbox UPDATE in this database\./s,
	'outbox_relay() fails, saying to run ALTER EXTENSION UPDATE');

# the update: the relay resumes
update_extension($u);
my $with_kafka = !grep({ $_ eq 'kafka' } split ' ', ($ENV{OUTBOX_KINDS_LEFT_OUT} // '')) && kafka_available();
my $kafka;
if ($with_kafka)
{
	$kafka = start_kafka();
	$kafka->command('topic upgraded 3');
	$node->safe_psql('postgres', sprintf(q{
		INSERT INTO outbox.outbox_destinations (name, kind, event_types, options)
		VALUES ('kafka', 'kafka', 'kafka.*', '%s')}, $kafka->options(topic => 'upgraded')));
}
else
{
	note('no Kafka kind or no kcat here: the waiting event goes to a webhook');
	$node->safe_psql('postgres', sprintf(q{
		INSERT INTO outbox.outbox_destinations (name, event_types, url) VALUES ('kafka', 'kafka.*', '%s')},
		$u->{sink}->url('/kafka')));
}
deliver_the_rest($u);
SKIP:
{
	skip 'no Kafka kind or no kcat', 1 unless $with_kafka;
	my @got = @{ $kafka->consume('upgraded') };
	is_deeply([ map { [ $_->{headers}{'outbox-event-id'}, $_->{key}, decode_json($_->{payload})->{payload}{n} ] } @got ],
		[ [ $waiting, '7', 1 ] ], 'the event written under 1.1 is in the Kafka topic, once, keyed by its aggregate');
	$kafka->stop;
}

# the other database can create the extension now
$node->safe_psql('other', 'CREATE EXTENSION outbox');
is($node->safe_psql('other', $version), '1.2', 'CREATE EXTENSION after the restart makes 1.2');

$u->{sink}->stop;
$node->stop;
$u->{nats}->stop;
done_testing();
