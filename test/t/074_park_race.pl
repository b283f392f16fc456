# An event that no destination takes is parked (about 10 s), and a new
# destination makes parked events due at once (its trigger). A destination
# written while a claim parks must not miss them: the claim's parking takes
# a SHARE lock on outbox_destinations, so a change that starts meanwhile
# waits for the claim's COMMIT and then finds the events parked; a change
# already in progress makes the claim park them for one second only.
#
# The claims are outbox_relay() calls in a session of the test's, held
# open between the parking and the COMMIT; no relay runs in the database.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('parkrace', 'outbox.databases' => "''");

# Whether the event of type $type is marked unroutable, and when it is due
# from now: "due", "within 1 s", "within 10 s" or "later". The parking
# counts from the claim's start, a moment before: each bound holds however
# slow the machine is between the claim and this query.
sub parked
{
	my ($type) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT last_error = _outbox_unroutable_error() AS marked,
		       CASE WHEN next_attempt_at <= now() THEN 'due'
		            WHEN next_attempt_at <= now() + interval '1 second' THEN 'within 1 s'
		            WHEN next_attempt_at <= now() + interval '10 seconds' THEN 'within 10 s'
		            ELSE 'later' END
		  FROM outbox WHERE event_type = '$type'});
}

# 1. A destination inserted while a claim parks: it waits for the claim.
emit($node, 'postgres', 'race.one', 1);
my $claim = $node->background_psql('postgres');
$claim->query_safe(q{
	BEGIN;
	SET LOCAL client_min_messages = error;
	SELECT * FROM outbox_relay();
});
my $admin = $node->background_psql('postgres');
$admin->query_until(qr/started/, "\\echo started\n" .
	"INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('one', 'race.one', 'race_one');\n");
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
		 WHERE c.relname = 'outbox_destinations' AND NOT l.granted}),
	'the new destination waits for the claim that parks');
$claim->query_safe('COMMIT');
$admin->query_safe('SELECT 1');
is(parked('race.one'), 't|due',
	'the destination\'s trigger found the event parked, and made it due at once');
$node->safe_psql('postgres', 'SELECT * FROM outbox_relay()');
is( $node->safe_psql('postgres', q{SELECT destination FROM outbox WHERE event_type = 'race.one' AND delivered_at IS NOT NULL}),
	'one', 'and the next pass delivers it');

# 2. A claim that parks while a destination change is in progress parks for
# one second only: the change's trigger may not see its events parked.
emit($node, 'postgres', 'race.two', 1);
$admin->query_safe(q{
	BEGIN;
	INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('two', 'race.two', 'race_two');
});
$claim->query_safe(q{
	BEGIN;
	SET LOCAL client_min_messages = error;
	SELECT * FROM outbox_relay();
	COMMIT;
});
like(parked('race.two'), qr/^t\|(within 1 s|due)$/, 'parked for one second while a change was in progress');
$admin->query_safe('COMMIT');

# 3. Without a change in progress, parking is as long as before.
emit($node, 'postgres', 'race.three', 1);
$claim->query_safe(q{
	SET client_min_messages = error;
	SELECT * FROM outbox_relay();
});
is(parked('race.three'), 't|within 10 s', 'parked for 10 s otherwise');
is( $node->safe_psql('postgres',
		q{SELECT next_attempt_at > now() + interval '5 seconds' FROM outbox WHERE event_type = 'race.three'}),
	't', 'and not one second, as in case 2');

$claim->quit;
$admin->quit;
$node->stop;
done_testing();
