# Ordered destinations, with four relays per database: the events of one
# aggregate reach the endpoint one at a time, in id order, through random
# failures, a poison event, redelivery and a crash restart; other keys,
# and other destinations, keep flowing meanwhile.
#
# The order is checked on what the endpoint saw: per key, the first
# arrival of each event (duplicates removed by webhook-id) is in strictly
# increasing id order, and it came after the 2xx answer to the event
# before it, or its last answer if it never had one (a skipped dead
# event): never two of a key in flight at once.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $relays = 4;
# the framework turns restart_after_crash off; part 5 kills a relay
# requests the endpoint holds stay in flight until it lets them go, however
# slow the run (with the default 5 s limit they would be retried meanwhile)
my $node = outbox_node('ordered', 'outbox.relays_per_database' => $relays,
	'outbox.http_timeout' => "'180s'", restart_after_crash => 'on');
my $sink = start_sink();
ok( $node->poll_query_until('postgres', qq{
		SELECT count(*) = $relays FROM pg_stat_activity
		 WHERE backend_type = 'outbox relay' AND datname = 'postgres'}),
	"$relays relays run");

$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, event_types, url, ordered) VALUES
	    ('ord', 'ord.*', '%s', true),
	    ('pz', 'pz.*', '%s', true),
	    ('flat', 'flat.*', '%s', false)},
	$sink->url('/ord'), $sink->url('/pz'), $sink->url('/flat')));

# Checks the order of the events of type $type at $path; returns the
# number of distinct events that arrived there with a 2xx answer.
sub check_order
{
	my ($path, $type, $what) = @_;
	my %event;
	for my $row (split /\n/, $node->safe_psql('postgres',
		"SELECT event_id, id, coalesce(aggregate_type, '') || '/' || aggregate_id FROM outbox WHERE event_type = '$type'"))
	{
		my ($event_id, $id, $key) = split /\|/, $row;
		$event{$event_id} = { id => $id, key => $key };
	}
	# an event is done at its first 2xx answer or, if it never had one
	# (dead-lettered, then skipped), at its last answer
	my (%first, %ok_at, %done_at, %by_key);
	for my $r (sort { $a->{received_at} <=> $b->{received_at} } @{ $sink->arrivals($path) })
	{
		my $e = $event{ $r->{webhook_id} } or next;
		$ok_at{ $r->{webhook_id} } //= $r->{answered_at}
		  if defined $r->{status} && $r->{status} >= 200 && $r->{status} < 300;
		$done_at{ $r->{webhook_id} } = $ok_at{ $r->{webhook_id} } // $r->{answered_at};
		next if $first{ $r->{webhook_id} }++;
		push @{ $by_key{ $e->{key} } }, [ $e->{id}, $r->{received_at}, $r->{webhook_id} ];
	}
	my ($out_of_order, $overlap) = (0, 0);
	for my $key (sort keys %by_key)
	{
		my $seq = $by_key{$key};
		for my $i (1 .. $#$seq)
		{
			my ($prev, $cur) = ($seq->[ $i - 1 ], $seq->[$i]);
			if ($cur->[0] <= $prev->[0])
			{
				diag("$what: key $key: event $cur->[0] arrived after $prev->[0]") unless $out_of_order++;
			}
			my $prev_done = $done_at{ $prev->[2] };
			if (!defined $prev_done || $cur->[1] <= $prev_done)
			{
				diag("$what: key $key: event $cur->[0] arrived before $prev->[0] was done")
				  unless $overlap++;
			}
		}
	}
	is($out_of_order, 0, "$what: per key, events first arrive in increasing id order");
	is($overlap, 0, "$what: per key, each arrives only after the one before was answered");
	return scalar keys %ok_at;
}

# 1. 2,000 events over 50 keys, in 10 transactions, to an endpoint that
# answers 20 % of requests with 503 at random
$sink->control(seed => 20);
$sink->paths('/ord' => { fail_rate => 0.2 });
for my $t (1 .. 10)
{
	$node->safe_psql('postgres', qq{
		SELECT count(outbox_emit('ord.step', jsonb_build_object('t', $t, 'i', i), 'order', (i % 50)::text))
		  FROM generate_series(1, 200) i});
}
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 2000 FROM outbox WHERE event_type = 'ord.step' AND delivered_at IS NOT NULL"),
	'all 2,000 events are delivered');
my $failures = grep { $_->{status} == 503 } @{ $sink->requests('/ord') };
note("503 answers: $failures");
ok($failures > 100, 'the endpoint failed some of the requests');
is(check_order('/ord', 'ord.step', 'random failures'), 2000, 'all 2,000 arrived with a 2xx answer');
is($node->safe_psql('postgres', q{
		SELECT count(DISTINCT relay) FROM (
		    SELECT relay FROM outbox_relay_stats() WHERE delivered > 0) r}),
	$relays, 'every relay took part');

# 2. a poison event (a 400 answer dead-letters it) blocks its key only;
# skipping it lets the key go on, in order
my @poison_ids = map { $node->safe_psql('postgres', 'SELECT gen_random_uuid()') } 1 .. 3;
$sink->control(fail => { $poison_ids[0] => 1 }, fail_status => 400);
$node->safe_psql('postgres', qq{
	INSERT INTO outbox (event_id, event_type, payload, aggregate_type, aggregate_id) VALUES
	    ('$poison_ids[0]', 'pz.step', '{"n": 1}', 'order', 'poisoned'),
	    ('$poison_ids[1]', 'pz.step', '{"n": 2}', 'order', 'poisoned'),
	    ('$poison_ids[2]', 'pz.step', '{"n": 3}', 'order', 'poisoned');
	SELECT count(outbox_emit('pz.step', jsonb_build_object('n', i), 'order', 'healthy'))
	  FROM generate_series(1, 5) i;});
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) FILTER (WHERE aggregate_id = 'healthy' AND delivered_at IS NOT NULL) = 5
		   AND count(*) FILTER (WHERE aggregate_id = 'poisoned' AND dead_at IS NOT NULL) = 1
		  FROM outbox WHERE event_type = 'pz.step'}),
	'the other key is delivered; the poison event is dead-lettered');
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM outbox_blocked_keys
		 WHERE aggregate_id = 'poisoned' AND state = 'dead' AND waiting = 2}),
	'outbox_blocked_keys shows the key, held by a dead event, 2 waiting');
is(scalar(grep { $_->{webhook_id} eq $poison_ids[1] || $_->{webhook_id} eq $poison_ids[2] } @{ $sink->arrivals('/pz') }),
	0, 'the events after the poison were never sent');
is($node->safe_psql('postgres', "SELECT outbox_skip_dead('$poison_ids[0]')"), 't', 'the dead event is skipped');
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 2 FROM outbox WHERE aggregate_id = 'poisoned' AND delivered_at IS NOT NULL}),
	'the events after it are delivered');
is(check_order('/pz', 'pz.step', 'poison'), 7, 'seven events of the two keys arrived with a 2xx answer');

# 3. two events of one key dead-lettered while the destination was not
# ordered: redelivered once it is, they go again in id order
$node->safe_psql('postgres', "UPDATE outbox_destinations SET ordered = false WHERE name = 'pz'");
my @dead_ids = map { $node->safe_psql('postgres', 'SELECT gen_random_uuid()') } 1 .. 2;
$sink->control(fail => { $dead_ids[0] => 1, $dead_ids[1] => 1 }, fail_status => 400);
$node->safe_psql('postgres', qq{
	INSERT INTO outbox (event_id, event_type, payload, aggregate_type, aggregate_id) VALUES
	    ('$dead_ids[0]', 'pz.redo', '{"n": 1}', 'order', 'redo'),
	    ('$dead_ids[1]', 'pz.redo', '{"n": 2}', 'order', 'redo')});
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM outbox WHERE event_type = 'pz.redo' AND dead_at IS NOT NULL"),
	'both events of the key are dead-lettered');
$node->safe_psql('postgres', "UPDATE outbox_destinations SET ordered = true WHERE name = 'pz'");
my $before = scalar @{ $sink->arrivals('/pz') };
is($node->safe_psql('postgres', 'SELECT outbox_redeliver_dead()'), '2', 'both are redelivered');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM outbox WHERE event_type = 'pz.redo' AND delivered_at IS NOT NULL"),
	'both are delivered');
my @redo = grep { $_->{webhook_id} eq $dead_ids[0] || $_->{webhook_id} eq $dead_ids[1] }
  @{ $sink->arrivals('/pz') }[ $before .. $#{ $sink->arrivals('/pz') } ];
is(join(',', map { $_->{webhook_id} eq $dead_ids[0] ? 1 : 2 } @redo), '1,2', 'the redelivery sends them once each, in id order');
ok($redo[1]{received_at} > $redo[0]{answered_at}, 'the second only after the first was answered');

# 4. an ordered destination whose key heads hang does not hold back another
# destination: with the requests of 5 keys held by the endpoint, only those
# 5 are in flight to it, its 995 other events wait, held, and 500 events of
# an unordered destination are delivered meanwhile
$sink->paths('/ord' => { hold => 1 });
$node->safe_psql('postgres', q{
	SELECT count(outbox_emit('ord.hang', jsonb_build_object('i', i), 'order', 'h' || (i % 5)))
	  FROM generate_series(1, 1000) i});
ok( wait_until(sub { $sink->stats('/ord')->{in_flight} == 5 }), 'the 5 key heads are in flight');
emit($node, 'postgres', 'flat.x', 500);
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 500 FROM outbox WHERE event_type = 'flat.x' AND delivered_at IS NOT NULL"),
	'the unordered destination delivers its 500 events meanwhile');
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 995 FROM outbox WHERE event_type = 'ord.hang' AND held_by IS NOT NULL}),
	'the 995 others wait, held, out of the claims\' way');
is($sink->stats('/ord')->{in_flight}, 5, 'still only one request per key in flight');
is($node->safe_psql('postgres', q{
		SELECT count(*) || '/' || sum(waiting) FROM outbox_blocked_keys
		 WHERE destination = 'ord' AND state = 'in flight'}),
	'5/995', 'outbox_blocked_keys shows the 5 keys, each held by its event in flight');

# 5. kill -9 of a relay in the middle of that flow: a crash restart; the
# heads in flight are sent again first, and nothing is lost
$sink->paths('/ord' => { delay_ms => 5 });
ok( $node->poll_query_until('postgres',
		"SELECT count(*) >= 100 FROM outbox WHERE event_type = 'ord.hang' AND delivered_at IS NOT NULL"),
	'the flow resumes');
my $victim = $node->safe_psql('postgres', q{
	SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox relay' AND datname = 'postgres' LIMIT 1});
kill 'KILL', $victim;
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 1000 FROM outbox WHERE event_type = 'ord.hang' AND delivered_at IS NOT NULL"),
	'after the crash restart, all 1,000 are delivered')
  or diag($node->safe_psql('postgres', q{
	SELECT o.id, o.aggregate_id, o.held_by, o.next_attempt_at - now(), o.attempts, o.last_error,
	       b.delivered_at IS NOT NULL AS blocker_delivered
	  FROM outbox o LEFT JOIN outbox b ON b.id = o.held_by
	 WHERE o.event_type = 'ord.hang' AND o.delivered_at IS NULL ORDER BY o.id LIMIT 20}),
	$node->safe_psql('postgres', 'SELECT * FROM outbox_in_flight'),
	$node->safe_psql('postgres', 'SELECT * FROM outbox_relay_stats()'));
like(slurp_file($node->logfile), qr/terminated by signal 9/, 'the server went through a crash restart');
is(check_order('/ord', 'ord.hang', 'crash'), 1000, 'all 1,000 arrived with a 2xx answer');

# 6. outbox_relay() in a session whose transaction stays open meets an
# event held back by one that a relay has in flight: it must not lock that
# event, or the relay could not record its outcome (it would wait for the
# session) and would stop for every destination
$sink->paths('/ord' => { hold => 1 });
$node->safe_psql('postgres', q{
	SELECT outbox_emit('ord.solo', '{"n": 1}', 'order', 'solo');
	SELECT outbox_emit('ord.solo', '{"n": 2}', 'order', 'solo');});
ok(wait_until(sub { $sink->stats('/ord')->{in_flight} == 1 }), 'a relay sends the first event of the key');
my ($first, $second) = split /
/, $node->safe_psql('postgres',
	"SELECT id FROM outbox WHERE event_type = 'ord.solo' ORDER BY id");
my $session = $node->background_psql('postgres');
# the session makes the second due and claims it itself (its update keeps
# the relays' claims off the row)
$session->query_safe(qq{
	BEGIN;
	UPDATE outbox SET next_attempt_at = now() WHERE id = $second;
	SELECT * FROM outbox_relay(10);});
is($session->query_safe("SELECT held_by FROM outbox WHERE id = $second"), $first,
	'outbox_relay() holds the second event for the first');
$sink->paths('/ord' => {});
ok($node->poll_query_until('postgres', "SELECT delivered_at IS NOT NULL FROM outbox WHERE id = $first"),
	'the relay records the first one\'s delivery while the session is still open');
is($node->safe_psql('postgres', q{
		SELECT count(*) FROM pg_stat_activity
		 WHERE backend_type = 'outbox relay' AND wait_event_type = 'Lock'}),
	'0', 'no relay waits for a lock');
$session->query_safe('COMMIT');
$session->quit;
ok($node->poll_query_until('postgres', "SELECT delivered_at IS NOT NULL FROM outbox WHERE id = $second"),
	'the second is delivered after it');
is(check_order('/ord', 'ord.solo', 'outbox_relay() beside the relays'), 2, 'both arrived');

# 7. an event whose blocker another transaction has locked (here an
# operator's open transaction) is held for a moment rather than claimed
# again and again: a relay that skips the locked row still holds the event
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT outbox_emit('ord.locked', '{"n": 1}', 'order', 'locked');
	UPDATE outbox SET next_attempt_at = now() + interval '1 hour', attempts = 1
	 WHERE event_type = 'ord.locked';
	COMMIT;});
my $head = $node->safe_psql('postgres', "SELECT id FROM outbox WHERE event_type = 'ord.locked'");
my $operator = $node->background_psql('postgres');
$operator->query_safe("BEGIN; SELECT id FROM outbox WHERE id = $head FOR UPDATE;");
$node->safe_psql('postgres', q{SELECT outbox_emit('ord.locked', '{"n": 2}', 'order', 'locked')});
my $next = $node->safe_psql('postgres', "SELECT max(id) FROM outbox WHERE event_type = 'ord.locked'");
ok( $node->poll_query_until('postgres', qq{
		SELECT held_by = $head AND next_attempt_at < now() + interval '1 minute'
		  FROM outbox WHERE id = $next}),
	'the event is held for its locked blocker, for a moment only');
$operator->query_safe('ROLLBACK');
$operator->quit;

$sink->stop;
$node->stop;
done_testing();
