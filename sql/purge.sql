-- outbox_purge() deletes delivered events older than the retention, and
-- nothing else: pending and dead-lettered events stay.
INSERT INTO outbox (event_type, payload, created_at, delivered_at, dead_at) VALUES
    ('old.delivered', '{}', now() - interval '10 days', now() - interval '9 days', NULL),
    ('recent.delivered', '{}', now() - interval '2 days', now() - interval '1 day', NULL),
    ('old.pending', '{}', now() - interval '10 days', NULL, NULL),
    ('old.dead', '{}', now() - interval '10 days', NULL, now() - interval '9 days');

SELECT outbox_purge() AS purged;
SELECT event_type FROM outbox ORDER BY 1;
SELECT outbox_purge('12 hours') AS purged;
SELECT event_type FROM outbox ORDER BY 1;
SELECT outbox_purge('0') AS purged;

-- many rows at once, of three destinations and none (the purge takes one
-- destination after the other)
INSERT INTO outbox (event_type, payload, created_at, delivered_at, destination)
SELECT 'bulk', '{}', now() - interval '30 days', now() - interval '30 days',
       (ARRAY['a', 'b', 'c', NULL])[g % 4 + 1]
  FROM generate_series(1, 25000) g;
SELECT outbox_purge('1 day') AS purged;
SELECT event_type, count(*) FROM outbox GROUP BY 1 ORDER BY 1;

-- an id near the top of bigint
INSERT INTO outbox (id, event_type, payload, delivered_at) OVERRIDING SYSTEM VALUE
VALUES (9223372036854775000, 'far', '{}', now() - interval '30 days');
SELECT outbox_purge('1 day') AS purged;
SELECT event_type, count(*) FROM outbox GROUP BY 1 ORDER BY 1;

-- errors
SELECT regress.try($$SELECT outbox_purge(NULL)$$);
SELECT regress.try($$SELECT outbox_purge('-1 day')$$);

DELETE FROM outbox;

-- Retention is a length of time, not a count of calendar days: the same
-- rows are purged under any TimeZone, across a clock change. days reaches
-- back past the last clock change of America/New_York (whatever today's
-- date); one row was delivered (or processed) 30 minutes before the
-- cut-off, the other 30 minutes after it. now() - interval 'N days' would
-- move the cut-off by an hour in New York, and keep or purge the wrong one.
SET TimeZone = 'America/New_York';
CREATE TEMP TABLE tz_case AS
SELECT ceil(extract(epoch FROM now() - max(t)) / 86400)::int + 1 AS days
  FROM generate_series(now() - interval '400 days', now(), interval '1 hour') t
 WHERE extract(timezone FROM t) <> extract(timezone FROM t - interval '1 hour');
SELECT days BETWEEN 2 AND 367 AS crosses_one_clock_change FROM tz_case;
CREATE FUNCTION regress.purge_in_zone(zone text) RETURNS SETOF text LANGUAGE plpgsql AS $f$
DECLARE
    d int := (SELECT days FROM tz_case);
BEGIN
    PERFORM set_config('TimeZone', zone, true);
    INSERT INTO outbox (event_type, payload, delivered_at) VALUES
        ('before_cutoff', '{}', now() - make_interval(secs => d * 86400 + 1800)),
        ('after_cutoff', '{}', now() - make_interval(secs => d * 86400 - 1800));
    INSERT INTO inbox (consumer, event_id, processed_at) VALUES
        ('before_cutoff', gen_random_uuid(), now() - make_interval(secs => d * 86400 + 1800)),
        ('after_cutoff', gen_random_uuid(), now() - make_interval(secs => d * 86400 - 1800));
    RETURN NEXT zone || ': outbox purged ' || outbox_purge(make_interval(days => d))
                || ', inbox purged ' || inbox_purge(make_interval(days => d));
    RETURN QUERY SELECT zone || ': kept outbox ' || event_type FROM outbox;
    RETURN QUERY SELECT zone || ': kept inbox ' || consumer FROM inbox;
    DELETE FROM outbox;
    DELETE FROM inbox;
END
$f$;
SELECT regress.purge_in_zone('UTC');
SELECT regress.purge_in_zone('America/New_York');
SELECT regress.purge_in_zone('Australia/Sydney');
RESET TimeZone;

-- The cost of a purge follows what it deletes, not the table's size:
-- 1,200,000 delivered events, none older than the retention, cost a few
-- buffers (1.0 walked the whole primary key: 120 range deletes, about
-- 21,000 buffers): about 70 here, most of them the planning of each
-- statement, whose custom plans are made at each call. The trigger is off only to load faster. TRUNCATE
-- first: the index entries of rows deleted above stay until vacuum, and a
-- purge would walk them.
TRUNCATE outbox;
SET session_replication_role = replica;
INSERT INTO outbox (event_type, payload, created_at, delivered_at, attempts, destination)
SELECT 'bulk', '{}', now() - interval '2 days', now() - (g % 86400) * interval '1 second', 1,
       (ARRAY['a', 'b', 'c', NULL])[g % 4 + 1]
  FROM generate_series(1, 1200000) g;
INSERT INTO outbox (event_type, payload, created_at) SELECT 'pending', '{}', now() - interval '30 days'
  FROM generate_series(1, 1000);
RESET session_replication_role;
ANALYZE outbox;
CREATE FUNCTION regress.buffers(sql text) RETURNS bigint LANGUAGE plpgsql AS $f$
DECLARE
    plan json;
BEGIN
    EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, FORMAT JSON) ' || sql INTO plan;
    RETURN (plan->0->'Plan'->>'Shared Hit Blocks')::bigint
         + (plan->0->'Plan'->>'Shared Read Blocks')::bigint;
END
$f$;
SELECT outbox_purge('7 days') AS purged;  -- plans and caches are made here
SELECT regress.buffers($$SELECT outbox_purge('7 days')$$) AS buffers \gset
SELECT :buffers < 100 AS bounded;
TRUNCATE outbox;
