# outbox_relay() cancelled while its webhook requests wait at the endpoint
# (here by statement_timeout) rolls back like any statement and leaves
# nothing behind in its session: its requests are cut, and the next
# outbox_relay() in the same session, the endpoint answering again,
# delivers the event once, with one attempt (the rollback counted none).
# The events of the aborted call died with its transaction: the webhook
# kind must not keep them.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

# no relay worker: outbox_relay() alone delivers
my $node = outbox_node('cancelled', 'outbox.databases' => "''");
my $sink = start_sink();
my $url = $sink->url('/hook');
$node->safe_psql('postgres', "INSERT INTO outbox_destinations (name, url) VALUES ('hook', '$url')");
$sink->paths('/hook' => { hold => JSON::PP::true });
my ($id) = @{ emit($node, 'postgres', 'cancel.me', 1) };

my $session = $node->background_psql('postgres', on_error_stop => 0);
$session->query_safe("SET statement_timeout = '2s'");
my ($out, $failed) = $session->query('SELECT * FROM outbox_relay()');
is($failed, 1, 'the call held by the endpoint fails');
like($session->{stderr}, qr/canceling statement due to statement timeout/, 'by its statement_timeout');
$session->{stderr} = '';    # the session keeps what it read, for the next query
ok(wait_until(sub { $sink->stats('/hook')->{arrived} == 1 }), 'its request had reached the endpoint');
is( $node->safe_psql('postgres', "SELECT attempts, delivered_at IS NULL FROM outbox WHERE event_id = '$id'"),
	'0|t', 'the event is pending, no attempt counted');

$sink->paths('/hook' => {});
$session->query_safe('RESET statement_timeout');
is($session->query_safe('SELECT * FROM outbox_relay()'), '1|0',
	'the next call in the same session delivers it');
is( $node->safe_psql('postgres', "SELECT attempts, delivered_at IS NOT NULL FROM outbox WHERE event_id = '$id'"),
	'1|t', 'delivered with one attempt');
is(scalar @{ $sink->delivered_ids('/hook') }, 1, 'the endpoint answered it once');
is($session->query_safe('SELECT * FROM outbox_relay()'), '0|0', 'a third call finds nothing');
$session->quit;

$sink->stop;
$node->stop;
done_testing();
