# Statistics for destinations beyond outbox.max_destination_stats: the
# setting sizes the shared-memory table (a restart applies it), and the
# outcomes of a destination that finds no row go into its database's
# overflow row, shown with a NULL destination, with one LOG line. Nothing
# is dropped silently: 1.1 kept 128 rows a database and counted the rest
# in their relay's totals only.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('stats', 'outbox.max_destination_stats' => 16,
	'outbox.databases' => "''");
is($node->safe_psql('postgres', 'SHOW outbox.max_destination_stats'), '16', 'the setting is 16');
my ($rc, $out, $err) = $node->psql('postgres', 'SET outbox.max_destination_stats = 32');
like($err, qr/cannot be changed without restarting the server/, 'it takes a restart');

$node->safe_psql('postgres', q{
	INSERT INTO outbox_destinations (name, event_types, channel)
	SELECT 'd' || lpad(i::text, 2, '0'), 'e.' || i, 'stats' FROM generate_series(1, 20) i;
	SELECT count(outbox_emit('e.' || i, '{}')) FROM generate_series(1, 20) i;
	SELECT count(outbox_emit('e.20', '{}')) FROM generate_series(1, 4)});
my $offset = -s $node->logfile;
is($node->safe_psql('postgres', 'SELECT delivered FROM outbox_relay(100)'), '24',
	'24 events delivered to 20 destinations');
is($node->safe_psql('postgres', q{
	SELECT count(destination), count(*) FILTER (WHERE destination IS NULL)
	  FROM outbox_destination_stats()}),
	'16|1', '16 destinations have their row, and there is one overflow row');
my $overflow = $node->safe_psql('postgres', q{
	SELECT delivered, failed, last_success_at IS NOT NULL, latency_p50_ms IS NOT NULL
	  FROM outbox_destination_stats() WHERE destination IS NULL});
# which 16 got rows depends on the order of one transaction's outcomes;
# the other 4 hold 4 events, or 8 when d20 (4 more) is among them
like($overflow, qr/^(4|8)\|0\|t\|t$/, "the overflow row counts the others' outcomes ($overflow)");
is($node->safe_psql('postgres', q{
	SELECT sum(delivered) FROM outbox_destination_stats()}), '24', 'every outcome is counted once');
like(log_since($node, $offset),
	qr/outbox destination statistics are full.*\n.*DETAIL:\s+outbox.max_destination_stats is 16; the outcomes of other destinations are counted in their database's overflow row/,
	'the log says so once, with the setting');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM outbox_destination_latency() WHERE destination IS NULL}), '18',
	'the latency histogram has the overflow row too (one row per bucket, destination NULL)');

$node->safe_psql('postgres', 'SELECT outbox_stats_reset()');
$node->safe_psql('postgres', q{SELECT count(outbox_emit('e.' || i, '{}')) FROM generate_series(1, 3) i});
$node->safe_psql('postgres', 'SELECT outbox_relay(100)');
is($node->safe_psql('postgres', q{
	SELECT count(destination), count(*) FILTER (WHERE destination IS NULL) FROM outbox_destination_stats()}),
	'3|0', 'a reset frees the rows: new outcomes get rows of their own again');

$node->stop;
done_testing();
