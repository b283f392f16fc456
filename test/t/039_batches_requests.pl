# Webhooks in batches (outbox_destinations.events_per_request), what the
# requests carry: events queued for a destination while its relay was
# stopped go out up to N per request, as a JSON array of envelopes or a
# CloudEvents batch (application/cloudevents-batch+json, read by the npm
# cloudevents SDK). Checked on the wire: the split of a backlog into
# requests, the order within them, webhook-id (the event_id of a batch of
# one, else a UUID from the SHA-256 of the ids), the signature over the
# whole body (Node's crypto, the standardwebhooks package and Perl's HMAC),
# an event with headers of its own going alone, and an ordered
# destination's keys. What becomes of a batch that fails or is cut off:
# 039_batches_outcomes.pl.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use Digest::SHA qw(sha256 hmac_sha256_base64);
use Encode qw(encode_utf8);
use JSON::PP;
use OutboxBatches;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;


my ($node, $sink) = batches_node('batches');
my $secret = $OutboxBatches::secret;

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
	my $verdicts = node_json('verify_signature.js', {
			id => $req->{headers}{'webhook-id'}, timestamp => $req->{headers}{'webhook-timestamp'},
			body => $req->{body}, signature => $req->{headers}{'webhook-signature'}, keys => \@keys });
	return join('', map { $_ ? 't' : 'f' } @$verdicts);
}

############################################################################
# envelope: 25 events, 10 per request

my $ids = backlog($node, 'env.%', q{SELECT outbox_emit('env.made', jsonb_build_object('n', g), 'order', g::text) FROM generate_series(1, 25) g});
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
	decode_json(encode_utf8($node->safe_psql('postgres', qq{
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
is( join(',', map { $_ ? 'true' : 'false' } @{ node_json('standardwebhooks_check.js', {
					headers => $reqs->[2]{headers}, body => $reqs->[2]{body},
					secrets => [ $secret, 'another secret' ] }, 'standardwebhooks') }),
	'true,false', 'envelope: and by the standardwebhooks package');
is($node->safe_psql('postgres', q{SELECT count(*) FILTER (WHERE attempts = 1) FROM outbox WHERE event_type = 'env.made'}), '25',
	'envelope: one attempt each');

# one event alone, to a batching destination: still an array, webhook-id its event_id
$sink->reset;
my ($one) = @{ backlog($node, 'env.%', q{SELECT outbox_emit('env.one', '{"a": 1}')}) }[-1];
$reqs = requests_of($sink, '/env');
is(scalar(@$reqs), 1, 'one event: one request');
is($reqs->[0]{headers}{'webhook-id'}, $one, "one event: webhook-id is its event_id");
is(scalar(@{ decode_json($reqs->[0]{body}) }), 1, 'one event: an array of one');

# an event with headers of its own goes alone, with them
$sink->reset;
$ids = backlog($node, 'env.h%', q{
	SELECT outbox_emit('env.h' || g, '{}', NULL, NULL, CASE WHEN g = 2 THEN '{"x-tenant": "t2"}'::jsonb END)
	  FROM generate_series(1, 3) g});
$reqs = requests_of($sink, '/env');
my %by_size = map { scalar(@{ decode_json($_->{body}) }) => $_ } @$reqs;
is(scalar(@$reqs), 2, 'own headers: two requests');
is(join(',', map { $_->{id} } @{ decode_json($by_size{2}{body}) }), "$ids->[0],$ids->[2]",
	'own headers: the others together');
is($by_size{1}{headers}{'webhook-id'}, $ids->[1], 'own headers: that event alone');
is($by_size{1}{headers}{'x-tenant'}, 't2', 'own headers: with its header');
ok(!exists $by_size{2}{headers}{'x-tenant'}, 'own headers: not on the batch');

############################################################################
# CloudEvents batch: 7 events, 5 per request

$ids = backlog($node, 'ce.%', q{SELECT outbox_emit('ce.made', jsonb_build_object('n', g), 'order', g::text) FROM generate_series(1, 7) g});
$reqs = requests_of($sink, '/ce');
is(scalar(@$reqs), 2, 'cloudevents: 7 events in 2 requests');
is($reqs->[0]{headers}{'content-type'}, 'application/cloudevents-batch+json', 'cloudevents: Content-Type');
my @groups;
for my $r (@$reqs)
{
	my $got = node_json('cloudevents_check.js', { headers => $r->{headers}, body => $r->{body} }, 'cloudevents');
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

$ids = backlog($node, 'ord.%', q{
	SELECT outbox_emit('ord.step', jsonb_build_object('k', k, 'step', s), 'account', k::text)
	  FROM generate_series(1, 4) s, generate_series(1, 3) k});
$reqs = requests_of($sink, '/ord');
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

done_testing();
