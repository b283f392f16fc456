# The rabbitmq kind through faults, against a real rabbitmq-server on
# 127.0.0.1 read back with npm amqplib:
#   a. kill -9 of the relay mid-flow of OUTBOX_RABBITMQ_EVENTS events
#      (3,000 here; ci/slow.sh runs 10,000) into a durable queue: every
#      event arrives, each message_id at least once, and the copies are at
#      most the unconfirmed window (RabbitMQ does not deduplicate on
#      message_id): their number is reported
#   b. the broker stopped for 10 s mid-flow, then started again on its
#      data: nothing lost
#   c. an ordered destination into a single-consumer queue: each key's
#      events in order, though some are returned (unroutable) and retried
#   d. fan-out: a RabbitMQ destination and a webhook take the same events
#   e. SIGTERM ends the relay within a second while the broker is frozen
#      (SIGSTOP) with messages waiting for confirms, and while a connection
#      is being made to a server that accepts and never answers
#   f. a 15 MiB message (under RabbitMQ 4.0's default max_message_size,
#      16 MiB) that the frozen broker stops reading in the middle of, more
#      than the kernel's TCP buffers hold: the event's time limit ends the
#      write, and so does SIGTERM, within a second
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use IO::Socket::INET;
use JSON::PP;
use Time::HiRes qw(time);
use OutboxRabbitmq;
use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

require_kind('rabbitmq');
plan skip_all => 'rabbitmq-server or npm amqplib is not installed (ci/deps.sh installs them)'
  unless rabbitmq_available();

my $window = 64;
my $n = $ENV{OUTBOX_RABBITMQ_EVENTS} // 3000;
die "OUTBOX_RABBITMQ_EVENTS must be a number of events, at least 1,000\n"
  unless $n =~ /^\d+$/ && $n >= 1000;
my $rmq = start_rabbitmq();
$rmq->tool({ command => 'setup', queues => [ map { { name => $_ } } qw(flow outage ordered fan big) ] });
my $node = outbox_node('rabbitmq_faults', restart_after_crash => 'on');
my $pid = wait_relay($node, 'postgres');
ok($pid, 'relay runs');
for my $q (qw(flow outage ordered fan))
{
	$node->safe_psql('postgres', sprintf(q{
		INSERT INTO outbox_destinations (name, kind, event_types, options, ordered)
		VALUES ('%s', 'rabbitmq', '%s.*', '%s', %s)},
		$q, $q, $rmq->options(routing_key => $q, max_unconfirmed => $window),
		$q eq 'ordered' ? 'true' : 'false'));
}

sub delivered
{
	my ($type) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM outbox WHERE event_type LIKE '$type.%' AND delivered_at IS NOT NULL");
}

# every event of $type in queue $q, each at least once: returns the copies beyond one
sub all_there
{
	my ($type, $q, $n, $label) = @_;
	my $got = $rmq->tool({ command => 'consume', queue => $q, count => 10 * $n, idle_ms => 3000,
		timeout_ms => 300_000 })->{messages};
	my %ids;
	$ids{ $_->{message_id} }++ for @$got;
	is_deeply([ sort keys %ids ],
		[ sort split /\n/, $node->safe_psql('postgres', "SELECT DISTINCT event_id FROM outbox WHERE event_type LIKE '$type.%'") ],
		"$label: every event in the queue");
	return scalar(@$got) - scalar(keys %ids);
}

# a. kill -9 mid-flow
$node->safe_psql('postgres', qq{SELECT count(outbox_emit('flow.x', jsonb_build_object('n', g))) FROM generate_series(1, $n) g});
ok($node->poll_query_until('postgres', sprintf("SELECT count(*) >= %d FROM outbox WHERE event_type = 'flow.x' AND delivered_at IS NOT NULL", $n / 10)),
	'a: the flow runs');
kill 'KILL', $pid;
$pid = wait_relay($node, 'postgres', $pid);
ok($pid, 'a: a new relay after the crash');
ok($node->poll_query_until('postgres', "SELECT count(*) = $n FROM outbox WHERE event_type = 'flow.x' AND delivered_at IS NOT NULL"),
	"a: all $n delivered");
my $copies = all_there('flow', 'flow', $n, 'a');
diag("a: kill -9 mid-flow: $copies of $n messages stored twice (unconfirmed window $window)");
cmp_ok($copies, '<=', $window, 'a: copies at most the unconfirmed window');

# b. the broker stopped for 10 s mid-flow
$node->safe_psql('postgres', q{SELECT count(outbox_emit('outage.x', jsonb_build_object('n', g))) FROM generate_series(1, 2000) g});
ok($node->poll_query_until('postgres', "SELECT count(*) >= 200 FROM outbox WHERE event_type = 'outage.x' AND delivered_at IS NOT NULL"),
	'b: the flow runs');
$rmq->stop('TERM');
# 500 more, written while it is down (the flow may have ended meanwhile)
$node->safe_psql('postgres', q{SELECT count(outbox_emit('outage.x', jsonb_build_object('n', g))) FROM generate_series(2001, 2500) g});
ok($node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM outbox WHERE event_type = 'outage.x' AND last_error LIKE '%RabbitMQ%'"),
	'b: the relay sees the broker gone');
my $down_until = time() + 10;
ok(wait_until(sub { time() >= $down_until }), 'b: the broker stays down for 10 s');
$rmq->start;
ok($node->poll_query_until('postgres', "SELECT count(*) = 2500 FROM outbox WHERE event_type = 'outage.x' AND delivered_at IS NOT NULL"),
	'b: all 2,500 delivered once it is back');
is($node->safe_psql('postgres', "SELECT count(*) FROM outbox WHERE event_type = 'outage.x' AND dead_at IS NOT NULL"),
	'0', 'b: none dead-lettered');
$copies = all_there('outage', 'outage', 2500, 'b');
diag("b: a 10 s outage: $copies of 2,500 messages stored twice");

# c. ordered: five keys interleaved, one consumer. The routing key is the
# event type, and only ordered.x is bound at first: each ordered.y is
# returned (a failed attempt, retried), and the events of its key after it
# must wait for it; an unordered destination would deliver them first.
$rmq->tool({ command => 'setup', exchanges => [ { name => 'ordx', type => 'direct' } ],
	bindings => [ { queue => 'ordered', exchange => 'ordx', key => 'ordered.x' } ] });
$node->safe_psql('postgres', sprintf(q{UPDATE outbox_destinations SET options = '%s' WHERE name = 'ordered'},
	$rmq->options(exchange => 'ordx', routing_key => '{event_type}', max_unconfirmed => $window)));
$node->safe_psql('postgres', q{
	SELECT count(outbox_emit(CASE WHEN g % 7 = 3 THEN 'ordered.y' ELSE 'ordered.x' END,
		jsonb_build_object('n', g), 'account', (g % 5)::text))
	  FROM generate_series(1, 200) g});
ok($node->poll_query_until('postgres', q{SELECT count(*) = 5 FROM outbox
		WHERE event_type = 'ordered.y' AND attempts >= 2 AND last_error LIKE 'RabbitMQ returned the message%'}),
	'c: the first ordered.y of each key returned, twice');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox o
		WHERE o.event_type LIKE 'ordered.%' AND o.delivered_at IS NOT NULL
		  AND o.id > (SELECT min(y.id) FROM outbox y
		               WHERE y.event_type = 'ordered.y' AND y.aggregate_id = o.aggregate_id)}),
	'0', 'c: no event of a key after its returned one delivered meanwhile');
$rmq->tool({ command => 'setup', bindings => [ { queue => 'ordered', exchange => 'ordx', key => 'ordered.y' } ] });
ok($node->poll_query_until('postgres', "SELECT count(*) = 200 FROM outbox WHERE event_type LIKE 'ordered.%' AND delivered_at IS NOT NULL"),
	'c: 200 ordered events delivered once ordered.y is bound');
my $got = $rmq->tool({ command => 'consume', queue => 'ordered', count => 200, timeout_ms => 10_000 })->{messages};
my %seen;
my $out_of_order = 0;
for my $m (@$got)
{
	my $b = decode_json($m->{body});
	my $key = $b->{aggregate_id};
	$out_of_order++ if defined $seen{$key} && $b->{payload}{n} < $seen{$key};
	$seen{$key} = $b->{payload}{n};
}
is(scalar(@$got), 200, 'c: 200 messages');
is($out_of_order, 0, "c: each key's events in the order written");

# d. fan-out: RabbitMQ and a webhook take the same events
my $sink = start_sink();
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES ('fan-hook', 'fan.*', '%s')}, $sink->url));
$node->safe_psql('postgres', q{SELECT count(outbox_emit('fan.x', jsonb_build_object('n', g))) FROM generate_series(1, 50) g});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 100 FROM outbox_deliveries WHERE event_type = 'fan.x' AND state = 'delivered'"),
	'd: 50 events delivered to both destinations');
is(all_there('fan', 'fan', 50, 'd'), 0, 'd: no copy in the queue');
is(scalar(@{ $sink->requests('/hook') }), 50, 'd: 50 requests to the webhook');

# e. SIGTERM while the broker is frozen, with messages waiting for confirms
$rmq->signal('STOP');
$node->safe_psql('postgres', q{SELECT count(outbox_emit('flow.frozen', '{}')) FROM generate_series(1, 50)});
ok($node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM outbox_in_flight f JOIN outbox e ON e.id = ANY (f.ids) WHERE e.event_type = 'flow.frozen'"),
	'e: events in flight to the frozen broker');
my $t0 = time();
kill 'TERM', $pid;
ok(wait_until(sub { !kill(0, $pid) }), 'e: the relay ended');
my $took = time() - $t0;
cmp_ok($took, '<', time_bound(1), sprintf('e: within a second (%.3f s)', $took));
$rmq->signal('CONT');
$pid = wait_relay($node, 'postgres', $pid);
ok($node->poll_query_until('postgres', "SELECT count(*) = 50 FROM outbox WHERE event_type = 'flow.frozen' AND delivered_at IS NOT NULL"),
	'e: delivered by the next relay once the broker runs again');

# e. SIGTERM while connecting to a server that accepts and never answers
my $silent = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 16, ReuseAddr => 1)
  or die "listen: $!";
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, kind, event_types, options, timeout_ms)
	VALUES ('silent', 'rabbitmq', 'silent.*', '{"urls": "amqp://127.0.0.1:%d"}', 60000);
	SELECT outbox_emit('silent.x', '{}')}, $silent->sockport));
ok($node->poll_query_until('postgres', "SELECT count(*) = 1 FROM outbox_in_flight f JOIN outbox e ON e.id = ANY (f.ids) WHERE e.event_type = 'silent.x'"),
	'e: the event is in flight, its connection being made');
$t0 = time();
kill 'TERM', $pid;
ok(wait_until(sub { !kill(0, $pid) }), 'e: the relay ended');
$took = time() - $t0;
cmp_ok($took, '<', time_bound(1), sprintf('e: within a second, where the connection may take 60 s (%.3f s)', $took));
# f. a write the frozen broker stops reading: the largest backlog of bytes
# received and not read on the broker's port, from /proc/net/tcp (a
# heartbeat is 8 bytes). The kernel holds far less than the message: a
# receive buffer grows only as its reader reads (TCP autotuning), and the
# send buffer is 4 MiB at most on Debian.
sub unread_by_broker
{
	my $most = 0;
	for my $line (split /\n/, slurp_file('/proc/net/tcp'))
	{
		my @f = split ' ', $line;
		next unless @f > 4 && $f[1] =~ /:([0-9A-F]{4})$/ && hex($1) == $rmq->{port};
		my $rx = hex((split /:/, $f[4])[1]);
		$most = $rx if $rx > $most;
	}
	return $most;
}

sub big_write_stalls
{
	my ($type, $label) = @_;
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', "SELECT outbox_emit('big.warm', '{}')");
	ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM outbox WHERE event_type = 'big.warm' AND delivered_at IS NULL"),
		"$label: the destination's connection is made");
	$rmq->signal('STOP');
	$node->safe_psql('postgres', "SELECT outbox_emit('$type', jsonb_build_object('s', repeat('x', 15 << 20)))");
	ok(wait_until(sub { unread_by_broker() >= 65536 }), "$label: the relay writes a 15 MiB message the broker does not read");
	return $offset;
}

$pid = wait_relay($node, 'postgres', $pid);
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, kind, event_types, options, timeout_ms)
	VALUES ('big', 'rabbitmq', 'big.*', '%s', 2000)}, $rmq->options(routing_key => 'big', max_message_bytes => 64 << 20)));
my $offset = big_write_stalls('big.limit', 'f');
my $bytes = $node->safe_psql('postgres', q{
	SELECT length(_outbox_envelope(event_id, event_type, aggregate_type, aggregate_id, created_at, 1, payload))
	  FROM outbox WHERE event_type = 'big.limit'});
# the retries that follow, while the broker is frozen, fail to connect
ok($node->wait_for_log(qr/destination "big": the connection to RabbitMQ ended: RabbitMQ did not read a message of $bytes bytes within 2000 ms\n/,
		$offset), "f: the time limit ends the write of $bytes bytes, and says so");
$rmq->signal('CONT');
is(relay_pid($node, 'postgres'), $pid, 'f: the same relay goes on');
ok($node->poll_query_until('postgres', "SELECT delivered_at IS NOT NULL FROM outbox WHERE event_type = 'big.limit'"),
	'f: delivered once the broker reads again');
$node->safe_psql('postgres', "UPDATE outbox_destinations SET timeout_ms = 60000 WHERE name = 'big'");
big_write_stalls('big.term', 'f');
$t0 = time();
kill 'TERM', $pid;
ok(wait_until(sub { !kill(0, $pid) }), 'f: the relay ended');
$took = time() - $t0;
cmp_ok($took, '<', time_bound(1), sprintf('f: SIGTERM ends the write within a second, its limit 60 s (%.3f s)', $took));
$rmq->signal('CONT');
$pid = wait_relay($node, 'postgres', $pid);
ok($node->poll_query_until('postgres', "SELECT delivered_at IS NOT NULL FROM outbox WHERE event_type = 'big.term'"),
	'f: delivered by the next relay');

unlike(slurp_file($node->logfile), qr/PANIC|TRAP|terminated by signal 11|server process .* was terminated by signal 6/,
	'no crash but the one the test made');

$node->stop;
$rmq->stop;
done_testing();
