# A transaction that keeps an old snapshot holds back the removal of the
# outbox's old row versions, and every claim reads them. The first relay
# names it once it is older than outbox.horizon_warning (1 s here): a
# WARNING with its pid, role, application and state, and horizon_pid and
# horizon_since on every row of outbox_status; both go once it ends. A
# prepared transaction is named too (horizon_pid NULL).
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('horizon', 'outbox.horizon_warning' => "'1s'", max_prepared_transactions => 2);
ok(wait_relay($node, 'postgres'), 'relay runs');
# an event no destination takes: outbox_status has a row to show
$node->safe_psql('postgres', q{SELECT outbox_emit('nowhere.x', '{}'); CREATE TABLE scratch (n int)});
is($node->safe_psql('postgres', 'SELECT horizon_pid IS NULL AND horizon_since IS NULL FROM outbox_status'),
	't', 'nothing holds the horizon back');

my $offset = -s $node->logfile;
my $holder = $node->background_psql('postgres', extra_params => [ '-v', 'ON_ERROR_STOP=1' ]);
$holder->query_safe("SET application_name = 'nightly_report'");
my $pid = $holder->query_safe('SELECT pg_backend_pid()');
$holder->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$holder->query_safe('SELECT count(*) FROM outbox');
ok($node->poll_query_until('postgres', "SELECT horizon_pid = $pid AND horizon_since < now() FROM outbox_status"),
	'outbox_status names the session that holds an old snapshot');
like(log_since($node, $offset),
	qr/WARNING:  outbox relay: a transaction that began at .* holds back the removal of old row versions: process $pid \(client backend of role \w+, application "nightly_report", idle in transaction\)\n.*HINT:  End that transaction, or if it is abandoned: SELECT pg_terminate_backend\($pid\)/s,
	'the log names it, with what to do');
my @warnings = log_since($node, $offset) =~ /holds back the removal/g;
$holder->query_safe('COMMIT');
ok($node->poll_query_until('postgres', 'SELECT horizon_pid IS NULL AND horizon_since IS NULL FROM outbox_status'),
	'it is gone from outbox_status once the transaction ends');
is(scalar(() = log_since($node, $offset) =~ /holds back the removal/g), scalar @warnings,
	'and was logged once, not at every check');
is(scalar @warnings, 1, 'one WARNING while it lasted');

# a READ COMMITTED transaction idle after a write has no snapshot, but its
# xid holds the horizon just the same
$offset = -s $node->logfile;
$holder->query_safe(q{BEGIN; INSERT INTO scratch VALUES (0)});
ok($node->poll_query_until('postgres', "SELECT horizon_pid = $pid FROM outbox_status"),
	'outbox_status names a READ COMMITTED session idle after a write');
like(log_since($node, $offset), qr/holds back the removal of old row versions: process $pid .*idle in transaction\)/,
	'the log names it too');
$holder->query_safe('ROLLBACK');
ok($node->poll_query_until('postgres', 'SELECT horizon_pid IS NULL FROM outbox_status'),
	'and forgets it once it ends');

# a prepared transaction that wrote something keeps its xid
$holder->query_safe(q{BEGIN; INSERT INTO scratch VALUES (1); PREPARE TRANSACTION 'held_over'});
ok($node->poll_query_until('postgres', 'SELECT horizon_pid IS NULL AND horizon_since IS NOT NULL FROM outbox_status'),
	'outbox_status shows a prepared transaction, without a pid');
like(log_since($node, $offset), qr/holds back the removal of old row versions: prepared transaction "held_over" of role \w+\n.*HINT:  Commit or roll back the prepared transaction/s,
	'the log names it by its gid');
$holder->query_safe(q{ROLLBACK PREPARED 'held_over'});
ok($node->poll_query_until('postgres', 'SELECT horizon_since IS NULL FROM outbox_status'),
	'and forgets it once it is rolled back');
$holder->quit;

$node->stop;
done_testing();
