# outbox_cancel() of events in flight: the relay has claimed them and their
# requests wait at the endpoint. The cancel stands whatever the answer:
# neither a 2xx nor a 503 that arrives afterwards is recorded over it, and
# a cancelled event is not sent again.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('cancel', 'outbox.http_timeout' => "'60s'");
my $sink = start_sink();
my ($ok_url, $fail_url) = ($sink->url('/ok'), $sink->url('/fail'));

# both endpoints hold their answers until told to go on
$sink->paths('/ok' => { hold => JSON::PP::true }, '/fail' => { hold => JSON::PP::true, status => 503 });
$node->safe_psql('postgres', qq{
	INSERT INTO outbox_destinations (name, event_types, url) VALUES
		('ok', 'ok.*', '$ok_url'), ('fail', 'fail.*', '$fail_url');
	CREATE ROLE regress_operator;
	GRANT outbox_admin TO regress_operator;});
my ($ok_id) = @{ emit($node, 'postgres', 'ok.created', 1) };
my ($fail_id) = @{ emit($node, 'postgres', 'fail.created', 1) };
my ($kept_id) = @{ emit($node, 'postgres', 'ok.kept', 1) };

ok(wait_until(sub { $sink->stats->{in_flight} == 3 }), 'three requests wait at the endpoint');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM outbox WHERE (id, attempts) IN (SELECT f.id, f.attempts FROM outbox_in_flight j, unnest(j.ids, j.attempts) AS f(id, attempts)) AND attempts = 0 AND delivered_at IS NULL}),
	'3', 'all three are in flight, in the journal, their attempt not counted yet');

is( $node->safe_psql('postgres', qq{
		SET ROLE regress_operator;
		SELECT outbox_cancel('$ok_id', 'sent to the wrong tenant'),
		       outbox_cancel('$fail_id', 'superseded by order 18')}),
	't|t', 'both in-flight events are cancelled');

# the endpoint answers now: 200 for /ok, 503 for /fail
$sink->paths('/ok' => {}, '/fail' => { status => 503 });
ok($sink->wait_delivered(2, '/ok'), 'the answers went out');
ok( $node->poll_query_until('postgres',
		qq{SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$kept_id'}),
	'the event that was not cancelled is delivered');
ok(wait_until(sub { $sink->stats('/fail')->{requests} == 1 }), 'the 503 went out');

# An outcome is recorded in a short transaction as it arrives; to be sure
# the relay has had the last two, emit one more event and wait for it.
$sink->paths();
my ($after_id) = @{ emit($node, 'postgres', 'ok.after', 1) };
ok( $node->poll_query_until('postgres',
		qq{SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$after_id'}),
	'a later event is delivered and recorded');
is( $node->safe_psql('postgres', q{
		SELECT string_agg(destination || ':' || delivered || '/' || failed, ',' ORDER BY destination)
		  FROM outbox_destination_stats() WHERE delivered + failed > 0}),
	'ok:2/0', 'the statistics count the outcomes recorded, not those of the cancelled events');

my $row = q{
	SELECT concat_ws('|', attempts, delivered_at IS NULL, dead_at IS NOT NULL, cancelled_at IS NOT NULL,
	                 NOT (id, attempts) IN (SELECT f.id, f.attempts FROM outbox_in_flight j, unnest(j.ids, j.attempts) AS f(id, attempts)), last_error)
	  FROM outbox WHERE event_id = };
is($node->safe_psql('postgres', "$row '$ok_id'"),
	'1|t|t|t|t|cancelled by regress_operator: sent to the wrong tenant',
	'the 200 that came after the cancel did not mark the event delivered');
is($node->safe_psql('postgres', "$row '$fail_id'"),
	'1|t|t|t|t|cancelled by regress_operator: superseded by order 18',
	'the 503 did not schedule a retry nor replace the reason');
is($node->safe_psql('postgres', q{SELECT dead FROM outbox_status WHERE event_type = 'fail.created'}),
	'1', 'the status view counts it dead');

# a cancelled event is not sent again, even by outbox_redeliver_dead()
is($node->safe_psql('postgres', 'SELECT outbox_redeliver_dead()'), '0',
	'outbox_redeliver_dead() leaves cancelled events alone');
my $sent = $sink->stats->{requests};
my ($last_id) = @{ emit($node, 'postgres', 'ok.last', 1) };
ok( $node->poll_query_until('postgres',
		qq{SELECT delivered_at IS NOT NULL FROM outbox WHERE event_id = '$last_id'}),
	'the relay goes on');
is($sink->stats->{requests}, $sent + 1, 'and sent only the new event');
is_deeply(count_by_id($sink->requests),
	{ $ok_id => 1, $fail_id => 1, $kept_id => 1, $after_id => 1, $last_id => 1 },
	'each event was sent once: the cancelled ones only while already in flight');

$sink->stop;
$node->stop;
done_testing();
