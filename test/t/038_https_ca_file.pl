# An https webhook whose certificate a private CA signed: delivered with
# the destination's ca_file, refused without it or with another CA, with
# libcurl's reason in last_error; a ca_file that cannot be read is an
# error of its own. The relay reads the file itself, as the server's OS
# user: only a regular file of at most 1 MB, never waiting for a FIFO's
# writer, so that no file named holds or fills the relay; a changed file
# or path is taken up. Setting ca_file needs the privileges of
# pg_read_server_files.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use File::Copy qw(copy);
use POSIX qw(mkfifo);
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
is(first_outcome('m.x'), 'ca_file cannot be opened: No such file or directory',
	'a ca_file that cannot be read: an error that says why');
is(scalar @{ $sink->delivered('/secure') }, 1, 'nothing else reached the endpoint');

# Files that are not a regular file of at most 1 MB, named by a superuser:
# a FIFO (libcurl would wait for a writer for ever), a device that never
# ends, a directory, a file one byte over the limit. Each event fails at
# once with the reason; an event of the good destination, emitted with
# them, is delivered meanwhile by the same relay.
my $dir = PostgreSQL::Test::Utils::tempdir();
mkfifo("$dir/fifo", 0600) or die "mkfifo: $!";
open(my $fh, '>', "$dir/big.pem") or die $!;
print $fh 'x' x (1024 * 1024 + 1);
close $fh;
my %bad = (fifo => "$dir/fifo", zero => '/dev/zero', dir => $dir, big => "$dir/big.pem");
sql(join(';', map { "INSERT INTO outbox_destinations (name, event_types, url, ca_file)
	VALUES ('$_', '$_.*', '$url', '$bad{$_}')" } sort keys %bad));
my $relay = relay_pid($node, 'postgres');
my $ids = join(',', map { "'$_'" } split /\n/,
	sql(q{SELECT outbox_emit(t || '.x', '{}') FROM unnest('{fifo,zero,dir,big,p}'::text[]) t}));
ok($node->poll_query_until('postgres', "SELECT count(*) = 5 FROM outbox WHERE event_id IN ($ids)
	AND (delivered_at IS NOT NULL OR last_error IS NOT NULL)"), 'each of them has an outcome');
is(sql("SELECT string_agg(event_type || ': ' || coalesce(last_error, 'delivered'), E'\\n' ORDER BY event_type)
		FROM outbox WHERE event_id IN ($ids) AND dead_at IS NULL"),
	join("\n", 'big.x: ca_file is larger than 1048576 bytes',
		'dir.x: ca_file is not a regular file',
		'fifo.x: ca_file is not a regular file',
		'p.x: delivered',
		'zero.x: ca_file is not a regular file'),
	'a FIFO, /dev/zero, a directory, a file over 1 MB: refused, to be retried; the good one delivered');
is(relay_pid($node, 'postgres'), $relay, 'by the same relay');

# a regular file within the limit that holds no certificate verifies nothing
copy($other->{key}, "$dir/junk.pem") or die $!;
sql(qq{INSERT INTO outbox_destinations (name, event_types, url, ca_file)
	VALUES ('junk', 'junk.*', '$url', '$dir/junk.pem')});
like(first_outcome('junk.x'), qr/^HTTP request failed: /,
	'a file without a certificate: refused (libcurl: error importing CA certificate blob)');

# the copy a destination keeps is taken up again when its file changes ...
copy($other->{ca}, "$dir/swap.pem") or die $!;
sql(qq{INSERT INTO outbox_destinations (name, event_types, url, ca_file)
	VALUES ('swap', 'sw.*', '$url', '$dir/swap.pem')});
like(first_outcome('sw.x'), qr/^HTTP request failed: SSL certificate /, 'with another CA in its file: refused');
copy($certs->{ca}, "$dir/swap.pem.new") or die $!;
rename("$dir/swap.pem.new", "$dir/swap.pem") or die $!;
ok($node->poll_query_until('postgres',
	q{SELECT delivered_at IS NOT NULL FROM outbox WHERE event_type = 'sw.x'}),
	'the file replaced by the right CA: delivered on a retry');
# ... and when the destination names another file
sql(qq{UPDATE outbox_destinations SET ca_file = '$certs->{ca}' WHERE name = 'wrong'});
is(first_outcome('w.x'), 'delivered', 'ca_file changed to the right CA: delivered');

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
