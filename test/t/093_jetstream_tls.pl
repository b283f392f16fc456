# A JetStream destination over TLS with a token: a server whose certificate
# a private CA signed (made here with the openssl command line), the CA
# named by nats_ca_file. Then what goes wrong, each a failed attempt with a
# clear reason and the relay running on: a CA that did not sign the
# server's certificate, a nats:// URL to a server that requires TLS, a
# wrong token, a CA file that does not exist, a tls:// URL to a server without TLS (the token is not sent
# in clear: libnats would take tls:// for nats:// if not told). The token
# never reaches the log or last_error. And outbox_relay() from a session.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxNats;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $certs = make_certificates('outbox');
my $other = make_certificates('other');
my $token = 'tok-9f8e7d6c5b4a';
my $nats = start_nats(tls => $certs, token => $token);
$nats->add_stream('SECURE', 'secure.>');
my $port = $nats->{port};
my $plain = start_nats(token => $token);
$plain->add_stream('PLAIN', 'plain.>');
my $plain_port = $plain->{port};

my $node = outbox_node('jstls');
my $pid = wait_relay($node, 'postgres');
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream, nats_token, nats_ca_file) VALUES
	    ('good', 'tls.good', 'tls://127.0.0.1:$port', 'secure.good', 'SECURE', '$token', '$certs->{ca}'),
	    ('wrong_ca', 'tls.wrong_ca', 'tls://127.0.0.1:$port', 'secure.wrong', 'SECURE', '$token', '$other->{ca}'),
	    ('plain', 'tls.plain', 'nats://127.0.0.1:$port', 'secure.plain', 'SECURE', '$token', NULL),
	    ('bad_token', 'tls.bad_token', 'tls://127.0.0.1:$port', 'secure.bad', 'SECURE', 'not-the-token', '$certs->{ca}'),
	    ('no_tls', 'tls.no_tls', 'tls://127.0.0.1:$plain_port', 'plain.x', 'PLAIN', '$token', NULL),
	    ('no_ca', 'tls.no_ca', 'tls://127.0.0.1:$port', 'secure.no_ca', 'SECURE', '$token', '$certs->{ca}.missing');
	SELECT outbox_emit(t, '{}') FROM unnest(ARRAY['tls.good', 'tls.wrong_ca', 'tls.plain', 'tls.bad_token', 'tls.no_tls', 'tls.no_ca']) t;
});

ok( $node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL FROM outbox WHERE event_type = 'tls.good'"),
	'delivered over TLS, the server verified with the CA file, the token accepted');
is($nats->count('SECURE'), 1, 'the stream holds it');

ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 5 FROM outbox WHERE event_type <> 'tls.good' AND attempts >= 2 AND dead_at IS NULL"),
	'the others fail, and are retried');
my %errors = map { split /\|/, $_, 2 } split /\n/,
  $node->safe_psql('postgres', "SELECT event_type, last_error FROM outbox WHERE event_type <> 'tls.good'");
like($errors{'tls.wrong_ca'},
	qr/^NATS at tls:\/\/127\.0\.0\.1:$port, stream "SECURE": cannot connect: SSL handshake error: .*(unable to get local issuer certificate|certificate verify failed)/,
	'a CA that did not sign the certificate: the verification failed');
like($errors{'tls.plain'},
	qr/^NATS at nats:\/\/127\.0\.0\.1:$port, stream "SECURE": cannot connect: .*(secure|TLS|SSL)/i,
	'a nats:// URL to a server that requires TLS');
is($errors{'tls.bad_token'},
	"NATS at tls://127.0.0.1:$port, stream \"SECURE\": cannot connect: the server refused the credentials (Authorization Violation)",
	'a wrong token');
like($errors{'tls.no_tls'},
	qr/^NATS at tls:\/\/127\.0\.0\.1:$plain_port, stream "PLAIN": cannot connect: .*(secure|TLS|SSL)/i,
	'a tls:// URL to a server without TLS: refused, not sent in clear');
is($plain->count('PLAIN'), 0, 'nothing reached the server without TLS');
like($errors{'tls.no_ca'},
	qr/^NATS at tls:\/\/127\.0\.0\.1:$port, stream "SECURE": the connection options are not valid: .+/,
	'a CA file that does not exist');
is(relay_pid($node, 'postgres'), $pid, 'the same relay throughout');
is((grep { /\[$pid\]/ && /\Q$token\E|not-the-token/ } split /\n/, slurp_file($node->logfile)), 0,
	"no token in the relay's log lines");
is((grep { /\Q$token\E|not-the-token/ } values %errors), 0, 'nor in last_error');

# outbox_relay() from a session, the worker stopped: the session's backend
# makes its own connection and waits for the PubAck.
$node->safe_psql('postgres', q{
	SELECT outbox_cancel(event_id, 'test done') FROM outbox WHERE event_type <> 'tls.good'});
set_databases($node, '');
ok(wait_no_relay($node, 'postgres'), 'worker stopped');
my $sid = $node->safe_psql('postgres', q{SELECT outbox_emit('tls.good', '{"by": "session"}')});
is($node->safe_psql('postgres', 'SELECT delivered, failed FROM outbox_relay()'), '1|0',
	'outbox_relay() in a session delivers over TLS');
is($node->safe_psql('postgres', "SELECT attempts FROM outbox WHERE event_id = '$sid' AND delivered_at IS NOT NULL"),
	'1', 'marked delivered');
is($nats->count('SECURE'), 2, 'the stream holds it');

done_testing();
