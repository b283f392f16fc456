# Fan-out at scale and to NOTIFY consumers, through the real relay:
#  - 1,000 NOTIFY destinations, one per customer, each with a filter on
#    the aggregate id, and an audit channel whose filter takes the large
#    orders of every customer: each destination gets exactly its events
#    (read back with outbox_catch_up, and live by listeners of three of
#    them), a large order reaches both its customer's and the audit
#    channel, and nothing goes anywhere else;
#  - catch-up reads the rows of its own channel only: a consumer of the
#    audit channel catches up with each of its events once (its inbox, by
#    consumer and event_id, then passes them over on any channel), and an event
#    still pending at a disabled channel is in no catch-up until that
#    channel delivers it.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('fan_out_many');
ok(wait_relay($node, 'postgres'), 'relay runs');
sub sql { my ($text) = @_; return $node->safe_psql('postgres', $text); }

sql(q{
	INSERT INTO outbox_destinations (name, event_types, channel, filter)
	SELECT format('c%s', k), 'order.*', format('cust_%s', k),
	       format('$.aggregate_id == "c%s"', k)::jsonpath
	  FROM generate_series(1, 1000) k;
	INSERT INTO outbox_destinations (name, event_types, channel, filter)
	VALUES ('zz_audit', 'order.*', 'audit', '$.payload.amount > 900');
	CREATE ROLE auditor LOGIN;
	GRANT outbox_consumer TO auditor;
});
my @listeners = map { start_listener($node, 'postgres', "cust_$_") } (1, 500, 1000);

# 3,000 orders, three per customer, amounts 1..3000: 2,100 above 900
sql(q{
	SELECT count(outbox_emit('order.placed', jsonb_build_object('amount', g),
	                         'customer', format('c%s', (g - 1) % 1000 + 1)))
	  FROM generate_series(1, 3000) g});
ok($node->poll_query_until('postgres', q{
		SELECT NOT EXISTS (SELECT FROM outbox WHERE delivered_at IS NULL)}),
	'every delivery is made');
is(sql(q{SELECT count(*), count(DISTINCT event_id), count(*) FILTER (WHERE origin_id IS NOT NULL)
           FROM outbox}),
	'5100|3000|4200', 'a row per delivery: 2,100 orders fanned out to two destinations, 900 kept one row');

# each customer's catch-up holds its three orders and nothing else
is(sql(q{
	SELECT count(*), count(DISTINCT c.event_id),
	       count(*) FILTER (WHERE c.aggregate_id <> format('c%s', k))
	  FROM generate_series(1, 1000) k,
	       outbox_catch_up(format('c%s', k), 'billing', max_events => 100) c}),
	'3000|3000|0', 'each customer channel delivered exactly its customer\'s three orders');
is(sql(q{
	SELECT count(*), min((payload->>'amount')::int), max((payload->>'amount')::int)
	  FROM outbox_catch_up('zz_audit', 'audit', max_events => 10000)}),
	'2100|901|3000', 'the audit channel delivered the large orders of every customer');
for my $l (@listeners)
{
	ok($l->sync, "the listener of $l->{channel} received what was committed");
	my ($k) = $l->{channel} =~ /(\d+)$/;
	my @got = sort map { $_->{payload} =~ /"aggregate_id"\s*:\s*"([^"]*)"/ ? $1 : '?' } @{ $l->notes };
	is_deeply(\@got, [ ("c$k") x 3 ], "$l->{channel} was notified of its customer's three orders only");
	$l->quit;
}

# Catch-up by an audit consumer: each event once, accepted in its inbox;
# the customer channels' rows of the same events are not in it
my $audit = $node->background_psql('postgres', extra_params => [ '-U', 'auditor' ]);
is($audit->query_safe(q{
	WITH c AS (SELECT * FROM outbox_catch_up('zz_audit', 'audit', max_events => 10000))
	SELECT count(*) FILTER (WHERE inbox_accept(c.event_id, 'audit')) FROM c}),
	'2100', 'the audit consumer catches up with its 2,100 events');
is($audit->query_safe(q{SELECT count(*) FROM outbox_catch_up('zz_audit', 'audit')}),
	'0', 'and a second catch-up finds nothing');
is($audit->query_safe(q{SELECT string_agg(payload->>'amount', ',' ORDER BY payload->>'amount')
                         FROM outbox_catch_up('c7', 'audit')}),
	'7', 'the inbox is per consumer and event: on a customer channel, it is offered only the order it did not accept');
is($audit->query_safe(q{SELECT string_agg(payload->>'amount', ',' ORDER BY payload->>'amount')
                         FROM outbox_catch_up('c7', 'billing')}),
	'1007,2007,7', 'another consumer of that channel is offered its three orders');

# A disabled channel: an event it takes waits for it, and its catch-up
# holds the event only once that channel delivered it
sql(q{UPDATE outbox_destinations SET enabled = false WHERE name = 'zz_audit'});
my $late = sql(q{SELECT outbox_emit('order.placed', '{"amount": 5000}', 'customer', 'c7')});
ok($node->poll_query_until('postgres', qq{
		SELECT count(*) = 1 FROM outbox WHERE event_id = '$late' AND delivered_at IS NOT NULL}),
	'the customer channel delivers the new order');
is($audit->query_safe(qq{
	SELECT count(*) FROM outbox_catch_up('c7', 'audit') WHERE event_id = '$late'}),
	'1', 'its customer channel\'s catch-up holds it');
is($audit->query_safe(qq{
	SELECT count(*) FROM outbox_catch_up('zz_audit', 'audit') WHERE event_id = '$late'}),
	'0', 'the disabled audit channel\'s catch-up does not');
is(sql(qq{SELECT string_agg(destination || ':' || state, ' ' ORDER BY destination)
            FROM outbox_deliveries WHERE event_id = '$late'}),
	'c7:delivered zz_audit:pending', 'outbox_deliveries shows it delivered at one, pending at the other');
sql(q{UPDATE outbox_destinations SET enabled = true WHERE name = 'zz_audit'});
ok($node->poll_query_until('postgres', qq{
		SELECT NOT EXISTS (SELECT FROM outbox WHERE event_id = '$late' AND delivered_at IS NULL)}),
	'enabled again, the audit channel delivers it');
is($audit->query_safe(q{SELECT count(*) FROM outbox_catch_up('zz_audit', 'audit')}),
	'1', 'and its catch-up now holds it, once');
$audit->quit;

is(join("\n", error_lines(log_since($node, 0))), '', 'no ERROR in the server log');
$node->stop;
done_testing();
