# The kafka kind through faults, against librdkafka's mock Kafka cluster
# (3 brokers on 127.0.0.1, test/kafka_mock.c) read back with kcat:
#   a. kill -9 of the relay mid-flow of OUTBOX_KAFKA_EVENTS events (3,000
#      here; ci/slow.sh runs 10,000): every event there, each event_id at
#      least once, the copies at most the outstanding window (a new
#      producer is a new idempotence session): their number is reported;
#      within a partition each key's events in order but for those copies
#   b. every broker down for 5 s mid-flow, then up: librdkafka's retries
#      within the time limit deliver all, none dead-lettered, no copy
#   c. an ordered destination with produce errors injected: each key's
#      events in order, one outstanding message per key
#   d. fan-out: a Kafka destination and a webhook take the same events
#   e. SIGTERM ends the relay within a second while every broker delays its
#      answers by 10 s with messages outstanding; the next relay delivers them
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use Time::HiRes qw(time);
use OutboxKafka;
use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

require_kind('kafka');
plan skip_all => 'kcat or librdkafka-dev is not installed (ci/deps.sh installs them)'
  unless kafka_available();

my $window = 256;
my $n = $ENV{OUTBOX_KAFKA_EVENTS} // 3000;
die "OUTBOX_KAFKA_EVENTS must be a number of events, at least 1,000\n"
  unless $n =~ /^\d+$/ && $n >= 1000;

my $kafka = start_kafka();
$kafka->command("topic $_ 3") for qw(flow outage ordered fan);

my $node = outbox_node('kafka_faults', restart_after_crash => 'on');
my $pid = wait_relay($node, 'postgres');
ok($pid, 'relay runs');
for my $t (qw(flow outage ordered fan))
{
	$node->safe_psql('postgres', sprintf(q{
		INSERT INTO outbox_destinations (name, kind, event_types, options, ordered)
		VALUES ('%s', 'kafka', '%s.*', '%s', %s)},
		$t, $t, $kafka->options(topic => $t, max_outstanding => $window), $t eq 'ordered' ? 'true' : 'false'));
}

sub delivered_all
{
	my ($type, $count) = @_;
	return $node->poll_query_until('postgres',
		"SELECT count(*) = $count FROM outbox WHERE event_type = '$type' AND delivered_at IS NOT NULL");
}

# Every event of $type in topic $topic, each at least once; returns the
# copies beyond one and the keys whose events went backwards within their
# partition, counting each copy's place.
sub all_there
{
	my ($type, $topic, $label) = @_;
	my $got = $kafka->consume($topic);
	my (%ids, %last, $backwards);
	$ids{ $_->{headers}{'outbox-event-id'} }++ for @$got;
	is_deeply([ sort keys %ids ],
		[ sort split /\n/, $node->safe_psql('postgres', "SELECT DISTINCT event_id FROM outbox WHERE event_type = '$type'") ],
		"$label: every event in the topic");
	for my $m (sort { $a->{partition} <=> $b->{partition} || $a->{offset} <=> $b->{offset} } @$got)
	{
		my $seq = decode_json($m->{payload})->{payload}{n};
		my $key = $m->{key} // '';
		$backwards++ if defined $last{$key} && $seq < $last{$key};
		$last{$key} = $seq;
	}
	return (scalar(@$got) - scalar(keys %ids), $backwards // 0);
}

sub emit_keyed
{
	my ($type, $count, $keys) = @_;
	$node->safe_psql('postgres', qq{
		SELECT count(outbox_emit('$type', jsonb_build_object('n', g), 'account', (g % $keys)::text))
		  FROM generate_series(1, $count) g});
}

# a. kill -9 mid-flow
emit_keyed('flow.x', $n, 20);
ok($node->poll_query_until('postgres', sprintf(
			"SELECT count(*) >= %d FROM outbox WHERE event_type = 'flow.x' AND delivered_at IS NOT NULL", $n / 10)),
	'a: the flow runs');
kill 'KILL', $pid;
$pid = wait_relay($node, 'postgres', $pid);
ok($pid, 'a: a new relay after the crash');
ok(delivered_all('flow.x', $n), "a: all $n delivered");
my ($copies, $backwards) = all_there('flow.x', 'flow', 'a');
diag("a: kill -9 mid-flow: $copies of $n messages stored twice (outstanding window $window)");
cmp_ok($copies, '<=', $window, 'a: copies at most the outstanding window');
cmp_ok($backwards, '<=', $copies, "a: a key's events in order within its partition, but for the copies");

# b. every broker down for 5 s mid-flow
emit_keyed('outage.x', 2000, 20);
ok($node->poll_query_until('postgres',
		"SELECT count(*) >= 200 FROM outbox WHERE event_type = 'outage.x' AND delivered_at IS NOT NULL"),
	'b: the flow runs');
$kafka->command("down $_") for 1 .. 3;
my $up_at = time() + 5;
ok(wait_until(sub { time() >= $up_at }), 'b: the brokers stay down for 5 s');
$kafka->command("up $_") for 1 .. 3;
ok(delivered_all('outage.x', 2000), 'b: all 2,000 delivered once they are back');
is($node->safe_psql('postgres', "SELECT count(*) FROM outbox WHERE event_type = 'outage.x' AND dead_at IS NOT NULL"),
	'0', 'b: none dead-lettered');
($copies, $backwards) = all_there('outage.x', 'outage', 'b');
is("$copies $backwards", '0 0', 'b: no copy, no key out of order (one idempotent session)');

# c. ordered, with NOT_LEADER_FOR_PARTITION and REQUEST_TIMED_OUT injected
$kafka->command('errors 0 6 7 6 7 6');
emit_keyed('ordered.x', 300, 5);
ok(delivered_all('ordered.x', 300), 'c: 300 ordered events delivered');
($copies, $backwards) = all_there('ordered.x', 'ordered', 'c');
is("$copies $backwards", '0 0', "c: each key's events once and in the order written");

# d. fan-out: Kafka and a webhook take the same events
my $sink = start_sink();
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES ('fan-hook', 'fan.*', '%s')}, $sink->url));
emit_keyed('fan.x', 50, 5);
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 100 FROM outbox_deliveries WHERE event_type = 'fan.x' AND state = 'delivered'"),
	'd: 50 events delivered to both destinations');
($copies) = all_there('fan.x', 'fan', 'd');
is($copies, 0, 'd: no copy in the topic');
is(scalar(@{ $sink->requests('/hook') }), 50, 'd: 50 requests to the webhook');

# e. SIGTERM with messages outstanding to brokers that answer in 10 s
$kafka->command("rtt $_ 10000") for 1 .. 3;
emit_keyed('flow.slow', 50, 5);
ok($node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM outbox_in_flight f JOIN outbox e ON e.id = ANY (f.ids) WHERE e.event_type = 'flow.slow'"),
	'e: events outstanding to slow brokers');
my $t0 = time();
kill 'TERM', $pid;
ok(wait_until(sub { !kill(0, $pid) }), 'e: the relay ended');
my $took = time() - $t0;
cmp_ok($took, '<', time_bound(1), sprintf('e: within a second (%.3f s)', $took));
$kafka->command("rtt $_ 0") for 1 .. 3;
$pid = wait_relay($node, 'postgres', $pid);
ok(delivered_all('flow.slow', 50), 'e: delivered by the next relay');

unlike(slurp_file($node->logfile), qr/PANIC|TRAP|terminated by signal 11|server process .* was terminated by signal 6/,
	'no crash but the one the test made');
$node->stop;
$kafka->stop;
done_testing();
