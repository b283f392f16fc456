# Webhooks in batches (outbox_destinations.events_per_request): events
# queued for a destination while its relay was stopped go out up to N per
# request, as a JSON array of envelopes or a CloudEvents batch
# (application/cloudevents-batch+json, read by the npm cloudevents SDK).
# Checked on the wire: the split of a backlog into requests, the order
# within them, webhook-id (the event_id of a batch of one, else a UUID
# from the SHA-256 of the ids, the same on every attempt), the signature
# over the whole body (Node's crypto and Perl's HMAC), an event with
# headers of its own going alone, an ordered destination's keys, and an
# outcome (503, 410) that applies to every event of its request, and a
# kill -9 of the relay while a batch waits for its answer (each of its
# events counted once as cut off and sent again, in one request).
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use Digest::SHA qw(sha256 hmac_sha256_base64);
use Encode qw(encode_utf8);
use File::Spec;
use IPC::Run ();
use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $test_dir = File::Spec->rel2abs("$FindBin::RealBin/..");
my $node_modules = ($ENV{OUTBOX_NODE_DIR} // '/var/cache/outbox-npm') . '/node_modules';
die "the cloudevents and standardwebhooks packages are not in $node_modules: run ci/deps.sh as root"
  unless -d "$node_modules/cloudevents" && -d "$node_modules/standardwebhooks";

# the framework turns restart_after_crash off; a relay killed by a signal
# must bring the server through a crash restart, as in production
my $node = outbox_node('batches', restart_after_crash => 'on');
my $sink = start_sink();
ok(wait_relay($node, 'postgres'), 'relay runs');
sub sql { return $node->safe_psql('postgres', $_[0]); }

my $secret = 'batch secret';
sql(sprintf(q{
	INSERT INTO outbox_destinations (name, event_types, url, secret, events_per_request) VALUES
		('env', 'env.*', '%s', '%s', 10);
	INSERT INTO outbox_destinations (name, event_types, url, format, cloudevents_source, events_per_request) VALUES
		('ce', 'ce.*', '%s', 'cloudevents', '/shop', 5);
	INSERT INTO outbox_destinations (name, event_types, url, events_per_request, ordered) VALUES
		('ord', 'ord.*', '%s', 100, true);
	INSERT INTO outbox_destinations (name, event_types, url, events_per_request) VALUES
		('fail', 'fail.*', '%s', 4), ('crash', 'crash.*', '%s', 10);},
	$sink->url('/env'), $secret, $sink->url('/ce'), $sink->url('/ord'), $sink->url('/fail'),
	$sink->url('/crash')));

# Stops the relay, runs $emit (SQL), starts the relay and waits until
# every event of $like is delivered; returns the ids emitted, in id order.
sub backlog
{
	my ($like, $emit) = @_;
	set_databases($node, '');
	ok(wait_no_relay($node, 'postgres'), "$like: relay stopped");
	sql($emit);
	set_databases($node, 'postgres');
	ok($node->poll_query_until('postgres',
			"SELECT count(*) = 0 FROM outbox WHERE event_type LIKE '$like' AND delivered_at IS NULL"),
		"$like: every event delivered");
	return [ split /\n/, sql("SELECT event_id FROM outbox WHERE event_type LIKE '$like' ORDER BY id") ];
}

# The requests the sink answered for $path, in arrival order.
sub requests_of
{
	my ($path) = @_;
	return [ sort { $a->{received_at} <=> $b->{received_at} } @{ $sink->requests($path) } ];
}

# A batch's webhook-id: a version-8 UUID from the SHA-256 of its events'
# ids, each with a terminating NUL byte.
sub batch_id
{
	my @h = unpack('C16', sha256(join('', map { "$_\0" } @_)));
	$h[6] = ($h[6] & 0x0f) | 0x80;
	$h[8] = ($h[8] & 0x3f) | 0x80;
	return sprintf('%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x', @h);
}

# For each key, whether a signature of $req verifies with it (Node's crypto).
sub node_verifies
{
	my ($req, @keys) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'node', "$test_dir/verify_signature.js" ], '<', \encode_json({
				id => $req->{headers}{'webhook-id'}, timestamp => $req->{headers}{'webhook-timestamp'},
				body => $req->{body}, signature => $req->{headers}{'webhook-signature'},
				keys => \@keys }), '>', \$out, '2>', \$err)
	  or die "verify_signature.js: $err";
	return join('', map { $_ ? 't' : 'f' } @{ decode_json($out) });
}

############################################################################
# envelope: 25 events, 10 per request

my $ids = backlog('env.%', q{SELECT outbox_emit('env.made', jsonb_build_object('n', g), 'order', g::text) FROM generate_series(1, 25) g});
# the requests run at once, and may arrive in any order: in the order of their first event
my %pos = map { $ids->[$_] => $_ } 0 .. $#$ids;
my $reqs = [ sort { $pos{ decode_json($a->{body})->[0]{id} } <=> $pos{ decode_json($b->{body})->[0]{id} } }
	  @{ $sink->requests('/env') } ];
is(scalar(@$reqs), 3, 'envelope: 25 events in 3 requests');
my @bodies = map { decode_json(encode_utf8($_->{body})) } @$reqs;
is(join(',', map { scalar(@$_) } @bodies), '10,10,5', 'envelope: 10, 10 and 5 events');
is(join(',', map { $_->{id} } map { @$_ } @bodies), join(',', @$ids),
	'envelope: each event once, in id order within requests and from one to the next');
is_deeply($bodies[0][0],
	decode_json(encode_utf8(sql(qq{
		SELECT _outbox_envelope(event_id, event_type, aggregate_type, aggregate_id, created_at, 1, payload)
		  FROM outbox WHERE event_id = '$ids->[0]'}))),
	"envelope: an element is the event's envelope");
is($reqs->[0]{headers}{'content-type'}, 'application/json', 'envelope: Content-Type');
like($reqs->[0]{body}, qr/^\[\{"id": "[^"]+", "type": "env\.made".*\}\]$/s, 'envelope: a JSON array of objects');
is($reqs->[0]{headers}{'webhook-id'}, batch_id(@{$ids}[0 .. 9]),
	'envelope: webhook-id from the SHA-256 of the ids');
is($reqs->[2]{headers}{'webhook-id'}, batch_id(@{$ids}[20 .. 24]), 'envelope: so for the last batch');
like($reqs->[0]{headers}{'webhook-id'}, qr/^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
	'envelope: a version-8 UUID');
for my $r (@$reqs)
{
	my $content = "$r->{headers}{'webhook-id'}.$r->{headers}{'webhook-timestamp'}.$r->{body}";
	my $mac = hmac_sha256_base64(encode_utf8($content), $secret);
	$mac .= '=' while length($mac) % 4;
	is($r->{headers}{'webhook-signature'}, "v1,$mac", 'envelope: v1 over the whole body (Perl)');
}
is(node_verifies($reqs->[1], $secret, 'another secret'), 'tf', "envelope: and by Node's crypto");
{
	my ($out, $err) = ('', '');
	local $ENV{NODE_PATH} = $node_modules;
	IPC::Run::run([ 'node', "$test_dir/standardwebhooks_check.js" ], '<', \encode_json({
				headers => $reqs->[2]{headers}, body => $reqs->[2]{body}, secrets => [ $secret, 'another secret' ] }),
		'>', \$out, '2>', \$err)
	  or die "standardwebhooks_check.js: $err";
	is($out, "[true,false]\n", 'envelope: and by the standardwebhooks package');
}
is(sql(q{SELECT count(*) FILTER (WHERE attempts = 1) FROM outbox WHERE event_type = 'env.made'}), '25',
	'envelope: one attempt each');

# one event alone, to a batching destination: still an array, webhook-id its event_id
$sink->reset;
my ($one) = @{ backlog('env.%', q{SELECT outbox_emit('env.one', '{"a": 1}')}) }[-1];
$reqs = requests_of('/env');
is(scalar(@$reqs), 1, 'one event: one request');
is($reqs->[0]{headers}{'webhook-id'}, $one, "one event: webhook-id is its event_id");
is(scalar(@{ decode_json($reqs->[0]{body}) }), 1, 'one event: an array of one');

# an event with headers of its own goes alone, with them
$sink->reset;
$ids = backlog('env.h%', q{
	SELECT outbox_emit('env.h' || g, '{}', NULL, NULL, CASE WHEN g = 2 THEN '{"x-tenant": "t2"}'::jsonb END)
	  FROM generate_series(1, 3) g});
$reqs = requests_of('/env');
my %by_size = map { scalar(@{ decode_json($_->{body}) }) => $_ } @$reqs;
is(scalar(@$reqs), 2, 'own headers: two requests');
is(join(',', map { $_->{id} } @{ decode_json($by_size{2}{body}) }), "$ids->[0],$ids->[2]",
	'own headers: the others together');
is($by_size{1}{headers}{'webhook-id'}, $ids->[1], 'own headers: that event alone');
is($by_size{1}{headers}{'x-tenant'}, 't2', 'own headers: with its header');
ok(!exists $by_size{2}{headers}{'x-tenant'}, 'own headers: not on the batch');

############################################################################
# CloudEvents batch: 7 events, 5 per request

$ids = backlog('ce.%', q{SELECT outbox_emit('ce.made', jsonb_build_object('n', g), 'order', g::text) FROM generate_series(1, 7) g});
$reqs = requests_of('/ce');
is(scalar(@$reqs), 2, 'cloudevents: 7 events in 2 requests');
is($reqs->[0]{headers}{'content-type'}, 'application/cloudevents-batch+json', 'cloudevents: Content-Type');
my @groups;
for my $r (@$reqs)
{
	my ($out, $err) = ('', '');
	local $ENV{NODE_PATH} = $node_modules;
	IPC::Run::run([ 'node', "$test_dir/cloudevents_check.js" ],
		'<', \encode_json({ headers => $r->{headers}, body => $r->{body} }), '>', \$out, '2>', \$err)
	  or die "cloudevents_check.js: $err";
	my $got = decode_json($out);
	is($got->{error}, undef, 'cloudevents: the SDK reads the batch');
	ok((grep { $_ } @{ $got->{valid} }) == @{ $got->{events} }, 'cloudevents: every event valid');
	push @groups, [ map { $_->{id} } @{ $got->{events} } ];
	is((grep { $_->{source} eq '/shop' && $_->{type} eq 'ce.made' && $_->{specversion} eq '1.0' }
			@{ $got->{events} }), scalar(@{ $got->{events} }), 'cloudevents: source, type, specversion');
}
# the two requests run at once: in the order of their first event
%pos = map { $ids->[$_] => $_ } 0 .. $#$ids;
my @seen = map { @$_ } sort { $pos{ $a->[0] } <=> $pos{ $b->[0] } } @groups;
is(join(',', map { scalar(@$_) } sort { $pos{ $a->[0] } <=> $pos{ $b->[0] } } @groups), '5,2',
	'cloudevents: 5 and 2 events');
is(join(',', @seen), join(',', @$ids), 'cloudevents: each event once, in id order within requests and across them');

############################################################################
# ordered: four events of each of three keys, at most one of a key per request

$ids = backlog('ord.%', q{
	SELECT outbox_emit('ord.step', jsonb_build_object('k', k, 'step', s), 'account', k::text)
	  FROM generate_series(1, 4) s, generate_series(1, 3) k});
$reqs = requests_of('/ord');
my (%last, $repeat, $backwards);
for my $r (@$reqs)
{
	my %keys;
	for my $e (@{ decode_json($r->{body}) })
	{
		$repeat++ if $keys{ $e->{aggregate_id} }++;
		$backwards++ if ($last{ $e->{aggregate_id} } // 0) > $e->{payload}{step};
		$last{ $e->{aggregate_id} } = $e->{payload}{step};
	}
}
is($repeat, undef, 'ordered: no request has two events of one key');
is($backwards, undef, "ordered: each key's events arrive in order");
is(join(',', map { $last{$_} } sort keys %last), '4,4,4', 'ordered: every key to its last event');
cmp_ok(scalar(@$reqs), '<=', 6, 'ordered: in batches (12 events, at most 6 requests)');

############################################################################
# an outcome is every event's: a 503 fails the batch, all are sent again

$sink->control(paths => { '/fail' => { script => [ { status => 503 } ] } });
$ids = backlog('fail.%', q{SELECT outbox_emit('fail.x', jsonb_build_object('n', g)) FROM generate_series(1, 4) g});
$reqs = requests_of('/fail');
is(join(',', map { $_->{status} } @$reqs), '503,200', '503: the batch, then again');
is($reqs->[1]{headers}{'webhook-id'}, $reqs->[0]{headers}{'webhook-id'}, '503: the same webhook-id again');
is($reqs->[1]{body} =~ s/"attempt": 2/"attempt": 1/gr, $reqs->[0]{body}, '503: the same events, the attempt counted');
is(sql(q{SELECT string_agg(DISTINCT attempts || ' ' || (last_error IS NULL), ',') FROM outbox WHERE event_type = 'fail.x'}),
	'2 true', '503: two attempts each, the error cleared by the delivery');

# 410 Gone: every event of the batch stays pending, the destination disabled
$sink->control(paths => { '/fail' => { status => 410 } });
set_databases($node, '');
ok(wait_no_relay($node, 'postgres'), '410: relay stopped');
$ids = emit($node, 'postgres', 'fail.gone', 3);
set_databases($node, 'postgres');
ok($node->poll_query_until('postgres', q{SELECT NOT enabled FROM outbox_destinations WHERE name = 'fail'}),
	'410: the destination is disabled');
# then they wait, as unroutable, for the destination to be enabled again
ok($node->poll_query_until('postgres', q{
		SELECT count(*) = 3 FROM outbox
		 WHERE event_type = 'fail.gone' AND attempts = 1 AND dead_at IS NULL AND delivered_at IS NULL
		   AND last_error = 'no enabled destination matches the event type'}),
	'410: each event of the batch pending, its attempt counted');
my $log = slurp_file($node->logfile);
is(scalar(grep { $log =~ /could not deliver event $_ to destination "fail": HTTP status 410 \(Gone/ } @$ids), 3,
	'410: the outcome logged for each event');
is(scalar(grep { $_->{status} == 410 } @{ $sink->requests('/fail') }), 1, '410: in one request');

############################################################################
# kill -9 while a batch waits for its answer

$sink->paths('/crash' => { hold => JSON::PP::true });
set_databases($node, '');
ok(wait_no_relay($node, 'postgres'), 'crash: relay stopped');
$ids = emit($node, 'postgres', 'crash.x', 10);
my $offset = -s $node->logfile;
set_databases($node, 'postgres');
my $pid = wait_relay($node, 'postgres');
ok(wait_until(sub { @{ $sink->arrivals('/crash') } >= 1 }), 'crash: the batch is sent and held');
kill 'KILL', $pid or die "kill $pid: $!";
$sink->paths('/crash' => {});
$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
ok(wait_relay($node, 'postgres', $pid), 'crash: a new relay after the crash restart');
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 10 FROM outbox WHERE event_type = 'crash.x' AND delivered_at IS NOT NULL}),
	'crash: every event delivered');
like(log_since($node, $offset), qr/outbox relay counted 10 attempts that no outcome recorded/,
	'crash: the 10 attempts cut off are counted');
is(sql(q{SELECT string_agg(DISTINCT attempts::text, ',') FROM outbox WHERE event_type = 'crash.x'}), '2',
	'crash: two attempts each, the one cut off and the delivery');
my @sent = sort { $a->{received_at} <=> $b->{received_at} } @{ $sink->arrivals('/crash') };
is(scalar(@sent), 2, 'crash: the batch was sent twice in all');
is(join(',', map { $_->{id} } @{ decode_json($sent[1]{body}) }), join(',', @$ids),
	'crash: the second time, the same events in one request');
is($sent[1]{headers}{'webhook-id'}, $sent[0]{headers}{'webhook-id'}, 'crash: with the same webhook-id');

done_testing();
