# A destination replaced while one of its events is in flight: a webhook
# deleted and a NOTIFY channel created under its name (catch-up readable
# by outbox_consumer) while the endpoint still holds the webhook's request.
# The delivery is recorded when the answer comes, after the channel's
# catch_up_from: in 1.1 it was recorded under the name, and the channel's
# catch-up returned the webhook's payload. It is recorded with no
# destination now, and catch-up returns nothing of it; an event delivered
# by the channel itself is returned.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('replaced', 'outbox.http_timeout' => "'60s'");
my $sink = start_sink();
ok(wait_relay($node, 'postgres'), 'relay runs');

$sink->paths('/hook' => { hold => JSON::PP::true });
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES ('x', 'x.*', '%s')},
	$sink->url('/hook')));
my ($secret) = @{ emit($node, 'postgres', 'x.card', 1) };
ok(wait_until(sub { scalar @{ $sink->arrivals('/hook') } == 1 }), 'the webhook request is in flight');

$node->safe_psql('postgres', q{
	DELETE FROM outbox_destinations WHERE name = 'x';
	INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('x', 'x.*', 'public_channel')});
$sink->paths('/hook' => { status => 200 });
ok( $node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$secret'"),
	'the webhook delivery is recorded once the endpoint answers');
is( $node->safe_psql('postgres', "SELECT destination IS NULL, attempts FROM outbox WHERE event_id = '$secret'"),
	't|1', 'with no destination: the name stands for another one now');

my ($own) = @{ emit($node, 'postgres', 'x.note', 1) };
ok( $node->poll_query_until('postgres',
		"SELECT destination = 'x' FROM outbox WHERE event_id = '$own' AND delivered_at IS NOT NULL"),
	"the channel's own event is recorded under its name");
is( $node->safe_psql('postgres', q{
		SET ROLE outbox_consumer;
		SELECT string_agg(event_id::text, ',') FROM outbox_catch_up('x')}),
	$own, "catch-up returns the channel's event, not the webhook's");

$sink->stop;
$node->stop;
done_testing();
