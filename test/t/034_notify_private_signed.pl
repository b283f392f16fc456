# What a role without any privilege gets from a NOTIFY destination, and
# what it can forge. In reference mode its LISTEN receives no payload (the
# consumer reads it with outbox_catch_up, which that role may not call);
# events too large for a notification are delivered in a shorter form in
# either mode; with a secret, notifications are signed, and docs/notify.md's
# verification function accepts the relay's and rejects forged ones. One
# sent again on another channel whose destination has the same secret
# verifies there as Standard Webhooks says (its signed text names no
# channel); its signed body names the channel it was meant for, which
# that function compares with the channel it came in on.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('private');
my $db = 'app';
my $secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

$node->safe_psql('postgres',
	"CREATE DATABASE $db ENCODING 'UTF8' LOCALE 'C' TEMPLATE template0");
$node->safe_psql($db, q{
	CREATE SCHEMA outbox;
	CREATE EXTENSION outbox SCHEMA outbox;
	INSERT INTO outbox.outbox_destinations (name, event_types, channel, notify_mode)
	VALUES ('d', 'nt.*', 'outbox_events', 'reference');
	CREATE ROLE nobody LOGIN;        -- no grant at all
	CREATE ROLE billing LOGIN;
	GRANT outbox_consumer TO billing;
	CREATE EXTENSION pgcrypto;
});
$node->safe_psql($db, readme_sql('CREATE FUNCTION verified_notification('));
set_databases($node, $db);
ok(wait_relay($node, $db), 'relay runs');

my $nobody = start_listener($node, $db, 'outbox_events', 'nobody');

# Emits events in one transaction ($values: SQL rows of type, payload,
# aggregate_type, aggregate_id), waits for their delivery and for the
# listener; returns their event_ids and the notifications received.
sub emit_and_receive
{
	my ($values) = @_;
	$nobody->{notes} = [];
	my @ids = split /\n/, $node->safe_psql($db,
		"SELECT outbox.outbox_emit(t, p::jsonb, at, ai) FROM (VALUES $values) v(t, p, at, ai)");
	my $list = join(',', map { "'$_'" } @ids);
	$node->poll_query_until($db,
		"SELECT count(*) = @{[ scalar @ids ]} FROM outbox.outbox WHERE event_id IN ($list) AND delivered_at IS NOT NULL")
	  or die 'not delivered';
	$nobody->sync or die 'listener not in sync';
	return (\@ids, [ map { $_->{payload} } @{ $nobody->{notes} } ]);
}

sub keys_of { my ($json) = @_; return join(',', sort keys %{ decode_json($json) }); }

############################################################################
# Reference mode: the issue's three events with an SSN, seen by a role
# that has no privilege.

my $ssn = q{('nt.x', '{"ssn": "078-05-1120"}', 'person', '42')};
my ($ids, $got) = emit_and_receive(join(', ', ($ssn) x 3));
is(scalar @$got, 3, 'the unprivileged listener gets three notifications');
is_deeply([ map { decode_json($_)->{id} } @$got ], $ids, 'one per event, in order');
is_deeply([ grep { /ssn|078-05-1120/ } @$got ], [], 'none holds the payload');
is(keys_of($got->[0]), 'aggregate_id,aggregate_type,attempt,created_at,id,type',
	'the reference: id, type, aggregate, time, attempt');
is( $node->safe_psql($db, "SELECT count(*) FROM outbox.outbox WHERE delivered_at IS NOT NULL AND attempts = 1 AND last_error IS NULL"),
	'3', 'all three delivered');

my ($ret, $out, $err) = $node->psql($db,
	"SELECT count(*) FROM outbox.outbox_catch_up('d', 'nobody')", extra_params => [ '-U', 'nobody' ]);
like($err, qr/permission denied for (?:schema outbox|function outbox_catch_up)/,
	'that role cannot catch up');
($ret, $out, $err) = $node->psql($db, 'SELECT count(*) FROM outbox.outbox', extra_params => [ '-U', 'nobody' ]);
like($err, qr/permission denied/, 'nor read outbox');
is( $node->safe_psql($db, "SELECT string_agg(payload->>'ssn', ',') FROM outbox.outbox_catch_up('d', 'billing')",
		extra_params => [ '-U', 'billing' ]),
	'078-05-1120,078-05-1120,078-05-1120', 'the consumer reads the payloads with outbox_catch_up');

# in full mode, as documented, the same role reads them
$node->safe_psql($db, "UPDATE outbox.outbox_destinations SET notify_mode = 'full'");
($ids, $got) = emit_and_receive($ssn);
is(decode_json($got->[0])->{payload}{ssn}, '078-05-1120', 'full mode: every listener reads the payload');

############################################################################
# Too large for a notification, in each mode: a payload of 20 kB is sent as
# the reference, an event whose aggregate fields escape to 12 kB as the id
# form. All are delivered and can be read with outbox_catch_up.

my $sizes = q{('nt.big', jsonb_build_object('text', repeat('x', 20000))::text, 'big', '1'),
	('nt.ctl', '{"n": 1}', repeat(chr(1), 1024), repeat(chr(1), 1024))};
for my $mode ('full', 'reference')
{
	$node->safe_psql($db, "UPDATE outbox.outbox_destinations SET notify_mode = '$mode'");
	($ids, $got) = emit_and_receive($sizes);
	is_deeply([ map { decode_json($_)->{id} } @$got ], $ids, "$mode mode: both notified");
	is_deeply([ map { keys_of($_) } @$got ],
		[ 'aggregate_id,aggregate_type,attempt,created_at,id,type', 'attempt,created_at,id' ],
		"$mode mode: 20 kB payload as the reference, long aggregate fields as the id form");
	ok(length($got->[0]) < 200, "$mode mode: the reference is short (" . length($got->[0]) . ' bytes)');
	is( $node->safe_psql($db, "SELECT count(*) FROM outbox.outbox WHERE event_id IN ('$ids->[0]', '$ids->[1]')
			AND delivered_at IS NOT NULL AND dead_at IS NULL AND last_error IS NULL"),
		'2', "$mode mode: both delivered, no error");
}
is( $node->safe_psql($db, "SELECT string_agg(octet_length(payload->>'text')::text || '/' || octet_length(aggregate_id), ',' ORDER BY event_type)
		FROM outbox.outbox_catch_up('d', 'billing') WHERE event_type IN ('nt.big', 'nt.ctl')",
		extra_params => [ '-U', 'billing' ]),
	'20000/1,20000/1', 'outbox_catch_up returns the large payloads whole');

############################################################################
# Signed: with a secret, each notification carries a Standard Webhooks
# signature; docs/notify.md's function accepts it and rejects forgeries that
# the role without privileges sends on the same channel.

$node->safe_psql($db, "UPDATE outbox.outbox_destinations SET notify_mode = 'reference', secret = '$secret'");
($ids, $got) = emit_and_receive($ssn);
my $real = $got->[0];
my $outer = decode_json($real);
is(join(',', sort keys %$outer), 'body,webhook-id,webhook-signature,webhook-timestamp',
	'signed: the three webhook fields and the body');
is($outer->{'webhook-id'}, $ids->[0], 'webhook-id is the event_id');
ok(abs($outer->{'webhook-timestamp'} - time()) < 60, 'webhook-timestamp is now, in Unix seconds');
like($outer->{'webhook-signature'}, qr{^v1,[A-Za-z0-9+/]{43}=$}, 'v1 and a base64 HMAC-SHA256');
is(keys_of($outer->{body}), 'aggregate_id,aggregate_type,attempt,channel,created_at,id,type',
	'the body is the reference and the channel, as a JSON string');
is(decode_json($outer->{body})->{channel}, 'outbox_events', 'the channel it was sent on');

# verified_notification() of docs/notify.md, given a notification as
# received on channel outbox_events (or $channel)
sub verified
{
	my ($text, $key, $tolerance, $channel) = @_;
	return $node->safe_psql($db, sprintf(q{SELECT coalesce(verified_notification($n$%s$n$, '%s', '%s'%s)->>'id', 'rejected')},
		$text, $channel // 'outbox_events', $key // $secret, defined $tolerance ? ", '$tolerance'" : ''));
}
is(verified($real), $ids->[0], "the relay's notification verifies");
is(verified($real, 'whsec_' . 'A' x 32), 'rejected', 'not with another secret');

# forgeries, sent on the channel by the role without privileges
my $fake_id = '01932c07-8f4e-7a3b-9c1d-2e5f6a7b8c9d';
my $fake_body = qq({"id": "$fake_id", "type": "nt.x", "aggregate_type": null, "aggregate_id": null, "created_at": "2026-01-01T00:00:00+00:00", "attempt": 1, "channel": "outbox_events"});
my %forged = (
	'an unsigned envelope' => $fake_body,
	'a signature copied onto another body' => encode_json({ %$outer, body => $fake_body }),
	'the real body with a new id' => encode_json({ %$outer, 'webhook-id' => $fake_id }),
	'a signature made with another key' => $node->safe_psql($db, sprintf(q{
		SELECT jsonb_build_object('webhook-id', '%s', 'webhook-timestamp', ts, 'body', $b$%s$b$,
		       'webhook-signature', 'v1,' || encode(hmac(convert_to('%s.' || ts || '.' || $b$%s$b$, 'UTF8'),
		                                                 'guessed', 'sha256'), 'base64'))::text
		  FROM (SELECT extract(epoch FROM now())::bigint::text AS ts) t}, $fake_id, $fake_body, $fake_id, $fake_body)),
	'not JSON' => 'v1,abc',
);
$nobody->{notes} = [];
for my $what (sort keys %forged)
{
	my ($r, $o, $e) = $node->psql($db, "SELECT pg_notify('outbox_events', \$n\$$forged{$what}\$n\$)",
		extra_params => [ '-U', 'nobody' ]);
	is($e, '', "any role can send $what");
}
$nobody->sync;
is(scalar @{ $nobody->{notes} }, scalar keys %forged, 'listeners receive every forgery');
for my $note (@{ $nobody->{notes} })
{
	my ($what) = grep { $forged{$_} eq $note->{payload} } keys %forged;
	is(verified($note->{payload}), 'rejected', "rejected: $what");
}

# a signature made with the right key, 10 minutes ago: rejected as too old,
# accepted with a longer tolerance (which also checks the signing scheme)
my $old = $node->safe_psql($db, sprintf(q{
	SELECT jsonb_build_object('webhook-id', '%s', 'webhook-timestamp', ts, 'body', $b$%s$b$,
	       'webhook-signature', 'v1,' || encode(hmac(convert_to('%s.' || ts || '.' || $b$%s$b$, 'UTF8'),
	                                                 decode(substr('%s', 7), 'base64'), 'sha256'), 'base64'))::text
	  FROM (SELECT (extract(epoch FROM now())::bigint - 600)::text AS ts) t},
	$fake_id, $fake_body, $fake_id, $fake_body, $secret));
is(verified($old), 'rejected', 'a valid signature of 10 minutes ago is rejected');
is(verified($old, undef, '15 minutes'), $fake_id, 'and accepted with a tolerance of 15 minutes');

# Sent again on another channel, whose destination has the same secret:
# the signature verifies there (the signed text is <id>.<timestamp>.<body>,
# no channel), and only the channel in the body tells it was meant for
# outbox_events; the documented function compares the two.
$node->safe_psql($db, "INSERT INTO outbox.outbox_destinations (name, event_types, channel, notify_mode, secret)
	VALUES ('other', 'ot.*', 'other_events', 'reference', '$secret')");
my $other = start_listener($node, $db, 'other_events', 'nobody');
($ret, $out, $err) = $node->psql($db, "SELECT pg_notify('other_events', \$n\$$real\$n\$)", extra_params => [ '-U', 'nobody' ]);
is($err, '', 'any role sends the relay\'s notification again on another channel');
$other->sync or die 'listener not in sync';
my ($replayed) = map { $_->{payload} } @{ $other->{notes} };
is($replayed, $real, 'that channel\'s listeners receive it as it was');
is( $node->safe_psql($db, sprintf(q{
		SELECT 'v1,' || encode(hmac(convert_to(concat(n->>'webhook-id', '.', n->>'webhook-timestamp', '.', n->>'body'), 'UTF8'),
		                            decode(substr('%s', 7), 'base64'), 'sha256'), 'base64')
		       = ANY (string_to_array(n->>'webhook-signature', ' '))
		  FROM (SELECT $n$%s$n$::jsonb AS n) x}, $secret, $replayed)),
	't', 'its signature alone verifies there: a check of the signature only accepts it');
is(decode_json(decode_json($replayed)->{body})->{channel}, 'outbox_events', 'its signed body names outbox_events');
is(verified($replayed, undef, undef, 'other_events'), 'rejected',
	'the documented function rejects it on other_events');
# while that channel's own notifications verify there
$other->{notes} = [];
my ($oid) = split /\n/, $node->safe_psql($db, q{SELECT outbox.outbox_emit('ot.x', '{}')});
$node->poll_query_until($db, "SELECT delivered_at IS NOT NULL FROM outbox.outbox WHERE event_id = '$oid'")
  or die 'not delivered';
$other->sync or die 'listener not in sync';
is(verified($other->{notes}[0]{payload}, undef, undef, 'other_events'), $oid,
	'a notification the relay sent on other_events verifies there');
$other->quit;

# signed and too large in full mode: the signed reference
$node->safe_psql($db, "UPDATE outbox.outbox_destinations SET notify_mode = 'full'");
($ids, $got) = emit_and_receive(q{('nt.big', jsonb_build_object('text', repeat('x', 7700))::text, 'big', '2')});
my $body = decode_json(decode_json($got->[0])->{body});
cmp_ok( $node->safe_psql($db, "SELECT octet_length(outbox._outbox_envelope(event_id, event_type, aggregate_type,
		aggregate_id, created_at, attempts, payload)) FROM outbox.outbox WHERE event_id = '$ids->[0]'"),
	'<', 8000, 'its envelope alone would fit');
is(verified($got->[0]), $ids->[0], 'signed, full mode, an envelope of 7.9 kB: verifies');
ok(!exists $body->{payload}, 'its body is the reference (the signed envelope would not fit)');

# a key rotation: with a second secret, each notification carries two
# signatures, and the function verifies it with either secret
my $second = $node->safe_psql($db, q{SELECT outbox.outbox_add_secret('d')});
($ids, $got) = emit_and_receive($ssn);
like(decode_json($got->[0])->{'webhook-signature'}, qr{^v1,[A-Za-z0-9+/]{43}= v1,[A-Za-z0-9+/]{43}=$},
	'two secrets: two signatures');
is(verified($got->[0]), $ids->[0], 'it verifies with the first secret');
is(verified($got->[0], $second), $ids->[0], 'and with the second');
is(verified($got->[0], 'whsec_' . 'A' x 32), 'rejected', 'not with another');

$nobody->quit;
$node->stop;
done_testing();
