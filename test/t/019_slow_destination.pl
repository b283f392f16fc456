# A slow destination does not hold back the others. The endpoint of
# destination "slow" holds every request until the test releases it; "fast"
# answers at once. While fast has events in the relay, slow gets at most half
# of outbox.http_max_connections, and its backlog beyond
# http_max_connections (and one batch) stays in the table.
#
# Every step waits for a state, never for a time: slow's backlog, alone,
# takes every connection; fast's events reach the relay; slow's first
# requests are released, and from then on slow's requests are held until the
# end. Fast can then finish only on the connections slow was not given, so a
# relay that let slow take them back would never deliver fast's events. The
# rates are figures, not properties: bench/bench.py (section 6) prints them.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $n = 2000;
my $nslow = 1000;
my $conns = 32;

# held requests must not time out while fast's events go through; claims
# smaller than slow's backlog, so that the rest of it has to wait
my $batch = 100;
my $node = outbox_node('fairness',
	'outbox.http_max_connections' => $conns,
	'outbox.batch_size' => $batch,
	'outbox.http_timeout' => "'180s'");
my $sink = start_sink();
my $pid = wait_relay($node, 'postgres');
ok($pid, 'relay runs');

$sink->paths('/slow' => { hold => JSON::PP::true });
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES
	    ('fast', 'fast.*', '%s'), ('slow', 'slow.*', '%s')},
	$sink->url('/fast'), $sink->url('/slow')));

# Alone, slow's backlog gets every connection, and no more.
emit($node, 'postgres', 'slow.created', $nslow);
ok(wait_until(sub { $sink->stats('/slow')->{in_flight} >= $conns }),
	"slow alone: $conns requests in flight");

# Slow's events held by the relay (in its in-flight set) and those still
# waiting in the table.
sub slow_counts
{
	return split /\|/, $node->safe_psql('postgres', q{
		WITH f AS (SELECT u.id, u.attempts FROM outbox_in_flight j, unnest(j.ids, j.attempts) AS u(id, attempts))
		SELECT count(*) FILTER (WHERE (id, attempts) IN (SELECT id, attempts FROM f)),
		       count(*) FILTER (WHERE (id, attempts) NOT IN (SELECT id, attempts FROM f) AND delivered_at IS NULL)
		  FROM outbox WHERE event_type = 'slow.created'});
}
my ($in_flight, $waiting) = slow_counts();
# A destination holding http_max_connections events in the relay is left
# out of claims; one claim may take a batch (outbox.batch_size) beyond what
# it already held.
cmp_ok($in_flight, '<=', $conns + $batch, "slow: at most http_max_connections ($conns) + one batch in the relay");
cmp_ok($waiting, '>', 0, 'slow: the rest of its backlog waits in the table');
is($sink->stats('/slow')->{in_flight}, $conns, "slow alone: never more than http_max_connections ($conns) requests");

# Fast's events reach the relay while slow holds every connection.
my $ids = emit($node, 'postgres', 'fast.created', $n);
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) > 0 FROM outbox_in_flight j, unnest(j.ids) AS u(id)
		  JOIN outbox o ON o.id = u.id WHERE o.event_type = 'fast.created'}),
	'fast: events in the relay');
is($sink->stats('/fast')->{arrived}, 0, 'fast: no request while slow holds every connection');

# Slow's first requests are answered; the ones it starts from now on are
# held until the end.
$sink->control(release => '/slow');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM outbox WHERE event_type = 'fast.created' AND delivered_at IS NULL"),
	"fast: all $n events delivered while slow's later requests are held");

my %mine = map { $_ => 1 } @$ids;
my @fast = grep { $mine{ $_->{webhook_id} } } @{ $sink->delivered('/fast') };
is(scalar @fast, $n, "fast: $n requests, one per event");

# What slow started after the release is still held, so what it had in
# flight when fast's last request arrived is what arrived by then. (Once fast
# is done, slow may take every connection again.)
my ($last_fast) = sort { $b <=> $a } map { $_->{received_at} } @fast;
my $slow = $sink->arrivals('/slow');
my $held = grep { !defined $_->{status} && $_->{received_at} <= $last_fast } @$slow;
note(sprintf('slow: %d requests arrived, %d held when fast\'s last arrived', scalar @$slow, $held));
cmp_ok($held, '<=', $conns / 2, 'slow had at most half the connections while fast had events');
cmp_ok($held, '>=', 1, 'slow was not starved: it kept requests in flight');
is(scalar(grep { defined $_->{status} && $_->{status} == 200 } @$slow), $conns,
	"slow: its first $conns requests answered once released");
($in_flight, $waiting) = slow_counts();
cmp_ok($in_flight, '<=', $conns + $batch, 'slow: still at most http_max_connections + one batch in the relay');
cmp_ok($waiting, '>', 0, 'slow: the rest of its backlog still waits in the table');

# Released, slow's backlog drains, each event once.
$sink->paths();
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM outbox WHERE event_type = 'slow.created' AND delivered_at IS NULL"),
	"slow: all $nslow events delivered once released");
my %seen;
$seen{ $_->{webhook_id} }++ for @{ $sink->delivered('/slow') };
is(scalar keys %seen, $nslow, "slow: $nslow distinct events delivered");
is(scalar(grep { $_ > 1 } values %seen), 0, 'slow: no event delivered twice');
is(relay_pid($node, 'postgres'), $pid, 'the same relay throughout');

$sink->stop;
$node->stop;
done_testing();
