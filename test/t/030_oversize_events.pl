# Events that got past the limits (inserted with triggers off, as older
# data would be) are dead-lettered alone at the claim, with the reason,
# and never stop the relay; SIGTERM ends a relay busy with a huge event
# within a second.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = outbox_node('oversize', 'outbox.poll_interval' => "'100ms'");
my $sink = start_sink();
my $url = $sink->url;
$node->safe_psql('postgres',
	"INSERT INTO outbox_destinations (name, event_types, url) VALUES ('all', '*', '$url')");
my $pid = wait_relay($node, 'postgres');
ok($pid, 'relay runs');

# the issue's inputs, stored as a superuser with triggers off
$node->safe_psql('postgres', q{
	SET session_replication_role = replica;
	INSERT INTO outbox (event_type, payload) VALUES ('bad.' || repeat(chr(1), 180000000), '{}');
	INSERT INTO outbox (event_type, payload, aggregate_id)
	SELECT 'agg.big', '{}', repeat(i::text, 60 * 1024 * 1024) FROM generate_series(1, 8) i;
	INSERT INTO outbox (event_type, payload, headers)
	VALUES ('hh.n', '{}', (SELECT jsonb_object_agg('h' || i, 'v' || i) FROM generate_series(1, 100000) i));
	INSERT INTO outbox (event_type, payload, headers)
	VALUES ('hh.auth', '{}', '{"Authorization": "Bearer WRITER-CHOSEN"}');
	INSERT INTO outbox (event_type, payload)
	VALUES ('env.numbers', (SELECT jsonb_agg('1e1000'::numeric) FROM generate_series(1, 140000)));
});
my $good = emit($node, 'postgres', 'good', 3);

ok($sink->wait_delivered(3), 'good events delivered');
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 12 FROM outbox WHERE dead_at IS NOT NULL"), 'the 12 bad events are dead-lettered');
is($node->safe_psql('postgres', q{
	SELECT string_agg(DISTINCT left(event_type, 11) || ' ' || attempts || ' ' || last_error, E'\n')
	  FROM outbox WHERE dead_at IS NOT NULL}),
	join("\n",
		'agg.big 1 aggregate id is longer than 1024 bytes (It has 62914560 bytes.)',
		'bad.' . ("\x01" x 7) . ' 1 event type is longer than 1024 bytes (It has 180000004 bytes.)',
		'env.numbers 1 event envelope would be larger than 134217728 bytes',
		'hh.auth 1 event header "Authorization" is not allowed',
		'hh.n 1 event headers are larger than 65536 bytes'),
	'each is dead-lettered on its first attempt with its reason');
is_deeply($sink->delivered_ids, [ sort @$good ], 'only the good events reached the endpoint');
is(relay_pid($node, 'postgres'), $pid, 'the relay never restarted');

# what the relay logs names the limit, never the value
my @relay_log = grep { /\[$pid\]/ } split /\n/, slurp_file($node->logfile);
ok(scalar(grep { /dead-lettered/ } @relay_log) >= 12, 'the relay logged the dead letters');
unlike(join("\n", @relay_log), qr/\x01{8}|WRITER-CHOSEN|1{64}/, 'no value of a bad event in them');

# a relay busy with large valid events ends within a second of SIGTERM
# (the test's endpoint is slow to take 60 MB: give it time)
$node->safe_psql('postgres',
	"UPDATE outbox_destinations SET enabled = false, timeout_ms = 600000");
$node->safe_psql('postgres', q{
	SELECT outbox_emit('huge', jsonb_build_object('s', repeat(i::text, 60 * 1024 * 1024)))
	  FROM generate_series(1, 4) i});
my $start = $node->safe_psql('postgres', 'SELECT now()');
$node->safe_psql('postgres', "UPDATE outbox_destinations SET enabled = true");
ok($node->poll_query_until('postgres', qq{
	SELECT state = 'active' AND query = 'claim events' FROM pg_stat_activity WHERE pid = $pid}),
	'the relay is claiming the huge events');
my $t0 = time();
kill 'TERM', $pid;
ok(wait_until(sub { !kill(0, $pid) }), 'the relay exited');
my $elapsed = time() - $t0;
cmp_ok($elapsed, '<', time_bound(1.0), "SIGTERM took effect within a second ($elapsed s)");

my $new = wait_relay($node, 'postgres', $pid);
ok($new, 'the launcher started the relay again');
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 4 FROM outbox WHERE event_type = 'huge' AND delivered_at IS NOT NULL"),
	'the huge events are delivered afterwards, within the memory budget');

$sink->stop;
$node->stop;
done_testing();
