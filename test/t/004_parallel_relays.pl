# Relays in parallel over one table: the relay worker and two sessions
# looping over outbox_relay(5) deliver 200 events together, each exactly once.
#
# The overlap is real: all three start at the same instant (the COMMIT of the
# emitting transaction wakes the worker and releases an advisory lock that
# holds the two loops back), and the sink answers each request after 100 ms,
# so every pass keeps its claim open for at least that long while the others
# claim theirs. If the claim did not lock its rows, concurrent passes would
# claim the same events and the sink would see duplicates; if it locked them
# without SKIP LOCKED, each pass would wait for the one before it to commit
# and the sink would never have more than one batch in flight. Both are
# checked below.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use List::Util qw(max sum0);
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $nevents = 200;
my $batch = 5;
my $delay_ms = 100;

my $node = outbox_node('parallel', 'outbox.batch_size' => $batch);
my $sink = start_sink();
$sink->control(delay_ms => $delay_ms);

ok(wait_relay($node, 'postgres'), 'relay worker runs');

my $url = $sink->url('/par');
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES ('par', 'par.*', '$url');

	-- what each manual pass delivered
	CREATE TABLE relay_pass (who text NOT NULL, delivered int NOT NULL, failed int NOT NULL);

	-- A relay loop as an application would run it: one outbox_relay() per
	-- transaction until no event is pending. It first waits for the gate (an
	-- advisory lock held by the emitting transaction).
	CREATE PROCEDURE relay_loop(who text) LANGUAGE plpgsql AS \$\$
	DECLARE
		d int;
		f int;
		give_up timestamptz := clock_timestamp() + interval '3 min';
	BEGIN
		PERFORM pg_advisory_lock_shared(4004);
		PERFORM pg_advisory_unlock_shared(4004);
		LOOP
			SELECT r.delivered, r.failed INTO d, f FROM outbox_relay($batch) r;
			IF d + f > 0 THEN
				INSERT INTO relay_pass VALUES (who, d, f);
			END IF;
			COMMIT;
			EXIT WHEN NOT EXISTS (SELECT 1 FROM outbox WHERE delivered_at IS NULL AND dead_at IS NULL)
			       OR clock_timestamp() > give_up;
			IF d + f = 0 THEN
				-- the rest is claimed by the others: do not spin hard
				PERFORM pg_sleep(0.005);
			END IF;
		END LOOP;
	END
	\$\$;
});

# The gate: the transaction that emits the events holds the lock the loops
# wait for, so its COMMIT releases them and wakes the worker at once.
my $gate = $node->background_psql('postgres');
$gate->query_safe(qq{
	BEGIN;
	SELECT pg_advisory_xact_lock(4004);
	SELECT count(outbox_emit('par.created', jsonb_build_object('n', g)))
	  FROM generate_series(1, $nevents) g;
});

my @loops;
for my $who ('loop1', 'loop2')
{
	my $s = $node->background_psql('postgres');
	$s->query_until(qr/started/, "\\echo started\nCALL relay_loop('$who');\n");
	push @loops, $s;
}
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"),
	'both relay loops wait at the gate');
is($sink->stats->{requests}, 0, 'nothing was sent before the commit');

$gate->query_safe('COMMIT');
$gate->quit;

# each loop returns once nothing is pending
$_->query_safe('SELECT 1') for @loops;
$_->quit for @loops;

is( $node->safe_psql('postgres',
		'SELECT count(*) FROM outbox WHERE delivered_at IS NULL'),
	'0', 'no event pending after the loops ended');

my $requests = $sink->requests('/par');
my %seen;
$seen{ $_->{webhook_id} }++ for @$requests;
is(scalar @$requests, $nevents, "the sink received exactly $nevents requests");
is(scalar keys %seen, $nevents, "$nevents distinct webhook-ids");
is(scalar(grep { $_->{status} == 200 } @$requests), $nevents, 'all answered 200');
is_deeply([ grep { $seen{$_} > 1 } sort keys %seen ], [], 'no event sent twice');

my %in_table = map { $_ => 1 } split /\n/,
  $node->safe_psql('postgres', "SELECT event_id FROM outbox WHERE event_type = 'par.created'");
is_deeply(\%in_table, { map { $_ => 1 } keys %seen },
	'the webhook-ids are exactly the event_ids of the table');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FILTER (WHERE delivered_at IS NOT NULL AND attempts = 1
		                          AND last_error IS NULL AND dead_at IS NULL
		                          AND destination = 'par'),
		       count(*)
		  FROM outbox}),
	"$nevents|$nevents", 'every event delivered with attempts = 1');

# who delivered what
my %by = map { split /\|/ } split /\n/, $node->safe_psql('postgres',
	'SELECT who, sum(delivered) FROM relay_pass GROUP BY who');
my $manual = sum0(values %by);
my $worker = $nevents - $manual;
diag(sprintf('who delivered the %d events (the split varies from run to run): worker %d, loop1 %d, loop2 %d',
		$nevents, $worker, $by{loop1} // 0, $by{loop2} // 0));
is( $node->safe_psql('postgres', 'SELECT coalesce(sum(failed), 0) FROM relay_pass'),
	'0', 'no manual pass had a failure');
cmp_ok($manual, '>', 0, 'the manual relay loops delivered some events');
cmp_ok($worker, '>', 0, 'the worker delivered some events');

# The passes overlapped: each request is answered $delay_ms after it
# arrived, so [received_at - delay, received_at] lies inside the time it was
# in flight; more than one batch in flight at once means that concurrent
# passes each held a claim on different events.
my @edges = sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] }
  map { ([ $_->{received_at} - $delay_ms / 1000, 1 ], [ $_->{received_at}, -1 ]) }
  @$requests;
my ($inflight, $peak) = (0, 0);
for my $e (@edges)
{
	$inflight += $e->[1];
	$peak = max($peak, $inflight);
}
diag("up to $peak requests in flight at once; one pass sends at most $batch (outbox.batch_size), "
	  . 'so more means that passes of different relays overlapped, as intended');
cmp_ok($peak, '>', $batch, 'passes of different relays were in flight at the same time');

is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox relay'"),
	'1', 'the worker is still running');

$sink->stop;
$node->stop;
done_testing();
