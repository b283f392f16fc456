# An event whose delivery ends its relay. Here the test plays the endpoint
# whose answer kills the relay: it holds the poison event's request at the
# sink and ends the relay once the request has arrived with SIGKILL, which
# restarts the whole server (part b). A SIGTERM (part a) is a stop, which
# the relay notes in its start log as it exits: the attempts it cuts off
# are counted, but not held against their events. Wanted:
#   - an attempt cut off by the relay's end is counted for the events whose
#     requests had started, and for no other event of the claim (the start
#     log in $PGDATA/outbox_in_flight survives the process and the crash
#     restart);
#   - an event cut off twice in a row (or at outbox.max_attempts) is sent
#     alone, with nothing else of its relay in flight;
#   - cut off again while alone, it is dead-lettered with a clear
#     last_error and a WARNING; its neighbours are delivered.
# So one event ends its relay three times, no more.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $conns = 4;
my $node = outbox_node('poison',
	'outbox.http_max_connections' => $conns,
	'outbox.max_attempts' => 2,
	restart_after_crash => 'on');
my $sink = start_sink();
my $pid = wait_relay($node, 'postgres');
ok($pid, 'relay runs');
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES ('hook', 'a.*', '%s'),
	    ('crash', 'b.*', '%s')},
	$sink->url('/hook'), $sink->url('/crash')));

# Requests the sink received for path $path, answered or not.
sub arrived { my ($path) = @_; return scalar @{ $sink->arrivals($path) }; }

# Ends the relay with signal $sig once $n requests to $path have arrived;
# returns the next relay's pid, once it has released the journal (the log
# line from $offset on: 'counted N attempts').
sub end_relay
{
	my ($part, $sig, $path, $n) = @_;
	ok(wait_until(sub { arrived($path) >= $n }), "$part: $n requests arrived")
	  or diag(explain($sink->arrivals($path)));
	is(arrived($path), $n, "$part: exactly $n requests arrived");
	my $offset = -s $node->logfile;
	kill $sig, $pid or die "kill $pid: $!";
	$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset)
	  if $sig eq 'KILL';
	$pid = wait_relay($node, 'postgres', $pid);
	ok($pid, "$part: the next relay runs");
	$node->wait_for_log(qr/outbox relay counted \d+ attempts? that no outcome recorded/, $offset);
	return $offset;
}

# attempts, cut_off_attempts, state, last_error of the events of type $type, by id.
sub rows
{
	my ($type) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT string_agg(format('%s|%s|%s|%s', attempts, cut_off_attempts,
		                         CASE WHEN dead_at IS NOT NULL THEN 'dead'
		                              WHEN delivered_at IS NOT NULL THEN 'delivered'
		                              ELSE 'pending' END,
		                         coalesce(last_error, '')), E'\\n' ORDER BY id)
		  FROM outbox WHERE event_type LIKE '$type'});
}

my $cut1 = 'attempt cut off: its relay ended while it was in flight (1 in a row)';
my $dead = 'its relay ended while it was in flight, sent alone (cut off 3 times in a row):'
  . ' dead-lettered, as it may end the relay';

###
### a. SIGTERM is a stop, not a poison: 11 events to one destination; 4
###    connections, so 4 requests start and 7 wait in the relay when the
###    relay is stopped, twice. Their attempts are counted, without blame:
###    none is dead-lettered, and at outbox.max_attempts (2) they go alone
###
my $stopped = 'attempt cut off: its relay was stopped while it was in flight';
$sink->paths('/hook' => { hold => JSON::PP::true });
my $ids = $node->safe_psql('postgres', q{
	SELECT string_agg(outbox_emit('a.x', jsonb_build_object('n', g))::text, ' ' ORDER BY g)
	  FROM generate_series(1, 11) g});
my @ids = split / /, $ids;

# first stop: the 4 started are counted, the 7 never sent are not
my $offset = end_relay('a1', 'TERM', '/hook', $conns);
like(log_since($node, $offset), qr/outbox relay counted 4 attempts that no outcome recorded/,
	'a1: the release counted the 4 requests that started');
is(rows('a.x'), join("\n", ("1|0|pending|$stopped") x 4, ("0|0|pending|") x 7),
	'a1: an attempt for each event sent, not held against it; none for the 7 never sent');

# second stop: the same 4 are sent first again (they are first due); at
# outbox.max_attempts (2) they are to be sent alone, not dead-lettered
$offset = end_relay('a2', 'TERM', '/hook', 2 * $conns);
like(log_since($node, $offset), qr/outbox relay will send 4 events alone/, 'a2: at max_attempts, 4 events to be sent alone');
is(rows('a.x'), join("\n", ("2|2|pending|$stopped") x 4, ("0|0|pending|") x 7),
	'a2: stopped twice: counted, at max_attempts');
$sink->paths('/hook' => {});

# all are delivered, the 4 one after the other
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 11 FROM outbox WHERE event_type = 'a.x' AND delivered_at IS NOT NULL"),
	'a3: all 11 are delivered');
is(rows('a.x'), join("\n", ("3|2|delivered|") x 4, ("1|0|delivered|") x 7),
	'a3: no event dead-lettered for the stops');
unlike(slurp_file($node->logfile), qr/dead-lettered: its relay ended/, 'a3: no poison WARNING');

###
### b. SIGKILL: each end is a crash restart of the server. One poison and
###    5 neighbours; the start log survives the crash restart
###
$sink->reset;
$sink->paths('/crash' => { hold => JSON::PP::true });
$ids = $node->safe_psql('postgres', q{
	SELECT string_agg(outbox_emit('b.x', jsonb_build_object('n', g))::text, ' ' ORDER BY g)
	  FROM generate_series(1, 6) g});
@ids = split / /, $ids;
my $poison = $ids[0];
$sink->control(hold_ids => [$poison]);
my $restarts0 = () = slurp_file($node->logfile) =~ /all server processes terminated; reinitializing/g;

$offset = end_relay('b1', 'KILL', '/crash', $conns);
like(log_since($node, $offset), qr/outbox relay counted 4 attempts that no outcome recorded/,
	'b1: after the crash restart, the 4 requests that started are counted');
is(rows('b.x'), join("\n", ("1|1|pending|$cut1") x 4, ("0|0|pending|") x 2),
	'b1: none for the 2 never sent');
$sink->paths('/crash' => {});

# the neighbours are delivered; the poison, cut off once, goes with others
# or alone, then alone until its relay has ended 3 times
for my $n (2, 3)
{
	ok(wait_until(sub { (grep { $_->{webhook_id} eq $poison } @{ $sink->arrivals('/crash') }) >= $n }),
		"b$n: the poison is sent again");
	my $o = -s $node->logfile;
	kill 'KILL', $pid or die "kill $pid: $!";
	$node->wait_for_log(qr/all server processes terminated; reinitializing/, $o);
	$pid = wait_relay($node, 'postgres', $pid);
	ok($pid, "b$n: the next relay runs");
	$node->wait_for_log(qr/outbox relay counted \d+ attempts? that no outcome recorded/, $o);
}
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 5 FROM outbox WHERE event_type = 'b.x' AND delivered_at IS NOT NULL"),
	'b: the 5 neighbours are delivered');
is($node->safe_psql('postgres',
	"SELECT format('%s|%s|%s', attempts, cut_off_attempts, dead_at IS NOT NULL) FROM outbox WHERE event_id = '$poison'"),
	'3|3|t', 'b: the poison is dead-lettered after 3 crash restarts');
my $restarts = () = slurp_file($node->logfile) =~ /all server processes terminated; reinitializing/g;
is($restarts - $restarts0, 3, 'b: the poison caused 3 crash restarts');
is(scalar(grep { $_->{webhook_id} eq $poison } @{ $sink->arrivals('/crash') }), 3,
	'b: the poison was sent 3 times');

# the start logs of the relays that ended are removed by the releases
my @logs = glob($node->data_dir . '/outbox_in_flight/*');
is(scalar(@logs), 2, 'the running relay\'s two start log files are all that is left')
  or diag(join("\n", @logs));

$sink->stop;
$node->stop;
done_testing();
