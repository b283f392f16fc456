# A writer's event headers cannot replace the destination's credentials
# (here the user:password of its URL), and credentials an endpoint echoes
# back are masked in last_error and never logged.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";
use MIME::Base64 qw(encode_base64);
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('headers');
my $sink = start_sink();
(my $url = $sink->url('/hook')) =~ s{^http://}{http://user:pass\@};
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, url, headers)
	VALUES ('creds', '*', '$url', '{"x-tenant": "from-the-admin"}')});
ok(wait_relay($node, 'postgres'), 'relay runs');
my $basic = 'Basic ' . encode_base64('user:pass', '');

# the writer cannot even store the header ...
$node->safe_psql('postgres', q{
	CREATE ROLE app LOGIN;
	GRANT outbox_writer TO app;});
my ($ret, $out, $err) = $node->psql('postgres',
	q{SELECT outbox_emit('t', '{}', headers => '{"Authorization": "Bearer WRITER-CHOSEN"}')},
	extra_params => [ '-U', 'app' ]);
like($err, qr/ERROR:  event header "Authorization" is not allowed/, 'emit refuses the header');

# ... and one stored anyway is dead-lettered, never sent
$node->safe_psql('postgres', q{
	SET session_replication_role = replica;
	INSERT INTO outbox (event_type, payload, headers)
	VALUES ('forced', '{}', '{"Authorization": "Bearer WRITER-CHOSEN"}'),
	       ('forced', '{}', '{"proxy-authorization": "Basic eA==", "Cookie": "s=1", "Host": "evil"}');});
my $ok = $node->safe_psql('postgres', q{
	SELECT outbox_emit('ok', '{}', headers => '{"x-tenant": "from-the-app", "x-request-id": "r1", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}')},
	extra_params => [ '-U', 'app' ]);
ok($sink->wait_delivered(1), 'the valid event is delivered');
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 2 FROM outbox WHERE event_type = 'forced' AND dead_at IS NOT NULL"),
	'the forced events are dead-lettered');
is($node->safe_psql('postgres',
	"SELECT string_agg(last_error, ' | ' ORDER BY id) FROM outbox WHERE event_type = 'forced'"),
	'event header "Authorization" is not allowed | event header "Host" is not allowed',
	'with the header named');
my @got = @{ $sink->requests('/hook') };
is(scalar @got, 1, 'one request only');
is($got[0]{webhook_id}, $ok, 'the valid event');
is($got[0]{headers}{authorization}, $basic, 'the URL credentials are what the endpoint gets');
is($got[0]{headers}{'x-tenant'}, 'from-the-admin', 'the destination header wins over the event\'s');
is($got[0]{headers}{'x-request-id'}, 'r1', 'an x- header of the event is sent');
is($got[0]{headers}{traceparent}, '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'traceparent is sent');

# an endpoint echoes the request's credentials in a 400: masked in last_error
$sink->reset;
$sink->control(status => 400, echo => [ 'authorization', 'x-tenant' ]);
my $offset = -s $node->logfile;
my $echoed = $node->safe_psql('postgres', q{SELECT outbox_emit('echo', '{}')});
ok($node->poll_query_until('postgres',
	"SELECT dead_at IS NOT NULL FROM outbox WHERE event_id = '$echoed'"), 'the 400 dead-letters it');
is($node->safe_psql('postgres', "SELECT last_error FROM outbox WHERE event_id = '$echoed'"),
	'HTTP status 400: authorization[redacted]  x-tenant: from-the-admin  ',
	'last_error keeps the answer with the credential masked');
my $log = log_since($node, $offset);
like($log, qr/could not deliver event $echoed to destination "creds": HTTP status 400\n/,
	'the log has the status');
unlike($log, qr/dXNlcjpwYXNz|from-the-admin/, 'and nothing of the answer');

$sink->stop;
$node->stop;
done_testing();
