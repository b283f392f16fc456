# The relay's purge: off by default; with outbox.retention and
# outbox.inbox_retention it deletes delivered events and inbox rows older
# than that, a batch per transaction, by the first relay of the database
# only, never a pending or dead-lettered event; the cut-off is absolute
# time, so a server in America/New_York purges the same rows across a
# clock change as one in UTC. An event fanned out to several destinations
# goes once every one delivered it.
use strict;
use warnings FATAL => 'all';
use FindBin;
use lib "$FindBin::RealBin/../perl";

use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('purge',
	'outbox.relays_per_database' => 2,
	'outbox.purge_interval' => "'200ms'",
	'outbox.purge_delay' => "'10ms'",
	'outbox.purge_batch_size' => 100,
	TimeZone => "'America/New_York'");
sub sql { my ($text) = @_; return $node->safe_psql('postgres', $text); }

ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 2 FROM outbox_relay_stats() WHERE state IN ('running', 'idle')}),
	'two relays run');

# Every DELETE on the purged tables is logged with its transaction and
# backend, and how many rows it took.
sql(q{
	CREATE TABLE purge_log (tab text, xid xid8, pid int, n bigint);
	CREATE FUNCTION log_purge() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO public.purge_log SELECT TG_TABLE_NAME, pg_current_xact_id(), pg_backend_pid(), count(*) FROM gone;
		RETURN NULL;
	END $$;
	CREATE TRIGGER outbox_purged AFTER DELETE ON outbox REFERENCING OLD TABLE AS gone
		FOR EACH STATEMENT EXECUTE FUNCTION log_purge();
	CREATE TRIGGER inbox_purged AFTER DELETE ON inbox REFERENCING OLD TABLE AS gone
		FOR EACH STATEMENT EXECUTE FUNCTION log_purge();
});

# days reaches back past the last clock change of America/New_York: one
# row of each table 30 minutes before the cut-off, one 30 minutes after.
my $days = sql(q{
	SELECT ceil(extract(epoch FROM now() - max(t)) / 86400)::int + 1
	  FROM generate_series(now() - interval '400 days', now(), interval '1 hour') t
	 WHERE extract(timezone FROM t) <> extract(timezone FROM t - interval '1 hour')});
ok($days >= 2 && $days <= 367, "the retention of $days days crosses one clock change");

sql(qq{
	INSERT INTO outbox (event_type, payload, delivered_at, attempts)
	SELECT 'old', '{}', now() - make_interval(secs => $days * 86400 + 3600 + g), 1
	  FROM generate_series(1, 1000) g;
	INSERT INTO outbox (event_type, payload, delivered_at, attempts) VALUES
		('before_cutoff', '{}', now() - make_interval(secs => $days * 86400 + 1800), 1),
		('after_cutoff', '{}', now() - make_interval(secs => $days * 86400 - 1800), 1);
	INSERT INTO outbox (event_type, payload, created_at, attempts, last_error, dead_at) VALUES
		('old_dead', '{}', now() - interval '500 days', 10, 'HTTP status 500', now() - interval '500 days');
	INSERT INTO outbox (event_type, payload, created_at, next_attempt_at) VALUES
		('old_pending', '{}', now() - interval '500 days', now() + interval '1 hour');
	INSERT INTO inbox (consumer, event_id, processed_at)
	SELECT 'old', gen_random_uuid(), now() - make_interval(secs => $days * 86400 + 3600 + g)
	  FROM generate_series(1, 250) g;
	INSERT INTO inbox (consumer, event_id, processed_at) VALUES
		('before_cutoff', gen_random_uuid(), now() - make_interval(secs => $days * 86400 + 1800)),
		('after_cutoff', gen_random_uuid(), now() - make_interval(secs => $days * 86400 - 1800));
});

# off by default: a few purge intervals go by and nothing is deleted
my $passes = sql(q{SELECT passes FROM outbox_relay_stats() WHERE relay = 0});
ok($node->poll_query_until('postgres',
		"SELECT passes >= $passes + 3 FROM outbox_relay_stats() WHERE relay = 0"),
	'the relay runs passes');
is(sql(q{SELECT count(*) FROM purge_log}), '0', 'without a retention nothing is purged');
# (from here on, every purge round logs a statement, most of them of 0 rows)

sql(qq{ALTER SYSTEM SET outbox.retention = '${days}d';
	ALTER SYSTEM SET outbox.inbox_retention = '${days}d'});
$node->reload;
ok($node->poll_query_until('postgres',
		q{SELECT NOT EXISTS (SELECT FROM outbox WHERE event_type IN ('old', 'before_cutoff'))
		     AND NOT EXISTS (SELECT FROM inbox WHERE consumer IN ('old', 'before_cutoff'))}),
	'old delivered events and inbox rows are purged');
is(sql(q{SELECT string_agg(event_type, ',' ORDER BY event_type) FROM outbox}),
	'after_cutoff,old_dead,old_pending',
	'the row 30 minutes inside the retention stays, and no pending or dead event goes');
is(sql(q{SELECT string_agg(consumer, ',') FROM inbox}), 'after_cutoff',
	'the same in the inbox');

my $relay0 = sql(q{SELECT pid FROM outbox_relay_stats() WHERE relay = 0});
is(sql(q{SELECT string_agg(DISTINCT pid::text, ',') FROM purge_log WHERE n > 0}), $relay0,
	'only the first relay purges');
is(sql(q{SELECT tab, count(DISTINCT xid), sum(n), max(n) FROM purge_log WHERE n > 0 GROUP BY tab ORDER BY tab}),
	"inbox|3|251|100\noutbox|11|1001|100",
	'a batch of at most 100 rows per transaction');

# a manual purge agrees, under either zone
is(sql(qq{SET TimeZone = 'UTC'; SELECT outbox_purge('$days days'), inbox_purge('$days days')}),
	'0|0', 'outbox_purge() finds nothing left, in UTC');

# a row that ages past the cut-off goes at the next round
sql(q{UPDATE outbox SET delivered_at = delivered_at - interval '1 hour' WHERE event_type = 'after_cutoff'});
ok($node->poll_query_until('postgres',
		q{SELECT NOT EXISTS (SELECT FROM outbox WHERE event_type = 'after_cutoff')}),
	'a row that aged past the cut-off is purged at the next round');

# Fan-out: a fanned-out event's rows go once every destination delivered
# it before the cut-off. The first 150 events of the fast destination's
# order, more than a batch, are still pending at the slow one: the purge
# walks past them to the 50 events both delivered, and keeps the 150.
sql(qq{
	INSERT INTO outbox_destinations (name, event_types, channel) VALUES
		('fast', 'fan.*', 'fan_fast'), ('slow', 'fan.*', 'fan_slow');
	INSERT INTO outbox (event_id, event_type, payload, destination, destination_id, origin_id,
						delivered_at, attempts, next_attempt_at)
	SELECT e.event_id, 'fan.x', jsonb_build_object('n', e.g), d.name, d.id, -e.g,
		   CASE WHEN d.name = 'slow' AND e.g <= 150 THEN NULL
				ELSE now() - make_interval(secs => $days * 86400 + 7200 - e.g) END,
		   1, now() + interval '1 day'
	  FROM (SELECT g, gen_random_uuid() AS event_id FROM generate_series(1, 200) g) e
	 CROSS JOIN outbox_destinations d
	 WHERE d.name IN ('fast', 'slow');
});
ok($node->poll_query_until('postgres',
		q{SELECT NOT EXISTS (SELECT FROM outbox WHERE event_type = 'fan.x' AND (payload->>'n')::int > 150)}),
	'the events every destination delivered are purged');
is(sql(q{SELECT destination, count(*), min((payload->>'n')::int), max((payload->>'n')::int),
				count(delivered_at)
		   FROM outbox WHERE event_type = 'fan.x' GROUP BY destination ORDER BY destination}),
	"fast|150|1|150|150\nslow|150|1|150|0",
	'an event pending at one destination keeps its delivered row at the other');
sql(qq{UPDATE outbox SET delivered_at = now() - make_interval(secs => $days * 86400 + 3600)
		WHERE event_type = 'fan.x' AND delivered_at IS NULL});
ok($node->poll_query_until('postgres',
		q{SELECT NOT EXISTS (SELECT FROM outbox WHERE event_type = 'fan.x')}),
	'once the slow destination delivered them too, they are purged');

$node->stop;
done_testing();
