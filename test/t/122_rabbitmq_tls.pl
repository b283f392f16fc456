# The rabbitmq kind over TLS (amqps://), against a real rabbitmq-server with
# a TLS listener on 127.0.0.1 and a certificate of a private CA:
#   a. with the CA in tls_ca_file, events are delivered
#   b. without it (the system's CAs) and with a CA file that is not a
#      regular file or holds no certificate: each a clear last_error, no
#      event delivered, the relay unharmed
#   c. SIGTERM ends the relay within a second while a TLS connection is
#      being made to a server that accepts and never answers (the connect
#      thread is inside OpenSSL as the process exits), with no crash
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use File::Spec;
use IO::Socket::INET;
use Time::HiRes qw(time);
use OutboxRabbitmq;
use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

require_kind('rabbitmq');
plan skip_all => 'rabbitmq-server or npm amqplib is not installed (ci/deps.sh installs them)'
  unless rabbitmq_available();

my $certs = make_certificates('outbox rabbitmq');
my $ca = File::Spec->rel2abs($certs->{ca});
my $rmq = start_rabbitmq(tls => $certs);
$rmq->tool({ command => 'setup', queues => [ { name => 'tls' } ] });
my $node = outbox_node('rabbitmq_tls');
my $pid = wait_relay($node, 'postgres');
ok($pid, 'relay runs');

sub destination
{
	my ($name, %options) = @_;
	$node->safe_psql('postgres', sprintf(q{
		INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('%s', 'rabbitmq', '%s.*', '%s')},
		$name, $name, $rmq->options(urls => "amqps://127.0.0.1:$rmq->{tls_port}", routing_key => 'tls', %options)));
}

sub last_error { my ($type) = @_; return last_error_of($node, $type); }

# a. the private CA, read by the relay from tls_ca_file
destination('good', tls_ca_file => $ca);
$node->safe_psql('postgres', q{SELECT count(outbox_emit('good.x', jsonb_build_object('n', g))) FROM generate_series(1, 100) g});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 100 FROM outbox WHERE event_type = 'good.x' AND delivered_at IS NOT NULL"),
	'a: 100 events delivered over TLS');
my $got = $rmq->tool({ command => 'consume', queue => 'tls', count => 100, timeout_ms => 30_000 })->{messages};
is(scalar(@$got), 100, 'a: 100 messages in the queue');

# b. a server certificate of a CA the relay does not trust, a CA file that
# is no regular file, and one that holds no certificate
my $port = $rmq->{tls_port};
destination('untrusted');
emit($node, 'postgres', 'untrusted.x', 1);
is(last_error('untrusted.x'),
	"cannot connect to RabbitMQ: amqps://127.0.0.1:$port: cannot connect: SSL peer cert verification failed",
	'b: a certificate of a CA the relay does not trust (the system\'s CAs): refused, said');
destination('devzero', tls_ca_file => '/dev/zero');
emit($node, 'postgres', 'devzero.x', 1);
is(last_error('devzero.x'),
	"cannot connect to RabbitMQ: amqps://127.0.0.1:$port: tls_ca_file is not a regular file",
	'b: a CA file that is not a regular file');
my $empty = File::Spec->rel2abs(PostgreSQL::Test::Utils::tempdir() . '/empty.pem');
PostgreSQL::Test::Utils::append_to_file($empty, "not a certificate\n");
destination('empty', tls_ca_file => $empty);
emit($node, 'postgres', 'empty.x', 1);
is(last_error('empty.x'),
	"cannot connect to RabbitMQ: amqps://127.0.0.1:$port: destination tls_ca_file holds no PEM certificate",
	'b: a CA file without a certificate');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox WHERE event_type IN ('untrusted.x', 'devzero.x', 'empty.x') AND delivered_at IS NOT NULL}),
	'0', 'b: none of those delivered');
is(relay_pid($node, 'postgres'), $pid, 'b: the same relay ran through all of it');

# c. SIGTERM while a TLS connection is being made to a silent server
my $silent = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 16, ReuseAddr => 1)
  or die "listen: $!";
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, kind, event_types, options, timeout_ms)
	VALUES ('silent', 'rabbitmq', 'silent.*', '{"urls": "amqps://127.0.0.1:%d", "tls_ca_file": "%s"}', 60000);
	SELECT outbox_emit('silent.x', '{}')}, $silent->sockport, $ca));
ok($node->poll_query_until('postgres', "SELECT count(*) = 1 FROM outbox_in_flight f JOIN outbox e ON e.id = ANY (f.ids) WHERE e.event_type = 'silent.x'"),
	'c: the event is in flight, its TLS connection being made');
my $t0 = time();
kill 'TERM', $pid;
ok(wait_until(sub { !kill(0, $pid) }), 'c: the relay ended');
my $took = time() - $t0;
cmp_ok($took, '<', time_bound(1), sprintf('c: within a second, where the connection may take 60 s (%.3f s)', $took));
ok(wait_relay($node, 'postgres', $pid), 'c: a new relay runs');
unlike(slurp_file($node->logfile), qr/PANIC|TRAP|terminated by signal|exited with exit code [^01]/,
	'c: the relay exited cleanly, no crash');

$node->stop;
$rmq->stop;
done_testing();
