# JetStream destinations when things fail, against real nats-server
# processes on 127.0.0.1:
#   c. bad credentials, a missing stream, a stream created with no_ack, a
#      subject no stream takes, a subject of another stream, a subject a
#      core NATS subscriber answers instead of a stream, an envelope over
#      the server's max_payload: each a failed attempt with its reason in
#      last_error (the last one dead at once), the relay running on (no
#      crash loop), and delivery once the cause is fixed; a message the
#      stream already has under the event's id: delivered on a duplicate
#      PubAck, without a second copy
#   e. SIGTERM ends the relay within a second while the broker is frozen
#      (SIGSTOP) with publishes waiting for their PubAck, and (d) while it
#      connects to a server that never answers
# A crash and a broker outage in a flow: 091_jetstream_faults.pl.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use IO::Socket::INET;
use Time::HiRes qw(time);
use OutboxJetStreamFaults;
use OutboxNats;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my ($nats, $node) = jetstream_faults_setup();
my $url = $nats->plain_url;
my $pid = wait_relay($node, 'postgres');

# c. Errors: each a failed attempt with its reason; no crash loop.
my $small = start_nats(max_payload => 2048);
$small->add_stream('SMALL', 'small.>');
my $secured = start_nats(auth => 'relay:right-password');
$secured->add_stream('SAFE', 'safe.>');
$nats->add_stream('NOACK', 'noack.>', noack => 1);
$nats->add_stream('OTHER', 'other.>');
my $surl = $secured->plain_url;
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream, nats_user, nats_password) VALUES
	    ('c_auth', 'c.auth', '$surl', 'safe.x', 'SAFE', 'relay', 'wrong-password');
	INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream) VALUES
	    ('c_missing', 'c.missing', '$url', 'missing.x', 'MISSING'),
	    ('c_noack', 'c.noack', '$url', 'noack.x', 'NOACK'),
	    ('c_nostream', 'c.nostream', '$url', 'nowhere.x', 'FLOW'),
	    ('c_other', 'c.other', '$url', 'other.x', 'FLOW'),
	    ('c_answered', 'c.answered', '$url', 'answered.x', 'FLOW'),
	    ('c_big', 'c.big', '@{[ $small->plain_url ]}', 'small.x', 'SMALL');
	SELECT outbox_emit('c.big', jsonb_build_object('text', repeat('x', 4000)));
	SELECT outbox_emit(t, '{}') FROM unnest(ARRAY['c.auth', 'c.missing', 'c.noack', 'c.nostream', 'c.other', 'c.answered']) t;
});
# a core NATS subscriber answers with JSON that has no error: libnats takes
# it for a PubAck, the relay does not
my $responder = $nats->responder('answered.x', '{}');
my $port = $nats->{port};
my $sport = $secured->{port};
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 6 FROM outbox WHERE event_type LIKE 'c.%' AND attempts >= 2 AND delivered_at IS NULL AND dead_at IS NULL"),
	'c: each failed twice, and is retried');
is( $node->safe_psql('postgres',
		"SELECT string_agg(event_type || ': ' || last_error, E'\\n' ORDER BY event_type) FROM outbox WHERE event_type LIKE 'c.%' AND event_type <> 'c.big'"),
	join("\n",
		"c.answered: an answer that is no PubAck of stream \"FLOW\" came for subject \"answered.x\" (JSON without a stream or a sequence): something else answers it",
		"c.auth: NATS at nats://127.0.0.1:$sport, stream \"SAFE\": cannot connect: the server refused the credentials (Authorization Violation)",
		"c.missing: NATS at nats://127.0.0.1:$port, stream \"MISSING\": the stream does not exist",
		"c.noack: NATS at nats://127.0.0.1:$port, stream \"NOACK\": the stream is created with no_ack: it does not acknowledge what it stores",
		"c.nostream: no JetStream stream takes subject \"nowhere.x\" (no responders)",
		"c.other: JetStream refused the message (error 10060): expected stream does not match"),
	'c: the reason of each');
ok( $node->poll_query_until('postgres',
		"SELECT dead_at IS NOT NULL FROM outbox WHERE event_type = 'c.big'"),
	'c: an envelope over the server\'s max_payload is dead-lettered');
like( $node->safe_psql('postgres', "SELECT attempts || ' ' || last_error FROM outbox WHERE event_type = 'c.big'"),
	qr/^1 the envelope of 4\d\d\d bytes is larger than the server's max_payload$/,
	'c: at its first attempt, with the reason');
is($small->count('SMALL'), 0, 'c: nothing stored');
is( $node->safe_psql('postgres', q{
		SELECT d || ': ' || coalesce(c.exactly_once::text, 'null') || ' ' || c.problem
		  FROM unnest(ARRAY['c_auth', 'c_missing', 'c_noack']) d, LATERAL outbox_jetstream_check(d) c}),
	join("\n",
		"c_auth: null NATS at nats://127.0.0.1:$sport, stream \"SAFE\": cannot connect: the server refused the credentials (Authorization Violation)",
		"c_missing: null NATS at nats://127.0.0.1:$port, stream \"MISSING\": the stream does not exist",
		"c_noack: null NATS at nats://127.0.0.1:$port, stream \"NOACK\": the stream is created with no_ack: it does not acknowledge what it stores"),
	'c: outbox_jetstream_check() says the same');
is(relay_pid($node, 'postgres'), $pid, 'c: the same relay: no crash loop');
is((grep { /\[$pid\]/ && /wrong-password|right-password/ } split /\n/, slurp_file($node->logfile)), 0,
	"c: no password in the relay's log lines");

# fixed: each is delivered on a later attempt
$node->safe_psql('postgres', q{
	UPDATE outbox_destinations SET nats_password = 'right-password' WHERE name = 'c_auth';
	UPDATE outbox_destinations SET nats_subject = 'flow.nostream' WHERE name = 'c_nostream';
	UPDATE outbox_destinations SET nats_stream = 'OTHER' WHERE name = 'c_other';
	UPDATE outbox_destinations SET nats_subject = 'other.noack', nats_stream = 'OTHER' WHERE name = 'c_noack';
	UPDATE outbox_destinations SET nats_subject = 'flow.answered' WHERE name = 'c_answered';
});
$responder->kill_kill;
$nats->add_stream('MISSING', 'missing.>');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 6 FROM outbox WHERE event_type LIKE 'c.%' AND delivered_at IS NOT NULL"),
	'c: delivered once the cause is fixed');
is($secured->count('SAFE'), 1, 'c: the message is in the secured server\'s stream');

# A message the stream already has under the event's id: the PubAck says
# duplicate, and the event is delivered without a second copy.
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream, enabled)
	VALUES ('c_dup', 'c.dup', '$url', 'dup.x', 'DUP', false)});
my $dup_id = $node->safe_psql('postgres', q{SELECT outbox_emit('c.dup', '{}')});
my ($rc, $out, $err) = $nats->tool('publish', 'dup.x', $dup_id, 'stored before');
is($rc, 0, 'c: a message with the event\'s id is stored first') or diag($err);
$node->safe_psql('postgres', "UPDATE outbox_destinations SET enabled = true WHERE name = 'c_dup'");
ok( $node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL AND attempts = 1 FROM outbox WHERE event_type = 'c.dup'"),
	'c: a duplicate PubAck counts as delivered');
my @dup = @{ $nats->messages('DUP', 1) };
is_deeply([ map { $_->{data} } @dup ], ['stored before'], 'c: the stream keeps the one message it had');

# e. SIGTERM while the broker is frozen (SIGSTOP) with publishes waiting
# for PubAcks, on a connection made before.
$node->safe_psql('postgres', "SELECT outbox_emit('frozen.before', '{}')");
ok( $node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL FROM outbox WHERE event_type = 'frozen.before'"),
	'e: connected');
kill 'STOP', $nats->{pid};
$node->safe_psql('postgres', "SELECT count(outbox_emit('frozen.flow', '{}')) FROM generate_series(1, 50)");
ok( $node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM outbox_in_flight f JOIN outbox e ON e.id = ANY (f.ids) WHERE e.event_type = 'frozen.flow'"),
	'e: events in flight to the frozen broker');
my $t_stop = time();
kill 'TERM', $pid;
ok(wait_until(sub { !kill(0, $pid) }), 'e: the relay ended');
my $stop_took = time() - $t_stop;
cmp_ok($stop_took, '<', time_bound(1), sprintf('e: within a second (%.3f s)', $stop_took));
kill 'CONT', $nats->{pid};
$pid = wait_relay($node, 'postgres', $pid);
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 50 FROM outbox WHERE event_type = 'frozen.flow' AND delivered_at IS NOT NULL"),
	'e: delivered by the next relay once the broker runs again');
exactly_once($node, $nats, 'frozen.flow', 'e', 'FROZEN');

# d. SIGTERM while connecting to a server that accepts and never answers.
my $silent = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 16, ReuseAddr => 1)
  or die "listen: $!";
my $silent_port = $silent->sockport;
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream, timeout_ms)
	VALUES ('d_silent', 'd.silent', 'nats://127.0.0.1:$silent_port', 'silent.x', 'SILENT', 60000);
	SELECT outbox_emit('d.silent', '{}');
});
ok( $node->poll_query_until('postgres', "SELECT count(*) = 1 FROM outbox_in_flight f JOIN outbox e ON e.id = ANY (f.ids) WHERE e.event_type = 'd.silent'"),
	'd: the event is in flight, its connection being made');
my $t0 = time();
kill 'TERM', $pid;
ok(wait_until(sub { !kill(0, $pid) }), 'd: the relay ended');
my $took = time() - $t0;
cmp_ok($took, '<', time_bound(1), sprintf('d: within a second, where the connection may take 60 s (%.3f s)', $took));

done_testing();
