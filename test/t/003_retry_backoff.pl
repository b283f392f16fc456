# Failures: a failed event is retried with backoff and does not hold back the
# others; it is dead-lettered after outbox.max_attempts; timeouts and bad
# headers are failures with a reason in last_error.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use Time::HiRes;
use Time::Local;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

# one request at a time, so that arrival order is delivery order
my $node = outbox_node('retry', 'outbox.http_max_connections' => 1);
my $sink = start_sink();
my $url = $sink->url('/hook');

# The destination starts disabled so that the sink's rule is in place before
# the relay can see the events.
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, url, enabled) VALUES ('hook', '$url', false)});
my @ids = @{ emit($node, 'postgres', 'task.created', 5) };
is(scalar @ids, 5, 'five events emitted');

# five events, the endpoint fails the third once
$sink->control(fail => { $ids[2] => 1 });
$node->safe_psql('postgres', q{UPDATE outbox_destinations SET enabled = true});
ok($sink->wait_delivered(5), 'all five delivered');

my @order = map { decode_json($_->{body})->{payload}{n} } @{ $sink->delivered };
is("@order", '1 2 4 5 3', 'arrival order 1, 2, 4, 5, 3: the failure held back nothing');
is( $node->safe_psql('postgres', q{
		SELECT string_agg(attempts::text, ',' ORDER BY id) FROM outbox}),
	'1,1,2,1,1', 'the third event took 2 attempts');
my %connections = map { $_->{peer_port} => 1 } @{ $sink->requests };
is(scalar keys %connections, 1, 'all six requests over one kept-alive connection');
my @third = grep { $_->{webhook_id} eq $ids[2] } @{ $sink->requests };
is(scalar @third, 2, 'the third event was sent twice');
is($third[1]{headers}{'webhook-id'}, $third[0]{headers}{'webhook-id'}, 'with the same webhook-id');
is(decode_json($third[1]{body})->{attempt}, 2, 'the envelope counts the attempt');

# the endpoint is down, then up again: the event waits with backoff and arrives
$sink->reset;
$sink->control(status => 503);
my $down = $node->safe_psql('postgres', q{SELECT outbox_emit('task.down', '{}')});
ok( $node->poll_query_until('postgres',
		"SELECT attempts >= 3 FROM outbox WHERE event_id = '$down'"),
	'retried while the endpoint is down');
like( $node->safe_psql('postgres', "SELECT last_error FROM outbox WHERE event_id = '$down'"),
	qr/^HTTP status 503/, 'last_error keeps the status');
# the row's last recorded failure scheduled the next attempt after that
# attempt's answer (read from the row and the endpoint, not against the
# clock now: the retry may be under way already),
my ($failed_attempts, $next_at) = split /\|/, $node->safe_psql('postgres',
	"SELECT attempts, extract(epoch FROM next_attempt_at) FROM outbox WHERE event_id = '$down'");
my ($last_failed) = grep { decode_json($_->{body})->{attempt} == $failed_attempts }
  grep { $_->{webhook_id} eq $down } @{ $sink->requests };
# at least half of outbox.backoff_base (100 ms here) after it: backoff
# with equal jitter waits at least half of its delay
ok(defined $last_failed && $next_at - $last_failed->{answered_at} >= 0.05,
	'the next attempt is scheduled at least 50 ms after the failed one');
$sink->control(status => 200);
ok( $node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL AND last_error IS NULL FROM outbox WHERE event_id = '$down'"),
	'delivered once the endpoint is back');

# permanently failing: dead-lettered after outbox.max_attempts, kept, redeliverable
$node->append_conf('postgresql.conf', "outbox.max_attempts = 3\n");
$node->reload;
$sink->reset;
my $doomed;
$node->safe_psql('postgres', q{UPDATE outbox_destinations SET enabled = false});
$doomed = $node->safe_psql('postgres', q{SELECT outbox_emit('task.doomed', '{}')});
$sink->control(fail => { $doomed => 1000 });
$node->safe_psql('postgres', q{UPDATE outbox_destinations SET enabled = true});
ok( $node->poll_query_until('postgres',
		"SELECT dead_at IS NOT NULL FROM outbox WHERE event_id = '$doomed'"),
	'dead-lettered');
is( $node->safe_psql('postgres',
		"SELECT attempts, delivered_at IS NULL, last_error FROM outbox WHERE event_id = '$doomed'"),
	'3|t|HTTP status 500: {"ok": false}', 'after 3 attempts, kept with its error');
is(scalar(grep { $_->{webhook_id} eq $doomed } @{ $sink->requests }), 3,
	'the endpoint saw exactly 3 attempts');
is( $node->safe_psql('postgres', q{SELECT dead FROM outbox_status WHERE event_type = 'task.doomed'}),
	'1', 'the status view shows it dead');
$sink->control(fail => {});
is($node->safe_psql('postgres', q{SELECT outbox_redeliver_dead()}), '1', 'redelivered');
ok( $node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL AND attempts = 4 FROM outbox WHERE event_id = '$doomed'"),
	'delivered after redelivery');

# a request that outlives the destination's timeout fails; attempts to
# spare, as more than one may come before the endpoint is fast again
$node->append_conf('postgresql.conf', "outbox.max_attempts = 20\n");
$node->reload;
$node->safe_psql('postgres', q{UPDATE outbox_destinations SET timeout_ms = 300});
$sink->control(delay_ms => 3000);
my $slow = $node->safe_psql('postgres', q{SELECT outbox_emit('task.slow', '{}')});
ok( $node->poll_query_until('postgres',
		"SELECT last_error ~ 'timed out' FROM outbox WHERE event_id = '$slow'"),
	'timeout recorded in last_error');
$sink->control(delay_ms => 0);
ok( $node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$slow'"),
	'delivered once the endpoint is fast again');
$node->append_conf('postgresql.conf', "outbox.max_attempts = 3\n");
$node->reload;

# header injection is refused when the event is written
my ($hret, $hout, $herr) = $node->psql('postgres',
	q{SELECT outbox_emit('task.bad', '{}', headers => jsonb_build_object('x-evil', E'a\r\nx-injected: 1'))});
like($herr, qr/ERROR:  value of event header "x-evil" has a control character\n/,
	'an event with a CR/LF in a header value is refused');

# server-wide timeouts do not cut a pass short after it delivered (that
# would send its events again and again): the relay overrides them
$node->append_conf('postgresql.conf', "statement_timeout = '1s'\nlock_timeout = '1s'\n"
	  . ($node->pg_version >= 17 ? "transaction_timeout = '1s'\n" : ''));
$node->reload;
$node->safe_psql('postgres', q{UPDATE outbox_destinations SET timeout_ms = 10000});
$sink->reset;
$sink->control(delay_ms => 2500);
my $long = $node->safe_psql('postgres', q{SELECT outbox_emit('task.long', '{}')});
ok( $node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL AND attempts = 1 FROM outbox WHERE event_id = '$long'"),
	'a pass longer than the server-wide timeouts completes');
is(scalar(grep { $_->{webhook_id} eq $long } @{ $sink->requests }), 1, 'and sends the event once');

# An event whose every mark fails (here a trigger rejects it) does not stop
# the relay: the relay records the failure with user triggers off, retries
# the event with backoff and dead-letters it on its own, with the trigger's
# message in last_error (outbox.max_attempts is 3 here).
my $pid = relay_pid($node, 'postgres');
$node->safe_psql('postgres', q{
	CREATE FUNCTION reject_mark() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN RAISE EXCEPTION 'mark rejected for the test'; END $$;
	CREATE TRIGGER reject_mark BEFORE UPDATE ON outbox FOR EACH ROW
	    WHEN (NEW.event_type = 'poison.pill') EXECUTE FUNCTION reject_mark();
	INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('a_poison', 'poison.*', 'poison');
	-- the poison's one destination: the webhook takes task events only
	UPDATE outbox_destinations SET event_types = 'task.*' WHERE name = 'hook';
});
my $poison = $node->safe_psql('postgres', q{SELECT outbox_emit('poison.pill', '{}')});
ok( $node->poll_query_until('postgres',
		"SELECT dead_at IS NOT NULL FROM outbox WHERE event_id = '$poison'"),
	'the event that every mark fails is dead-lettered on its own');
is( $node->safe_psql('postgres',
		"SELECT attempts, delivered_at IS NULL, last_error LIKE '%mark rejected for the test%' FROM outbox WHERE event_id = '$poison'"),
	'3|t|t', 'after 3 attempts, never marked delivered, with the trigger\'s message');
is(relay_pid($node, 'postgres'), $pid, 'the relay kept running throughout');
$node->safe_psql('postgres', q{DROP TRIGGER reject_mark ON outbox});

# A relay that keeps exiting is started again after 1 s, then 2 s, then 4 s,
# instead of every second: the delay from each termination to the next
# start (in the server log) grows.
my $log_offset = -s $node->logfile;
my $starts = qr/^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) UTC \[\d+\] LOG:  outbox relay started/m;
my @killed;
for my $n (1 .. 3)
{
	my $old = relay_pid($node, 'postgres');
	push @killed, Time::HiRes::time();
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
	ok(wait_relay($node, 'postgres', $old), "relay started again after termination $n");
}
my @started = map {
	my ($date, $clock) = /^(\S+) (\S+)$/;
	my ($y, $mo, $d) = split /-/, $date;
	my ($h, $m, $sec) = split /:/, $clock;
	Time::Local::timegm(0, $m, $h, $d, $mo - 1, $y) + $sec
} (slurp_file($node->logfile, $log_offset) =~ /$starts/g);
is(scalar @started, 3, 'three starts logged');
my @delays = map { $started[$_] - $killed[$_] } 0 .. 2;
note(sprintf('delays from termination to start: %.2f s, %.2f s, %.2f s', @delays));
# each delay counts from before the termination, so the schedule's own
# waits (1, 2, 4 s) are lower bounds whatever the machine's load adds
cmp_ok($delays[0], '>=', 1.0, 'the first restart waited its second');
cmp_ok($delays[1], '>=', 2.0, 'the second waited 2 s');
cmp_ok($delays[2], '>=', 4.0, 'and the third 4 s: restarts slow down');

$sink->stop;
$node->stop;
done_testing();
