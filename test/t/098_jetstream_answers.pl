# What a JetStream destination's answers tell operators, against a real
# nats-server on 127.0.0.1:
#   a. core NATS responders that answer instead of a stream: `not json`
#      and a JSON object that is no PubAck; each failure's last_error says
#      what came back
#   b. an event redelivered after its delivery: the stream answers with a
#      duplicate PubAck; outbox_destination_stats counts it delivered, as
#      any delivery, and deduplicated (exactly 1), and the log names the
#      event and the stream; the stream keeps one message
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxNats;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $nats = start_nats();
$nats->add_stream('DUP', 'dup.>');
my $url = $nats->plain_url;

my $node = outbox_node('jsanswers', 'outbox.backoff_base' => "'1s'");
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream)
	VALUES ('dup', 'dup.*', '$url', 'dup.x', 'DUP'),
	       ('stray', 'stray.*', '$url', '{event_type}', 'DUP')});

# a. Responders that are not the stream (DUP takes dup.> only).
my $text = $nats->responder('stray.text', 'not json');
my $object = $nats->responder('stray.object', '{"answer": 42}');
$node->safe_psql('postgres', q{
	SELECT outbox_emit('stray.text', '{}');
	SELECT outbox_emit('stray.object', '{}')});
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM outbox WHERE event_type LIKE 'stray.%' AND attempts >= 1 AND last_error IS NOT NULL"),
	'a: both failed');
is( $node->safe_psql('postgres',
		"SELECT string_agg(event_type || ': ' || last_error, E'\\n' ORDER BY event_type) FROM outbox WHERE event_type LIKE 'stray.%'"),
	join("\n",
		'stray.object: an answer that is no PubAck of stream "DUP" came for subject "stray.object" (JSON without a stream or a sequence): something else answers it',
		q{stray.text: an answer that is not JSON came for subject "stray.text" (incorrect JSON string: 'not json'): something else answers it}),
	'a: each failure says what came back');
like($node->safe_psql('postgres',
		"SELECT last_error FROM outbox_destination_stats() WHERE destination = 'stray'"),
	qr/^an answer that/, 'a: and so does the destination\'s last_error');
$text->kill_kill;
$object->kill_kill;

# b. The same event published twice.
my $log_start = -s $node->logfile;
my $id = $node->safe_psql('postgres', "SELECT outbox_emit('dup.one', '{}')");
ok( $node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$id'"),
	'b: delivered');
is($node->safe_psql('postgres',
		"SELECT delivered || ' ' || deduplicated FROM outbox_destination_stats() WHERE destination = 'dup'"),
	'1 0', 'b: one delivery, none deduplicated');
is($node->safe_psql('postgres', "SELECT outbox_redeliver('$id')"), 't', 'b: redelivered');
ok( $node->poll_query_until('postgres',
		"SELECT delivered_at IS NOT NULL AND attempts = 2 FROM outbox WHERE event_id = '$id'"),
	'b: delivered again');
is($node->safe_psql('postgres',
		"SELECT delivered || ' ' || deduplicated || ' ' || failed FROM outbox_destination_stats() WHERE destination = 'dup'"),
	'2 1 0', 'b: two deliveries, one of them deduplicated, no failure');
is($nats->count('DUP'), 1, 'b: the stream keeps one message');
like(slurp_file($node->logfile, $log_start),
	qr/LOG:  outbox destination "dup": stream "DUP" already had event \Q$id\E, which counts as delivered without a second copy/,
	'b: the log names the event and the stream');

done_testing();
