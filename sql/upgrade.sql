-- Versions 1.0 and 1.1 are released: a database created with either is
-- brought to the current version by ALTER EXTENSION outbox UPDATE, keeping its events and destinations, and
-- ends with the same objects as a fresh install (which itself runs 1.0 and
-- then the upgrade script).
CREATE DATABASE regress_upgrade;
\c regress_upgrade
CREATE EXTENSION outbox VERSION '1.0';
SELECT extversion FROM pg_extension WHERE extname = 'outbox';
INSERT INTO outbox_destinations (name, event_types, url, secret) VALUES
    ('hooks', 'task.*', 'http://127.0.0.1:1/hook', 'whsec_c2VjcmV0'),
    -- accepted by 1.0's check, although no signature can be made with it
    ('legacy', 'legacy.*', 'http://127.0.0.1:1/legacy', 'whsec_abc');
SELECT outbox_emit('task.created', '{"n": 1}') IS NOT NULL AS emitted;
INSERT INTO outbox (event_type, payload, attempts, last_error, next_attempt_at)
VALUES ('task.retrying', '{}', 2, 'HTTP status 503', now() + interval '1 hour');
INSERT INTO outbox (event_type, payload, attempts, last_error, dead_at)
VALUES ('task.dead', '{}', 10, 'HTTP status 500', now());

ALTER EXTENSION outbox UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'outbox';
-- the events and destinations are untouched
SELECT event_type, attempts, last_error, dead_at IS NOT NULL AS dead
  FROM outbox ORDER BY id;
SELECT name, secret, notify_mode, options FROM outbox_destinations ORDER BY name;
-- the old destination stays as it was (its events are dead-lettered with a
-- reason); a change to it must bring a secret the relay can use
DO $$
BEGIN
    UPDATE outbox_destinations SET timeout_ms = 1000 WHERE name = 'legacy';
    RAISE NOTICE 'updated';
EXCEPTION WHEN check_violation THEN
    RAISE NOTICE 'refused: %', SQLERRM;
END
$$;
-- the same members as a fresh install (setup.out lists those)
SELECT pg_describe_object(classid, objid, 0) AS object
  FROM pg_depend
 WHERE refclassid = 'pg_extension'::regclass
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'outbox')
   AND deptype = 'e'
   AND classid <> 'pg_type'::regclass
 ORDER BY 1;
SELECT event_type, pending, retrying, dead, unroutable FROM outbox_status ORDER BY event_type;
-- the purge indexes, as a fresh install has them
SELECT indexdef FROM pg_indexes WHERE tablename IN ('outbox', 'inbox') ORDER BY indexname;
-- the purge functions keep their signatures and use the new indexes
SELECT outbox_purge('1 day') AS purged, inbox_purge('1 day') AS purged_inbox;
-- 1.1 records operators' actions in the row: the events of 1.0 have none
SELECT count(*) AS events,
       count(*) FILTER (WHERE redelivered_at IS NULL AND cancelled_at IS NULL) AS untouched
  FROM outbox;
-- the library and the SQL objects now agree
SELECT outbox_library_version() = extversion AS same_version
  FROM pg_extension WHERE extname = 'outbox';
-- redelivery by time range and cancel work on the upgraded table
SELECT outbox_redeliver('-infinity', 'infinity') AS replayed;
SELECT outbox_cancel(event_id, 'upgrade test') AS cancelled
  FROM outbox WHERE event_type = 'task.created';
SELECT event_type, dead_at IS NOT NULL AS dead, cancelled_at IS NOT NULL AS cancelled, last_error
  FROM outbox ORDER BY id;
SELECT outbox_redeliver_dead() AS redelivered;
\c contrib_regression
DROP DATABASE regress_upgrade;

-- From 1.1: destinations of every kind, events pending for each, two of
-- them in one key of an ordered destination, one dead-lettered
CREATE DATABASE regress_upgrade_11;
\c regress_upgrade_11
CREATE EXTENSION outbox VERSION '1.1';
INSERT INTO outbox_destinations (name, event_types, url, ordered) VALUES
    ('hooks', 'task.*', 'http://127.0.0.1:1/hook', true);
INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('chan', 'note.*', 'regress_chan');
INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream)
VALUES ('js', 'js.*', 'nats://127.0.0.1:1', 'orders.{aggregate_id}', 'ORDERS');
SELECT count(*) AS emitted FROM (
    SELECT outbox_emit('task.created', '{"n": 1}', 'task', 'k1')
    UNION ALL SELECT outbox_emit('task.created', '{"n": 2}', 'task', 'k1')
    UNION ALL SELECT outbox_emit('task.created', '{"n": 3}', NULL, 'k1')
    UNION ALL SELECT outbox_emit('note.added', '{"n": 4}')
    UNION ALL SELECT outbox_emit('js.sent', '{"n": 5}', 'order', '7')) e;
UPDATE outbox SET dead_at = now(), attempts = 10, last_error = 'HTTP status 500'
 WHERE payload = '{"n": 5}';
-- 1.1's definition of the relay statistics still works with this library
SELECT count(*) >= 0 AS relay_stats_of_1_1 FROM outbox_relay_stats(true);
ALTER EXTENSION outbox UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'outbox';
SELECT name, kind, ordered FROM outbox_destinations ORDER BY name;
-- a database with destinations keeps 1.1's routing, the first by name,
-- until its DBA switches; every event is still one row, routed at its claim
SELECT routing FROM outbox_config;
SELECT count(*) FILTER (WHERE destination_id IS NULL AND origin_id IS NULL) AS unrouted_rows
  FROM outbox;
-- 1.2's: the memory budget; and the backlog of each destination (the dead
-- letter's last attempt named no destination)
SELECT bool_and(held_bytes >= 0 AND memory_budget > 0) IS NOT FALSE AS relay_stats_of_1_2
  FROM outbox_relay_stats(true);
SELECT destination, kind, enabled, pending, dead FROM outbox_backlog();
SELECT event_type, payload, aggregate_type, aggregate_id, attempts, dead_at IS NOT NULL AS dead
  FROM outbox ORDER BY id;
-- the rebuilt key index finds the event before another of its key (a NULL
-- type is another key than 'task')
SELECT p.payload->>'n' AS n, b.payload->>'n' AS waits_for
  FROM _outbox_pending p LEFT JOIN outbox b ON b.id = p.blocked_by
 WHERE p.dest_name = 'hooks' ORDER BY p.id;
CREATE FUNCTION pg_temp.plan() RETURNS SETOF text LANGUAGE plpgsql AS $f$
BEGIN
    RETURN QUERY EXECUTE 'EXPLAIN (COSTS OFF) SELECT blocked_by FROM _outbox_pending';
END
$f$;
SET enable_seqscan = off;
SELECT bool_or(p LIKE '%Index Scan Backward using outbox_key_idx on outbox e%') AS probes_key,
       bool_or(p LIKE '%Index Cond: ((_outbox_aggregate_key(aggregate_type, aggregate_id) = _outbox_aggregate_key(o.aggregate_type, o.aggregate_id)) AND (COALESCE(origin_id, id) < COALESCE(o.origin_id, o.id)))%') AS on_the_key
  FROM pg_temp.plan() p;
RESET enable_seqscan;
\c contrib_regression
DROP DATABASE regress_upgrade_11;
