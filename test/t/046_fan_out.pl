# Fan-out through the real relay: every webhook that takes an event gets
# it, with the same webhook-id, and each destination's delivery is on its
# own: one that fails is retried without sending the event again to the
# others, one that answers 410 Gone is disabled alone, one that
# dead-letters the event leaves the others' deliveries as they are.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('fan_out', 'outbox.backoff_base' => "'100ms'", 'outbox.backoff_max' => "'200ms'");
my $sink = start_sink();
ok(wait_relay($node, 'postgres'), 'relay runs');
is($node->safe_psql('postgres', "SELECT count(*) FROM outbox_config"), '0',
	'a new installation fans out (no routing row: all)');

$node->safe_psql('postgres', join(';', map { qq{
	INSERT INTO outbox_destinations (name, event_types, url)
	VALUES ('$_', 'order.*', '${\ $sink->url("/$_")}')} } qw(ok flaky gone dead)));
$sink->paths('/flaky' => { status => 503 }, '/gone' => { status => 410 }, '/dead' => { status => 400 });

my $ids = emit($node, 'postgres', 'order.paid', 3);
ok($sink->wait_delivered(3, '/ok'), 'the healthy endpoint gets the three events');
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 3 FROM outbox o JOIN outbox_destinations d ON d.id = o.destination_id
		 WHERE d.name = 'flaky' AND o.attempts >= 3}),
	'the failing endpoint\'s rows are retried, three attempts each');
is_deeply($sink->delivered_ids('/ok'), [ sort @$ids ], 'each event once at the healthy endpoint, with its event_id');
is(scalar @{ $sink->requests('/ok') }, 3, 'and no more requests there while the other is retried');
is( $node->safe_psql('postgres', q{
		SELECT string_agg(format('%s:%s', name, enabled), ' ' ORDER BY name) FROM outbox_destinations}),
	'dead:t flaky:t gone:f ok:t', '410 Gone disabled that destination only');
is( $node->safe_psql('postgres', q{
		SELECT string_agg(format('%s:%s:%s', name, dead, delivered), ' ' ORDER BY name)
		  FROM (SELECT d.name, count(*) FILTER (WHERE o.dead_at IS NOT NULL) AS dead,
		               count(*) FILTER (WHERE o.delivered_at IS NOT NULL) AS delivered
		          FROM outbox o JOIN outbox_destinations d ON d.id = o.destination_id
		         GROUP BY d.name) s}),
	'dead:3:0 flaky:0:0 gone:0:0 ok:0:3', 'dead letters at one destination, deliveries at another');

# the failing one recovers: its rows are delivered, with the event's id
$sink->paths('/gone' => { status => 410 }, '/dead' => { status => 400 });
ok($sink->wait_delivered(3, '/flaky'), 'the recovered endpoint gets the three events');
is_deeply($sink->delivered_ids('/flaky'), [ sort @$ids ], 'with the same webhook-ids');
is(scalar @{ $sink->requests('/ok') }, 3, 'the healthy endpoint got nothing more');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox WHERE origin_id IS NULL'), '0',
	'every event row was replaced by its rows');
is(join("\n", error_lines(log_since($node, 0))), '', 'no ERROR in the server log');

done_testing();
