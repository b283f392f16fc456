# Life cycle of the relay workers: a database without the extension, DROP
# EXTENSION and CREATE EXTENSION under a running relay, DROP DATABASE of a
# database with a relay, outbox.databases changed by reload, a terminated
# relay, SIGTERM during a hung webhook request, a server restart, and a
# streaming standby that gets its relay only once promoted.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

# Retries stay short and never dead-letter, whatever a scenario costs.
my $node = outbox_node(
	'life',
	allows_streaming => 1,
	'outbox.max_attempts' => 1000,
	'outbox.backoff_max' => "'1s'");
my $sink = start_sink();
my $url = $sink->url('/hook');

my $relay_of = "FROM pg_stat_activity WHERE backend_type = 'outbox relay'";

# pid of the relay of $db ('' if none)
sub relay_pid
{
	my ($n, $db) = @_;
	return $n->safe_psql('postgres', "SELECT pid $relay_of AND datname = '$db'");
}

# Waits until exactly one relay runs in $db, other than $old_pid if given;
# returns its pid, or undef on timeout.
sub wait_relay
{
	my ($n, $db, $old_pid) = @_;
	my $cond = "datname = '$db'" . (defined $old_pid ? " AND pid <> $old_pid" : '');
	return undef
	  unless $n->poll_query_until('postgres',
		"SELECT count(*) = 1 $relay_of AND $cond");
	return $n->safe_psql('postgres', "SELECT pid $relay_of AND $cond");
}

# Waits until relay $pid has run passes for at least $secs seconds after now:
# its state_change (set at every pass) moves past that point while its pid
# stays the same. Fails at once if the process is gone.
sub wait_idle_passes
{
	my ($n, $pid, $secs) = @_;
	my $t0 = $n->safe_psql('postgres', 'SELECT now()');
	my $state = '';
	wait_until(sub {
		$state = $n->safe_psql('postgres', qq{
			SELECT CASE WHEN count(*) = 0 THEN 'gone'
			            WHEN bool_and(state_change > '$t0'::timestamptz + interval '$secs s') THEN 't'
			            ELSE 'f' END
			  FROM pg_stat_activity WHERE pid = $pid});
		return $state ne 'f';
	});
	diag("relay $pid: $state") unless $state eq 't';
	return $state eq 't';
}

sub emit
{
	my ($db, $type, $n, $on) = @_;
	$on //= $node;
	return [ split /\n/, $on->safe_psql($db,
		"SELECT outbox_emit('$type', jsonb_build_object('n', g)) FROM generate_series(1, $n) g") ];
}

sub log_since { my ($n, $offset) = @_; return slurp_file($n->logfile, $offset); }

# error lines of a log excerpt, excluding the statements logged by log_statement
sub error_lines
{
	my ($text) = @_;
	return grep { /\b(?:ERROR|FATAL|PANIC):\s/ && !/\bLOG:\s+statement:/ } split /\n/, $text;
}

$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES ('hooks', '*', '$url')});
my $pg_pid = wait_relay($node, 'postgres');
ok($pg_pid, 'relay runs in database postgres');

############################################################################
# A database without the extension: its relay starts and idles quietly.

$node->safe_psql('postgres', 'CREATE DATABASE plain');
my $offset = -s $node->logfile;
$node->safe_psql('postgres', "ALTER SYSTEM SET outbox.databases = 'postgres, plain'");
$node->reload;
my $plain_pid = wait_relay($node, 'plain');
ok($plain_pid, 'relay started for a database without the extension');
$node->wait_for_log(qr/outbox relay started for database "plain"/, $offset);
# 1 s of passes at a poll interval of 200 ms
ok(wait_idle_passes($node, $plain_pid, 1), 'it keeps running its passes, same pid');
is(join("\n", error_lines(log_since($node, $offset))), '',
	'no ERROR or FATAL in the log while it idles');
is(relay_pid($node, 'postgres'), $pg_pid, 'relay of postgres undisturbed');

############################################################################
# outbox.databases by reload: removing a database stops its relay, adding it
# back starts a new one; the other database keeps its relay.

$node->safe_psql('postgres', "ALTER SYSTEM SET outbox.databases = 'postgres'");
$node->reload;
ok( $node->poll_query_until('postgres', "SELECT count(*) = 0 $relay_of AND datname = 'plain'"),
	'relay stops when its database is removed from outbox.databases');
ok( $node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $plain_pid"),
	'the process is gone');
is(relay_pid($node, 'postgres'), $pg_pid, 'relay of postgres still the same process');

$offset = -s $node->logfile;
$node->safe_psql('postgres', "ALTER SYSTEM SET outbox.databases = 'postgres, plain'");
$node->reload;
my $plain_pid2 = wait_relay($node, 'plain', $plain_pid);
ok($plain_pid2, 'a new relay starts when the database is added back');
$node->wait_for_log(qr/outbox relay started for database "plain"/, $offset);
is(relay_pid($node, 'postgres'), $pg_pid, 'relay of postgres still the same process');

############################################################################
# DROP DATABASE of a database whose relay runs: the guard stops the relay, so
# the command does not fail with "being accessed by other users".

my $plain_oid = $node->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = 'plain'");
is(relay_pid($node, 'plain'), $plain_pid2, 'relay of plain runs before DROP DATABASE');

# a role that does not own the database cannot stop its relay by trying
$node->safe_psql('postgres', 'CREATE ROLE regress_nobody LOGIN');
my ($nret, $nout, $nerr) = $node->psql('postgres', 'DROP DATABASE plain',
	extra_params => [ '-U', 'regress_nobody' ]);
like($nerr, qr/must be owner of database plain/, 'DROP DATABASE by a non-owner fails');
is(relay_pid($node, 'plain'), $plain_pid2, 'and leaves the relay running');

my $drop_offset = -s $node->logfile;
my $drop_ts = $node->safe_psql('postgres', 'SELECT now()');
my $t = time();
my ($ret, $stdout, $stderr) = $node->psql('postgres', 'DROP DATABASE plain');
my $drop_secs = time() - $t;
is($ret, 0, 'DROP DATABASE of a database with a running relay succeeds');
unlike($stderr, qr/being accessed by other users/, 'not blocked by the relay');
note(sprintf('DROP DATABASE took %.2f s', $drop_secs));
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $plain_pid2 OR (backend_type = 'outbox relay' AND datid = $plain_oid)"),
	'0', 'its relay is gone');
# (the launcher's behaviour afterwards is checked below, once its pause for
# the dropped database is long over)

############################################################################
# DROP EXTENSION while the relay delivers (sink busy) and more events are
# pending; the relay goes on idling; CREATE EXTENSION again works.

# an application session that emits before DROP EXTENSION and after CREATE
# EXTENSION (outbox_emit keeps a prepared INSERT per session)
my $app = $node->background_psql('postgres');
$sink->reset;
$sink->control(delay_ms => 4000);
my $busy = emit('postgres', 'ext.before', 3);
ok( $node->poll_query_until('postgres',
		"SELECT state = 'active' AND now() - query_start > interval '0.5 s' $relay_of AND datname = 'postgres'"),
	'relay is in a pass, waiting for the busy sink');
emit('postgres', 'ext.pending', 2);
$app->query_safe("SELECT outbox_emit('ext.pending', '{}')");
$offset = -s $node->logfile;
my $drop_ext_ts = $node->safe_psql('postgres', 'SELECT now()');
($ret, $stdout, $stderr) = $node->psql('postgres', 'DROP EXTENSION outbox');
is($ret, 0, 'DROP EXTENSION succeeds while the relay runs') or diag($stderr);
is_deeply([ sort grep { my $id = $_; grep { $_ eq $id } @$busy } map { $_->{webhook_id} } @{ $sink->delivered } ],
	[ sort @$busy ], 'the pass under way finished its deliveries first');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 1 $relay_of AND datname = 'postgres' AND state_change > '$drop_ext_ts'::timestamptz + interval '1 s'"),
	'a relay runs its passes in postgres after DROP EXTENSION');
my $ext_pid = relay_pid($node, 'postgres');
ok(wait_idle_passes($node, $ext_pid, 1), 'and idles without the extension, same pid');
note($ext_pid == $pg_pid ? 'the relay survived DROP EXTENSION'
	: 'the relay was restarted after DROP EXTENSION');
my @errors = error_lines(log_since($node, $offset));
note("log errors around DROP EXTENSION:\n" . join("\n", @errors)) if @errors;
cmp_ok(scalar @errors, '<=', 1, 'at most one error (a restart), no error loop');

$sink->reset;
$node->safe_psql('postgres', qq{
	CREATE EXTENSION outbox;
	INSERT INTO outbox_destinations (name, event_types, url) VALUES ('hooks', '*', '$url')});
my $after = emit('postgres', 'ext.after', 3);
my ($app_id, $app_err) = $app->query("SELECT outbox_emit('ext.after', '{\"session\": true}')");
is($app_err, 0, 'the same session emits again after CREATE EXTENSION');
push @$after, $app_id;
$app->quit;
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 4 FROM outbox WHERE event_type = 'ext.after' AND delivered_at IS NOT NULL"),
	'events emitted after CREATE EXTENSION are delivered');
ok($sink->wait_delivered(4), 'the sink received them');
is_deeply([ sort map { $_->{webhook_id} } @{ $sink->delivered } ], [ sort @$after ],
	'exactly those events');
$pg_pid = relay_pid($node, 'postgres');

############################################################################
# pg_terminate_backend: the launcher starts a new relay, which delivers the
# events that were pending.

$sink->reset;
$sink->control(status => 503);
my $term = emit('postgres', 'term.pending', 3);
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 3 FROM outbox WHERE event_type = 'term.pending' AND attempts >= 1 AND delivered_at IS NULL"),
	'events fail while the sink answers 503');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pg_pid)");
my $new_pid = wait_relay($node, 'postgres', $pg_pid);
ok($new_pid, 'a new relay replaces the terminated one');
$sink->control(status => 200);
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 3 FROM outbox WHERE event_type = 'term.pending' AND delivered_at IS NOT NULL"),
	'pending events delivered by the new relay');
$pg_pid = $new_pid;

############################################################################
# The launcher is terminated: the postmaster restarts it, and the new
# launcher adopts the relay the old one started instead of starting a second
# one (which would also escape the DROP DATABASE guard).

my $launcher_of = "FROM pg_stat_activity WHERE backend_type = 'outbox launcher'";
my $old_launcher = $node->safe_psql('postgres', "SELECT pid $launcher_of");
$node->safe_psql('postgres', "SELECT pg_terminate_backend($old_launcher)");
ok( $node->poll_query_until('postgres', "SELECT count(*) = 1 AND min(pid) <> $old_launcher $launcher_of"),
	'the launcher is restarted');
# a reload makes the new launcher reconcile once more; then the system must
# still deliver, through the one relay it had
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
my $adopt = emit('postgres', 'adopt.check', 1);
ok( $node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$adopt->[0]'"),
	'events are delivered after the launcher restart');
is($node->safe_psql('postgres', "SELECT count(*) $relay_of AND datname = 'postgres'"),
	'1', 'still one relay for postgres');
is(relay_pid($node, 'postgres'), $pg_pid, 'the same relay, adopted by the new launcher');

############################################################################
# SIGTERM during a request that hangs for 10 minutes: the relay waits for
# libcurl in slices with CHECK_FOR_INTERRUPTS, so it ends at once.

$sink->reset;
my $hang_url = $sink->url('/hang');
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, url, timeout_ms)
	VALUES ('hang', 'hang.*', '$hang_url', 600000)});
$sink->control(delay_ms => 600000);
my ($hang_id) = @{ emit('postgres', 'hang.me', 1) };
# a pass lasting 2 s is in the HTTP wait: every other step takes milliseconds
ok( $node->poll_query_until('postgres',
		"SELECT state = 'active' AND now() - query_start > interval '2 s' $relay_of AND pid = $pg_pid"),
	'relay hangs in the request');
# answer later requests at once; the hung one keeps sleeping in the sink
$sink->control(delay_ms => 0);
$t = time();
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pg_pid)");
ok( $node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pg_pid"),
	'SIGTERM ends the relay during a hung request');
my $term_secs = time() - $t;
note(sprintf('the hung relay exited %.2f s after pg_terminate_backend', $term_secs));
cmp_ok($term_secs, '<', 60, 'promptly, not after the 10-minute timeout');
$new_pid = wait_relay($node, 'postgres', $pg_pid);
ok($new_pid, 'a new relay starts');
ok( $node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$hang_id'"),
	'the event is delivered by the new relay');
# The interrupted attempt rolled back with its pass: it is not counted.
is( $node->safe_psql('postgres',
		"SELECT attempts, last_error IS NULL, destination FROM outbox WHERE event_id = '$hang_id'"),
	'1|t|hang', 'one attempt recorded: the interrupted one was rolled back');
my @hang_reqs = grep { $_->{webhook_id} eq $hang_id } @{ $sink->delivered('/hang') };
is(scalar @hang_reqs, 1, 'the sink answered one request for it');
like($hang_reqs[0]{body} // '', qr/"attempt": 1\b/, 'sent as attempt 1');
$pg_pid = $new_pid;
$node->safe_psql('postgres', "DELETE FROM outbox_destinations WHERE name = 'hang'");

############################################################################
# After DROP DATABASE the launcher does not try to start a relay for the
# dropped database (it is still named in outbox.databases). The DROP paused
# the database for 10 s: wait until that pause is over, then make the
# launcher reconcile (it starts a relay for postgres only in a reconcile)
# and look at everything it logged since the DROP.

ok( $node->poll_query_until('postgres',
		"SELECT now() > '$drop_ts'::timestamptz + interval '11 s'"),
	'the pause of the dropped database is over');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pg_pid)");
$new_pid = wait_relay($node, 'postgres', $pg_pid);
ok($new_pid, 'launcher reconciled after the pause');
$pg_pid = $new_pid;
my $since_drop = log_since($node, $drop_offset);
unlike($since_drop, qr/outbox relay started for database "plain"/,
	'no relay started for the dropped database');
is( join("\n",
		grep { /\b(?:WARNING|ERROR|FATAL|PANIC):.*(?:"plain"|\b$plain_oid\b)/ && !/\bstatement:/ }
		  split /\n/, $since_drop),
	'', 'no error about the dropped database');
unlike($since_drop, qr/could not start an outbox relay/, 'no failed relay start');
# each launcher process (it was restarted in between) says so once, not at
# every reconcile
my @said_by = map { /\[(\d+)\]/ ? $1 : () }
  grep { /no outbox relay for databases named in "outbox.databases": "plain"/ } split /\n/, $since_drop;
my %per_launcher;
$per_launcher{$_}++ for @said_by;
ok(@said_by >= 1 && !grep({ $_ > 1 } values %per_launcher),
	'each launcher logs once that the named database is gone');

############################################################################
# Restart of the server: events pending while the sink answers 503 are
# delivered after the restart, once the sink is up again.

$sink->reset;
$sink->control(status => 503);
my $pending = emit('postgres', 'restart.pending', 3);
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 3 FROM outbox WHERE event_type = 'restart.pending' AND attempts >= 1 AND delivered_at IS NULL"),
	'events failing before the restart');
$node->restart;
ok(wait_relay($node, 'postgres'), 'relay runs after the restart');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM outbox WHERE event_type = 'restart.pending' AND delivered_at IS NULL"),
	'3', 'still pending after the restart');
$sink->control(status => 200);
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 3 FROM outbox WHERE event_type = 'restart.pending' AND delivered_at IS NOT NULL"),
	'delivered once the sink is up');
is_deeply([ sort map { $_->{webhook_id} } @{ $sink->delivered } ], [ sort @$pending ],
	'each delivered once');

############################################################################
# A streaming standby has no outbox workers while in recovery; events
# emitted on the primary are delivered by the primary's relay alone. Once
# the primary is stopped and the standby promoted, a relay starts there and
# delivers events emitted on it, and the ones left pending.

$node->backup('bk');
my $standby = PostgreSQL::Test::Cluster->new('life_standby');
$standby->init_from_backup($node, 'bk', has_streaming => 1);
$standby->start;
$node->wait_for_catchup($standby);
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'standby in recovery');

my $workers = "SELECT count(*) FROM pg_stat_activity WHERE backend_type IN ('outbox relay', 'outbox launcher')";
is($standby->safe_psql('postgres', $workers), '0', 'no outbox worker on the standby');

$sink->reset;
my $on_primary = emit('postgres', 'standby.primary', 3);
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 3 FROM outbox WHERE event_type = 'standby.primary' AND delivered_at IS NOT NULL"),
	'primary delivers its events');
$node->wait_for_catchup($standby);
is( $standby->safe_psql('postgres',
		"SELECT count(*) FROM outbox WHERE event_type = 'standby.primary' AND delivered_at IS NOT NULL"),
	'3', 'the events and their delivery replicated');
is_deeply([ sort map { $_->{webhook_id} } @{ $sink->requests } ], [ sort @$on_primary ],
	'one request per event: only the primary delivered');
is($standby->safe_psql('postgres', $workers), '0', 'still no outbox worker on the standby');

# an event left pending at the failover
$sink->control(status => 503);
my ($left_id) = @{ emit('postgres', 'standby.left', 1) };
ok( $node->poll_query_until('postgres',
		"SELECT attempts >= 1 AND delivered_at IS NULL FROM outbox WHERE event_id = '$left_id'"),
	'an event pending on the primary');
$node->wait_for_catchup($standby);
$node->stop;
unlike(slurp_file($standby->logfile), qr/outbox relay started/, 'no relay ever started on the standby');

$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'), 'standby promoted');
ok(wait_relay($standby, 'postgres'), 'a relay starts on the new primary');
is( $standby->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox launcher'"),
	'1', 'with its launcher');
$sink->reset;
my $on_new = emit('postgres', 'standby.promoted', 3, $standby);
ok( $standby->poll_query_until('postgres',
		"SELECT count(*) = 4 FROM outbox WHERE event_type IN ('standby.promoted', 'standby.left') AND delivered_at IS NOT NULL"),
	'the new primary delivers events emitted there and the one left pending');
is_deeply([ sort map { $_->{webhook_id} } @{ $sink->delivered } ], [ sort(@$on_new, $left_id) ],
	'the sink received each of them once');

$standby->stop;
$sink->stop;
done_testing();
