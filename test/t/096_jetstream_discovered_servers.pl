# The relay connects only to the servers a destination names. A NATS server
# lists others in its INFO (connect_urls), and libnats would add them to the
# servers it tries, and send them the credentials and the events. Here a
# fake server on 127.0.0.1 (test/fake_nats.py) names a second listener of
# its own and drops the connection after the client's CONNECT: the second
# listener must never be connected to, by the relay or by
# outbox_jetstream_check(), while delivery fails against the first.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use IPC::Run ();
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

require_kind('jetstream');

my $status = PostgreSQL::Test::Utils::tempdir() . '/fake.status';
my $fake = IPC::Run::start([ 'python3', "$FindBin::RealBin/../fake_nats.py", 'discover', $status ]);

# The fake server's status: port, other, accepted, other_accepted.
sub fake_status
{
	return {} unless -s $status;
	return { map { split /=/ } split ' ', slurp_file($status) };
}
ok(wait_until(sub { defined fake_status()->{other} }), 'the fake server listens');
my $port = fake_status()->{port};

my $node = outbox_node('jsdiscovered');
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream,
	                                 nats_user, nats_password, timeout_ms)
	VALUES ('named', 'named.*', 'nats://127.0.0.1:$port', 'named.x', 'NAMED', 'relay', 'pw-secret', 1000);
	SELECT outbox_emit('named.one', '{}');
});
ok(wait_until(sub { fake_status()->{accepted} >= 2 }),
	'the relay connected to the named server twice (a failed connection is tried again)');
ok( $node->poll_query_until('postgres',
		"SELECT attempts >= 2 FROM outbox WHERE event_type = 'named.one'"),
	'the event failed twice');
like($node->safe_psql('postgres', "SELECT last_error FROM outbox WHERE event_type = 'named.one'"),
	qr/^NATS at nats:\/\/127\.0\.0\.1:$port, stream "NAMED": cannot connect: /,
	'delivery fails against the named server');
my $problem = $node->safe_psql('postgres', "SELECT problem FROM outbox_jetstream_check('named')");
like($problem, qr/cannot connect: /, 'outbox_jetstream_check() fails against it too');
is(fake_status()->{other_accepted}, 0, 'the server only its INFO named was never connected to');

$fake->kill_kill;
done_testing();
