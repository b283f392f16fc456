# One destination cannot take every entry of its database's in-flight set
# (4,096): a claim puts at most half the set's room in flight for one
# destination, as a destination gets at most half the connections while
# another is busy. With outbox.batch_size 5000, a slow endpoint (2 s per
# request, 16 connections: 8 events/s) used to fill the set, and every
# other destination waited until it had worked through 4,096 events
# (about 8 minutes here); now the other destination is claimed at once and
# sent as soon as a connection is free.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('inflightshare', 'outbox.batch_size' => 5000);
my $sink = start_sink();
my $pid = wait_relay($node, 'postgres');
ok($pid, 'relay runs');

$sink->paths('/hang' => { delay_ms => 2000 });
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES
	    ('hang', 'hang.*', '%s'), ('ok', 'ok.*', '%s')},
	$sink->url('/hang'), $sink->url('/ok')));

emit($node, 'postgres', 'hang.created', 5000);
ok(wait_until(sub { $sink->stats('/hang')->{in_flight} >= 1 }), 'the slow endpoint has requests');
emit($node, 'postgres', 'ok.created', 10);
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM outbox WHERE event_type = 'ok.created' AND delivered_at IS NULL"),
	'the other destination\'s events are delivered while the slow one has a backlog');
my $hang_in_flight = $node->safe_psql('postgres', q{
	SELECT count(*) FROM outbox_in_flight j, unnest(j.ids) AS u(id)
	  JOIN outbox o ON o.id = u.id WHERE o.event_type = 'hang.created'});
cmp_ok($hang_in_flight, '<=', 2048, 'the slow destination holds at most half the in-flight set');
cmp_ok($hang_in_flight, '>', 0, 'and some of it');

$sink->paths();
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM outbox WHERE event_type = 'hang.created' AND delivered_at IS NULL"),
	'answering at once again, its backlog drains');
is($node->safe_psql('postgres', q{SELECT max(attempts) FROM outbox}), '1', 'every event in one attempt');
is(relay_pid($node, 'postgres'), $pid, 'the same relay throughout');

$sink->stop;
$node->stop;
done_testing();
