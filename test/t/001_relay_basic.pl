# The relay worker: visible in pg_stat_activity, delivers committed events to
# a webhook with Standard Webhooks headers, is woken at COMMIT rather than by
# its poll timer, never delivers a rolled-back event, and reloads settings.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use Digest::SHA qw(hmac_sha256_base64);
use Encode qw(encode_utf8);
use JSON::PP;
use MIME::Base64 qw(decode_base64);
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

# A one-hour poll interval: an event that arrives was delivered because the
# COMMIT woke the relay.
my $node = outbox_node('basic', 'outbox.poll_interval' => "'1h'");
my $sink = start_sink();

ok(wait_relay($node, 'postgres'), 'relay worker runs in database postgres');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox launcher'"),
	'1', 'one launcher');
# custom wait events exist from PostgreSQL 17; before, it is "Extension"
my $wait_event = $node->pg_version >= 17 ? 'OutboxRelayMain' : 'Extension';
ok( $node->poll_query_until('postgres',
		"SELECT wait_event = '$wait_event' FROM pg_stat_activity WHERE backend_type = 'outbox relay'"),
	"idle relay waits on wait event $wait_event");

my $url = $sink->url('/hook');
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, url, headers, secret)
	VALUES ('hooks', 'task.*', '$url', '{"x-api-key": "k1", "x-tenant": "t1", "webhook-id": "forged", "x-empty": ""}',
	        'whsec_' || encode('test secret key', 'base64'));
});

# a rolled-back emit, then a committed one
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT outbox_emit('task.created', '{"n": 0}');
	ROLLBACK;
});
my $event_id = $node->safe_psql('postgres', q{
	SELECT outbox_emit('task.created', '{"n": 1, "text": "salom dunyo \\u2713"}', 'task', '42',
	                   '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "X-Tenant": "from-the-app"}')
});

ok($sink->wait_delivered(1), 'committed event delivered while the poll interval is one hour');
my @got = @{ $sink->requests };
is(scalar @got, 1, 'exactly one request: the rolled-back event was never sent');
my $req = $got[0];

is($req->{webhook_id}, $event_id, 'webhook-id is the event_id');
is(scalar(grep { $_ eq 'webhook-id' } @{ $req->{header_names} }), 1,
	'webhook-id sent once: not also the one the destination tried to set');
is($req->{headers}{'content-type'}, 'application/json', 'content-type');
like($req->{headers}{'webhook-timestamp'}, qr/^\d{10}$/, 'webhook-timestamp is Unix seconds');
ok(abs($req->{headers}{'webhook-timestamp'} - time()) < 300, 'webhook-timestamp is now');
is($req->{headers}{'x-api-key'}, 'k1', 'destination header sent');
is($req->{headers}{'x-tenant'}, 't1', 'destination header wins over the event\'s');
is(scalar(grep { $_ eq 'x-tenant' } @{ $req->{header_names} }), 1, 'that header sent once');
is($req->{headers}{'x-empty'}, '', 'a header with an empty value is sent empty');
is($req->{headers}{traceparent}, '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
	'event header sent');

# Standard Webhooks signature: base64 HMAC-SHA256 of id.timestamp.body
my $signed = "$req->{webhook_id}.$req->{headers}{'webhook-timestamp'}.$req->{body}";
my $expected = hmac_sha256_base64(encode_utf8($signed), 'test secret key');
$expected .= '=' while length($expected) % 4;
is($req->{headers}{'webhook-signature'}, "v1,$expected", 'webhook-signature verifies');

my $envelope = JSON::PP->new->decode($req->{body});
is($envelope->{id}, $event_id, 'envelope id');
is($envelope->{type}, 'task.created', 'envelope type');
is($envelope->{aggregate_type}, 'task', 'envelope aggregate_type');
is($envelope->{aggregate_id}, '42', 'envelope aggregate_id');
is($envelope->{attempt}, 1, 'envelope attempt');
like($envelope->{created_at}, qr/^\d{4}-\d\d-\d\dT/, 'envelope created_at');
is_deeply($envelope->{payload}, { n => 1, text => "salom dunyo \x{2713}" }, 'envelope payload');

# the sink counts a request before its answer reaches the relay: wait for the mark
ok($node->poll_query_until('postgres', q{SELECT delivered_at IS NOT NULL FROM outbox}), 'event marked delivered');
is( $node->safe_psql('postgres', q{
		SELECT delivered_at IS NOT NULL, attempts, last_error IS NULL, destination FROM outbox}),
	't|1|t|hooks', 'event marked delivered with one attempt');

# Events inserted without outbox_emit() arm no wake-up: the poll timer finds
# them. Reload a short poll interval and check that it takes effect.
$node->safe_psql('postgres', q{
	INSERT INTO outbox (event_type, payload) VALUES ('task.plain', '{}');
	ALTER SYSTEM SET outbox.poll_interval = '100ms';
});
$node->reload;
ok($sink->wait_delivered(2), 'plain INSERT delivered by polling after reload');

# a non-2xx answer is a failure with the status kept; 3xx is not followed,
# and its Location is kept too, credentials masked (newer libcurl drops a
# Location's user:password itself; older ones leave it to the masking)
$sink->control(status => 302, location => 'http://user:pw@127.0.0.1:1/moved?token=abc');
$node->safe_psql('postgres', q{SELECT outbox_emit('task.redirected', '{}')});
ok( $node->poll_query_until('postgres', q{
		SELECT last_error ~ '^HTTP status 302 \(redirects are not followed; Location: http://(\[redacted\]@)?127\.0\.0\.1:1/moved\?token\[redacted\]\): [{]"ok": false[}]$'
		   AND last_error !~ 'pw|abc'
		  FROM outbox WHERE event_type = 'task.redirected'}),
	'a redirect is a failure, with the status and the Location in last_error, credentials masked');
$sink->control(status => 200, location => undef);
ok( $node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL AND attempts >= 2 FROM outbox WHERE event_type = 'task.redirected'"),
	'delivered on the retry');

# SIGHUP was handled by the relay without a restart
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox relay'"),
	'1', 'still one relay');

$sink->stop;
$node->stop;
done_testing();
