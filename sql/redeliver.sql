-- Redelivery by time range, and cancelling an event by hand; both are
-- recorded in the row. In a database of its own, where no relay runs.
CREATE DATABASE regress_redeliver;
\c regress_redeliver
CREATE EXTENSION outbox;
CREATE SCHEMA regress;
CREATE FUNCTION regress.try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
GRANT USAGE ON SCHEMA regress TO PUBLIC;
CREATE ROLE regress_operator;
GRANT outbox_admin TO regress_operator;
SET ROLE regress_operator;
-- the bounds are instants: the session's zone changes nothing
SET TimeZone = 'America/New_York';

INSERT INTO outbox (event_type, payload, destination, attempts, delivered_at) VALUES
    ('a.x', '{"n": 1}', 'one', 1, '2026-11-01 10:00:00Z'),
    ('a.x', '{"n": 2}', 'two', 1, '2026-11-01 11:00:00Z'),
    ('b.y', '{"n": 3}', 'one', 1, '2026-11-01 12:00:00Z'),
    ('a.x', '{"n": 4}', 'one', 2, '2026-11-02 10:00:00Z');
INSERT INTO outbox (event_type, payload, attempts, next_attempt_at) VALUES
    ('a.x', '{"n": 5}', 0, now() + interval '1 hour');
INSERT INTO outbox (event_type, payload, attempts, last_error, dead_at) VALUES
    ('a.x', '{"n": 6}', 10, 'HTTP status 500', now());
CREATE VIEW pg_temp.events AS
SELECT payload ->> 'n' AS n, event_type, attempts, delivered_at IS NULL AS pending,
       dead_at IS NOT NULL AS dead, next_attempt_at <= now() AS due,
       redelivered_at IS NOT NULL AS redelivered, cancelled_at IS NOT NULL AS cancelled,
       last_error
  FROM outbox ORDER BY id;

-- [since, until): of type a.x, 10:00 and 11:00 UTC, not 12:00
SELECT outbox_redeliver('2026-11-01 10:00:00Z', '2026-11-01 12:00:00Z', 'a.x') AS replayed;
-- of destination one, from 05:00 in New York (10:00 UTC: that night the
-- clocks went back) to 06:00 the next day: 12:00 (b.y) and the next day's
SELECT outbox_redeliver('2026-11-01 05:00:00', '2026-11-02 06:00:00', destination => 'one') AS replayed;
SELECT * FROM pg_temp.events;
-- nothing delivered is left: none again
SELECT outbox_redeliver('-infinity', 'infinity') AS replayed;
SELECT outbox_redeliver('2026-11-01 10:00:00Z', '2026-11-01 10:00:00Z') AS empty_range;
SELECT regress.try($$SELECT outbox_redeliver(NULL::timestamptz, now())$$);
SELECT regress.try($$SELECT outbox_redeliver(now(), NULL)$$);
SELECT regress.try($$SELECT outbox_redeliver(now(), now() - interval '1 second')$$);

-- cancel: a pending event is dead-lettered with who cancelled it and why
SELECT outbox_cancel(event_id, 'duplicate of order 17') AS cancelled
  FROM outbox WHERE payload ->> 'n' = '5';
-- not pending any more, or never was: false
SELECT outbox_cancel(event_id, 'again') AS cancelled
  FROM outbox WHERE payload ->> 'n' IN ('5', '6') ORDER BY id;
SELECT outbox_cancel('00000000-0000-0000-0000-000000000000', 'unknown') AS cancelled;
UPDATE outbox SET delivered_at = now() WHERE payload ->> 'n' = '1';
SELECT outbox_cancel(event_id, 'delivered already') AS cancelled
  FROM outbox WHERE payload ->> 'n' = '1';
SELECT * FROM pg_temp.events WHERE n IN ('5', '6');
SELECT event_type, pending, dead FROM outbox_status ORDER BY 1;
SELECT regress.try($$SELECT outbox_cancel(NULL, 'x')$$);
SELECT regress.try($$SELECT outbox_cancel(gen_random_uuid(), NULL)$$);
SELECT regress.try($$SELECT outbox_cancel(gen_random_uuid(), '')$$);
SELECT regress.try($$SELECT outbox_cancel(gen_random_uuid(), repeat('x', 1025))$$);

-- an event in flight (in the journal of relay 3, which only a relay
-- writes) is cancelled too; its outcome, recorded later, finds it dead and
-- changes nothing
RESET ROLE;
INSERT INTO outbox_in_flight (run, claim, relay, ids, attempts)
SELECT 42, 1, 3, ARRAY[id], ARRAY[attempts] FROM outbox WHERE payload ->> 'n' = '2';
SET ROLE regress_operator;
SELECT event_type, pending, in_flight FROM outbox_status ORDER BY 1;
SELECT outbox_cancel(event_id, 'endpoint retired') AS cancelled
  FROM outbox WHERE payload ->> 'n' = '2';
SELECT event_type, pending, dead, in_flight FROM outbox_status ORDER BY 1;
RESET ROLE;
DELETE FROM outbox_in_flight;
SET ROLE regress_operator;

-- outbox_redeliver_dead() leaves cancelled events alone; outbox_redeliver()
-- of one brings it back, and clears the mark
SELECT outbox_redeliver_dead() AS redelivered;
SELECT * FROM pg_temp.events WHERE n IN ('2', '5', '6');
SELECT outbox_redeliver(event_id) AS redelivered FROM outbox WHERE payload ->> 'n' = '5';
SELECT * FROM pg_temp.events WHERE n = '5';

RESET ROLE;
\c contrib_regression
DROP DATABASE regress_redeliver;
DROP ROLE regress_operator;
