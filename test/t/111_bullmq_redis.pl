# BullMQ on Redis, the backend most BullMQ users run, is fed through a
# webhook: the receiver docs/bullmq.md shows (test/bullmq_redis_receiver.js)
# verifies the signature and adds each event as a job whose id is the
# webhook-id. Against a real redis-server (Debian) started on 127.0.0.1 and
# npm bullmq's Queue and Worker: 300 events, then every one sent again
# (outbox_redeliver), make 300 jobs, and a Worker processes each once; a
# request with a forged signature adds nothing.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use HTTP::Tiny;
use IPC::Run;
use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan skip_all => 'redis-server is not installed (ci/deps.sh installs it)'
  unless grep { -x "$_/redis-server" } split /:/, $ENV{PATH};
my $modules = ($ENV{OUTBOX_NODE_DIR} // '/var/cache/outbox-npm') . '/node_modules';
die "the npm package bullmq is not in $modules: run ci/deps.sh as root" unless -d "$modules/bullmq";

my $dir = PostgreSQL::Test::Utils::tempdir();
my $redis_port = PostgreSQL::Test::Cluster::get_free_port();
my $redis = IPC::Run::start(
	[ 'redis-server', '--bind', '127.0.0.1', '--port', $redis_port, '--dir', $dir, '--save', '',
		'--appendonly', 'no', '--maxmemory-policy', 'noeviction' ],
	'>', "$dir/redis.log", '2>&1');
ok(wait_until(sub { (`redis-cli -h 127.0.0.1 -p $redis_port ping 2>/dev/null` // '') eq "PONG\n" }),
	"redis-server answers on 127.0.0.1:$redis_port");

my $secret = 'whsec_' . 'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
local $ENV{NODE_PATH} = $modules;
my $receiver = IPC::Run::start(
	[ 'node', "$FindBin::RealBin/../bullmq_redis_receiver.js", $redis_port, $secret, "$dir/port" ],
	'>', "$dir/receiver.log", '2>&1');
ok(wait_until(sub { -s "$dir/port" }), 'the receiver listens');
my $port = PostgreSQL::Test::Utils::slurp_file("$dir/port");

my $node = outbox_node('bullmq_redis');
ok(wait_relay($node, 'postgres'), 'relay runs');
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, url, secret)
	VALUES ('bullmq-redis', 'order.*', 'http://127.0.0.1:$port/', '$secret');
	SELECT count(outbox_emit('order.placed', jsonb_build_object('n', g), 'order', g::text))
	  FROM generate_series(1, 300) g});
ok($node->poll_query_until('postgres', 'SELECT count(*) = 0 FROM outbox WHERE delivered_at IS NULL'),
	'300 events delivered to the receiver');
is($node->safe_psql('postgres', q{
		SELECT count(*) FILTER (WHERE outbox_redeliver(event_id)) FROM outbox}),
	'300', 'every one of them sent again');
ok($node->poll_query_until('postgres', 'SELECT count(*) = 0 FROM outbox WHERE delivered_at IS NULL'),
	'and delivered again');
is($node->safe_psql('postgres', 'SELECT min(attempts) || \' \' || max(attempts) FROM outbox'),
	'2 2', 'each event delivered twice, the second a resend with its webhook-id');

# a forged request: refused, and no job
my $forged = HTTP::Tiny->new->post("http://127.0.0.1:$port/", {
	headers => { 'webhook-id' => 'forged', 'webhook-timestamp' => time(),
		'webhook-signature' => 'v1,AAAA', 'content-type' => 'application/json' },
	content => '{"type": "order.placed", "payload": {}}' });
is($forged->{status}, 400, 'a forged signature is refused');

my $worked = node_json('bullmq_tool.js', { command => 'work', redis => JSON::PP::true,
	connection => { host => '127.0.0.1', port => $redis_port }, queue => 'orders',
	count => 300, concurrency => 8, timeout_ms => 60_000 }, 'bullmq');
my %seen;
$seen{ $_->{id} }++ for @{ $worked->{jobs} };
my @ids = sort split /\n/, $node->safe_psql('postgres', 'SELECT event_id FROM outbox');
is_deeply([ sort keys %seen ], \@ids, 'a Worker on Redis processed one job per event, its id the event_id');
is(scalar(grep { $seen{$_} > 1 } keys %seen), 0, 'none twice');
is(`redis-cli -h 127.0.0.1 -p $redis_port exists bull:orders:forged`, "0\n", 'no job for the forged request');

$receiver->kill_kill;
$redis->kill_kill;
done_testing();
