# Aggregate ids that a writer made collide. 1.1 keyed outbox_key_idx by
# hashtextextended(aggregate_id, hashtextextended(aggregate_type, 0)),
# whose collisions a writer can compute (test/key_collisions.c makes them
# by the hundred a second); the probe for the event before another then
# read every colliding entry, and claims for ordered destinations stalled.
# The key is now 64 bits of a SHA-256 (_outbox_aggregate_key).
#
# Checked: the ids collide under the old hash (the premise, from the
# server's own function); the probe of a new event among them reads no
# entry of another key (EXPLAIN ANALYZE: no row removed by the key test);
# during an outage of the ordered destination holding them, another key
# of it and another destination are delivered, and once the endpoint is
# back every event of the colliding keys is delivered.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $n = 400;
my $dir = PostgreSQL::Test::Utils::tempdir();
my ($out, $err) = run_command([ $ENV{CC} // 'cc', '-O2', '-o', "$dir/key_collisions",
	"$FindBin::RealBin/../key_collisions.c" ]);
die "cannot build key_collisions: $err" unless -x "$dir/key_collisions";

my $node = outbox_node('collisions');
my $sink = start_sink();
my $seed = $node->safe_psql('postgres', q{SELECT hashtextextended('acct', 0)});
($out, $err) = run_command([ "$dir/key_collisions", $seed, $n + 1 ]);
my @ids = split /\n/, $out;
is(scalar @ids, $n + 1, "$n + 1 ids made");
my $values = join(',', map { "('" . s/'/''/gr . "')" } @ids);

is( $node->safe_psql('postgres', qq{
		SELECT count(DISTINCT v) || ' ' || count(DISTINCT hashtextextended(v, hashtextextended('acct', 0)))
		  FROM (VALUES $values) t(v)}),
	($n + 1) . ' 1', "$n + 1 distinct ids share one value of 1.1's key hash");

# the endpoint of the ordered destination fails; the other answers
$sink->paths('/ord' => { status => 503 });
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, event_types, url, ordered) VALUES
	    ('ord', 'acct.*', '%s', true), ('flat', 'flat.*', '%s', false)},
	$sink->url('/ord'), $sink->url('/flat')));
my $last = pop @ids;
$node->safe_psql('postgres', join(";\n",
		map { "SELECT outbox_emit('acct.opened', '{}', 'acct', '" . s/'/''/gr . "')" } @ids));
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) > 0 FROM outbox WHERE event_type = 'acct.opened' AND attempts > 0}),
	'the ordered destination fails');

# the probe of one more colliding id reads no other key's entry
$node->safe_psql('postgres',
	"SELECT outbox_emit('acct.opened', '{}', 'acct', '" . ($last =~ s/'/''/gr) . "')");
my $plan = $node->safe_psql('postgres', q{
	SET enable_seqscan = off;
	EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, FORMAT JSON)
	SELECT blocked_by FROM _outbox_pending WHERE id = (SELECT max(id) FROM outbox)});
# the plan nodes that scan outbox_key_idx, wherever they are in the tree
my @probes;
my @todo = (decode_json($plan)->[0]{Plan});
while (my $p = shift @todo)
{
	push @probes, $p if ($p->{'Index Name'} // '') eq 'outbox_key_idx';
	push @todo, @{ $p->{Plans} // [] };
}
is(scalar @probes, 1, 'the probe walks outbox_key_idx');
is($probes[0]{'Rows Removed by Filter'} // 'none', 0, 'no entry of another key is read')
  or diag($plan);

# meanwhile another key of the ordered destination, and another destination
$node->safe_psql('postgres', q{
	SELECT outbox_emit('acct.opened', '{}', 'acct', 'plain');
	SELECT outbox_emit('flat.sent', '{}')});
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM outbox WHERE event_type = 'flat.sent' AND delivered_at IS NOT NULL}),
	'the other destination is delivered during the outage');
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) > 0 FROM outbox WHERE aggregate_id = 'plain' AND attempts > 0}),
	'another key of the ordered destination is tried during the outage');

$sink->paths('/ord' => { status => 200 });
$node->safe_psql('postgres', q{SELECT outbox_redeliver('-infinity', 'infinity')});
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 0 FROM outbox WHERE delivered_at IS NULL}),
	'every event is delivered once the endpoint is back');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox WHERE event_type = 'acct.opened'}),
	$n + 2, 'all the events of the colliding keys, and the other key');

done_testing();
