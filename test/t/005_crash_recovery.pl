# Crash safety: every committed event reaches the endpoint at least once,
# whatever happens to the server or the endpoint in between, and a crash
# repeats at most the events a relay had in flight, which the relay
# releases as soon as it starts again, counting their cut-off attempts (but
# for the journal rows of a claim whose commit was not flushed yet, lost
# with it: see check_repeats).
#   a. kill -9 of the relay worker in the middle of a large batch
#   b. immediate shutdown of the server while delivering, then start
#   c. the endpoint answers 503 for a while: retries with backoff, then
#      everything is delivered once it recovers
#   d. an event committed just before a backend crash survives the crash
#      recovery and is delivered afterwards
# Each part has its own event type and sink path, so that its counts are not
# mixed with those of another part.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;

my $nbig = 2000;
my $batch = 500;

# The test framework turns restart_after_crash off; parts a and d need the
# postmaster to reinitialize after a backend crash, as in production.
my $node = outbox_node('crash',
	'outbox.batch_size' => $batch,
	restart_after_crash => 'on');
my $conns = $node->safe_psql('postgres', 'SHOW outbox.http_max_connections');
my $sink = start_sink();

my $dests = join(",\n", map { "('$_', '$_.*', '" . $sink->url("/$_") . "', " . ($_ eq 'd' ? 'false' : 'true') . ')' }
	qw(a b c d));
$node->safe_psql('postgres',
	"INSERT INTO outbox_destinations (name, event_types, url, enabled) VALUES $dests");

# The number of attempts cut off by the crash that the new relay counted
# when it started (its log line after $offset), or 0 if it logged none: a crash
# between two claims leaves nothing in flight. Call it once the events are
# delivered, so that the relay has run its first claim.
sub released_at_start
{
	my ($node, $offset) = @_;
	my ($n) = slurp_file($node->logfile, $offset) =~ /outbox relay counted (\d+) attempts? that no outcome recorded/;
	return $n // 0;
}

# Waits until no event of $type is pending on $node, then checks that $sink
# got every event of $type at $path, under its event_id, and nothing else;
# returns the number of repeated deliveries.
sub check_delivered
{
	my ($node, $sink, $part, $type, $path, $n) = @_;

	ok( $node->poll_query_until('postgres',
			"SELECT count(*) FROM outbox WHERE event_type = '$type' AND delivered_at IS NULL", '0'),
		"$part: every event marked delivered");
	is( $node->safe_psql('postgres', qq{
			SELECT count(*), count(*) FILTER (WHERE dead_at IS NULL AND last_error IS NULL)
			  FROM outbox WHERE event_type = '$type'}),
		"$n|$n", "$part: $n events, none dead-lettered or failed");

	my %in_table = map { $_ => 1 } split /\n/,
	  $node->safe_psql('postgres', "SELECT event_id FROM outbox WHERE event_type = '$type'");
	my $got = $sink->delivered($path);
	my %times;
	$times{ $_->{webhook_id} }++ for @$got;

	is(scalar keys %times, $n, "$part: the sink got $n distinct webhook-ids");
	is_deeply([ sort keys %times ], [ sort keys %in_table ],
		"$part: they are exactly the committed event_ids, none lost");
	is( scalar(grep { decode_json($_->{body})->{id} ne $_->{webhook_id} } @$got), 0,
		"$part: every request, duplicates included, carries its event's id as webhook-id and in the body");

	# Repeats are expected after a crash (delivery is at-least-once): say so,
	# so that the count does not read as a failure.
	my $dups = @$got - keys %times;
	if ($dups == 0)
	{
		note("$part: no repeat, every event accepted once");
	}
	else
	{
		diag(sprintf('%s: %d events, %d requests: %d sent again after the crash, as expected '
				. '(at-least-once delivery: events in flight, or answered with their outcome not yet on disk)',
				$part, $n, scalar @$got, $dups));
	}
	return $dups;
}

ok(wait_relay($node, 'postgres'), 'relay worker runs');

# Each request takes 5 ms at the sink: a batch of 500 over 16 connections
# takes 150 ms or more, so the crashes below hit a pass in flight.
$sink->control(delay_ms => 5);

###
### a. kill -9 of the relay worker in the middle of a batch
###
{
	emit($node, 'postgres', 'a.created', $nbig);
	ok(wait_until(sub { $sink->stats('/a')->{requests} >= 100 }), 'a: delivery has started');
	my $pid = relay_pid($node, 'postgres');
	my $log_offset = -s $node->logfile;
	kill 'KILL', $pid or die "kill $pid: $!";
	my $sent = $sink->stats('/a')->{requests};
	note("a: killed relay $pid after $sent requests");
	cmp_ok($sent, '<', $nbig, 'a: killed before all events were sent');

	$node->wait_for_log(qr/all server processes terminated; reinitializing/, $log_offset);
	ok($node->log_contains(qr/\(PID $pid\) was terminated by signal 9/, $log_offset),
		'a: the postmaster saw the relay killed and restarted');
	ok(wait_relay($node, 'postgres', $pid), 'a: a new relay runs after the crash restart');
	my $restarted_at = Time::HiRes::time();

	check_delivered($node, $sink, 'a', 'a.created', '/a', $nbig);
	my $released = released_at_start($node, $log_offset);
	note("a: the new relay counted $released attempts cut off by the crash");
	check_repeats($node, 'a', 'a.created', $sink->requests('/a'), $released, $conns, $restarted_at);
}

###
### b. immediate shutdown while delivering, then start
###
{
	emit($node, 'postgres', 'b.created', $nbig);
	ok(wait_until(sub { $sink->stats('/b')->{requests} >= 100 }), 'b: delivery has started');
	my $log_offset = -s $node->logfile;
	$node->stop('immediate');
	my $sent = $sink->stats('/b')->{requests};
	note("b: immediate shutdown after $sent requests");
	cmp_ok($sent, '<', $nbig, 'b: stopped before all events were sent');

	$node->start;
	my $restarted_at = Time::HiRes::time();
	ok($node->log_contains(qr/database system was (?:interrupted|not properly shut down)/, $log_offset),
		'b: the start ran crash recovery');
	check_delivered($node, $sink, 'b', 'b.created', '/b', $nbig);
	my $released = released_at_start($node, $log_offset);
	note("b: the relay counted $released attempts cut off by the shutdown");
	check_repeats($node, 'b', 'b.created', $sink->requests('/b'), $released, $conns, $restarted_at);
}

###
### c. the endpoint is down for a while
###
{
	my $n = 20;
	$sink->control(status => 503, delay_ms => 0);
	emit($node, 'postgres', 'c.created', $n);

	# backoff_base is 100ms: attempts 2, 3 and 4 come within a second or so
	ok( $node->poll_query_until('postgres',
			"SELECT min(attempts) >= 4 FROM outbox WHERE event_type = 'c.created'"),
		'c: failed events are retried while the endpoint is down');
	is( $node->safe_psql('postgres', q{
			SELECT count(*) FILTER (WHERE last_error LIKE 'HTTP status 503%'
			                          AND delivered_at IS NULL AND dead_at IS NULL
			                          AND next_attempt_at > created_at)
			  FROM outbox WHERE event_type = 'c.created'}),
		$n, 'c: every event pending with last_error HTTP status 503 and a later next_attempt_at');
	is($sink->stats('/c')->{delivered}, 0, 'c: nothing was accepted while down');

	# The relay backs off: after attempt k fails, the next one is due at least
	# 50 * 2^(k-1) ms after the pass that made it started, so attempts 1 to 4
	# of one event span at least 350 ms minus the time its first request
	# took to reach the sink. Retrying at once would take a few ms.
	my %times;
	push @{ $times{ $_->{webhook_id} } }, $_->{received_at} for @{ $sink->requests('/c') };
	my @spans = sort { $a <=> $b } map { $_->[3] - $_->[0] } values %times;
	note(sprintf('c: attempts 1 to 4 of each event spanned %.3f to %.3f s', $spans[0], $spans[-1]));
	cmp_ok($spans[0], '>=', 0.25, 'c: retries are spaced by the exponential backoff');

	$sink->control(status => 200);
	check_delivered($node, $sink, 'c', 'c.created', '/c', $n);
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM outbox WHERE event_type = 'c.created' AND attempts > 1"),
		$n, 'c: delivered after more than one attempt');
	is(scalar @{ $sink->delivered('/c') }, $n, 'c: each event accepted once');
}

###
### d. a committed event survives a crash of an ordinary backend
###
{
	# destination d is disabled: the event can only be delivered after the
	# crash, from what crash recovery restored
	my $session = $node->background_psql('postgres');
	my $pid = $session->query_safe('SELECT pg_backend_pid()');
	my $event_id = $session->query_safe(q{
		BEGIN;
		SELECT outbox_emit('d.created', '{"survives": "crash"}');
		COMMIT;
	});
	my $log_offset = -s $node->logfile;
	kill 'KILL', $pid or die "kill $pid: $!";
	$session->quit;

	$node->wait_for_log(qr/all server processes terminated; reinitializing/, $log_offset);
	ok($node->log_contains(qr/\(PID $pid\) was terminated by signal 9/, $log_offset),
		'd: the client backend was killed and the server restarted');
	ok(poll_after_crash($node, 'postgres', 'SELECT NOT pg_is_in_recovery()'),
		'd: crash recovery finished');
	ok($node->log_contains(qr/redo done at/, $log_offset), 'd: WAL was replayed');
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM outbox WHERE event_id = '$event_id' AND delivered_at IS NULL"),
		'1', 'd: the committed event is still there, pending');
	is($sink->stats('/d')->{requests}, 0, 'd: it was not sent before the crash');

	$node->safe_psql('postgres', "UPDATE outbox_destinations SET enabled = true WHERE name = 'd'");
	ok($sink->wait_delivered(1, '/d'), 'd: delivered after recovery');
	check_delivered($node, $sink, 'd', 'd.created', '/d', 1);
	is($sink->delivered('/d')->[0]{webhook_id}, $event_id, 'd: with its event_id');
}

$sink->stop;
$node->stop;
done_testing();
