# The rabbitmq kind against a real rabbitmq-server (Debian's) on 127.0.0.1,
# read back with npm amqplib: 10,000 events become 10,000 persistent messages,
# each message_id (the event_id) once, with the properties and headers the
# README names and no x-* header a writer set (RabbitMQ's own names);
# a message no queue takes comes back (basic.return) and a full queue with
# overflow reject-publish refuses it (basic.nack): failed attempts, never
# delivered (the broker's max_message_size: 123_rabbitmq_claims.pl); bad
# credentials, a missing exchange and a wrong virtual host
# are each a clear last_error, with the password never shown, and the relay
# keeps running through all of it.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxRabbitmq;
use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

require_kind('rabbitmq');
plan skip_all => 'rabbitmq-server or npm amqplib is not installed (ci/deps.sh installs them)'
  unless rabbitmq_available();

my $rmq = start_rabbitmq(heartbeat => 2);
$rmq->tool({ command => 'setup',
	exchanges => [ { name => 'orders', type => 'topic' } ],
	queues => [ { name => 'orders-q' }, { name => 'ce-q' }, { name => 'long-q' },
		{ name => 'capped', arguments => { 'x-max-length' => 1, 'x-overflow' => 'reject-publish' } } ],
	bindings => [ { queue => 'orders-q', exchange => 'orders', key => 'order.#' },
		{ queue => 'ce-q', exchange => 'orders', key => 'ce.#' },
		{ queue => 'long-q', exchange => 'orders', key => 'long' },
		{ queue => 'capped', exchange => 'orders', key => 'capped' } ] });

my $node = outbox_node('rabbitmq');
my $relay = wait_relay($node, 'postgres');
ok($relay, 'relay runs');

sub destination
{
	my ($name, $types, %options) = @_;
	$node->safe_psql('postgres', sprintf(q{
		INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('%s', 'rabbitmq', '%s', '%s')},
		$name, $types, $rmq->options(%options)));
}

sub last_error { my ($type) = @_; return last_error_of($node, $type); }

# 10,000 events, each with headers a writer may set: x-* (RabbitMQ's and its
# plugins' own, such as x-delay) and a trace context, which is forwarded;
# the destination adds a header of its own
destination('orders', 'order.*', exchange => 'orders');
$node->safe_psql('postgres', q{UPDATE outbox_destinations SET headers = '{"tenant": "acme"}' WHERE name = 'orders'});
my $traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
$node->safe_psql('postgres', qq{
	SELECT count(outbox_emit('order.placed', jsonb_build_object('n', g), 'order', g::text,
		jsonb_build_object('x-delay', '5000', 'x-custom', 'no', 'traceparent', '$traceparent')))
	  FROM generate_series(1, 10000) g});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 10000 FROM outbox WHERE event_type = 'order.placed' AND delivered_at IS NOT NULL"),
	'10,000 events delivered (confirmed by RabbitMQ)');
my $got = $rmq->tool({ command => 'consume', queue => 'orders-q', count => 10000, timeout_ms => 60_000 })->{messages};
my %ids;
$ids{ $_->{message_id} }++ for @$got;
is_deeply([ sort keys %ids ],
	[ sort split /\n/, $node->safe_psql('postgres', "SELECT event_id FROM outbox WHERE event_type = 'order.placed'") ],
	'10,000 messages, their message_ids the event_ids');
is(scalar(grep { $_ > 1 } values %ids), 0, 'each message_id once');

my $m = (grep { $_->{headers}{'outbox-aggregate-id'} eq '7' } @$got)[0];
my ($event_id, $created) = split /\|/, $node->safe_psql('postgres', q{
	SELECT event_id, extract(epoch FROM date_trunc('second', created_at))::bigint
	  FROM outbox WHERE aggregate_id = '7'});
is_deeply(
	[ $m->{message_id}, $m->{type}, $m->{content_type}, $m->{delivery_mode}, $m->{app_id},
		$m->{timestamp}, $m->{exchange}, $m->{routing_key} ],
	[ $event_id, 'order.placed', 'application/json', 2, 'outbox', $created, 'orders', 'order.placed' ],
	'message_id, type, content_type, persistent, app_id, timestamp, exchange, routing key (the event type)');
is_deeply($m->{headers}, {
		'outbox-event-id' => $event_id, 'outbox-event-type' => 'order.placed',
		'outbox-aggregate-type' => 'order', 'outbox-aggregate-id' => '7', 'outbox-attempt' => 1,
		traceparent => $traceparent, tenant => 'acme' },
	'headers: the relay\'s, the trace context and the destination\'s own; no x-*');
is(node_json('trace_check.js', { headers => $m->{headers}, body => '' }, '@opentelemetry/core')->{headers},
	'4bf92f3577b34da6a3ce929d0e0e4736', 'where an OpenTelemetry consumer (W3C propagator) finds the trace id');
my $body = decode_json($m->{body});
is_deeply([ $body->{id}, $body->{payload}{n} ], [ $event_id, 7 ], 'the body is the envelope');

# CloudEvents, structured mode, with the trace context as an attribute
destination('ce', 'ce.*', exchange => 'orders');
$node->safe_psql('postgres', qq{UPDATE outbox_destinations SET format = 'cloudevents' WHERE name = 'ce';
	SELECT outbox_emit('ce.x', '{"k": 1}', 'thing', '9', '{"traceparent": "$traceparent"}')});
$got = $rmq->tool({ command => 'consume', queue => 'ce-q', count => 1, timeout_ms => 30_000 })->{messages};
my $ce = decode_json($got->[0]{body});
is_deeply(
	[ $got->[0]{content_type}, $ce->{specversion}, $ce->{id}, $ce->{type}, $ce->{traceparent}, $ce->{data} ],
	[ 'application/cloudevents+json', '1.0', $got->[0]{message_id}, 'ce.x', $traceparent, { k => 1 } ],
	'format cloudevents: a CloudEvent in the JSON format, its id the message_id, with the trace context');
$node->safe_psql('postgres', qq{UPDATE outbox_destinations SET format = 'cloudevents-binary' WHERE name = 'ce';
	SELECT outbox_emit('ce.y', '{"k": 2}', 'thing', '9', '{"traceparent": "$traceparent"}')});
$got = $rmq->tool({ command => 'consume', queue => 'ce-q', count => 1, timeout_ms => 30_000 })->{messages};
my $h = $got->[0]{headers};
is_deeply(
	[ $got->[0]{content_type}, decode_json($got->[0]{body}), map { $h->{"cloudEvents:$_"} }
		qw(specversion id type subject traceparent) ],
	[ 'application/json', { k => 2 }, '1.0', $got->[0]{message_id}, 'ce.y', 'thing/9', $traceparent ],
	'format cloudevents-binary: the payload as the body, the attributes as cloudEvents: headers (the AMQP binding)');

# an event type longer than AMQP's short string (255 bytes) is no message
# type, only the outbox-event-type header; a message larger than the
# destination's max_message_bytes is never sent (the broker would close
# the channel, failing every message on it): dead-lettered at once
destination('long', 'long.*', exchange => 'orders', routing_key => 'long', max_message_bytes => 1024);
my $long_type = 'long.' . ('t' x 300);
$node->safe_psql('postgres', qq{SELECT outbox_emit('$long_type', '{}');
	SELECT outbox_emit('long.big', jsonb_build_object('text', repeat('b', 2000)))});
$got = $rmq->tool({ command => 'consume', queue => 'long-q', count => 1, timeout_ms => 30_000 })->{messages};
is_deeply([ map { [ $_->{type}, $_->{headers}{'outbox-event-type'} ] } @$got ], [ [ undef, $long_type ] ],
	'a 305-byte event type: no type property, the whole type in outbox-event-type');
like(last_error('long.big'),
	qr/^the message of \d+ bytes is larger than the destination's max_message_bytes \(1024\)$/,
	'a message over max_message_bytes: not sent');
is($node->safe_psql('postgres', q{SELECT attempts || ' ' || (dead_at IS NOT NULL) FROM outbox WHERE event_type = 'long.big'}),
	'1 true', 'and dead-lettered at its first attempt');

# a routing key no queue is bound to: returned, not delivered
destination('unrouted', 'unrouted.*', exchange => 'orders', routing_key => 'nobody');
emit($node, 'postgres', 'unrouted.x', 1);
is(last_error('unrouted.x'),
	'RabbitMQ returned the message: no queue is bound to exchange "orders" for routing key "nobody" (312 NO_ROUTE)',
	'a message no queue takes is a failed attempt, naming the exchange and routing key');

# a queue at its max-length with overflow reject-publish: nacked
destination('capped', 'capped.*', exchange => 'orders', routing_key => 'capped');
emit($node, 'postgres', 'capped.x', 3);
like(last_error('capped.x'),
	qr/^RabbitMQ refused the message \(basic\.nack\) for exchange "orders" and routing key "capped"/,
	'a nack is a failed attempt');
is($node->safe_psql('postgres',
		"SELECT count(*) FILTER (WHERE delivered_at IS NOT NULL) FROM outbox WHERE event_type = 'capped.x'"),
	'1', 'only the message the queue took is delivered');

# what the broker refuses when connecting: each said, the relay unharmed
destination('badpass', 'badpass.*', password => 'wrong-pass-9');
emit($node, 'postgres', 'badpass.x', 1);
my $port = $rmq->{port};
# (the broker's own words after its code differ between RabbitMQ versions)
like(last_error('badpass.x'),
	qr{^cannot connect to RabbitMQ: amqp://127\.0\.0\.1:$port: logging in: RabbitMQ closed the connection: 403 ACCESS_REFUSED - Login was refused },
	'bad credentials');
destination('noexchange', 'noexchange.*', exchange => 'nope');
emit($node, 'postgres', 'noexchange.x', 1);
like(last_error('noexchange.x'),
	qr{^cannot connect to RabbitMQ: amqp://127\.0\.0\.1:$port: checking exchange "nope": RabbitMQ closed the channel: 404 NOT_FOUND - no exchange 'nope' in vhost '/'},
	'a missing exchange');
destination('novhost', 'novhost.*', vhost => 'nope');
emit($node, 'postgres', 'novhost.x', 1);
like(last_error('novhost.x'),
	qr{^cannot connect to RabbitMQ: amqp://127\.0\.0\.1:$port: logging in: RabbitMQ closed the connection: 530 NOT_ALLOWED - (access to )?vhost '?nope'? },
	'a wrong virtual host');
my $closed = $node->safe_psql('postgres', "SELECT count(*) FROM outbox WHERE last_error LIKE '%closed%' AND delivered_at IS NOT NULL");
is($closed, '0', 'none of those delivered');

# a broker that is not there
$node->safe_psql('postgres', sprintf(q{
	INSERT INTO outbox_destinations (name, kind, event_types, options)
	VALUES ('down', 'rabbitmq', 'down.*', '{"urls": "amqp://127.0.0.1:%d, amqp://127.0.0.1:%d"}')},
	PostgreSQL::Test::Cluster::get_free_port(), PostgreSQL::Test::Cluster::get_free_port()));
emit($node, 'postgres', 'down.x', 1);
like(last_error('down.x'),
	qr{^cannot connect to RabbitMQ: amqp://127\.0\.0\.1:\d+: cannot connect: [^;]+; amqp://127\.0\.0\.1:\d+: cannot connect: },
	'no broker: each URL tried in turn, each named with why');
# a cluster whose first node is down: the next URL takes the event
destination('failover', 'failover.*', exchange => 'orders', routing_key => 'long',
	urls => sprintf('amqp://127.0.0.1:%d, %s', PostgreSQL::Test::Cluster::get_free_port(), $rmq->url));
emit($node, 'postgres', 'failover.x', 1);
$got = $rmq->tool({ command => 'consume', queue => 'long-q', count => 1, timeout_ms => 30_000 })->{messages};
is(join(',', map { $_->{type} } @$got), 'failover.x', 'the first URL down: delivered through the second');

# the README's destination, as written there but for the test broker's
# port and password, into an exchange and binding like the README's
$node->safe_psql('postgres', q{DELETE FROM outbox_destinations WHERE name = 'orders'});
my $readme = readme_sql(q{VALUES ('orders-exchange', 'rabbitmq'});
$readme =~ s/127\.0\.0\.1:5672/127.0.0.1:$port/ or die 'the README\'s URL changed';
$readme =~ s/"s3cret"/"$rmq->{password}"/ or die 'the README\'s password changed';
$readme =~ s/outbox\.outbox_destinations/outbox_destinations/;	# installed in public here
$node->safe_psql('postgres', $readme);
$node->safe_psql('postgres', q{SELECT outbox_emit('order.placed', '{"order": 42}', 'order', '42')});
$got = $rmq->tool({ command => 'consume', queue => 'orders-q', count => 1, timeout_ms => 30_000 })->{messages};
is_deeply([ map { [ $_->{routing_key}, decode_json($_->{body})->{payload}{order} ] } @$got ],
	[ [ 'order.placed', 42 ] ], 'the README\'s destination delivers into the README\'s binding')
  or diag explain $got;

# idle: the connection lives on heartbeats (2 s here, the broker's
# proposal), and the relay sleeps between them. The failing destinations
# are disabled first: their retries would keep the relay busy.
$node->safe_psql('postgres', q{UPDATE outbox_destinations SET enabled = false WHERE name <> 'orders-exchange'});
ok($node->poll_query_until('postgres', 'SELECT count(*) = 0 FROM outbox_in_flight'), 'nothing in flight');
sub cpu_ticks
{
	my @f = split ' ', (slurp_file("/proc/$relay/stat") =~ s/^.*\) //r);
	return $f[11] + $f[12];		# utime and stime, in clock ticks
}
my $log_offset = -s $node->logfile;
my $ticks = cpu_ticks();
my $idle_until = time() + 8;
ok(wait_until(sub { time() >= $idle_until }), 'idle for 8 s: four heartbeat intervals');
cmp_ok(cpu_ticks() - $ticks, '<', 100, 'the idle relay used less than a second of CPU in 8 s');
$node->safe_psql('postgres', q{SELECT outbox_emit('order.placed', '{"order": 43}', 'order', '43')});
$got = $rmq->tool({ command => 'consume', queue => 'orders-q', count => 1, timeout_ms => 30_000 })->{messages};
is(decode_json($got->[0]{body})->{payload}{order}, 43, 'an event after the idle time is delivered');
unlike(log_since($node, $log_offset), qr/the connection to RabbitMQ ended|connected to RabbitMQ again/,
	'on the same connection');

is(relay_pid($node, 'postgres'), $relay, 'the same relay ran through all of it');
my $log = slurp_file($node->logfile);
unlike(join('', grep { /\[$relay\]/ } split /^/, $log), qr/relay-secret-7Qx2|wrong-pass-9/,
	'no password in what the relay logged');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox WHERE last_error ~ 'relay-secret|wrong-pass'}),
	'0', 'nor in last_error');
unlike($log, qr/PANIC|TRAP|terminated by signal/, 'no crash');

$node->stop;
$rmq->stop;
done_testing();
