# A release of a gone relay's journal that always fails must not stop the
# relay. Here a constraint of the user's on outbox refuses what the release
# writes (its "attempt cut off" reason), so the release fails as a whole,
# with user triggers off too. It used to be retried forever, and no relay
# claimed again. Wanted: each journal row is released alone, and one that
# still fails is deleted without counting its attempts, with a WARNING;
# its events are sent again and delivered, and the relay goes on.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('releasefails');
my $sink = start_sink();
my $pid = wait_relay($node, 'postgres');
ok($pid, 'relay runs');
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES ('hook', 'a.*', '%s'), ('ok', 'b.*', '%s')},
	$sink->url('/hook'), $sink->url('/ok')));

$sink->paths('/hook' => { hold => JSON::PP::true });
emit($node, 'postgres', 'a.x', 3);
ok(wait_until(sub { scalar @{ $sink->arrivals('/hook') } == 3 }), 'three requests in flight');

# the user's constraint: no row may say its attempt was cut off
$node->safe_psql('postgres', q{
	ALTER TABLE outbox ADD CONSTRAINT no_cut_off
	    CHECK (last_error IS NULL OR last_error NOT LIKE 'attempt cut off%') NOT VALID});

my $offset = -s $node->logfile;
kill 'TERM', $pid or die "kill $pid: $!";
$pid = wait_relay($node, 'postgres', $pid);
ok($pid, 'the next relay runs');
$sink->paths('/hook' => {});
$node->wait_for_log(qr/outbox relay released claim \d+ of relay run [0-9a-f]{16} without counting its cut-off attempts/,
	$offset);
my $log = log_since($node, $offset);
like($log, qr/WARNING:  outbox relay released claim \d+ of relay run [0-9a-f]{16} without counting its cut-off attempts\n.*DETAIL:  Counting them failed: new row for relation "outbox" violates check constraint "no_cut_off"/,
	'the row whose release fails is deleted without counting, with a WARNING and the reason');

emit($node, 'postgres', 'b.x', 2);
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 5 FROM outbox WHERE delivered_at IS NOT NULL"),
	'the relay claims again: the 3 events sent again and 2 new ones are delivered');
is($node->safe_psql('postgres',
	"SELECT string_agg(attempts::text, ',' ORDER BY id) FROM outbox WHERE event_type = 'a.x'"),
	'1,1,1', 'the cut-off attempts were not counted');
ok($node->poll_query_until('postgres', 'SELECT count(*) = 0 FROM outbox_in_flight'),
	'the journal empties');
is(relay_pid($node, 'postgres'), $pid, 'the same relay throughout');

$sink->stop;
$node->stop;
done_testing();
