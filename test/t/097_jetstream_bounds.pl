# What a relay holds for a JetStream destination whose broker does not
# answer: nats-server frozen with SIGSTOP (its connection stays open, no
# PubAck comes), outbox.jetstream_max_pending 16, outbox.batch_size 1000
# and 400 events due. Sampled for 6 s: the journal never holds more than
# 16 events of the destination still in flight (each claim takes no more
# than the connection has room for), and no claim of it stays in the
# journal longer than the time limit (1 s) and a second (an event's clock
# starts when the relay takes it, not when room frees up). Once the broker
# runs again, every event is stored exactly once.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use Time::HiRes qw(time usleep);
use OutboxNats;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $max_pending = 16;
my $timeout_ms = 1000;
my $nats = start_nats();
$nats->add_stream('FROZEN', 'frozen.>');
my $url = $nats->plain_url;

my $node = outbox_node('jsbounds', 'outbox.batch_size' => 1000,
	'outbox.jetstream_max_pending' => $max_pending,
	'outbox.jetstream_timeout' => "'${timeout_ms}ms'");
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream)
	VALUES ('frozen', 'frozen.*', '$url', '{event_type}', 'FROZEN')});

# connected before the broker freezes
$node->safe_psql('postgres', "SELECT outbox_emit('frozen.before', '{}')");
ok( $node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL FROM outbox WHERE event_type = 'frozen.before'"),
	'connected: the first event is delivered');

kill 'STOP', $nats->{pid};
$node->safe_psql('postgres',
	"SELECT count(outbox_emit('frozen.flow', jsonb_build_object('n', g))) FROM generate_series(1, 400) g");

# the destination's events in flight by the journal, and the oldest
# claim's age, sampled for 6 s
my ($samples, $most, $oldest) = in_flight_sample($node, 'frozen.flow', 6);
diag(sprintf('%d samples: at most %d events in flight, the oldest claim %.3f s old',
	$samples, $most, $oldest));
cmp_ok($most, '>', 0, 'events were in flight to the frozen broker');
cmp_ok($most, '<=', $max_pending,
	"at no sample more than outbox.jetstream_max_pending ($max_pending) events in flight");
my $bound = time_bound($timeout_ms / 1000 + 1);
cmp_ok($oldest, '<', $bound,
	sprintf('no claim in flight longer than the time limit and a second (%.3f s < %g s)', $oldest, $bound));

# the attempts failed on their own clock, each with the PubAck's reason
my ($failed, $errors) = split /\|/, $node->safe_psql('postgres', q{
	SELECT sum(attempts), string_agg(DISTINCT last_error, ' | ')
	  FROM outbox WHERE event_type = 'frozen.flow' AND attempts > 0});
cmp_ok($failed, '>=', 2 * $max_pending, "failed attempts were recorded as they came ($failed)");
is($errors,
	"no PubAck from JetStream within $timeout_ms ms (the message may be stored: the retry carries the same Nats-Msg-Id)",
	'each failure is a PubAck that did not come in time: none waited for room or was cut short');

# the broker runs again: all delivered, each stored once
kill 'CONT', $nats->{pid};
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 400 FROM outbox WHERE event_type = 'frozen.flow' AND delivered_at IS NOT NULL"),
	'all 400 events delivered once the broker runs again');
my @msgs = grep { $_->{subject} eq 'frozen.flow' } @{ $nats->messages('FROZEN') };
my %stored;
$stored{ $_->{headers}{'Nats-Msg-Id'} }++ for @msgs;
is(scalar keys %stored, 400, 'one message per event in the stream');
is((grep { $_ != 1 } values %stored), 0, 'no event_id stored twice');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_in_flight'), '0', 'nothing left in flight');

done_testing();
