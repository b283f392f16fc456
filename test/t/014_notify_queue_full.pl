# A full NOTIFY queue makes the COMMIT of any claim with a NOTIFY delivery
# fail ("too many notifications in the NOTIFY queue"). That must cost the
# NOTIFY events only: HTTP events claimed alongside are sent once each and
# delivered, the NOTIFY events fail (last_error set) and are delivered,
# each exactly once, once the queue has drained; the relay process stays
# the same throughout. Nothing was sent for them, and any role can fill the
# queue, so their failures count no attempt: with outbox.max_attempts = 2
# they are retried as long as the queue is full, never dead-lettered.
#
# From PostgreSQL 17 on, the queue is really filled: max_notify_queue_pages
# is set to its minimum, a LISTEN session sits idle in a transaction (so the
# queue cannot be emptied past its position), and notifications are sent
# until the queue refuses them. PostgreSQL 15 has no such setting, and
# filling its 8 GB queue is out of the question; there a deferred constraint
# trigger that raises at COMMIT for events routed to the NOTIFY destination
# stands in for the full queue, and dropping it for the drain.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = outbox_node('notifyfull',
	'outbox.max_attempts' => 2,
	'outbox.backoff_max' => "'1s'");
my $real = $node->pg_version >= 17;
if ($real)
{
	$node->append_conf('postgresql.conf', "max_notify_queue_pages = 64\n");
	$node->restart;
}
note($real ? 'PostgreSQL 17 or later: a really full queue'
	: 'PostgreSQL ' . $node->pg_version . ': a deferred trigger stands in for the full queue');
my $sink = start_sink();
my $url = $sink->url('/hook');
my $pid = wait_relay($node, 'postgres');
ok($pid, 'relay runs');

$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES ('hook', 'task.*', '$url');
	INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('listen', 'note.*', 'outbox_events');
});

my $full_error = qr/too many notifications in the NOTIFY queue/;
my $blocker;
if ($real)
{
	# a listener that stops reading (idle in a transaction) holds the
	# queue's tail back; aborted notifications fill it up to the limit
	$blocker = $node->background_psql('postgres');
	$blocker->query_safe('LISTEN blocker');
	$blocker->query_safe('BEGIN');
	$blocker->query_safe('SELECT 1');
	my ($ret, $out, $err) = $node->psql('postgres',
		q{SELECT pg_notify('filler', g || repeat('x', 7000)) FROM generate_series(1, 1000) g});
	like($err, $full_error, 'the NOTIFY queue is full');
	cmp_ok($node->safe_psql('postgres', 'SELECT pg_notification_queue_usage()'), '>=', 0.99,
		'pg_notification_queue_usage says so');
}
else
{
	$node->safe_psql('postgres', q{
		CREATE FUNCTION queue_full() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			RAISE EXCEPTION 'too many notifications in the NOTIFY queue (stand-in)'
			    USING ERRCODE = 'program_limit_exceeded';    -- as async.c raises it
		END $$;
		CREATE CONSTRAINT TRIGGER queue_full AFTER UPDATE ON outbox
		    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
		    WHEN (NEW.event_type LIKE 'note.%') EXECUTE FUNCTION queue_full();
	});
}

# The listener that receives the NOTIFY events in the end. It starts
# listening now: its LISTEN reads the queue up to its head (past the
# aborted notifications), so that it does not hold the tail back.
my $listener = $node->background_psql('postgres');
$listener->set_query_timer_restart;
$listener->query_safe('LISTEN outbox_events');
my %received;    # envelope id => times received

sub collect
{
	my $out = $listener->query_safe('SELECT 1');
	while ($out =~ /^Asynchronous notification "outbox_events" with payload "(.*)" received from server process with PID \d+\.$/mg)
	{
		$received{ decode_json($1)->{id} }++;
	}
	return;
}

# 25 HTTP events and 10 NOTIFY events, interleaved, in one transaction
my $log_offset = -s $node->logfile;
my $t0 = time;
my (@http, @notes);
for my $line (split /\n/, $node->safe_psql('postgres', q{
	SELECT outbox_emit(CASE WHEN g % 7 IN (0, 4) THEN 'note.created' ELSE 'task.created' END,
	                   jsonb_build_object('n', g)) || ' ' || (g % 7 IN (0, 4))
	  FROM generate_series(1, 35) g ORDER BY g}))
{
	my ($id, $is_note) = split / /, $line;
	push @{ $is_note eq 'true' ? \@notes : \@http }, $id;
}
is(scalar @http . '/' . scalar @notes, '25/10', '25 HTTP and 10 NOTIFY events emitted');
my $http_list = join(', ', map { "'$_'" } @http);
my $note_list = join(', ', map { "'$_'" } @notes);

ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 25 FROM outbox WHERE event_id IN ($http_list) AND delivered_at IS NOT NULL"),
	'the HTTP events are delivered while the queue is full');
ok( $node->poll_query_until('postgres', qq{
		SELECT count(*) = 10 FROM outbox
		 WHERE event_id IN ($note_list) AND attempts = 0 AND last_error LIKE '%too many notifications in the NOTIFY queue%'}),
	'each NOTIFY event failed with the queue error in last_error, no attempt counted');

my $sent = count_by_id($sink->requests('/hook'));
is_deeply([ grep { ($sent->{$_} // 0) != 1 } @http ], [], 'each HTTP event was sent exactly once');
is(scalar keys %$sent, 25, 'and nothing else was sent');
is( $node->safe_psql('postgres', qq{
		SELECT count(*) FROM outbox WHERE event_id IN ($http_list)
		   AND attempts = 1 AND last_error IS NULL AND dead_at IS NULL}),
	'25', 'each HTTP event: one attempt, no error');
is( $node->safe_psql('postgres', qq{
		SELECT count(*) FROM outbox WHERE event_id IN ($note_list)
		   AND delivered_at IS NULL AND dead_at IS NULL}),
	'10', 'the NOTIFY events are pending, not dead');
like( $node->safe_psql('postgres', "SELECT last_error FROM outbox WHERE event_id = '$notes[0]'"),
	qr/^could not claim the event: too many notifications in the NOTIFY queue/,
	'last_error says the claim failed, and why');

# the queue drains
if ($real)
{
	# the blocker ends its transaction and stops listening; this query
	# advances the queue's tail as far as the remaining listener allows
	$blocker->query_safe('COMMIT');
	$blocker->quit;
	ok( $node->poll_query_until('postgres', 'SELECT pg_notification_queue_usage() < 0.1'),
		'the queue has drained');
}
else
{
	$node->safe_psql('postgres', 'DROP TRIGGER queue_full ON outbox');
	pass('the stand-in is gone');
}
ok( $node->poll_query_until('postgres', qq{
		SELECT count(*) = 10 FROM outbox
		 WHERE event_id IN ($note_list) AND delivered_at IS NOT NULL AND last_error IS NULL
		   AND attempts = 1}),
	'the NOTIFY events are delivered, in one attempt');
ok(wait_until(sub { collect(); return keys %received >= 10; }), 'the listener received them');
$node->safe_psql('postgres', "NOTIFY outbox_events, '{\"id\": \"marker\"}'");
ok(wait_until(sub { collect(); return $received{marker}; }), 'listener in sync');
delete $received{marker};
is_deeply([ sort keys %received ], [ sort @notes ], 'the listener received the 10 NOTIFY events');
is_deeply([ grep { $received{$_} != 1 } @notes ], [], 'each exactly once');
is(scalar keys %{ count_by_id($sink->requests('/hook')) }, 25, 'no HTTP event was sent again');

is(relay_pid($node, 'postgres'), $pid, 'the relay is the same process');
unlike(log_since($node, $log_offset), qr/outbox relay started|exited with exit code/,
	'no relay exit or restart in the log');
my @warnings = relay_warnings($node, $log_offset);
my $elapsed = time - $t0;
my $bound = 1 + int($elapsed / 10);
note(sprintf('%d "outbox relay could not" lines in %.1f s', scalar @warnings, $elapsed));
cmp_ok(scalar @warnings, '>=', 1, 'the caught error was logged');
cmp_ok(scalar @warnings, '<=', $bound, "at most one such line per 10 s ($bound)");

$listener->quit;
$sink->stop;
$node->stop;
done_testing();
