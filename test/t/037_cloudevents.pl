# Webhooks in CloudEvents 1.0 (HTTP protocol binding): structured mode
# (format cloudevents) and binary mode (cloudevents-binary). Each request
# is read by the npm cloudevents SDK's HTTP receiver (test/cloudevents_check.js)
# and checked raw as well, where the SDK accepts too much (it adds a time
# that is missing, and does not percent-decode headers): the mapping of
# every attribute, the percent-encoding of header values, ce-time in
# RFC 3339 UTC under a server TimeZone and DateStyle that would print
# otherwise, and the Standard Webhooks signature over the body. Then a
# LATIN1 database: its ce-* values percent-encoded from UTF-8 and its body
# in UTF-8, built in the claim's transaction (the relay sends without one).
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use Digest::SHA qw(hmac_sha256_base64);
use Encode qw(encode_utf8);
use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;


my $node = outbox_node('cloudevents', timezone => "'Pacific/Chatham'", datestyle => "'SQL, DMY'");
my $sink = start_sink();
ok(wait_relay($node, 'postgres'), 'relay runs');
sub sql { return $node->safe_psql('postgres', $_[0]); }

sql(sprintf(q{
	INSERT INTO outbox_destinations (name, event_types, url, format, cloudevents_source, secret) VALUES
		('ce_s', 'cs.*', '%s', 'cloudevents', 'https://shop.example/orders', 'ce secret');
	UPDATE outbox_destinations SET headers = '{"ce-type": "forged", "x-tenant": "t0"}' WHERE name = 'ce_s';
	INSERT INTO outbox_destinations (name, event_types, url, format, headers) VALUES
		('ce_b', 'cb.*', '%s', 'cloudevents-binary', '{"ce-type": "forged", "x-tenant": "t1"}');},
	$sink->url('/structured'), $sink->url('/binary')));

# The SDK's reading of a request: {events, valid} or {error}.
sub sdk
{
	my ($req) = @_;
	return node_json('cloudevents_check.js', { headers => $req->{headers}, body => $req->{body} },
		'cloudevents');
}

# Emits one event (its payload and aggregate fields SQL expressions) and
# returns its event_id and its request as the sink got it.
sub request_of
{
	my ($path, $type, $payload, $agg_type, $agg_id) = @_;
	my $id = sql(sprintf(q{SELECT outbox_emit('%s', %s, %s, %s)}, $type, $payload, $agg_type, $agg_id));
	ok($node->poll_query_until('postgres', "SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$id'"),
		"$type: delivered");
	my ($req) = grep { $_->{webhook_id} eq $id } @{ $sink->requests($path) };
	return ($id, $req);
}

# ce-time / time: RFC 3339 in UTC with Z, the instant of created_at
sub time_ok
{
	my ($time, $id, $what) = @_;
	like($time, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$/, "$what: RFC 3339, UTC, Z");
	is(sql("SELECT '$time'::timestamptz = created_at FROM outbox WHERE event_id = '$id'"), 't',
		"$what: the instant of created_at");
}

############################################################################
# structured mode

my ($id, $req) = request_of('/structured', 'cs.paid', q{'{"total": 9.5, "note": "caf\u00e9"}'}, q{'order'}, q{'42'});
is($req->{headers}{'content-type'}, 'application/cloudevents+json', 'structured: Content-Type');
my $ce = decode_json(encode_utf8($req->{body}));
time_ok($ce->{time}, $id, 'structured: time');
is( $req->{body},
	qq({"specversion": "1.0", "id": "$id", "source": "https://shop.example/orders", "type": "cs.paid", )
	  . qq("time": "$ce->{time}", "subject": "order/42", "partitionkey": "order/42", )
	  . qq("datacontenttype": "application/json", "data": {"note": "caf\x{e9}", "total": 9.5}}),
	'structured: the body, member by member');
my $sdk = sdk($req);
is_deeply($sdk->{valid}, [JSON::PP::true], 'structured: the SDK reads one valid event');
is( join('|', map { $sdk->{events}[0]{$_} // 'undef' } qw(id type source subject partitionkey specversion datacontenttype)),
	"$id|cs.paid|https://shop.example/orders|order/42|order/42|1.0|application/json", 'structured: its attributes');
is_deeply($sdk->{events}[0]{data}, { total => 9.5, note => "caf\x{e9}" }, 'structured: its data is the payload');
my $signed = encode_utf8("$id.$req->{headers}{'webhook-timestamp'}.$req->{body}");
my $mac = hmac_sha256_base64($signed, 'ce secret');
$mac .= '=' while length($mac) % 4;
is($req->{headers}{'webhook-signature'}, "v1,$mac", 'structured: the Standard Webhooks signature covers the body');
is(join('|', map { $req->{headers}{$_} // 'absent' } qw(x-tenant ce-type)), 't0|absent',
	"structured: the destination's headers are sent, but not a ce-* one");

# an aggregate id without a type: the subject is the id alone; without an
# aggregate: no subject, no partitionkey
($id, $req) = request_of('/structured', 'cs.noted', q{'{}'}, 'NULL', q{'k-7'});
$ce = decode_json(encode_utf8($req->{body}));
is(join('|', map { $ce->{$_} // 'absent' } qw(subject partitionkey)), 'k-7|k-7',
	'structured, aggregate_type NULL: subject and partitionkey are the aggregate_id');
($id, $req) = request_of('/structured', 'cs.plain', q{'{}'}, 'NULL', 'NULL');
$ce = decode_json(encode_utf8($req->{body}));
is(join('|', sort keys %$ce), 'data|datacontenttype|id|source|specversion|time|type',
	'structured, no aggregate: no subject, no partitionkey');
is_deeply(sdk($req)->{valid}, [JSON::PP::true], 'structured, no aggregate: valid for the SDK');

############################################################################
# binary mode: a hostile aggregate id, and no aggregate

($id, $req) = request_of('/binary', 'cb.paid', q{'{"total": 1}'}, q{'order'}, q{'a b"%' || chr(233) || '/1'});
my $h = $req->{headers};
is($h->{'content-type'}, 'application/json', 'binary: Content-Type is the data\'s');
is($req->{body}, '{"total": 1}', 'binary: the body is the payload');
is( join('|', map { $h->{"ce-$_"} // 'absent' } qw(specversion id source type subject partitionkey)),
	"1.0|$id|/outbox/postgres|cb.paid|order/a%20b%22%25%C3%A9/1|order/a%20b%22%25%C3%A9/1",
	'binary: ce-* headers, the default source, values percent-encoded (space, quote, percent, UTF-8)');
time_ok($h->{'ce-time'}, $id, 'binary: ce-time');
is($h->{'x-tenant'}, 't1', "binary: the destination's other headers are sent");
is(scalar(grep { lc($_) eq 'ce-type' } @{ $req->{header_names} }), 1,
	"binary: a destination's ce-type header is not sent: the attribute is the event's");
$sdk = sdk($req);
is_deeply($sdk->{valid}, [JSON::PP::true], 'binary: the SDK reads one valid event');
is( join('|', map { $sdk->{events}[0]{$_} // 'undef' } qw(id type source partitionkey)),
	"$id|cb.paid|/outbox/postgres|order/a%20b%22%25%C3%A9/1", 'binary: its attributes, as sent');
is_deeply($sdk->{events}[0]{data}, { total => 1 }, 'binary: its data');

($id, $req) = request_of('/binary', 'cb.plain', q{'[1, 2]'}, 'NULL', 'NULL');
$h = $req->{headers};
is(join('|', map { $h->{"ce-$_"} // 'absent' } qw(id subject partitionkey)), "$id|absent|absent",
	'binary, no aggregate: no ce-subject, no ce-partitionkey');
$sdk = sdk($req);
is_deeply([ $sdk->{valid}, $sdk->{events}[0]{data} ], [ [JSON::PP::true], [ 1, 2 ] ],
	'binary, no aggregate: valid, its data an array');

############################################################################
# a LATIN1 database: the relay builds the ce-* headers in the claim's
# transaction, converting to UTF-8 there, and sends them without one

$node->safe_psql('postgres',
	q{CREATE DATABASE latin ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0});
$node->safe_psql('latin', 'CREATE EXTENSION outbox');
$node->safe_psql('latin', sprintf(q{
	INSERT INTO outbox_destinations (name, event_types, url, format) VALUES ('ce_l', 'cl.*', '%s', 'cloudevents-binary')},
	$sink->url('/latin')));
my $latin_pid = relay_pid($node, 'postgres');
set_databases($node, 'postgres, latin');
ok(wait_relay($node, 'latin'), 'latin: its relay runs');
my $lid = $node->safe_psql('latin',
	q{SELECT outbox_emit('cl.paid', '{"note": "caf\u00e9"}', 'client', 'Zo' || chr(235) || ' M' || chr(252) || 'ller')});
ok($node->poll_query_until('latin', "SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$lid'"),
	'latin: delivered');
($req) = @{ $sink->requests('/latin') };
is(join('|', map { $req->{headers}{"ce-$_"} // 'absent' } qw(source subject)),
	'/outbox/latin|client/Zo%C3%AB%20M%C3%BCller', 'latin: the subject percent-encoded from UTF-8');
is(decode_json(encode_utf8($req->{body}))->{note}, "caf\x{e9}", 'latin: the payload, UTF-8 on the wire');
ok(wait_relay($node, 'latin'), 'latin: the relay still runs');
is(relay_pid($node, 'postgres'), $latin_pid, 'the relay of postgres is the same throughout');

$sink->stop;
$node->stop;
done_testing();
