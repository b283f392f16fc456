# What the tests of BullMQ destinations (110_bullmq.pl, 112_bullmq_routing.pl)
# share: a node whose BullMQ schema BullMQ's own migrations made (npm
# bullmq, test/bullmq_tool.js), as a role that is not a superuser.
package OutboxBullmq;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use OutboxTest;
use Test::More;

our @EXPORT = qw(bullmq_node);

# A started node called $name (%conf: more postgresql.conf lines, as
# outbox_node takes) with its relay running in database postgres, and
# schema bullmq there made by BullMQ's migrations as role queue_owner.
# Returns ($node, $conn): $conn the connection settings of a BullMQ Queue
# or Worker as queue_owner, for bullmq_tool.js. Three tests.
sub bullmq_node
{
	my ($name, %conf) = @_;
	my $node = outbox_node($name,
		'outbox.backoff_base' => "'50ms'",
		'outbox.backoff_max' => "'200ms'",
		%conf);
	ok(wait_relay($node, 'postgres'), 'relay runs');
	$node->safe_psql('postgres', q{
		CREATE ROLE queue_owner LOGIN;
		GRANT CREATE ON DATABASE postgres TO queue_owner});
	my $conn = { host => $node->host, port => $node->port, user => 'queue_owner',
		database => 'postgres', schema => 'bullmq' };
	my $migrated = OutboxTest::node_json('bullmq_tool.js',
		{ command => 'migrate', connection => $conn, queue => 'orders' }, 'bullmq', 'pg');
	cmp_ok($migrated->{version}, '>=', 11, "BullMQ migrated its schema (version $migrated->{version})");
	is($node->safe_psql('postgres', q{
			SELECT pg_get_userbyid(proowner) FROM pg_proc
			 WHERE proname = 'add_job' AND pronamespace = 'bullmq'::regnamespace}),
		'queue_owner', 'add_job belongs to the queue\'s role');
	return ($node, $conn);
}

1;
