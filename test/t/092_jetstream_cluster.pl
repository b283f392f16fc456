# A JetStream destination on a three-node cluster (routes on loopback, a
# stream with three replicas): one node is killed mid-flow, and every event
# is in the stream exactly once. The relay knows all three servers;
# libnats reconnects to another when its own goes, and the stream elects a
# new leader when the leader goes; publishes lost meanwhile time out and
# are sent again under the same Nats-Msg-Id, which the stream's replicated
# duplicate window catches.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxNats;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my @nodes = start_nats_cluster(3);
$nodes[0]->add_stream('CLUSTERED', 'events.>', replicas => 3);
my $servers = join(',', map { $_->plain_url } @nodes);

my $node = outbox_node('jscluster', 'outbox.batch_size' => 200);
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream, timeout_ms)
	VALUES ('clustered', 'cl.*', '$servers', 'events.{event_type}', 'CLUSTERED', 2000);
});

my $bg = $node->background_psql('postgres');
$bg->query_until(qr/started/, q{
	\echo started
	SELECT count(outbox_emit('cl.flow', jsonb_build_object('n', g))) FROM generate_series(1, 5000) g;
});
ok( $node->poll_query_until('postgres',
		"SELECT count(*) >= 1000 FROM outbox WHERE delivered_at IS NOT NULL"),
	'the flow is under way');

# kill the node the relay is connected to: the remote port of a TCP
# socket the relay holds (its fds, looked up in /proc/net/tcp)
my $relay = relay_pid($node, 'postgres');
# (an fd closed between the listing and readlink is skipped)
my %inodes = map { (readlink($_) // '') =~ /^socket:\[(\d+)\]$/ ? ($1 => 1) : () } glob("/proc/$relay/fd/*");
my %remote_ports;
for my $line (split /\n/, slurp_file('/proc/net/tcp'))
{
	my @f = split ' ', $line;
	next unless @f > 9 && $f[2] =~ /^[0-9A-F]+:([0-9A-F]+)$/ && $inodes{ $f[9] };
	$remote_ports{ hex($1) } = 1;
}
my ($victim) = grep { $remote_ports{ $_->{port} } } @nodes;
ok($victim, 'the server the relay is connected to is found');
note("killing the server on port $victim->{port}");
$victim->stop('KILL');
$bg->query_safe(q{
	SELECT count(outbox_emit('cl.flow', jsonb_build_object('n', g))) FROM generate_series(1, 5000) g});
$bg->quit;

ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 10000 FROM outbox WHERE delivered_at IS NOT NULL"),
	'all 10,000 events delivered with one node down');
my ($alive) = grep { $_ != $victim } @nodes;
my @msgs = @{ $alive->messages('CLUSTERED') };
my %stored;
$stored{ $_->{headers}{'Nats-Msg-Id'} }++ for @msgs;
my @ids = split /\n/, $node->safe_psql('postgres', 'SELECT event_id FROM outbox ORDER BY id');
is(scalar @msgs, 10000, 'the stream holds 10,000 messages');
is_deeply([ sort keys %stored ], [ sort @ids ], "they are the events'");
is((grep { $_ != 1 } values %stored), 0, 'no event_id stored twice');
diag('the relay recorded '
	  . $node->safe_psql('postgres',
		"SELECT sum(attempts) || ' attempts, ' || count(*) FILTER (WHERE attempts > 1) || ' events sent more than once' FROM outbox"));

done_testing();
