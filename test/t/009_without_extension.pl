# The relay in a database without the extension: DROP EXTENSION while the
# relay has requests in flight does not wait for them (no transaction is
# open meanwhile) and they still reach the endpoint, the relay
# then runs its passes without an error loop, and after CREATE EXTENSION
# events are delivered again, also those of a session that emitted before
# the DROP; a database where the extension was never created gets a relay
# that idles quietly.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('noext');
my $sink = start_sink();
my $url = $sink->url('/hook');
ok(wait_relay($node, 'postgres'), 'relay runs in database postgres');

############################################################################
# DROP EXTENSION while the relay delivers (sink busy) and more events are
# pending; the relay goes on with its passes; CREATE EXTENSION again works.
{
	$node->safe_psql('postgres', qq{
		INSERT INTO outbox_destinations (name, event_types, url) VALUES ('hooks', '*', '$url')});
	my $pg_pid = wait_relay($node, 'postgres');
	# an application session that emits before DROP EXTENSION and after
	# CREATE EXTENSION (outbox_emit keeps a prepared INSERT per session)
	my $app = $node->background_psql('postgres');
	$sink->reset;
	$sink->control(delay_ms => 4000);
	my $busy = emit($node, 'postgres', 'ext.before', 3);
	ok( $node->poll_query_until('postgres', qq{
			SELECT count(*) = 3 FROM outbox
			 WHERE event_type = 'ext.before' AND (id, attempts) IN (SELECT f.id, f.attempts FROM outbox_in_flight j, unnest(j.ids, j.attempts) AS f(id, attempts)) AND delivered_at IS NULL}),
		'relay has the events in flight, waiting for the busy sink');
	emit($node, 'postgres', 'ext.pending', 2);
	$app->query_safe("SELECT outbox_emit('ext.pending', '{}')");
	my $offset = -s $node->logfile;
	my $drop_ext_ts = $node->safe_psql('postgres', 'SELECT now()');
	my ($ret, $stdout, $stderr) = $node->psql('postgres', 'DROP EXTENSION outbox');
	is($ret, 0, 'DROP EXTENSION succeeds while the relay runs') or diag($stderr);
	my %busy = map { $_ => 1 } @$busy;
	ok(wait_until(sub { (grep { $busy{$_} } @{ $sink->delivered_ids }) == 3 }),
		'the requests in flight still reached the endpoint');
	ok( $node->poll_query_until('postgres', qq{
			SELECT count(*) = 1 FROM pg_stat_activity
			 WHERE backend_type = 'outbox relay' AND datname = 'postgres'
			   AND state_change > '$drop_ext_ts'::timestamptz + interval '1 s'}),
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
	my $after = emit($node, 'postgres', 'ext.after', 3);
	my ($app_id, $app_err) = $app->query("SELECT outbox_emit('ext.after', '{\"session\": true}')");
	is($app_err, 0, 'the same session emits again after CREATE EXTENSION');
	push @$after, $app_id;
	$app->quit;
	ok( $node->poll_query_until('postgres',
			"SELECT count(*) = 4 FROM outbox WHERE event_type = 'ext.after' AND delivered_at IS NOT NULL"),
		'events emitted after CREATE EXTENSION are delivered');
	ok($sink->wait_delivered(4), 'the sink received them');
	is_deeply($sink->delivered_ids, [ sort @$after ], 'exactly those events');
}

############################################################################
# DROP and CREATE EXTENSION while requests are in flight: the new table's
# ids start over, and the outcomes of the old events, which arrive once the
# new extension exists, must change nothing in it; the old ids leave the
# relay's in-flight set then, and the new events with the same ids go out.
{
	$sink->reset;
	my $down = $sink->url('/down');
	$sink->paths('/slow' => { delay_ms => 3000 }, '/down' => { status => 503 });
	# a fresh table, so that the old and the new rows have the same TIDs too
	$node->safe_psql('postgres', sprintf(q{
		DROP EXTENSION outbox;
		CREATE EXTENSION outbox;
		INSERT INTO outbox_destinations (name, event_types, url) VALUES ('slow', '*', '%s')},
		$sink->url('/slow')));
	emit($node, 'postgres', 'old.created', 3);
	ok(wait_until(sub { $sink->stats('/slow')->{arrived} == 3 }), 'three requests wait 3 s at the endpoint');
	$node->safe_psql('postgres', qq{
		DROP EXTENSION outbox;
		CREATE EXTENSION outbox;
		INSERT INTO outbox_destinations (name, event_types, url) VALUES ('down', '*', '$down')});
	emit($node, 'postgres', 'new.created', 3);
	is($node->safe_psql('postgres', "SELECT string_agg(id || ' ' || ctid, ',' ORDER BY id) FROM outbox"),
		'1 (0,1),2 (0,2),3 (0,3)', 'the new events have the ids and TIDs of the old ones');
	ok($sink->wait_delivered(3, '/slow'), 'the old requests are answered 200');
	ok( $node->poll_query_until('postgres', q{
			SELECT count(*) = 3 FROM outbox WHERE attempts >= 1 AND last_error LIKE 'HTTP status 503%'}),
		'the new events are sent, and fail with their own 503');
	is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox WHERE delivered_at IS NOT NULL'), '0',
		'no outcome of an old event was recorded on a new one');
	$node->safe_psql('postgres', 'DELETE FROM outbox_destinations');
}

############################################################################
# A database without the extension: its relay starts and idles quietly, and
# the relay of postgres is not disturbed.
{
	my $pg_pid = wait_relay($node, 'postgres');
	$node->safe_psql('postgres', 'CREATE DATABASE plain');
	my $offset = -s $node->logfile;
	set_databases($node, 'postgres, plain');
	my $plain_pid = wait_relay($node, 'plain');
	ok($plain_pid, 'relay started for a database without the extension');
	$node->wait_for_log(qr/outbox relay started for database "plain"/, $offset);
	# 1 s of passes at a poll interval of 200 ms
	ok(wait_idle_passes($node, $plain_pid, 1), 'it keeps running its passes, same pid');
	is(join("\n", error_lines(log_since($node, $offset))), '',
		'no ERROR or FATAL in the log while it idles');
	is(relay_pid($node, 'postgres'), $pg_pid, 'relay of postgres undisturbed');
}

$sink->stop;
$node->stop;
done_testing();
