# The set of events in flight, which every claim leaves out, and what
# becomes of the events a relay had in flight when it goes without a crash:
#   a. outbox_relay() in a session leaves alone the events a relay has in
#      flight: it sends none of them again
#   b. outbox.relays_per_database lowered from 2 to 1 stops relay 1 while
#      its requests are held by the endpoint; relay 0 finds its entries
#      without their relay, releases its journal rows (counting the attempts
#      cut off) and sends those events again, each delivered with
#      attempts = 2; nothing stays in the journal
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

# The endpoint holds every request until the end: no request may time out
# meanwhile, however long the relays take to share the events out; and
# relay 0 must have a connection for every event it may hold plus those it
# sends again for relay 1 (under load it may take 15 of 18 events, which
# with the default 16 connections left two resends waiting for a held
# request's time limit).
my $node = outbox_node('inflight',
	'outbox.relays_per_database' => 2,
	'outbox.batch_size' => 1,
	'outbox.http_max_connections' => 256,
	'outbox.http_timeout' => "'180s'");
my $sink = start_sink();
my $relays = "FROM pg_stat_activity WHERE backend_type = 'outbox relay' AND datname = 'postgres'";
ok($node->poll_query_until('postgres', "SELECT count(*) = 2 $relays"), 'two relays run');

$sink->paths('/hang' => { hold => JSON::PP::true });
$node->safe_psql('postgres', sprintf(
	"INSERT INTO outbox_destinations (name, url) VALUES ('hang', '%s')", $sink->url('/hang')));

# Events in flight, per relay number, from the journal.
sub in_flight_by
{
	my ($relay) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT count(*) FROM outbox o
		  JOIN outbox_in_flight j ON j.relay = $relay AND o.id = ANY (j.ids)
		 WHERE o.delivered_at IS NULL});
}

# One event per transaction until relay 1 holds three (both relays are
# woken by each commit; whichever claims first takes the event).
my @ids;
ok( wait_until(sub {
		push @ids, @{ emit($node, 'postgres', 'task.created', 1) };
		return in_flight_by(1) >= 3 || @ids >= 200;
	}) && in_flight_by(1) >= 3,
	'relay 1 has at least three events in flight');
my $n = @ids;
ok(wait_until(sub { $sink->stats('/hang')->{arrived} == $n }), "all $n requests are held by the endpoint");
my $of_relay1 = in_flight_by(1);
note("$n events in flight: " . in_flight_by(0) . " in relay 0, $of_relay1 in relay 1");
is( $node->safe_psql('postgres', 'SELECT sum(in_flight) FROM outbox_status'),
	$n, 'outbox_status counts them in flight');
is( $node->safe_psql('postgres', 'SELECT count(*) FROM outbox WHERE attempts <> 0'),
	'0', 'their rows are unchanged: no attempt counted yet');

###
### a. outbox_relay() leaves them alone
###
is($node->safe_psql('postgres', 'SELECT * FROM outbox_relay()'), '0|0',
	'a: outbox_relay() finds nothing to deliver');
is($sink->stats('/hang')->{arrived}, $n, 'a: and sent nothing again');

###
### b. relay 1 goes, relay 0 takes its events
###
my $offset = -s $node->logfile;
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET outbox.relays_per_database = 1;
	SELECT pg_reload_conf()});
ok($node->poll_query_until('postgres', "SELECT count(*) = 1 $relays"), 'b: relay 1 is stopped');
ok( $node->wait_for_log(qr/outbox relay counted $of_relay1 attempts? that no outcome recorded/, $offset),
	"b: relay 0 counted the $of_relay1 attempts relay 1 cut off");
ok(wait_until(sub { $sink->stats('/hang')->{arrived} == $n + $of_relay1 }),
	"b: and sent those $of_relay1 events again");
$sink->paths('/hang' => {});    # the endpoint answers now
my $list = join(', ', map { "'$_'" } @ids);
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = $n FROM outbox WHERE event_id IN ($list) AND delivered_at IS NOT NULL"),
	"b: all $n events are delivered");
is( $node->safe_psql('postgres', qq{
		SELECT attempts, count(*) FROM outbox WHERE event_id IN ($list) GROUP BY 1 ORDER BY 1}),
	join("\n", ($n > $of_relay1 ? ('1|' . ($n - $of_relay1)) : ()), "2|$of_relay1"),
	"b: relay 1's events took 2 attempts, the cut-off one counted; the others 1");
ok($node->poll_query_until('postgres', 'SELECT count(*) = 0 FROM outbox_in_flight'),
	'b: the journal is empty');
is($node->safe_psql('postgres', 'SELECT coalesce(sum(in_flight), 0) FROM outbox_status'), '0',
	'b: nothing in flight');

$sink->stop;
$node->stop;
done_testing();
