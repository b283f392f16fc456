-- Times are absolute: what the extension computes from intervals and
-- instants is the same under any TimeZone, across a clock change too.
-- In a database of its own, where no relay runs.
CREATE DATABASE regress_zones;
\c regress_zones
CREATE EXTENSION outbox;

-- A zone whose clocks went forward by an hour two days ago, whenever this
-- runs: UTC, then UTC+1 from that moment (a POSIX rule, in standard time).
SELECT set_config('TimeZone', format('XST0XDT,M%s.%s.%s/%s,M%s.1.0',
                                     extract(month FROM t)::int,
                                     least((extract(day FROM t)::int - 1) / 7 + 1, 5),
                                     extract(dow FROM t)::int,
                                     to_char(t, 'HH24:MI:SS'),
                                     (extract(month FROM t)::int + 5) % 12 + 1), false) <> '' AS zone_set
  FROM (SELECT now() AT TIME ZONE 'UTC' - interval '2 days' AS t) c;
-- calendar arithmetic in this zone: three days back are 71 hours
SELECT extract(epoch FROM now() - (now() - interval '3 days')) / 3600 AS hours_in_three_days;
-- and a session in another zone, with a different offset
CREATE FUNCTION pg_temp.other_zone() RETURNS void LANGUAGE sql
    AS $$ SELECT set_config('TimeZone', 'Asia/Kathmandu', false) $$;

-- inbox_purge('3 days') keeps what is less than 72 hours old, here and in
-- any zone: rows 71.5 and 72.5 hours old
CREATE FUNCTION pg_temp.inbox_rows() RETURNS void LANGUAGE sql AS $$
    DELETE FROM inbox;
    INSERT INTO inbox (consumer, event_id, processed_at) VALUES
        ('younger', gen_random_uuid(), now() - interval '71 hours 30 minutes'),
        ('older', gen_random_uuid(), now() - interval '72 hours 30 minutes');
$$;
SELECT pg_temp.inbox_rows();
SELECT inbox_purge('3 days') AS purged;
SELECT string_agg(consumer, ',') AS kept FROM inbox;
SELECT pg_temp.inbox_rows();
SELECT pg_temp.other_zone();
SELECT inbox_purge('3 days') AS purged;
SELECT string_agg(consumer, ',') AS kept FROM inbox;
SELECT pg_temp.inbox_rows();
SET TimeZone = 'UTC';
SELECT inbox_purge('3 days') AS purged;
SELECT string_agg(consumer, ',') AS kept FROM inbox;

-- the envelope's created_at is UTC with Z, whatever the session's zone
SET TimeZone = 'America/New_York';
SELECT _outbox_envelope('01932c07-8f4e-7a3b-9c1d-2e5f6a7b8c9d', 't', NULL, NULL,
                        '2026-03-08 01:59:59.5-05', 1, '{}')::jsonb ->> 'created_at' AS before_change,
       _outbox_envelope('01932c07-8f4e-7a3b-9c1d-2e5f6a7b8c9d', 't', NULL, NULL,
                        '2026-03-08 03:00:00-04', 1, '{}')::jsonb ->> 'created_at' AS after_change,
       _outbox_envelope('01932c07-8f4e-7a3b-9c1d-2e5f6a7b8c9d', 't', NULL, NULL,
                        'infinity', 1, '{}')::jsonb ->> 'created_at' AS infinite;

-- the relay's statements, run by outbox_relay() in this session: an event
-- without a destination is parked for as long as it waited (at most an
-- hour), a failed attempt waits outbox.backoff_base (1 s) with jitter
SELECT pg_temp.other_zone();
BEGIN;
INSERT INTO outbox (event_type, payload, created_at, next_attempt_at) VALUES
    ('parked.old', '{}', now() - interval '3 days', now() - interval '3 days'),
    ('parked.new', '{}', now() - interval '30 minutes', now() - interval '30 minutes');
INSERT INTO outbox_destinations (name, event_types, url) VALUES ('down', 'fails.*', 'http://127.0.0.1:1/');
INSERT INTO outbox (event_type, payload) VALUES ('fails.once', '{}');
SELECT * FROM outbox_relay();
SELECT event_type, attempts,
       extract(epoch FROM next_attempt_at - now()) AS due_in_s
  FROM outbox WHERE event_type LIKE 'parked.%' ORDER BY id;
SELECT event_type, attempts,
       extract(epoch FROM next_attempt_at - now()) BETWEEN 0.5 AND 1.0 AS backoff_within_base
  FROM outbox WHERE event_type = 'fails.once';
-- the status view: counts and the oldest pending instant
SELECT event_type, pending, retrying, unroutable,
       oldest_pending = (SELECT min(created_at) FROM outbox o WHERE o.event_type = s.event_type) AS oldest_ok
  FROM outbox_status s ORDER BY 1;
ROLLBACK;

RESET TimeZone;
\c contrib_regression
DROP DATABASE regress_zones;
