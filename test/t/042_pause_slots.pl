# DROP DATABASE and the like stop the relay of their database and pause it
# so that the command does not collide with it. A pause must last no longer
# than the command's transaction, a command that fails must leave none
# behind, and no one may fill the shared slots that relays need with
# pauses: a role with CREATEDB that loops over failing DROP DATABASE
# commands of its own databases must not keep the relay of app from
# starting ("too many outbox relays").
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

# The pause that a command sets lasts 10 s at most; a relay stopped by it
# comes back after the launcher's restart delay (1 s, then 2 s) once the
# pause is over, so back within this many seconds means the pause ended
# with the command.
my $pause_secs = 10;

my $node = outbox_node('pauses', 'outbox.databases' => "'app'");
my $sink = start_sink();
my $url = $sink->url('/hook');
$node->safe_psql('postgres', q{
	CREATE ROLE app_owner LOGIN CREATEDB;  -- to rename its database
	CREATE ROLE creator LOGIN CREATEDB;
	CREATE DATABASE app OWNER app_owner;
});
$node->safe_psql('app', qq{
	CREATE EXTENSION outbox;
	INSERT INTO outbox_destinations (name, event_types, url) VALUES ('hooks', '*', '$url');
});
my $pid = wait_relay($node, 'app');
ok($pid, 'relay runs in app');

sub as_role
{
	my ($role, $db, $sql) = @_;
	my ($ret, $out, $err) = $node->psql($db, $sql, extra_params => [ '-U', $role ],
		on_error_stop => 0);
	return join("\n", $err =~ /ERROR:\s+(.*)/g);
}

############################################################################
# DROP DATABASE in a transaction block fails before it stops the relay.
is( as_role('app_owner', 'postgres', "BEGIN;\nDROP DATABASE app;\nROLLBACK;"),
	'DROP DATABASE cannot run inside a transaction block',
	'DROP DATABASE app in a transaction block fails');
is(relay_pid($node, 'app'), $pid, 'and the relay of app still runs');

############################################################################
# A command that will fail its own checks does not stop the relay.
is( as_role('app_owner', 'postgres', 'ALTER DATABASE app RENAME TO postgres'),
	'database "postgres" already exists', 'ALTER DATABASE app RENAME to a name taken fails');
is(relay_pid($node, 'app'), $pid, 'and the relay of app still runs');

############################################################################
# A command that fails after stopping the relay (another session is in the
# database: PostgreSQL waits 5 s for it, then gives up) leaves no pause:
# from the failure on, the relay is back well before the pause would have
# ended.
{
	my $holder = $node->background_psql('app');
	is( as_role('app_owner', 'postgres', 'ALTER DATABASE app RENAME TO app_renamed'),
		'database "app" is being accessed by other users',
		'ALTER DATABASE app RENAME fails while another session is in app');
	my $t = time();
	$holder->quit;
	$pid = wait_relay($node, 'app', $pid);
	my $secs = time() - $t;
	ok($pid, 'a new relay starts');
	cmp_ok($secs, '<', $pause_secs - 1, 'before the pause would have ended');
	note(sprintf('the relay was back %.2f s after the failure', $secs));
}

############################################################################
# A rename in a transaction block that rolls back: the pause ends with it.
{
	my $t = time();
	my $session = $node->background_psql('postgres', extra_params => [ '-U', 'app_owner' ]);
	$session->query_safe('BEGIN');
	$session->query_safe('ALTER DATABASE app RENAME TO app_renamed');
	ok(wait_no_relay($node, 'app'), 'no relay while the rename is not committed');
	$session->query_safe('ROLLBACK');
	$session->quit;
	$pid = wait_relay($node, 'app', $pid);
	my $secs = time() - $t;
	ok($pid, 'a new relay starts after the ROLLBACK');
	cmp_ok($secs, '<', $pause_secs - 1, 'before the pause would have ended');
	note(sprintf('the relay was back after %.2f s', $secs));
}

############################################################################
# The loop from the report: 70 databases of a CREATEDB role, each DROP
# DATABASE of them attempted in a transaction block. Then the relay of app
# is restarted: it must find a slot, and deliver.
{
	my $n = 70;
	my $create = join('', map { sprintf("CREATE DATABASE db%02d;\n", $_) } 1 .. $n);
	is(as_role('creator', 'postgres', $create), '', "the CREATEDB role creates $n databases");
	my $loop = join('', map { sprintf("BEGIN;\nDROP DATABASE db%02d;\nROLLBACK;\n", $_) } 1 .. $n);
	my @errors = split /\n/, as_role('creator', 'postgres', $loop);
	is(scalar(grep { $_ eq 'DROP DATABASE cannot run inside a transaction block' } @errors),
		$n, "its $n DROP DATABASE in transaction blocks fail");
	# and outside a transaction block, renames to a name that is taken
	my $fail = join('', map { sprintf("ALTER DATABASE db%02d RENAME TO db%02d;\n", $_, $_ % $n + 1) } 1 .. $n);
	@errors = split /\n/, as_role('creator', 'postgres', $fail);
	is(scalar(grep { /^database "db\d\d" already exists$/ } @errors), $n,
		"its $n renames to a name that is taken fail");

	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	$pid = wait_relay($node, 'app', $pid);
	ok($pid, 'a new relay starts in app');
	my $ids = emit($node, 'app', 'after.loop', 2);
	ok($sink->wait_delivered(2), 'and delivers');
	is_deeply($sink->delivered_ids, [ sort @$ids ], 'the events emitted after the loop');
	unlike(log_since($node, $offset), qr/too many outbox relays/, 'no relay failed for want of a slot');
	is(relay_pid($node, 'app'), $pid, 'the relay keeps running');
}

$sink->stop;
$node->stop;
done_testing();
