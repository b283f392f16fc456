# Claims for a RabbitMQ destination whose unconfirmed window is small,
# against a real rabbitmq-server on 127.0.0.1 read back with npm amqplib:
# its backlog never holds another destination back, as a claim leaves a
# destination whose kind is full out (the relay's skip list) and reaches
# the events behind it: 100 NOTIFY events behind a backlog of 3,000
# RabbitMQ events in due order are all delivered while two thirds of that
# backlog still wait, and every RabbitMQ event is in the queue, each
# message_id once; b: a message over the broker's own max_message_size
# (below).
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxRabbitmq;
use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

require_kind('rabbitmq');
plan skip_all => 'rabbitmq-server or npm amqplib is not installed (ci/deps.sh installs them)'
  unless rabbitmq_available();

my $n = 3000;
my $rmq = start_rabbitmq(max_message_size => 4096);
$rmq->tool({ command => 'setup', queues => [ { name => 'window' }, { name => 'long-q' } ] });
my $node = outbox_node('rabbitmq_claims');
ok(wait_relay($node, 'postgres'), 'relay runs');
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, kind, event_types, options)
	VALUES ('window', 'rabbitmq', 'window.*', '%s');
	INSERT INTO outbox_destinations (name, kind, event_types, channel)
	VALUES ('other', 'notify', 'other.*', 'other')},
	$rmq->options(routing_key => 'window', max_unconfirmed => 16)));

# one transaction: the RabbitMQ events first in due order (same time,
# lower ids), and no time between the two for the relay to drain them
$node->safe_psql('postgres', qq{BEGIN;
	SELECT count(outbox_emit('window.x', jsonb_build_object('n', g))) FROM generate_series(1, $n) g;
	SELECT count(outbox_emit('other.x', jsonb_build_object('n', g))) FROM generate_series(1, 100) g;
	COMMIT});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 100 FROM outbox WHERE event_type = 'other.x' AND delivered_at IS NOT NULL"),
	'the 100 NOTIFY events are delivered');
my $before = $node->safe_psql('postgres', q{
	SELECT count(*) FROM outbox
	 WHERE event_type = 'window.x'
	   AND delivered_at <= (SELECT max(delivered_at) FROM outbox WHERE event_type = 'other.x')});
diag("$before of $n RabbitMQ events delivered when the last NOTIFY one was");
cmp_ok($before, '<', $n / 3, 'while most of the RabbitMQ backlog waits');

ok($node->poll_query_until('postgres',
		"SELECT count(*) = $n FROM outbox WHERE event_type = 'window.x' AND delivered_at IS NOT NULL"),
	"all $n RabbitMQ events delivered");
my $got = $rmq->tool({ command => 'consume', queue => 'window', count => $n, idle_ms => 2000,
	timeout_ms => 60_000 })->{messages};
my %ids;
$ids{ $_->{message_id} }++ for @$got;
is_deeply([ sort keys %ids ],
	[ sort split /\n/, $node->safe_psql('postgres', "SELECT event_id FROM outbox WHERE event_type = 'window.x'") ],
	'every event in the queue');
is(scalar(@$got), $n, 'each message_id once');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_in_flight'), '0', 'nothing left in flight');

# b: RabbitMQ's own max_message_size (4,096 bytes here) under the
# destination's max_message_bytes (16 MiB): the broker closes the channel
# (406) on a larger message. That event is dead-lettered at its first
# attempt with the broker's words, the one after it on the channel is
# retried and delivered, and later events over the limit the broker named
# are dead-lettered without being sent: one that comes up to be published,
# and one that waits behind events the frozen broker cannot confirm, which
# fail when their time limit ends, saying so, and are delivered once it
# runs again.
sub last_error { my ($type) = @_; return last_error_of($node, $type); }
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('huge', 'rabbitmq', 'huge.*', '%s')},
	$rmq->options(routing_key => 'long-q')));

my $log_406 = -s $node->logfile;
$node->safe_psql('postgres', q{BEGIN; SELECT outbox_emit('huge.big', jsonb_build_object('text', repeat('b', 5000)));
	SELECT outbox_emit('huge.small', '{}'); COMMIT});
ok($node->poll_query_until('postgres', q{SELECT count(*) = 2 FROM outbox
		WHERE event_type IN ('huge.big', 'huge.small') AND (dead_at IS NOT NULL OR delivered_at IS NOT NULL)}),
	'a message over the broker\'s max_message_size: its events end');
my $too_large = qr/^the message of (\d+) bytes is larger than RabbitMQ's max_message_size \(4096\), which the broker gave when it closed the channel: 406 PRECONDITION_FAILED - message size \1 is larger than configured max size 4096$/;
like(last_error('huge.big'), $too_large, 'the broker\'s 406, with its limit, is the last_error');
my $first_words = last_error('huge.big') =~ s/^.*closed the channel: //r;
is($node->safe_psql('postgres', q{SELECT string_agg(event_type || ' ' || attempts || ' ' || (dead_at IS NOT NULL), ', ' ORDER BY id)
		FROM outbox WHERE event_type LIKE 'huge.%'}),
	'huge.big 1 true, huge.small 2 false', 'dead-lettered at its first attempt; the next one retried, then delivered');
$node->safe_psql('postgres', q{SELECT outbox_emit('huge.big2', jsonb_build_object('text', repeat('c', 5000)))});
ok($node->poll_query_until('postgres', q{SELECT dead_at IS NOT NULL FROM outbox WHERE event_type = 'huge.big2'}),
	'a second such event: dead-lettered');
like(last_error('huge.big2'), qr/^the message of 5\d{3} bytes is larger than RabbitMQ's max_message_size \(4096\), which the broker gave when it closed the channel: \Q$first_words\E$/,
	'with the limit and the words the broker gave before');
my @closes = log_since($node, $log_406) =~ /the connection to RabbitMQ ended: RabbitMQ closed the channel: 406/g;
is(scalar(@closes), 1, 'and not sent: the broker closed the channel once');
# such an event that cannot go yet (the broker frozen, 1,100 events ahead
# of it that the broker cannot confirm) is dead-lettered at once all the
# same, not failed when its time limit ends and retried
my $log_frozen = -s $node->logfile;
$rmq->signal('STOP');
$node->safe_psql('postgres', q{BEGIN;
	SELECT count(outbox_emit('huge.filler', '{}')) FROM generate_series(1, 1100);
	SELECT outbox_emit('huge.big3', jsonb_build_object('text', repeat('d', 5000))); COMMIT});
ok($node->poll_query_until('postgres', q{SELECT dead_at IS NOT NULL FROM outbox WHERE event_type = 'huge.big3'}),
	'an event over the limit behind a full window: dead-lettered');
is($node->safe_psql('postgres', q{SELECT attempts || ' ' || (SELECT count(*) FROM outbox WHERE event_type = 'huge.filler' AND delivered_at IS NOT NULL) FROM outbox WHERE event_type = 'huge.big3'}),
	'1 0', 'at its first attempt, before the broker confirmed anything');
like(last_error('huge.big3'), qr/^the message of 5\d{3} bytes is larger than RabbitMQ's max_message_size \(4096\)/,
	'with the broker\'s limit');
# the messages the frozen broker never confirmed: failed when their time
# limit ended, to be retried with the same message_id; the relay ends the
# connection, saying why (their last_error says it until their retry,
# which fails again while the broker is frozen, says why in turn)
ok(wait_until(sub { log_since($node, $log_frozen) =~
		/outbox destination "huge": the connection to RabbitMQ ended: no confirm from RabbitMQ within 5000 ms$/m }),
	'no confirm within the time limit: the connection ends, saying so');
$rmq->signal('CONT');
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1100 FROM outbox WHERE event_type = 'huge.filler' AND delivered_at IS NOT NULL}),
	'the others are delivered once the broker runs again');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_in_flight'), '0', 'b: nothing left in flight');

$node->stop;
$rmq->stop;
done_testing();
