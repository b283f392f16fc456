# Which databases get a relay: changing outbox.databases by reload stops and
# starts relays without disturbing the others; DROP DATABASE of a database
# whose relay runs succeeds (a role that does not own the database cannot
# stop its relay by trying), and once the pause set by the DROP is over
# neither the launcher nor a restarted one starts a relay for the dropped
# database, and each logs once that it is gone.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = outbox_node('databases');
ok(wait_relay($node, 'postgres'), 'relay runs in database postgres');

############################################################################
# outbox.databases by reload: removing a database stops its relay, adding it
# back starts a new one; the other database keeps its relay.
{
	$node->safe_psql('postgres', 'CREATE DATABASE listed');
	set_databases($node, 'postgres, listed');
	my $listed_pid = wait_relay($node, 'listed');
	ok($listed_pid, 'relay starts for a database added to outbox.databases');
	my $pg_pid = relay_pid($node, 'postgres');

	set_databases($node, 'postgres');
	ok(wait_no_relay($node, 'listed'),
		'relay stops when its database is removed from outbox.databases');
	ok( $node->poll_query_until('postgres',
			"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $listed_pid"),
		'the process is gone');
	is(relay_pid($node, 'postgres'), $pg_pid, 'relay of postgres still the same process');

	my $offset = -s $node->logfile;
	set_databases($node, 'postgres, listed');
	ok(wait_relay($node, 'listed', $listed_pid), 'a new relay starts when the database is added back');
	$node->wait_for_log(qr/outbox relay started for database "listed"/, $offset);
	is(relay_pid($node, 'postgres'), $pg_pid, 'relay of postgres still the same process');
}

############################################################################
# DROP DATABASE of a database whose relay runs: the guard stops the relay, so
# the command does not fail with "being accessed by other users". The DROP
# pauses the database until it commits (10 s at most); once that pause is
# surely over, the launcher, made
# to reconcile, must not try to start a relay for the dropped database (it is
# still named in outbox.databases).
{
	$node->safe_psql('postgres', 'CREATE DATABASE plain');
	set_databases($node, 'postgres, plain');
	my $plain_pid = wait_relay($node, 'plain');
	my $pg_pid = wait_relay($node, 'postgres');
	my $plain_oid = $node->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = 'plain'");
	is(relay_pid($node, 'plain'), $plain_pid, 'relay of plain runs before DROP DATABASE');

	# a role that does not own the database cannot stop its relay by trying
	$node->safe_psql('postgres', 'CREATE ROLE regress_nobody LOGIN');
	my ($nret, $nout, $nerr) = $node->psql('postgres', 'DROP DATABASE plain',
		extra_params => [ '-U', 'regress_nobody' ]);
	like($nerr, qr/must be owner of database plain/, 'DROP DATABASE by a non-owner fails');
	is(relay_pid($node, 'plain'), $plain_pid, 'and leaves the relay running');

	# nor can its owner, by a command that fails the command's own checks
	# before its wait for other sessions
	$node->safe_psql('postgres', q{
		CREATE ROLE regress_owner LOGIN NOCREATEDB;
		ALTER DATABASE plain OWNER TO regress_owner});
	my @doomed = (
		[ 'ALTER DATABASE plain RENAME TO plain2', qr/permission denied to rename database/, 'RENAME without CREATEDB' ],
		[ 'CREATE DATABASE copy TEMPLATE plain', qr/permission denied to create database/, 'CREATE DATABASE ... TEMPLATE without CREATEDB' ],
		[ 'ALTER ROLE regress_owner CREATEDB', undef, undef ],
		[ 'ALTER DATABASE plain RENAME TO postgres', qr/database "postgres" already exists/, 'RENAME to a name taken' ],
		[ 'CREATE DATABASE postgres TEMPLATE plain', qr/database "postgres" already exists/, 'CREATE DATABASE ... TEMPLATE under a name taken' ],
		[ 'ALTER DATABASE plain SET TABLESPACE nosuch', qr/tablespace "nosuch" does not exist/, 'SET TABLESPACE to no tablespace' ],
		[ 'ALTER DATABASE plain SET TABLESPACE pg_global', qr/pg_global cannot be used as default tablespace|permission denied for tablespace pg_global/, 'SET TABLESPACE to pg_global' ]);
	for my $d (@doomed)
	{
		my ($sql, $error, $what) = @$d;
		if (!defined $error)
		{
			$node->safe_psql('postgres', $sql);
			next;
		}
		my ($r, $o, $e) = $node->psql('postgres', $sql, extra_params => [ '-U', 'regress_owner' ]);
		like($e, $error, "$what fails");
		is(relay_pid($node, 'plain'), $plain_pid, "$what leaves the relay running");
	}
	$node->safe_psql('postgres', 'ALTER DATABASE plain OWNER TO CURRENT_USER');

	my $drop_offset = -s $node->logfile;
	my $drop_ts = $node->safe_psql('postgres', 'SELECT now()');
	my $t = time();
	my ($ret, $stdout, $stderr) = $node->psql('postgres', 'DROP DATABASE plain');
	my $drop_secs = time() - $t;
	is($ret, 0, 'DROP DATABASE of a database with a running relay succeeds');
	unlike($stderr, qr/being accessed by other users/, 'not blocked by the relay');
	note(sprintf('DROP DATABASE took %.2f s', $drop_secs));
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM pg_stat_activity WHERE pid = $plain_pid OR (backend_type = 'outbox relay' AND datid = $plain_oid)"),
		'0', 'its relay is gone');

	# A restarted launcher looks at the dropped database afresh: restart it
	# once the pause is over, then end the relay of postgres. A launcher
	# starts a relay for postgres only in a reconcile: a new one proves that
	# the new launcher reconciled.
	ok( $node->poll_query_until('postgres',
			"SELECT now() > '$drop_ts'::timestamptz + interval '11 s'"),
		'the pause of the dropped database is over');
	my $launcher_of = "FROM pg_stat_activity WHERE backend_type = 'outbox launcher'";
	my $old_launcher = $node->safe_psql('postgres', "SELECT pid $launcher_of");
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($old_launcher)");
	ok( $node->poll_query_until('postgres',
			"SELECT count(*) = 1 AND min(pid) <> $old_launcher $launcher_of"),
		'the launcher is restarted');
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pg_pid)");
	ok(wait_relay($node, 'postgres', $pg_pid), 'launcher reconciled after the pause');
	my $since_drop = log_since($node, $drop_offset);
	unlike($since_drop, qr/outbox relay started for database "plain"/,
		'no relay started for the dropped database');
	is( join("\n",
			grep { /\b(?:WARNING|ERROR|FATAL|PANIC):.*(?:"plain"|\b$plain_oid\b)/ && !/\bstatement:/ }
			  split /\n/, $since_drop),
		'', 'no error about the dropped database');
	unlike($since_drop, qr/could not start an outbox relay/, 'no failed relay start');
	# each launcher process says so once, not at every reconcile
	my @said_by = map { /\[(\d+)\]/ ? $1 : () }
	  grep { /no outbox relay for databases named in "outbox.databases": "plain"/ } split /\n/, $since_drop;
	my %per_launcher;
	$per_launcher{$_}++ for @said_by;
	ok(@said_by >= 1 && !grep({ $_ > 1 } values %per_launcher),
		'each launcher logs once that the named database is gone');
}

$node->stop;
done_testing();
