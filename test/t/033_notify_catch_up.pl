# A NOTIFY consumer that was away catches up with outbox_catch_up() and
# processes every event exactly once, with the loop docs/notify.md gives
# (LISTEN, catch up at connect and after each notification, inbox_accept in
# the business transaction): 500 events emitted while it is away, some of
# them committed out of id order by concurrent transactions while it had
# caught up in between, so that "the last id seen" would skip them.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('catchup');
my $db = 'app';

# the installation of the README: a schema of its own, names qualified
$node->safe_psql('postgres', "CREATE DATABASE $db");
$node->safe_psql($db, q{
	CREATE SCHEMA outbox;
	CREATE EXTENSION outbox SCHEMA outbox;
	INSERT INTO outbox.outbox_destinations (name, event_types, channel)
	VALUES ('zz_rest', 'nt.*', 'outbox_events');
	CREATE ROLE billing LOGIN;
	GRANT outbox_consumer TO billing;
	-- the business table: no key, so that a duplicate would show
	CREATE TABLE billing_events (event_id uuid, payload jsonb);
	GRANT INSERT, SELECT ON billing_events TO billing;
});
# the consumer's function, as docs/notify.md gives it
$node->safe_psql($db, readme_sql('CREATE FUNCTION billing_catch_up()'));
$node->safe_psql($db, 'ALTER FUNCTION billing_catch_up() OWNER TO billing');

# the claim's EXPLAIN recipe of docs/delivery.md runs as given
like($node->safe_psql($db, readme_sql('PREPARE outbox_claim')),
	qr/Index Scan using outbox_pending_idx on outbox o/, "docs/delivery.md's claim EXPLAIN runs");

set_databases($node, $db);
ok(wait_relay($node, $db), 'relay runs');

my $sent = 0;    # events emitted so far

# Emits $n events of type nt.x in one transaction of session $s (a psql
# background session, or undef for a transaction of its own).
sub emit_n
{
	my ($n, $s) = @_;
	my $sql = "SELECT outbox.outbox_emit('nt.x', jsonb_build_object('n', g)) "
	  . "FROM generate_series(@{[ $sent + 1 ]}, @{[ $sent + $n ]}) g";
	$sent += $n;
	return defined $s ? $s->query_safe($sql) : $node->safe_psql($db, $sql);
}

sub wait_delivered
{
	my ($n) = @_;
	return $node->poll_query_until($db,
		"SELECT count(*) = $n FROM outbox.outbox WHERE delivered_at IS NOT NULL AND destination = 'zz_rest'");
}

# The consumer's session: LISTEN, then catch up until a call returns less
# than a batch. Returns the listener and the number of events processed.
sub consumer_connects
{
	my $l = start_listener($node, $db, 'outbox_events', 'billing');
	my $done = catch_up($l);
	return ($l, $done);
}

sub catch_up
{
	my ($l) = @_;
	my ($n, $total) = (100, 0);
	while ($n == 100)
	{
		$n = $l->query('SELECT billing_catch_up()');
		$total += $n;
	}
	return $total;
}

sub processed
{
	return $node->safe_psql($db,
		'SELECT count(*), count(DISTINCT event_id) FROM billing_events');
}

############################################################################
# Connected: a notification arrives, and the catch-up after it processes
# the event.

my ($l, $n) = consumer_connects();
is($n, 0, 'nothing to catch up at first');
emit_n(1);
ok(wait_until(sub { grep { $_->{channel} eq 'outbox_events' } @{ $l->notes } }),
	'a notification arrives');
is(catch_up($l), 1, 'the catch-up after it processes the event');
$l->quit;

############################################################################
# Away. Two transactions take ids and stay open; 300 events are committed
# after them by other transactions and delivered.

my $t1 = $node->background_psql($db);
my $t2 = $node->background_psql($db);
$t1->query_safe('BEGIN');
$t2->query_safe('BEGIN');
emit_n(50, $t1);
emit_n(50, $t2);
emit_n(50, $t1);
emit_n(50) for 1 .. 6;
ok(wait_delivered(1 + 300), 'the 300 committed events are delivered while no one listens');

# back for a while: the consumer catches up on those 300 and leaves
($l, $n) = consumer_connects();
is($n, 300, 'back: catches up on the 300 delivered meanwhile');
$l->quit;
my $max_seen = $node->safe_psql($db,
	'SELECT max(o.id) FROM outbox.outbox o JOIN billing_events b USING (event_id)');

# away again: the open transactions commit, out of id order, and 50 more
$t2->query_safe('COMMIT');
$t1->query_safe('COMMIT');
$t1->quit;
$t2->quit;
emit_n(50);
is($sent, 501, '500 events emitted while the consumer was away');
ok(wait_delivered(501), 'all delivered');
is( $node->safe_psql($db, qq{
		SELECT count(*) FROM outbox.outbox o
		 WHERE o.id < $max_seen AND NOT EXISTS (SELECT FROM billing_events b WHERE b.event_id = o.event_id)}),
	'150', '150 of them have ids below the highest id the consumer had processed');

############################################################################
# Back: the catch-up processes the other 200, and nothing twice.

($l, $n) = consumer_connects();
is($n, 200, 'back: catches up on the other 200');
is(processed(), '501|501', 'all 501 processed, each once');
is( $node->safe_psql($db, q{
		SELECT count(*) FROM outbox.outbox o FULL JOIN billing_events b USING (event_id)
		 WHERE o.event_id IS NULL OR b.event_id IS NULL OR b.payload <> o.payload}),
	'0', 'exactly the events emitted, with their payloads');
is($l->query('SELECT billing_catch_up()'), '0', 'a further catch-up finds nothing');

# and live again: the next event comes with a notification
$l->{notes} = [];
emit_n(1);
ok(wait_until(sub { grep { $_->{channel} eq 'outbox_events' } @{ $l->notes } }),
	'connected again: the next notification arrives');
is(catch_up($l), 1, 'and its catch-up processes it');
is(processed(), '502|502', '502 events, each processed once');
$l->quit;

############################################################################
# Cost on a large table: 200,000 delivered events of other destinations and
# 10,000 of this one in the window, all processed: a catch-up that finds
# nothing, measured.

$node->safe_psql($db, q{
	INSERT INTO outbox.outbox (event_type, payload, delivered_at, destination, attempts)
	SELECT 'other', '{}', now() - g * interval '1 s', 'other_' || (g % 10), 1
	  FROM generate_series(1, 200000) g;
	INSERT INTO outbox.outbox (event_type, payload, delivered_at, destination, attempts)
	SELECT 'nt.bulk', '{}', now() - g * interval '1 s', 'zz_rest', 1
	  FROM generate_series(1, 10000) g;
	-- as if the destination had been there for a week
	UPDATE outbox.outbox_destinations SET created_at = now() - interval '7 days',
	                                      catch_up_from = now() - interval '7 days';
	INSERT INTO outbox.inbox (consumer, event_id)
	SELECT 'billing', event_id FROM outbox.outbox WHERE event_type = 'nt.bulk';
	VACUUM ANALYZE outbox.outbox;
	VACUUM ANALYZE outbox.inbox;
});
my ($plan, $explain);
$node->psql($db, q{
	LOAD 'auto_explain';
	SET auto_explain.log_min_duration = 0;
	SET auto_explain.log_nested_statements = on;
	SET client_min_messages = log;
	SET ROLE billing;
	SELECT count(*) FROM outbox.outbox_catch_up('zz_rest', 'billing');
}, stdout => \$plan, stderr => \$explain, on_error_die => 1);
is($plan, '0', 'nothing to catch up');
like($explain, qr/(?:Index|Index Only|Bitmap Index) Scan (?:using|on) outbox_delivered_idx/,
	'the catch-up reads its window through outbox_delivered_idx');
unlike($explain, qr/Seq Scan on outbox/, 'no sequential scan of outbox');

# the time of a call, measured in the server (10 calls each)
for my $within ('1 day', '1 minute')
{
	my $timing;
	$node->psql($db, qq{
		SET ROLE billing;
		DO \$\$
		DECLARE
			t0 timestamptz := clock_timestamp();
		BEGIN
			FOR i IN 1 .. 10 LOOP
				PERFORM count(*) FROM outbox.outbox_catch_up('zz_rest', 'billing', within => '$within');
			END LOOP;
			RAISE NOTICE 'per call: % ms', round(extract(epoch FROM clock_timestamp() - t0) * 100, 2);
		END
		\$\$;
	}, stderr => \$timing, on_error_die => 1);
	like($timing, qr/per call: [\d.]+ ms/, "catch-up timed, within => '$within'");
	note("catch-up finding nothing among 210,000 delivered events, within => '$within' "
		  . "(10,000 or 60 accepted events of its destination in it): "
		  . ($timing =~ /per call: ([\d.]+ ms)/)[0]);
}

$node->stop;
done_testing();
