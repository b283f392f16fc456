# JetStream destinations when things fail, against a real nats-server
# on 127.0.0.1, in flows of 10,000 events:
#   a. kill -9 of the relay during a 10,000-event flow: a crash restart,
#      resends under the same Nats-Msg-Id, and still exactly 10,000
#      messages, one per event_id
#   b. the broker stopped for 10 s mid-flow and started again: attempts
#      fail and back off, the relay reconnects, nothing is lost or stored
#      twice
# Failed attempts with their reasons, and SIGTERM while the broker does not
# answer: 091_jetstream_errors_and_sigterm.pl.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use Time::HiRes qw(time);
use OutboxJetStreamFaults;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($nats, $node) = jetstream_faults_setup();

# Emits $n events of type $type in transactions of 100, from one session.
sub emit_events
{
	my ($type, $n) = @_;
	$node->safe_psql('postgres', qq{
		DO \$\$
		BEGIN
			FOR i IN 1 .. $n / 100 LOOP
				PERFORM outbox_emit('$type', jsonb_build_object('n', g)) FROM generate_series(1, 100) g;
				COMMIT;
			END LOOP;
		END \$\$});
}

# a. kill -9 of the relay mid-flow.
my $pid = wait_relay($node, 'postgres');
my $bg = $node->background_psql('postgres');
$bg->query_until(qr/started/, q{
	\echo started
	SELECT count(outbox_emit('flow.crash', jsonb_build_object('n', g))) FROM generate_series(1, 10000) g;
});
ok( $node->poll_query_until('postgres',
		"SELECT count(*) >= 2000 FROM outbox WHERE event_type = 'flow.crash' AND delivered_at IS NOT NULL"),
	'a: the flow is under way');
my $offset = -s $node->logfile;
kill 'KILL', $pid;
$bg->quit;
$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
ok(poll_after_crash($node, 'postgres', 'SELECT true'),
	'a: the server is back after the crash restart');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 10000 FROM outbox WHERE event_type = 'flow.crash' AND delivered_at IS NOT NULL"),
	'a: all 10,000 events delivered after the crash');
exactly_once($node, $nats, 'flow.crash', 'a', 'FLOW');
my $sends = $node->safe_psql('postgres',
	"SELECT sum(attempts) || ' attempts, ' || count(*) FILTER (WHERE attempts > 1) || ' events sent more than once' FROM outbox WHERE event_type = 'flow.crash'");
diag("a: 10,000 messages in the stream; the relay recorded $sends");

# b. The broker stopped for 10 s mid-flow.
$pid = wait_relay($node, 'postgres');
my $b_log = -s $node->logfile;
emit_events('outage.flow', 3000);
ok( $node->poll_query_until('postgres',
		"SELECT count(*) >= 500 FROM outbox WHERE event_type = 'outage.flow' AND delivered_at IS NOT NULL"),
	'b: the flow is under way');
my $stopped_at = time();
$nats->stop;
emit_events('outage.flow', 3000);
ok( $node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM outbox WHERE event_type = 'outage.flow' AND delivered_at IS NULL AND attempts > 0"),
	'b: attempts fail while the broker is down');
# the outage lasts 10 s: the scenario's length, not a wait for a condition
my $left = 10 - (time() - $stopped_at);
Time::HiRes::sleep($left) if $left > 0;
# (a server stopping by SIGTERM shuts JetStream down before it closes its
# connections: a message published meanwhile has no responders, or, as
# the socket closes, fails to be written (EPIPE, ECONNRESET), and the
# event waits out its backoff with that reason; on a loaded machine that
# can outlast the 10 s)
is( $node->safe_psql('postgres', q{
		SELECT string_agg(DISTINCT last_error, ' | ')
		         FILTER (WHERE last_error <> 'no JetStream stream takes subject "outage.flow" (no responders)'
		                   AND last_error NOT LIKE 'cannot publish to JetStream: %send error: %')
		  FROM outbox WHERE event_type = 'outage.flow' AND delivered_at IS NULL AND attempts > 0}),
	'no PubAck from JetStream within 2000 ms (the message may be stored: the retry carries the same Nats-Msg-Id)',
	'b: the failure says why, with outbox.jetstream_timeout');
$nats->start;
emit_events('outage.flow', 4000);
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 10000 FROM outbox WHERE event_type = 'outage.flow' AND delivered_at IS NOT NULL"),
	'b: all 10,000 events delivered after the broker came back');
exactly_once($node, $nats, 'outage.flow', 'b', 'OUTAGE');
is(relay_pid($node, 'postgres'), $pid, 'b: the same relay throughout (reconnected, not restarted)');
my @connected = grep { /connected to NATS at .* for destination "outage"/ } split /\n/, slurp_file($node->logfile, $b_log);
is(scalar @connected, 1, 'b: one connection, kept across claims and reconnected by libnats');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_in_flight'), '0',
	'b: nothing left in flight: every message published was answered or timed out');

done_testing();
