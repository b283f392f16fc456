# An https webhook whose certificate a private CA signed: delivered with
# the destination's ca_file, refused without it or with another CA, with
# libcurl's reason in last_error; a ca_file that cannot be read is an
# error of its own. The relay reads the file as the server's OS user, so
# setting ca_file needs the privileges of pg_read_server_files.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $certs = make_certificates('outbox https');
my $other = make_certificates('another');
my $node = outbox_node('https_ca');
my $sink = start_sink(tls => $certs);
ok(wait_relay($node, 'postgres'), 'relay runs');
sub sql { return $node->safe_psql('postgres', $_[0]); }

my $url = $sink->url('/secure');
like($url, qr{^https://127\.0\.0\.1:\d+/secure$}, 'the endpoint is https on 127.0.0.1');
sql(qq{
	INSERT INTO outbox_destinations (name, event_types, url, ca_file) VALUES
		('private', 'p.*', '$url', '$certs->{ca}'),
		('system', 's.*', '$url', NULL),
		('wrong', 'w.*', '$url', '$other->{ca}'),
		('missing', 'm.*', '$url', '/nonexistent/ca.pem');
});

# Emits one event of type $type and waits for its first recorded attempt;
# returns "delivered" or its last_error.
sub first_outcome
{
	my ($type) = @_;
	my ($id) = @{ emit($node, 'postgres', $type, 1) };
	$node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL OR last_error IS NOT NULL FROM outbox WHERE event_id = '$id'")
	  or die "no outcome for $type";
	return sql("SELECT CASE WHEN delivered_at IS NOT NULL THEN 'delivered' ELSE last_error END
		FROM outbox WHERE event_id = '$id'");
}

is(first_outcome('p.x'), 'delivered', 'with the CA as ca_file: delivered over https');
is(scalar @{ $sink->delivered('/secure') }, 1, 'the endpoint got it');
# libcurl's words differ between versions ("SSL certificate problem: ..."
# in 7.88, "SSL certificate OpenSSL verify result: ..." in 8.x)
like(first_outcome('s.x'), qr/^HTTP request failed: SSL certificate .*unable to get local issuer certificate/,
	'without ca_file (the system CAs): refused, the reason in last_error');
like(first_outcome('w.x'), qr/^HTTP request failed: SSL certificate .*unable to get local issuer certificate/,
	'with another CA: refused');
like(first_outcome('m.x'), qr{^HTTP request failed: .*/nonexistent/ca\.pem},
	'a ca_file that cannot be read: an error that names it');
is(scalar @{ $sink->delivered('/secure') }, 1, 'nothing else reached the endpoint');

# who may name a file: pg_read_server_files, only when the value changes
sql(q{CREATE ROLE admin LOGIN IN ROLE outbox_admin; GRANT USAGE ON SCHEMA public TO admin;});
my ($ret, $out, $err) = $node->psql('postgres',
	"UPDATE outbox_destinations SET ca_file = '$other->{ca}' WHERE name = 'private'",
	extra_params => [ '-U', 'admin' ]);
like($err, qr/permission denied to name a file in a destination/, 'outbox_admin alone may not set ca_file');
($ret, $out, $err) = $node->psql('postgres', "UPDATE outbox_destinations SET timeout_ms = 3000 WHERE name = 'private'",
	extra_params => [ '-U', 'admin' ]);
is($err, '', 'but may change the rest of a destination that has one');
($ret, $out, $err) = $node->psql('postgres', "UPDATE outbox_destinations SET ca_file = 'ca.pem' WHERE name = 'private'");
like($err, qr/destination ca_file is not valid/, 'a relative path is refused');
($ret, $out, $err) = $node->psql('postgres',
	"INSERT INTO outbox_destinations (name, event_types, channel, ca_file) VALUES ('ca_chan', 'c.*', 'c', '/x.pem')");
like($err, qr/destination ca_file is for a webhook/, 'a channel has no ca_file');
sql(q{GRANT pg_read_server_files TO admin});
($ret, $out, $err) = $node->psql('postgres',
	"UPDATE outbox_destinations SET ca_file = '$other->{ca}' WHERE name = 'private'",
	extra_params => [ '-U', 'admin' ]);
is($err, '', 'with pg_read_server_files it may');

$sink->stop;
$node->stop;
done_testing();
