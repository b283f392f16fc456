# Settings that the owner of a database (not a superuser) makes for it with
# ALTER DATABASE ... SET apply to every session that connects, the relay's
# included. None of them may break the relay or change what it sends: it
# keeps the server's settings and runs as the bootstrap superuser. The SQL
# functions keep working in sessions that have those settings.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('settings', 'outbox.databases' => "'app'", TimeZone => "'UTC'");
my $sink = start_sink();
my $url = $sink->url('/hook');

# The database app belongs to app_owner, who may not do more than an owner
# may; the extension was created by a superuser; ops administers the outbox.
$node->safe_psql('postgres', q{
	CREATE ROLE app_owner LOGIN;
	CREATE ROLE ops LOGIN IN ROLE outbox_admin;
	CREATE DATABASE app OWNER app_owner;
});
$node->safe_psql('app', qq{
	CREATE EXTENSION outbox;
	INSERT INTO outbox_destinations (name, event_types, url) VALUES ('hooks', '*', '$url');
});
my $pid = wait_relay($node, 'app');
ok($pid, 'relay runs in app');

# Every setting here is one the owner may make, and each would break the
# relay or change its output if it applied: the relay's statements would not
# parse or would mean something else, it would run as app_owner (who cannot
# read outbox), any caught error would end it, or the envelope's created_at
# would be in another time zone.
my @settings = (
	"standard_conforming_strings = off",
	"escape_string_warning = on",
	"role = app_owner",
	"exit_on_error = on",
	"search_path = app_owner, public",
	"TimeZone = 'Asia/Tokyo'",
	"DateStyle = 'SQL, DMY'",
	"IntervalStyle = sql_standard",
	"extra_float_digits = -15",
	"transform_null_equals = on",
	"plan_cache_mode = force_custom_plan",
	"row_security = off",
	"default_transaction_read_only = on",
	"default_transaction_isolation = serializable",
	"statement_timeout = '1ms'",
	"lock_timeout = '1ms'",
	"work_mem = '64kB'",
	"enable_indexscan = off");
# in one transaction: once set, read-only and timeouts apply to new sessions
my ($ret, $out, $err) = $node->psql('app', join('; ', map { "ALTER DATABASE app SET $_" } @settings),
	extra_params => [ '-U', 'app_owner' ]);
is($ret, 0, 'the owner of app sets ' . scalar(@settings) . ' settings for it') or diag($err);
is( $node->safe_psql('postgres', q{
		SELECT cardinality(setconfig) >= 18 FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase
		 WHERE d.datname = 'app' AND s.setrole = 0}),
	't', 'the settings are stored for app');
# The test's own sessions override the ones that would stop them (the
# relay, a background worker, does not see PGOPTIONS).
$ENV{PGOPTIONS} = '-c role=none -c default_transaction_read_only=off -c statement_timeout=0 -c lock_timeout=0';

# A new relay connects with those settings.
my $offset = -s $node->logfile;
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
$pid = wait_relay($node, 'app', $pid);
ok($pid, 'a new relay starts in app');
$node->wait_for_log(qr/outbox relay started for database "app"/, $offset);

# It delivers: the endpoint fails every event once, so retries are
# recorded too.
$sink->control(status => 503);
my $ids = emit($node, 'app', 'settings.check', 3);
ok( $node->poll_query_until('app', q{
		SELECT count(*) = 3 FROM outbox
		 WHERE event_type = 'settings.check' AND attempts >= 1 AND last_error LIKE 'HTTP status 503%'}),
	'failed attempts are recorded');
$sink->control(status => 200);
ok( $node->poll_query_until('app',
		"SELECT count(*) = 3 FROM outbox WHERE delivered_at IS NOT NULL AND event_type = 'settings.check'"),
	'then the events are delivered and marked');
is_deeply($sink->delivered_ids, [ sort @$ids ], 'each of them');
is(relay_pid($node, 'app'), $pid, 'by the same relay process');
my @bodies = map { $_->{body} } @{ $sink->delivered };
is(scalar(grep { /"created_at": "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z"/ } @bodies),
	3, 'created_at in UTC with Z, whatever the database\'s TimeZone');
my $log = log_since($node, $offset);
is(join("\n", grep { !/terminating background worker "outbox relay" due to administrator command/ } error_lines($log)),
	'', 'no errors in the log');
unlike($log, qr/outbox relay could not/, 'no step of the relay failed');

# The sessions of app have those settings too (app_owner's role does not
# apply to ops, who is not a member); the SQL functions still work there:
# outbox_status and outbox_relay() route with _outbox_like_pattern, whose
# backslashes once broke with standard_conforming_strings = off.
my $as_ops = sub {
	my ($sql) = @_;
	my ($ret, $out, $err) = $node->psql('app', $sql, extra_params => [ '-U', 'ops' ]);
	return $ret == 0 ? $out : "ERROR: $err";
};
is($as_ops->('SHOW standard_conforming_strings'), 'off',
	'a session of ops in app has standard_conforming_strings off');
is($as_ops->('SELECT current_user'), 'ops', 'and is ops');
is( $as_ops->(q{
		SELECT string_agg(pg_catalog.format('%s~%s=%s', t, p, t LIKE _outbox_like_pattern(p)), ' ' ORDER BY t, p)
		  FROM (VALUES ('a_b', 'a_b'), ('axb', 'a_b'), ('a' || chr(92) || 'b', 'a' || chr(92) || 'b'), ('a%', 'a%'), ('ab', 'a%')) v(t, p)}),
	'a%~a%=t a\b~a\b=t a_b~a_b=t ab~a%=f axb~a_b=f', 'patterns match literally there');
is( $as_ops->(q{
		BEGIN;
		INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('a_notify', 'a_b.*', 'ch');
		UPDATE outbox_destinations SET event_types = 'axb.*' WHERE name = 'hooks';
		INSERT INTO outbox (event_type, payload) VALUES ('a_b.one', '{}'), ('axb.two', '{}');
		SELECT event_type, pending, unroutable FROM outbox_status ORDER BY 1;
		SELECT * FROM outbox_relay();
		SELECT count(*) FROM outbox_status;
		ROLLBACK}),
	"a_b.one|1|0\naxb.two|1|0\n2|0\n0", 'outbox_status and outbox_relay() work there');

$node->safe_psql('postgres', 'ALTER DATABASE app RESET ALL');
$sink->stop;
$node->stop;
done_testing();
