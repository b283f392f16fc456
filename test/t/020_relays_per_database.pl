# Several relays per database (outbox.relays_per_database): four relays
# share 10,000 events, each delivered exactly once. The relays claim with
# FOR UPDATE SKIP LOCKED and put what they send in the in-flight set that
# every claim leaves out (their journal rows name the relay's number), so
# no event is sent by two of them.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $n = 10_000;
my $relays = 4;

my $node = outbox_node('relays4', 'outbox.relays_per_database' => $relays);
my $sink = start_sink();
my $relays_here = "FROM pg_stat_activity WHERE backend_type = 'outbox relay' AND datname = 'postgres'";
ok($node->poll_query_until('postgres', "SELECT count(*) >= 1 $relays_here"), 'a relay runs');
ok($node->poll_query_until('postgres', "SELECT count(*) = $relays $relays_here"),
	"$relays relay processes in pg_stat_activity");
my @pids = split /\n/, $node->safe_psql('postgres', "SELECT pid $relays_here ORDER BY pid");
note(scalar(@pids) . ' relay process(es): ' . join(', ', @pids));

my $url = $sink->url('/hook');
$node->safe_psql('postgres', "INSERT INTO outbox_destinations (name, url) VALUES ('hook', '$url')");
my $ids = emit($node, 'postgres', 'task.created', $n);
is(scalar @$ids, $n, "$n events emitted");

# Which relays have events in flight, sampled while they drain the table.
my %in_flight_by;
ok( wait_until(sub {
		my ($left, $numbers) = split /\|/, $node->safe_psql('postgres', q{
			SELECT count(*) FILTER (WHERE delivered_at IS NULL),
			       (SELECT coalesce(string_agg(DISTINCT relay::text, ','), '') FROM outbox_in_flight)
			  FROM outbox});
		$in_flight_by{$_} = 1 for grep { length } split /,/, $numbers;
		return $left == 0;
	}),
	"all $n events marked delivered");
note('relay numbers seen with events in flight: ' . join(', ', sort keys %in_flight_by));

my $requests = $sink->requests('/hook');
my $times = count_by_id($requests);
is(scalar @$requests, $n, "the sink got $n requests");
is(scalar keys %$times, $n, "$n distinct webhook-ids");
my %emitted = map { $_ => 1 } @$ids;
is(scalar(grep { !$emitted{$_} } keys %$times), 0, 'each one an emitted event');
is_deeply([ grep { $times->{$_} != 1 } keys %$times ], [], 'each event sent exactly once')
  or diag(join("\n", map {
		sprintf('%s received %.3f answered %.3f ended %s at %.3f port %d',
			$_->{webhook_id}, $_->{received_at}, $_->{answered_at}, $_->{ended} // '-',
			$_->{ended_at} // 0, $_->{peer_port})
	} grep { $times->{ $_->{webhook_id} } != 1 } @$requests));
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM outbox
		 WHERE attempts = 1 AND last_error IS NULL AND dead_at IS NULL}),
	$n, 'each event: one attempt, no error')
  or diag($node->safe_psql('postgres', q{
		SELECT id, event_id, attempts, last_error, next_attempt_at, delivered_at, dead_at
		  FROM outbox
		 WHERE NOT (attempts = 1 AND last_error IS NULL AND dead_at IS NULL)}));
ok( $node->poll_query_until('postgres', 'SELECT count(*) = 0 FROM outbox_in_flight'),
	'the journal of events in flight is empty once all are recorded');

is(join(',', sort keys %in_flight_by), join(',', 0 .. $relays - 1),
	"relays 0 to " . ($relays - 1) . ' all had events in flight');
is($node->safe_psql('postgres', "SELECT count(*) $relays_here"), $relays, "still $relays relays, none restarted");
is( $node->safe_psql('postgres',
		"SELECT string_agg(pid::text, '\n' ORDER BY pid) $relays_here"),
	join("\n", @pids), 'the same relay processes as at the start');

$sink->stop;
$node->stop;
done_testing();
