# Destinations with filters: one webhook per customer, each taking only its
# customer's events, through the real relay. Events whose payload a filter
# cannot read (a number where a string is compared, a payload that is not
# an object, one nested 13,000 deep) are not taken by it: they wait,
# unroutable, and never stop the claim of the others. A change of filter
# makes the waiting ones due again.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('filters');
my $sink = start_sink();
ok(wait_relay($node, 'postgres'), 'relay runs');

$node->safe_psql('postgres', join(';', map { qq{
	INSERT INTO outbox_destinations (name, event_types, url, filter)
	VALUES ('customer_$_', 'order.*', '${\ $sink->url("/$_")}', '\$.payload.customer == "$_"')} } qw(a b)));

sub emit_payload
{
	my ($payload) = @_;
	return $node->safe_psql('postgres', "SELECT outbox_emit('order.paid', $payload)");
}

my @hostile = map { emit_payload($_) } (
	q{'{"customer": 7}'}, q{'["a"]'}, q{'"a"'},
	q{(repeat('{"customer":', 13000) || '"a"' || repeat('}', 13000))::jsonb});
my %sent;
for my $customer (qw(a b))
{
	$sent{$customer} = [ map { emit_payload(qq{'{"customer": "$customer", "n": $_}'}) } 1 .. 3 ];
}
ok($sink->wait_delivered(6), 'six events delivered');
is_deeply($sink->delivered_ids('/a'), [ sort @{ $sent{a} } ], 'customer a\'s endpoint got its events only');
is_deeply($sink->delivered_ids('/b'), [ sort @{ $sent{b} } ], 'customer b\'s endpoint got its events only');

my $ids = join(',', map { "'$_'" } @hostile);
ok( $node->poll_query_until('postgres', qq{
		SELECT count(*) = 4 FROM outbox
		 WHERE event_id IN ($ids) AND last_error = _outbox_unroutable_error()}),
	'the events no filter takes are parked as unroutable');
is($node->safe_psql('postgres',
		"SELECT pending, unroutable FROM outbox_status WHERE event_type = 'order.paid'"),
	'4|4', 'outbox_status counts them unroutable');
is($node->safe_psql('postgres', 'SELECT coalesce(destination, \'-\'), pending FROM outbox_backlog() ORDER BY 1'),
	"-|4\ncustomer_a|0\ncustomer_b|0", 'outbox_backlog shows them on its unrouted row');

# a catch-all: the parked events are due again at once, and delivered
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, url)
	VALUES ('rest', 'order.*', '${\ $sink->url('/rest')}')});
ok($sink->wait_delivered(4, '/rest'), 'a new catch-all destination takes the four');
is_deeply($sink->delivered_ids('/rest'), [ sort @hostile ], 'the four, and only they');
is(join("\n", error_lines(log_since($node, 0))), '', 'no ERROR in the server log');

done_testing();
