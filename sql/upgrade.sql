-- Version 1.0 is released: a database created with it is brought to 1.1 by
-- ALTER EXTENSION outbox UPDATE, keeping its events and destinations, and
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
SELECT name, secret, notify_mode FROM outbox_destinations ORDER BY name;
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
-- the same members as a fresh install of 1.1 (setup.out lists those)
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
