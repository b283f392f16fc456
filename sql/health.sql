-- Relay and destination health from shared memory: outbox_relay_stats(),
-- outbox_destination_stats(), outbox_destination_latency() and
-- outbox_stats_reset(). Outcomes here are recorded by outbox_relay() in
-- transactions that also delete their events, so that the background relay
-- of this database never sees them.

-- the relay of this database has a row once the launcher started it
DO $$
BEGIN
    FOR i IN 1..600 LOOP
        EXIT WHEN EXISTS (SELECT FROM outbox_relay_stats() WHERE state IN ('running', 'idle'));
        PERFORM pg_sleep(0.1);
    END LOOP;
END
$$;
SELECT database = current_database() AS this_database, relay, pid IS NOT NULL AS has_pid,
       state IN ('running', 'idle') AS up, reason, next_start, started_at <= now() AS started,
       stats_since <= now() AS since
  FROM outbox_relay_stats();

SELECT outbox_stats_reset();
SELECT count(*) FROM outbox_destination_stats();

-- three NOTIFY deliveries and two failed webhook attempts (nothing listens
-- on port 1), counted when their transaction commits
BEGIN;
INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('health_notify', 'h.notify', 'health_channel');
INSERT INTO outbox_destinations (name, event_types, url) VALUES ('health_hook', 'h.hook', 'http://127.0.0.1:1/hook');
SELECT count(outbox_emit('h.notify', '{}')) FROM generate_series(1, 3);
SELECT count(outbox_emit('h.hook', '{}')) FROM generate_series(1, 2);
SELECT * FROM outbox_relay();
-- not yet: the transaction has not committed
SELECT count(*) FROM outbox_destination_stats();
DELETE FROM outbox WHERE event_type LIKE 'h.%';
DELETE FROM outbox_destinations WHERE name LIKE 'health_%';
COMMIT;

SELECT destination, delivered, failed, deduplicated, last_success_at IS NOT NULL AS succeeded,
       last_failure_at IS NOT NULL AS failed_once, last_error LIKE 'HTTP request failed: %' AS error,
       latency_p50_ms >= 0 AND latency_p50_ms <= latency_p99_ms AS latency
  FROM outbox_destination_stats() ORDER BY destination;
-- the histogram's last bucket counts every delivery
SELECT destination, count(*) AS buckets, max(count) AS deliveries,
       bool_and(le_ms > 0) AS bounds, max(le_ms) = 'Infinity' AS last_unbounded
  FROM outbox_destination_latency() GROUP BY destination ORDER BY destination;

-- outcomes of a transaction that rolls back are not counted
BEGIN;
INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('health_notify', 'h.notify', 'health_channel');
SELECT count(outbox_emit('h.notify', '{}')) FROM generate_series(1, 4);
SELECT * FROM outbox_relay();
ROLLBACK;
SELECT destination, delivered, failed FROM outbox_destination_stats() ORDER BY destination;

-- reset: this database's destinations are gone, its relay counters zero
SELECT outbox_stats_reset();
SELECT count(*) FROM outbox_destination_stats();
SELECT delivered, failed, last_error, stats_since > now() - interval '1 minute' AS reset_now FROM outbox_relay_stats();

-- for outbox_admin; other databases only with pg_read_all_stats
CREATE ROLE regress_health_admin IN ROLE outbox_admin;
SET ROLE regress_health_admin;
SELECT count(*) >= 1 AS sees_own FROM outbox_relay_stats();
SELECT regress.try($$SELECT * FROM outbox_relay_stats(all_databases => true)$$);
SELECT regress.try($$SELECT * FROM outbox_destination_stats(true)$$);
SELECT regress.try($$SELECT * FROM outbox_destination_latency(true)$$);
RESET ROLE;
GRANT pg_read_all_stats TO regress_health_admin;
SET ROLE regress_health_admin;
SELECT count(*) >= 1 AS sees_all FROM outbox_relay_stats(all_databases => true);
RESET ROLE;
DROP ROLE regress_health_admin;
-- and not for the others
SET ROLE outbox_writer;
SELECT regress.try($$SELECT * FROM outbox_relay_stats()$$);
SELECT regress.try($$SELECT outbox_stats_reset()$$);
RESET ROLE;

-- the memory budget: what the events a relay holds cost it, against the
-- most it holds (OUTBOX_RELAY_BYTES, 256 MB), and since when claims leave
-- events out for it; TAP 073 sees it held and full
SELECT held_bytes BETWEEN 0 AND memory_budget AS within, memory_budget,
       memory_full_since IS NULL AS not_full
  FROM outbox_relay_stats();

-- outbox_backlog(): what waits at each destination, for outbox_monitor.
-- Read in a transaction that rolls back, which the relay never sees; the
-- row with a NULL destination is compared with what it held before.
BEGIN;
CREATE TEMP TABLE backlog_before AS SELECT * FROM outbox_backlog() WHERE destination IS NULL;
INSERT INTO outbox_destinations (name, event_types, channel, enabled) VALUES
    ('backlog_notify', 'b.n.*', 'backlog_channel', true),
    ('backlog_off', 'b.off', 'backlog_off', false);
INSERT INTO outbox_destinations (name, event_types, url) VALUES
    ('backlog_hook', 'b.hook', 'http://127.0.0.1:1/hook'),
    ('backlog_idle', 'b.idle', 'http://127.0.0.1:1/idle');
SELECT count(outbox_emit('b.n.' || i, '{}')) FROM generate_series(1, 3) i;
SELECT count(outbox_emit('b.off', '{}')) FROM generate_series(1, 2);
SELECT count(outbox_emit('b.hook', '{}')) FROM generate_series(1, 4);
SELECT count(outbox_emit('b.nobody', '{}')) FROM generate_series(1, 5);
-- dead letters as the relay records them (the destination of the last
-- attempt), one of a destination deleted since, and one cancelled
UPDATE outbox SET dead_at = now(), attempts = 1, destination = 'backlog_hook'
 WHERE id IN (SELECT id FROM outbox WHERE event_type = 'b.hook' ORDER BY id LIMIT 2);
UPDATE outbox SET dead_at = now(), attempts = 1, destination = 'backlog_deleted'
 WHERE id IN (SELECT id FROM outbox WHERE event_type = 'b.hook' AND dead_at IS NULL ORDER BY id LIMIT 1);
SELECT outbox_cancel((SELECT event_id FROM outbox WHERE event_type = 'b.n.1'), 'not wanted');
-- a dead letter skipped (an operator's decision too) is not counted; an
-- event redelivered counts from then, one created an hour ago from then
UPDATE outbox SET skipped_at = now(), skipped_by = current_user
 WHERE id = (SELECT min(id) FROM outbox WHERE event_type = 'b.hook');
UPDATE outbox SET created_at = now() - interval '1 hour', redelivered_at = now() WHERE event_type = 'b.n.2';
UPDATE outbox SET created_at = now() - interval '1 hour'
 WHERE id = (SELECT min(id) FROM outbox WHERE event_type = 'b.off');
CREATE ROLE regress_backlog_monitor IN ROLE outbox_monitor;
GRANT SELECT ON backlog_before TO regress_backlog_monitor;
SET ROLE regress_backlog_monitor;
SELECT destination, kind, enabled, disabled_at IS NOT NULL AS disabled, pending,
       now() - oldest_pending_at AS oldest_age, dead
  FROM outbox_backlog() WHERE destination LIKE 'backlog_%' ORDER BY destination;
SELECT b.pending - f.pending AS unroutable, b.oldest_pending_at = now() AS oldest_is_now,
       b.dead - f.dead AS dead_elsewhere, b.kind, b.enabled
  FROM outbox_backlog() b, backlog_before f WHERE b.destination IS NULL;
-- counts and times, never an event
SELECT regress.try($$SELECT count(*) FROM outbox$$);
RESET ROLE;
ROLLBACK;
SET ROLE outbox_writer;
SELECT regress.try($$SELECT * FROM outbox_backlog()$$);
RESET ROLE;
