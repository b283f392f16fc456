# outbox.http_allowed_targets: a superuser limits where webhooks connect;
# addresses are checked on each connection, after name resolution, and a
# connection kept from a looser list is not reused.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('targets');
my $one = start_sink();
my $two = start_sink();
my ($port1) = $one->url =~ /:(\d+)\//;
my ($port2) = $two->url =~ /:(\d+)\//;
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES
	    ('one', 'one.*', 'http://127.0.0.1:$port1/hook'),
	    ('two', 'two.*', 'http://127.0.0.1:$port2/hook'),
	    ('named', 'named.*', 'http://localhost:$port2/hook');
	ALTER SYSTEM SET outbox.http_allowed_targets = '127.0.0.1:$port1, 10.0.0.0/8:$port2';});
$node->reload;
ok(wait_relay($node, 'postgres'), 'relay runs');
ok($node->poll_query_until('postgres',
	"SELECT setting = '127.0.0.1:$port1, 10.0.0.0/8:$port2' FROM pg_settings WHERE name = 'outbox.http_allowed_targets'"),
	'the list is loaded');

# Waits until event $id has failed at least once; returns its last_error.
sub failure_of
{
	my ($id) = @_;
	$node->poll_query_until('postgres',
		"SELECT attempts >= 1 AND last_error IS NOT NULL FROM outbox WHERE event_id = '$id'")
	  or return 'no failure recorded';
	return $node->safe_psql('postgres', "SELECT last_error FROM outbox WHERE event_id = '$id'");
}

my ($ok) = @{ emit($node, 'postgres', 'one.a', 1) };
my ($refused) = @{ emit($node, 'postgres', 'two.a', 1) };
my ($named) = @{ emit($node, 'postgres', 'named.a', 1) };
ok($one->wait_delivered(1), 'the allowed address and port are reached');
is(failure_of($refused),
	'HTTP request failed: the address connected to is not allowed by outbox.http_allowed_targets',
	'another port on the same address, allowed on other addresses, is refused at connection');
is(failure_of($named),
	'HTTP request failed: the address connected to is not allowed by outbox.http_allowed_targets',
	'so is a name that resolves to that address');
is($two->stats->{requests}, 0, 'the refused endpoint saw nothing');

# a list that names no address for the port refuses before connecting
$node->safe_psql('postgres', "ALTER SYSTEM SET outbox.http_allowed_targets = 'hooks.example.com:443'");
$node->reload;
$node->poll_query_until('postgres',
	"SELECT setting = 'hooks.example.com:443' FROM pg_settings WHERE name = 'outbox.http_allowed_targets'");
my ($none) = @{ emit($node, 'postgres', 'one.b', 1) };
is(failure_of($none),
	'the destination\'s host and port are not allowed by outbox.http_allowed_targets',
	'a host no entry can allow is refused before connecting');

# the other way round: the kept-alive connection to the first endpoint is
# not reused once its address is no longer allowed
$node->safe_psql('postgres', "ALTER SYSTEM SET outbox.http_allowed_targets = 'localhost:$port2, 127.0.0.1:$port2, 10.0.0.0/8:$port1'");
$node->reload;
$node->poll_query_until('postgres',
	"SELECT setting LIKE 'localhost%' FROM pg_settings WHERE name = 'outbox.http_allowed_targets'");
$node->safe_psql('postgres', 'SELECT outbox_redeliver_dead()');
$node->safe_psql('postgres', "UPDATE outbox SET next_attempt_at = now() WHERE delivered_at IS NULL");
ok($two->wait_delivered(2), 'now the second endpoint gets both its events, by address and by name');
my ($late) = @{ emit($node, 'postgres', 'one.c', 1) };
is(failure_of($late),
	'HTTP request failed: the address connected to is not allowed by outbox.http_allowed_targets',
	'the first endpoint is refused, its old connection not reused');
is($one->stats->{requests}, 1, 'it got nothing more');

# an IPv4-mapped IPv6 address (::ffff:127.0.0.1) reaches the IPv4 address
# it maps: IPv6 ranges such as ::/0 do not allow it, IPv4 entries decide
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES
	    ('mapped', 'mapped.*', 'http://[::ffff:127.0.0.1]:$port2/hook');
	ALTER SYSTEM SET outbox.http_allowed_targets = '::/0'});
$node->reload;
$node->poll_query_until('postgres',
	"SELECT setting = '::/0' FROM pg_settings WHERE name = 'outbox.http_allowed_targets'");
my ($mapped) = @{ emit($node, 'postgres', 'mapped.a', 1) };
is(failure_of($mapped),
	'HTTP request failed: the address connected to is not allowed by outbox.http_allowed_targets',
	'::/0 does not allow 127.0.0.1 reached as ::ffff:127.0.0.1');
$node->safe_psql('postgres', "ALTER SYSTEM SET outbox.http_allowed_targets = '[::ffff:127.0.0.1/128]:$port2'");
$node->reload;
$node->poll_query_until('postgres',
	"SELECT setting LIKE '[::ffff:127.0.0.1/128]%' FROM pg_settings WHERE name = 'outbox.http_allowed_targets'");
$node->safe_psql('postgres', "UPDATE outbox SET next_attempt_at = now() WHERE event_id = '$mapped'");
ok($two->wait_delivered(3), 'a mapped entry allows it, as the IPv4 address it maps');

# the default is permissive
$node->safe_psql('postgres', 'ALTER SYSTEM RESET outbox.http_allowed_targets');
$node->reload;
ok($one->wait_delivered(2), 'with the default everything is reachable again');

$one->stop;
$two->stop;
$node->stop;
done_testing();
