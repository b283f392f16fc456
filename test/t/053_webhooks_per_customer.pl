# One webhook per customer, through the real relay and a real HTTP
# endpoint on 127.0.0.1: 300 webhooks, each with a filter on the aggregate
# id, and an audit webhook whose filter takes the large orders of every
# customer. Each endpoint gets exactly its events, once each, by
# webhook-id; a large order reaches both its customer's and the audit
# endpoint; nothing goes anywhere else. The relay keeps one queue and one
# share of the connections per destination: this is the many-destination
# case of both.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('webhooks_per_customer', 'outbox.http_max_connections' => 8);
my $sink = start_sink();
ok(wait_relay($node, 'postgres'), 'relay runs');
sub sql { my ($text) = @_; return $node->safe_psql('postgres', $text); }

my $base = $sink->url('');
sql(qq{
	INSERT INTO outbox_destinations (name, event_types, url, filter)
	SELECT format('c%s', k), 'order.*', '$base/c' || k,
	       format('\$.aggregate_id == "c%s"', k)::jsonpath
	  FROM generate_series(1, 300) k;
	INSERT INTO outbox_destinations (name, event_types, url, filter)
	VALUES ('audit', 'order.*', '$base/audit', '\$.payload.amount > 2700');
});

# 3,000 orders, ten per customer, in three transactions
for my $part (0 .. 2)
{
	my $from = $part * 1000 + 1;
	my $to = $from + 999;
	sql(qq{
		SELECT count(outbox_emit('order.placed', jsonb_build_object('amount', i),
		                         'customer', 'c' || (i % 300 + 1)))
		  FROM generate_series($from, $to) i});
}

# what each endpoint must get: its customer's events, and the audit
# endpoint the large orders, by event_id (the webhook-id)
my $expected = sql(q{
	SELECT string_agg(p || ' ' || e, E'\n' ORDER BY p, e)
	  FROM (SELECT DISTINCT '/' || aggregate_id AS p, event_id::text AS e FROM outbox
	        UNION ALL
	        SELECT DISTINCT '/audit', event_id::text FROM outbox
	         WHERE (payload->>'amount')::int > 2700) x});
my $n = scalar(split /\n/, $expected);
is($n, 3300, '3,000 orders to their customers, 300 of them to the audit endpoint too');
ok($sink->wait_delivered($n), 'every delivery arrived');
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 0 FROM outbox WHERE delivered_at IS NULL}),
	'and every row is marked delivered');
my @got = sort map { "$_->{path} $_->{webhook_id}" } @{ $sink->delivered };
is(join("\n", @got), $expected, 'each endpoint got exactly its events, each once');
is(sql(q{
	SELECT count(*) FROM outbox o JOIN outbox_destinations d ON d.id = o.destination_id
	 WHERE d.name = 'audit'}), '300', 'a large order was fanned out to two rows');
is(join("\n", error_lines(log_since($node, 0))), '', 'no ERROR in the server log');

done_testing();
