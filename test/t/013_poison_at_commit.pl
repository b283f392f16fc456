# A COMMIT of the relay that fails (here a deferred constraint trigger on
# outbox raises at COMMIT for one event) must cost that event only, as an
# error inside a statement does (012): the relay keeps running (same
# process, no restart loop), every other event is sent once and marked
# delivered, and the poison event is retried with backoff and dead-lettered
# on its own, with the trigger's message in last_error. Three poisons, for
# the steps of the relay that commit row changes:
#   claim:  any change to a NOTIFY event fails at COMMIT; the claim marks
#           it delivered in its own transaction, so no claim that includes
#           it commits (and a failed claim notifies nothing)
#   any:    any change to an HTTP event fails at COMMIT; the claim writes
#           nothing to its row, so it is sent, its outcome fails and a
#           failed attempt is recorded instead, with user triggers off;
#           sent again until dead
#   record: only the delivered mark fails at COMMIT, so the request is sent
#           and its outcome cannot be recorded; a failed attempt is recorded
#           instead, and the event is sent again until dead
# Caught errors are logged, but at most once per 10 s.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $max_attempts = 3;
my $node = outbox_node('deferred', 'outbox.max_attempts' => $max_attempts);
my $sink = start_sink();
my $url = $sink->url('/hook');

my $pid = wait_relay($node, 'postgres');
ok($pid, 'relay runs');

$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES ('hook', 'task.*', '$url');
	INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('note', 'note.*', 'poison_notes');
	CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS \$\$
	BEGIN
		IF NEW.payload ? 'poison' THEN
			RAISE EXCEPTION 'poison event % refused at commit', NEW.payload->>'poison';
		END IF;
		IF NEW.payload ? 'poison_mark' AND NEW.delivered_at IS NOT NULL THEN
			RAISE EXCEPTION 'delivery mark of % refused at commit', NEW.payload->>'poison_mark';
		END IF;
		RETURN NULL;
	END \$\$;
	CREATE CONSTRAINT TRIGGER poison AFTER UPDATE ON outbox
	    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION poison();
});

# 60 good events with the three poisons among them, in one transaction
my $listener = start_listener($node, 'postgres', 'poison_notes');
my $log_offset = -s $node->logfile;
my $t0 = time;
my ($any_poison, $mark_poison, $claim_poison);
my @good;
my @lines = split /\n/, $node->safe_psql('postgres', q{
	SELECT outbox_emit(CASE g WHEN 63 THEN 'note.created' ELSE 'task.created' END,
	       CASE g WHEN 20 THEN '{"poison": "A"}' WHEN 41 THEN '{"poison_mark": "B"}'
	              WHEN 63 THEN '{"poison": "C"}' ELSE jsonb_build_object('n', g) END)
	  FROM generate_series(1, 63) g ORDER BY g});
($any_poison, $mark_poison, $claim_poison) = @lines[ 19, 40, 62 ];
@good = @lines[ 0 .. 18, 20 .. 39, 41 .. 61 ];
is(scalar @good, 60, '60 good events and 3 poisons emitted');

my $good_list = join(', ', map { "'$_'" } @good);
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 60 FROM outbox WHERE event_id IN ($good_list) AND delivered_at IS NOT NULL"),
	'the 60 good events are marked delivered');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 3 FROM outbox WHERE event_id IN ('$claim_poison', '$any_poison', '$mark_poison') AND dead_at IS NOT NULL"),
	'the three poisons are dead-lettered');
my $elapsed = time - $t0;

my $sent = count_by_id($sink->requests('/hook'));
is_deeply([ grep { ($sent->{$_} // 0) != 1 } @good ], [], 'each good event was sent exactly once');
is( $node->safe_psql('postgres', qq{
		SELECT count(*) FROM outbox
		 WHERE event_id IN ($good_list) AND attempts = 1 AND last_error IS NULL
		   AND dead_at IS NULL AND NOT (id, attempts) IN (SELECT f.id, f.attempts FROM outbox_in_flight j, unnest(j.ids, j.attempts) AS f(id, attempts))}),
	'60', 'each good event: 1 attempt, no error, not in flight');

# the claim poison: no claim including it committed, so it was never notified
ok($listener->sync, 'the listener has every notification committed so far');
is(scalar(grep { $_->{payload} =~ /\Q$claim_poison\E/ } @{ $listener->notes }), 0,
	'claim poison: never notified');
my ($attempts, $error, $dest) = split /\|/, $node->safe_psql('postgres', qq{
	SELECT attempts, last_error, coalesce(destination, '') FROM outbox WHERE event_id = '$claim_poison'});
is($attempts, $max_attempts, "claim poison: dead after $max_attempts attempts");
like($error, qr/^could not claim the event: poison event C refused at commit/,
	"claim poison: the trigger's message in last_error");
$listener->quit;

# the HTTP event refusing every update: sent, as its claim does not write
# its row; each failure recorded with user triggers off
is($sent->{$any_poison} // 0, $max_attempts, "any-update poison: sent $max_attempts times, once per attempt");
($attempts, $error) = split /\|/, $node->safe_psql('postgres', qq{
	SELECT attempts, last_error FROM outbox WHERE event_id = '$any_poison'});
is($attempts, $max_attempts, "any-update poison: dead after $max_attempts attempts");
like($error, qr/^could not record the outcome: poison event A refused at commit/,
	"any-update poison: the trigger's message in last_error");

# the mark poison: sent, its mark refused, a failed attempt recorded instead
is($sent->{$mark_poison} // 0, $max_attempts, "mark poison: sent $max_attempts times, once per attempt");
($attempts, $error) = split /\|/, $node->safe_psql('postgres', qq{
	SELECT attempts, last_error FROM outbox WHERE event_id = '$mark_poison'});
is($attempts, $max_attempts, "mark poison: dead after $max_attempts attempts");
like($error, qr/^could not record the outcome: delivery mark of B refused at commit/, "mark poison: the trigger's message in last_error");
is( $node->safe_psql('postgres', qq{
		SELECT delivered_at IS NULL AND NOT (id, attempts) IN (SELECT f.id, f.attempts FROM outbox_in_flight j, unnest(j.ids, j.attempts) AS f(id, attempts)) FROM outbox WHERE event_id = '$mark_poison'}),
	't', 'mark poison: not marked delivered, not in flight');

# the same worker did all of it
is(relay_pid($node, 'postgres'), $pid, 'the relay is the same process');
my $log = log_since($node, $log_offset);
unlike($log, qr/outbox relay started|exited with exit code/, 'no relay exit or restart in the log');
my @warnings = relay_warnings($node, $log_offset);
my $bound = 1 + int($elapsed / 10);
note(sprintf('%d "outbox relay could not" lines in %.1f s', scalar @warnings, $elapsed));
cmp_ok(scalar @warnings, '>=', 1, 'the caught error was logged');
cmp_ok(scalar @warnings, '<=', $bound, "at most one such line per 10 s ($bound)");

# the relay still delivers new events afterwards
my ($later) = @{ emit($node, 'postgres', 'task.later', 1) };
ok( $node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL AND attempts = 1 FROM outbox WHERE event_id = '$later'"),
	'a later event is delivered');
is(relay_pid($node, 'postgres'), $pid, 'still the same relay');

$sink->stop;
$node->stop;
done_testing();
