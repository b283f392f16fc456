# The seed lesson's canon against the real extension: a dual-write client
# that dies after COMMIT on every tenth task loses 10 of 100 events; with
# outbox_emit() all 100 arrive; redelivered events keep their webhook-id, so
# a consumer deduplicating by it still counts 100. Then the lesson's own
# queue: 100 more tasks into a BullMQ queue in the same database, every
# tenth client dying after COMMIT and the relay killed after the 50th: a
# BullMQ Worker processes 100 jobs, none twice.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('canon', restart_after_crash => 'on');
my $sink = start_sink();

local $ENV{PGHOST} = $node->host;
local $ENV{PGPORT} = $node->port;
local $ENV{PGDATABASE} = 'postgres';
local $ENV{NODE_PATH} = ($ENV{OUTBOX_NODE_DIR} // '/var/cache/outbox-npm') . '/node_modules';
my ($out, $err) = run_command(
	[ 'python3', "$FindBin::RealBin/../canon.py", '--sink', $sink->url(''), '--json',
		'--bullmq-tool', "$FindBin::RealBin/../bullmq_tool.js" ]);
is($err, '', 'canon client reported no error');
my $f = decode_json($out);

is($f->{dual_tasks}, 100, 'dual write: 100 tasks committed');
is($f->{dual_delivered}, 90, 'dual write: 90 events delivered, 10 lost');
is($f->{outbox_tasks}, 100, 'outbox: 100 tasks committed');
is($f->{outbox_delivered}, 100, 'outbox: 100 events delivered, none lost');
is($f->{redelivered}, 10, 'the 10 events of the dead clients redelivered');
is($f->{deliveries}, 110, 'the endpoint saw 110 deliveries');
is($f->{distinct}, 100, 'deduplicated by webhook-id: 100');
is($f->{bullmq_tasks}, 100, 'BullMQ: 100 tasks committed');
is($f->{bullmq_processed}, 100, 'BullMQ: a Worker processed 100 jobs, the relay killed midway');
is($f->{bullmq_duplicates}, 0, 'BullMQ: none of them twice');

is( $node->safe_psql('postgres',
		"SELECT count(*) FROM outbox WHERE event_type = 'canon.task_created' AND delivered_at IS NULL"),
	'0', 'no event left pending');

$sink->stop;
$node->stop;
done_testing();
