# The relay and its launcher stopped and started again: a relay ended by
# pg_terminate_backend is replaced and its successor delivers the pending
# events; a terminated launcher is restarted and adopts the running relay
# instead of starting a second one; after a server restart, events left
# pending are delivered; SIGTERM ends a relay at once even while a webhook
# request hangs, and the interrupted attempt is not counted.
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
	'restarts',
	'outbox.max_attempts' => 1000,
	'outbox.backoff_max' => "'1s'");
my $sink = start_sink();
my $url = $sink->url('/hook');
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES ('hooks', '*', '$url')});
ok(wait_relay($node, 'postgres'), 'relay runs in database postgres');

############################################################################
# pg_terminate_backend: the launcher starts a new relay, which delivers the
# events that were pending.
{
	my $pg_pid = wait_relay($node, 'postgres');
	$sink->reset;
	$sink->control(status => 503);
	emit($node, 'postgres', 'term.pending', 3);
	ok( $node->poll_query_until('postgres',
			"SELECT count(*) = 3 FROM outbox WHERE event_type = 'term.pending' AND attempts >= 1 AND delivered_at IS NULL"),
		'events fail while the sink answers 503');
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pg_pid)");
	ok(wait_relay($node, 'postgres', $pg_pid), 'a new relay replaces the terminated one');
	$sink->control(status => 200);
	ok( $node->poll_query_until('postgres',
			"SELECT count(*) = 3 FROM outbox WHERE event_type = 'term.pending' AND delivered_at IS NOT NULL"),
		'pending events delivered by the new relay');
}

############################################################################
# The launcher is terminated: the postmaster restarts it, and the new
# launcher adopts the relay the old one started instead of starting a second
# one (which would also escape the DROP DATABASE guard).
{
	my $pg_pid = wait_relay($node, 'postgres');
	$sink->reset;
	my $launcher_of = "FROM pg_stat_activity WHERE backend_type = 'outbox launcher'";
	my $old_launcher = $node->safe_psql('postgres', "SELECT pid $launcher_of");
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($old_launcher)");
	ok( $node->poll_query_until('postgres',
			"SELECT count(*) = 1 AND min(pid) <> $old_launcher $launcher_of"),
		'the launcher is restarted');
	# a reload makes the new launcher reconcile once more; then the system
	# must still deliver, through the one relay it had
	$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
	my ($adopt) = @{ emit($node, 'postgres', 'adopt.check', 1) };
	ok( $node->poll_query_until('postgres',
			"SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$adopt'"),
		'events are delivered after the launcher restart');
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox relay' AND datname = 'postgres'"),
		'1', 'still one relay for postgres');
	is(relay_pid($node, 'postgres'), $pg_pid, 'the same relay, adopted by the new launcher');
}

############################################################################
# Restart of the server: events pending while the sink answers 503 are
# delivered after the restart, once the sink is up again.
{
	$sink->reset;
	$sink->control(status => 503);
	my $pending = emit($node, 'postgres', 'restart.pending', 3);
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
	is_deeply($sink->delivered_ids, [ sort @$pending ], 'each delivered once');
}

############################################################################
# SIGTERM during a request that hangs for 10 minutes: the relay's one wait
# includes its latch, which the signal sets, so it ends at once, and the
# new relay releases its journal row at once (counting the attempt it cut
# off) and sends the event again. (Last in
# this file: the hung request keeps a thread of the sink asleep.)
{
	my $pg_pid = wait_relay($node, 'postgres');
	$sink->reset;
	my $hang_url = $sink->url('/hang');
	$node->safe_psql('postgres', qq{
		INSERT INTO outbox_destinations (name, event_types, url, timeout_ms)
		VALUES ('hang', 'hang.*', '$hang_url', 600000);
		-- the hung event's one destination
		UPDATE outbox_destinations SET event_types = 'task.*' WHERE name = 'hooks'});
	$sink->control(delay_ms => 600000);
	my ($hang_id) = @{ emit($node, 'postgres', 'hang.me', 1) };
	# in flight, and the request arrived at the sink, which does not answer
	ok( $node->poll_query_until('postgres',
			"SELECT (id, attempts) IN (SELECT f.id, f.attempts FROM outbox_in_flight j, unnest(j.ids, j.attempts) AS f(id, attempts)) AND delivered_at IS NULL FROM outbox WHERE event_id = '$hang_id'"),
		'the event is in flight');
	ok(wait_idle_passes($node, $pg_pid, 1), 'the relay goes on with its steps while the request hangs');
	# answer later requests at once; the hung one keeps sleeping in the sink
	$sink->control(delay_ms => 0);
	my $t = time();
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pg_pid)");
	ok( $node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pg_pid"),
		'SIGTERM ends the relay during a hung request');
	my $term_secs = time() - $t;
	note(sprintf('the hung relay exited %.2f s after pg_terminate_backend', $term_secs));
	cmp_ok($term_secs, '<', 60, 'promptly, not after the 10-minute timeout');
	ok(wait_relay($node, 'postgres', $pg_pid), 'a new relay starts');
	ok( $node->poll_query_until('postgres',
			"SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$hang_id'"),
		'the event is delivered by the new relay');
	# The interrupted attempt was counted when the new relay released it.
	is( $node->safe_psql('postgres',
			"SELECT attempts, last_error IS NULL, destination, NOT (id, attempts) IN (SELECT f.id, f.attempts FROM outbox_in_flight j, unnest(j.ids, j.attempts) AS f(id, attempts)) FROM outbox WHERE event_id = '$hang_id'"),
		'2|t|hang|t', 'two attempts recorded: the interrupted one counts');
	my @hang_reqs = grep { $_->{webhook_id} eq $hang_id } @{ $sink->delivered('/hang') };
	is(scalar @hang_reqs, 1, 'the sink answered one request for it');
	like($hang_reqs[0]{body} // '', qr/"attempt": 2\b/, 'sent as attempt 2');
	$node->safe_psql('postgres', "DELETE FROM outbox_destinations WHERE name = 'hang'");
}

$sink->stop;
$node->stop;
done_testing();
