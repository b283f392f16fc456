# A relay whose steps keep failing delivers nothing, and a monitor must be
# able to tell: outbox_relay_stats().failing_since is the time of the first
# of the steps failing since the last one that succeeded, NULL otherwise;
# outbox_status.oldest_due, read from the table alone, falls behind.
# Here the release of the journal, which comes before any claim, fails on
# every try: a trigger that fires even with user triggers off refuses to
# delete a journal row left by a relay that is gone.
#   a. the relay runs but claims nothing: failing_since is set and stays
#      the same while the failures go on; last_error says which step
#   b. once the trigger is gone, the release succeeds: failing_since is
#      NULL again and the waiting event is delivered
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('failing');
my $sink = start_sink();
my $url = $sink->url('/hook');
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, url) VALUES ('hook', '$url');
	INSERT INTO outbox_in_flight (run, claim, relay, ids, attempts) VALUES (1, 1, 0, '{}', '{}');
	CREATE FUNCTION refuse_release() RETURNS trigger LANGUAGE plpgsql AS \$\$
	BEGIN
		RAISE EXCEPTION 'journal row % kept by a trigger', OLD.run;
	END \$\$;
	CREATE TRIGGER refuse_release BEFORE DELETE ON outbox_in_flight
	    FOR EACH ROW EXECUTE FUNCTION refuse_release();
	ALTER TABLE outbox_in_flight ENABLE ALWAYS TRIGGER refuse_release});
# a relay that starts releases the journal of relays that are gone first
$node->restart;
ok(wait_relay($node, 'postgres'), 'the relay runs');
my ($id) = @{ emit($node, 'postgres', 'stall.event', 1) };

###
### a. failing
###
my $stats = "SELECT failing_since, last_error FROM outbox_relay_stats() WHERE relay = 0";
ok( $node->poll_query_until('postgres',
		"SELECT failing_since IS NOT NULL FROM outbox_relay_stats() WHERE relay = 0"),
	'a: failing_since is set');
my ($since, $error) = split /\|/, $node->safe_psql('postgres', $stats);
like($error, qr/^could not release the events of relays that are gone: journal row 1 kept by a trigger/,
	'a: last_error names the step and the error');
# later failures keep the time of the first
ok( $node->poll_query_until('postgres',
		"SELECT last_error_at > '$since'::timestamptz + interval '1 s' FROM outbox_relay_stats() WHERE relay = 0"),
	'a: the release keeps failing');
is($node->safe_psql('postgres', "SELECT failing_since = '$since' FROM outbox_relay_stats() WHERE relay = 0"),
	't', 'a: failing_since is still the first failure');
is($node->safe_psql('postgres', "SELECT delivered_at IS NULL FROM outbox WHERE event_id = '$id'"),
	't', 'a: the event waits');
is(scalar @{ $sink->requests('/hook') }, 0, 'a: nothing was sent');
ok( $node->poll_query_until('postgres', q{
		SELECT now() - oldest_due > interval '2 s' FROM outbox_status WHERE event_type = 'stall.event'}),
	'a: outbox_status shows the stall: the event is overdue (oldest_due)');

###
### b. recovered
###
$node->safe_psql('postgres', 'DROP TRIGGER refuse_release ON outbox_in_flight');
ok( $node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$id'"),
	'b: the event is delivered');
is($node->safe_psql('postgres', "SELECT failing_since IS NULL FROM outbox_relay_stats() WHERE relay = 0"),
	't', 'b: failing_since is NULL again');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_in_flight'), '0',
	'b: the journal row was released');

$sink->stop;
$node->stop;
done_testing();
