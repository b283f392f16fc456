# Signatures as receivers check them: key rotation and v1a (ed25519). Each
# message carries one signature per secret in use, space-separated in
# webhook-signature; each is verified by Node's crypto module
# (test/verify_signature.js), each v1 also by the npm standardwebhooks
# package, and each v1a also by the OpenSSL command line,
# never by the extension's own code. The rotation is the procedure the
# README gives: add the new secret, receivers move to it while both sign,
# retire the old one after an overlap; a receiver holding either secret
# verifies every message meanwhile. NOTIFY destinations sign the same way.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use Encode ();
use IPC::Run ();
use JSON::PP;
use MIME::Base64 qw(encode_base64 decode_base64);
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('signatures');
my $sink = start_sink();
ok(wait_relay($node, 'postgres'), 'relay runs');
sub sql { return $node->safe_psql('postgres', $_[0]); }

my $old = 'whsec_' . encode_base64('the old key of the hook', '');
sql(sprintf(q{INSERT INTO outbox_destinations (name, event_types, url, secret) VALUES ('hook', 'h.*', '%s', '%s')},
	$sink->url('/hook'), $old));

# For each key, whether one of the signatures of $msg ({id, timestamp,
# body, signature}) verifies with it, as Node's crypto says: "t" or "f".
sub node_verdicts
{
	my ($msg, @keys) = @_;
	return join('', map { $_ ? 't' : 'f' } @{ node_json('verify_signature.js', { %$msg, keys => \@keys }) });
}

# For each v1 secret, whether the npm standardwebhooks package (the
# specification's reference library) accepts $msg with it: "t" or "f".
sub library_verdicts
{
	my ($msg, @secrets) = @_;
	my $verdicts = node_json('standardwebhooks_check.js', {
			headers => { 'webhook-id' => $msg->{id}, 'webhook-timestamp' => $msg->{timestamp},
				'webhook-signature' => $msg->{signature} },
			body => $msg->{body}, secrets => \@secrets }, 'standardwebhooks');
	return join('', map { $_ ? 't' : 'f' } @$verdicts);
}

# Whether the OpenSSL command line verifies $msg's v1a signature with
# public key $whpk (ed25519, raw input).
sub openssl_verifies
{
	my ($msg, $whpk) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my ($v1a) = grep { s/^v1a,// } split / /, $msg->{signature};
	return 0 unless defined $v1a;
	# an ed25519 SubjectPublicKeyInfo (RFC 8410): a fixed prefix, then the key
	my $spki = pack('H*', '302a300506032b6570032100') . decode_base64(substr($whpk, 5));
	PostgreSQL::Test::Utils::append_to_file("$dir/pub.pem",
		"-----BEGIN PUBLIC KEY-----\n" . encode_base64($spki) . "-----END PUBLIC KEY-----\n");
	open my $fh, '>:raw', "$dir/content" or die $!;
	print $fh Encode::encode_utf8("$msg->{id}.$msg->{timestamp}.$msg->{body}");
	close $fh;
	open $fh, '>:raw', "$dir/sig" or die $!;
	print $fh decode_base64($v1a);
	close $fh;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ 'openssl', 'pkeyutl', '-verify', '-pubin', '-inkey', "$dir/pub.pem",
			'-rawin', '-in', "$dir/content", '-sigfile', "$dir/sig" ], '>', \$out, '2>', \$err);
	return $ok && $out =~ /Signature Verified Successfully/;
}

# Emits one event of type $type and returns its request as the hook got it.
sub signed_request
{
	my ($type) = @_;
	my ($id) = @{ emit($node, 'postgres', $type, 1) };
	ok( $node->poll_query_until('postgres', "SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$id'"),
		"$type: delivered");
	my ($req) = grep { $_->{webhook_id} eq $id } @{ $sink->requests('/hook') };
	return {
		id => $req->{webhook_id},
		timestamp => $req->{headers}{'webhook-timestamp'},
		body => $req->{body},
		signature => $req->{headers}{'webhook-signature'},
	};
}

sub schemes { return join(' ', map { (split /,/)[0] } split / /, $_[0]->{signature}); }

# 1. one secret, one signature
my $msg = signed_request('h.one');
is(schemes($msg), 'v1', 'one secret: one v1 signature');
is(node_verdicts($msg, $old, 'whsec_' . encode_base64('another key', '')), 'tf',
	'it verifies with the secret, not with another');
is(library_verdicts($msg, $old, 'whsec_' . encode_base64('another key', '')), 'tf',
	'so says the standardwebhooks package');

# 2. a new v1 secret and a new ed25519 key: three signatures, in the order
# of the secret column, then the secrets added, oldest first
my $new = sql(q{SELECT outbox_add_secret('hook')});
like($new, qr/^whsec_[A-Za-z0-9+\/]{43}=$/, 'outbox_add_secret makes a v1 secret and returns it');
my $whpk = sql(q{SELECT outbox_add_secret('hook', scheme => 'v1a')});
like($whpk, qr/^whpk_[A-Za-z0-9+\/]{43}=$/, 'outbox_add_secret makes an ed25519 key and returns its public key');
is(sql(q{SELECT public_key FROM outbox_destination_secrets WHERE secret LIKE 'whsk\_%'}), $whpk,
	'the public key is readable in outbox_destination_secrets');
# and an ed25519 key in its 64-byte form (seed, then public key), made here
# from a new seed and its public key
my $long_whpk = sql(q{
	SELECT outbox_add_secret('hook', 'whsk_' || translate(encode(
	           decode(substr(s, 6), 'base64') || decode(substr(outbox_public_key(s), 6), 'base64'),
	           'base64'), E'\n', ''))
	  FROM _outbox_new_secret('v1a') s});
like($long_whpk, qr/^whpk_[A-Za-z0-9+\/]{43}=$/, 'a 64-byte ed25519 key is taken; its public key is returned');
is(sql(q{SELECT length(secret) FROM outbox_destination_secrets WHERE public_key = '} . $long_whpk . q{'}),
	'93', 'it is stored as given: whsk_ and the base64 of 64 bytes');
$msg = signed_request('h.three');
is(schemes($msg), 'v1 v1 v1a v1a', 'four secrets: four signatures, space-separated');
is(node_verdicts($msg, $old, $new, $whpk, $long_whpk), 'tttt', 'a receiver holding any one of them verifies the message');
is(library_verdicts($msg, $old, $new), 'tt', 'the standardwebhooks package verifies with either v1 secret');
ok(openssl_verifies({ %$msg, signature => (split / /, $msg->{signature})[3] }, $long_whpk),
	'the OpenSSL command line verifies the 64-byte key\'s signature');
sql(qq{SELECT outbox_retire_secret('hook', '$long_whpk')});
$msg = signed_request('h.three_again');
is(schemes($msg), 'v1 v1 v1a', 'the 64-byte key retired: three signatures');
ok(openssl_verifies($msg, $whpk), 'the OpenSSL command line verifies the v1a signature');
my $forged = { %$msg, body => $msg->{body} . ' ' };
is(node_verdicts($forged, $old, $new, $whpk), 'fff', 'a changed body verifies with none');
ok(!openssl_verifies($forged, $whpk), 'nor with the OpenSSL command line');

# 3. the old secret retires after an overlap: it still signs meanwhile
like(sql(qq{SELECT outbox_retire_secret('hook', '$old', '1 hour') > now()}), qr/^t$/,
	'the old secret retires in an hour');
is(sql(q{SELECT secret IS NULL FROM outbox_destinations WHERE name = 'hook'}), 't',
	'it left the secret column for outbox_destination_secrets');
$msg = signed_request('h.overlap');
is(node_verdicts($msg, $old, $new, $whpk), 'ttt', 'during the overlap, the old secret still verifies');
is(library_verdicts($msg, $old, $new), 'tt', 'for the standardwebhooks package too');

# 4. the overlap ends (its time is made to pass): the old one no longer signs
sql(qq{UPDATE outbox_destination_secrets SET retire_at = now() - interval '1 second' WHERE secret = '$old'});
$msg = signed_request('h.after');
is(schemes($msg), 'v1 v1a', 'after the overlap: two signatures');
is(node_verdicts($msg, $old, $new, $whpk), 'ftt', 'the old secret verifies no more, the others do');
is(library_verdicts($msg, $old, $new), 'ft', 'for the standardwebhooks package too');

# 5. the ed25519 key, named by its public key, retires now
sql(qq{SELECT outbox_retire_secret('hook', '$whpk')});
$msg = signed_request('h.last');
is(schemes($msg), 'v1', 'retired now: one signature left');
is(node_verdicts($msg, $new, $whpk), 'tf', 'made with the new secret');

# 6. a NOTIFY channel with a raw secret and the ed25519 key of RFC 8032's
# first test vector signs each notification with both; rotates the same way
sql(q{INSERT INTO outbox_destinations (name, event_types, channel, secret) VALUES ('chan', 'c.*', 'signed_chan', 'channel raw secret')});
my $rfc_whpk = sql(q{SELECT outbox_add_secret('chan', 'whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=')});
is($rfc_whpk, 'whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=', "the key's public key is RFC 8032's");
my $listener = start_listener($node, 'postgres', 'signed_chan');
my ($cid) = @{ emit($node, 'postgres', 'c.one', 1) };
ok($node->poll_query_until('postgres', "SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$cid'"),
	'the notification is sent');
ok($listener->sync, 'and received');
my $note = decode_json($listener->notes->[0]{payload});
$msg = {
	id => $note->{'webhook-id'},
	timestamp => $note->{'webhook-timestamp'},
	body => $note->{body},
	signature => $note->{'webhook-signature'},
};
is($msg->{id}, $cid, 'the notification is the event');
is(schemes($msg), 'v1 v1a', 'a channel: one signature per secret');
is(node_verdicts($msg, 'channel raw secret', $rfc_whpk), 'tt', 'both verify');
ok(openssl_verifies($msg, $rfc_whpk), 'the v1a one with the OpenSSL command line too');

# the channel's raw secret retires now: the next notification carries the v1a one only
sql(q{SELECT outbox_retire_secret('chan', 'channel raw secret')});
($cid) = @{ emit($node, 'postgres', 'c.two', 1) };
ok($node->poll_query_until('postgres', "SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$cid'"),
	'a channel, after the retirement: sent');
ok($listener->sync, 'and received');
$note = decode_json($listener->notes->[1]{payload});
$msg = { id => $note->{'webhook-id'}, timestamp => $note->{'webhook-timestamp'}, body => $note->{body},
	signature => $note->{'webhook-signature'} };
is($msg->{id}, $cid, 'a channel, after the retirement: the second event');
is(schemes($msg), 'v1a', 'a channel, after the retirement: one signature');
is(node_verdicts($msg, 'channel raw secret', $rfc_whpk), 'ft', 'a channel: the retired secret verifies no more');
$listener->quit;

$sink->stop;
$node->stop;
done_testing();
