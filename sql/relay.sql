-- One relay pass from SQL, and the plan of the relay's claim query.
-- Everything runs inside transactions that this session rolls back, so the
-- background worker never sees these events.

-- the relay's claim query uses the partial index over undelivered events,
-- even with many delivered ones around, and leaves out the events in
-- flight ($3) with one hash table (a hashed subplan)
INSERT INTO outbox (event_type, payload, delivered_at, attempts)
SELECT 'old', '{}', now(), 1 FROM generate_series(1, 5000);
INSERT INTO outbox (event_type, payload) SELECT 'new', '{}' FROM generate_series(1, 5);
ANALYZE outbox;
CREATE FUNCTION regress.claim_plan() RETURNS SETOF text LANGUAGE plpgsql AS $f$
BEGIN
    RETURN QUERY EXECUTE 'EXPLAIN (COSTS OFF) ' ||
        replace(replace(replace(replace(_outbox_claim_query(), '$1', '100'), '$2', '''{}''::text[]'),
                '$3', '''{1,2}'''), '$4', '''{}''::text[]');
END
$f$;
-- plan details differ between PostgreSQL versions; the access path does not
SELECT bool_or(p LIKE '%Index Scan using outbox_pending_idx on outbox o%') AS uses_pending_index,
       bool_or(p LIKE '%Seq Scan on outbox o%') AS scans_outbox,
       bool_or(p LIKE '%Sort Key: o.%') AS sorts_events,
       bool_or(p LIKE '%hashed SubPlan%') AS hashes_in_flight
  FROM regress.claim_plan() p;
DELETE FROM outbox;

-- the envelope sent to webhooks and NOTIFY: fixed key order, JSON escaping,
-- null aggregate fields, the payload as stored
SELECT _outbox_envelope('01932c07-8f4e-7a3b-9c1d-2e5f6a7b8c9d', 'task "created"', 'task', NULL,
                        '2026-11-29 10:15:00.123456+00', 1, '{"b": 1, "a": "ж\n"}');
SELECT _outbox_envelope('01932c07-8f4e-7a3b-9c1d-2e5f6a7b8c9d', NULL, NULL, NULL, now(), 1, '{}') IS NULL AS null_type;
SELECT _outbox_envelope(gen_random_uuid(), 'x', 'y', 'z', now(), 3, '[1, {"k": null}]')::jsonb ? 'payload' AS valid_json;
-- the size limit measures a payload's text exactly as the envelope carries
-- it (payload::text is the same text): separators, raw scalars, escapes,
-- multibyte text, numbers that print far longer than they are stored
SELECT p, _outbox_payload_text_bytes(p) AS measured, octet_length(p::text) AS actual
  FROM unnest(ARRAY['{}', '[]', 'null', 'true', 'false', '"a"', '0', '-0.000100', '1.50',
                    '[[], {}, [[]], {"a": {}}]', '{"a": {"b": [1, {"c": null}]}, "d": [true, false]}',
                    '{"k\"ey": "\u0001\b\f\n\r\t\\\"/", "é": "日本語🎉"}',
                    '[1e20, 1e-20, 123456789.123456789]']::jsonb[]) p;
SELECT _outbox_payload_text_bytes(p) AS measured, octet_length(p::text) AS actual
  FROM (VALUES ('1e131071'::jsonb), (jsonb_build_array(repeat(chr(31), 1000), repeat('ü', 1000))),
               ((SELECT jsonb_object_agg(i::text, i) FROM generate_series(1, 1000) i))) v(p);

-- destination patterns: '*' is the only wildcard
SELECT t, p, t LIKE _outbox_like_pattern(p) AS matches
  FROM (VALUES ('task.created', 'task.*'), ('task.created', '*'), ('taskXcreated', 'task.*'),
               ('a%b', 'a%b'), ('axb', 'a%b'), ('a_b', 'a_b'), ('axb', 'a_b'),
               ('a\b', 'a\b'), ('order.paid', 'task.*'), ('x.task.y', '*.task.*')) v(t, p);

-- destinations with headers or a secret the relay could not use are refused
SELECT regress.try($$INSERT INTO outbox_destinations (name, url, headers) VALUES ('x', 'http://127.0.0.1:1/', '{"bad name": "v"}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, url, headers) VALUES ('x', 'http://127.0.0.1:1/', jsonb_build_object('a', E'v\n'))$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, url, secret) VALUES ('x', 'http://127.0.0.1:1/', 'whsec_not base64!')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, url, secret, headers) VALUES ('x', 'http://127.0.0.1:1/', 'whsec_c2VjcmV0', '{"Authorization": "Bearer t", "x-empty": ""}')$$);
DELETE FROM outbox_destinations;

-- argument errors
SELECT regress.try($$SELECT * FROM outbox_relay(0)$$);
SELECT regress.try($$SELECT * FROM outbox_relay(10001)$$);

-- nothing to do
SELECT * FROM outbox_relay();

-- one destination per event, the first by name (1.1's routing): fan-out
-- has its own test (fanout.sql)
SELECT outbox_set_routing('first');
BEGIN;
INSERT INTO outbox_destinations (name, event_types, channel) VALUES
    ('a_notify', 'task.*', 'task_events'),
    ('b_shadowed', 'task.*', 'never_used'),
    ('c_disabled', 'order.*', 'order_events');
UPDATE outbox_destinations SET enabled = false WHERE name = 'c_disabled';
INSERT INTO outbox_destinations (name, event_types, url, timeout_ms) VALUES
    ('d_closed_port', 'billing.*', 'http://127.0.0.1:1/hook', 1000);
INSERT INTO outbox_destinations (name, event_types, channel) VALUES
    ('e_literal', 'a_b', 'literal_events');
SELECT outbox_emit('task.created', '{"n": 1}') IS NOT NULL AS e1,
       outbox_emit('taskXcreated', '{"n": 2}') IS NOT NULL AS e2,
       outbox_emit('order.paid', '{"n": 3}') IS NOT NULL AS e3,
       outbox_emit('billing.failed', '{"n": 4}') IS NOT NULL AS e4,
       outbox_emit('task.big', jsonb_build_object('text', repeat('é', 4000))) IS NOT NULL AS e5,
       outbox_emit('task.fits', jsonb_build_object('text', repeat('é', 3800))) IS NOT NULL AS e6,
       outbox_emit('a_b', '{}') IS NOT NULL AS e7,
       outbox_emit('axb', '{}') IS NOT NULL AS e8;
-- 'é' is two bytes: 4000 of them exceed NOTIFY's 8000-byte limit, so that
-- event is delivered in the reference form (without its payload); 3800 fit
-- (the warnings about failed events name their event_id: keep them out)
SET client_min_messages = error;
SELECT * FROM outbox_relay();
SELECT event_type,
       CASE WHEN delivered_at IS NOT NULL THEN 'delivered'
            WHEN dead_at IS NOT NULL THEN 'dead'
            WHEN attempts > 0 THEN 'retrying'
            ELSE 'pending' END AS state,
       attempts, destination,
       -- first retry: outbox.backoff_base (1s) with half of it random jitter
       next_attempt_at - now() BETWEEN interval '500 ms' AND interval '1 s' AS backoff_1st,
       CASE WHEN last_error LIKE 'HTTP request failed: %' THEN 'HTTP request failed: ...'
            -- the envelope's size varies with its created_at
            ELSE regexp_replace(last_error, '^payload of \d+ bytes', 'payload of N bytes')
       END AS last_error
  FROM outbox ORDER BY id;
SELECT event_type, pending, retrying, dead, unroutable FROM outbox_status ORDER BY 1;
-- a second pass finds nothing due: the failed event waits for its backoff,
-- the events without a destination are parked
SELECT * FROM outbox_relay();

-- a new destination makes the parked events due at once; named before
-- c_disabled, as a disabled destination keeps the events of its types
INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('b_orders', 'order.*', 'order_events');
SELECT event_type, next_attempt_at <= now() AS due FROM outbox
 WHERE last_error LIKE 'no enabled destination%' ORDER BY id;
SELECT * FROM outbox_relay();
SELECT event_type, delivered_at IS NOT NULL AS delivered, attempts, destination, last_error
  FROM outbox WHERE event_type IN ('order.paid', 'axb') ORDER BY id;

-- redelivery: a delivered event and a dead one become due again
UPDATE outbox SET dead_at = now() WHERE event_type = 'billing.failed';
SELECT outbox_redeliver(event_id) FROM outbox WHERE event_type = 'task.created';
SELECT outbox_redeliver(event_id) FROM outbox WHERE event_type = 'task.created';
SELECT outbox_redeliver_dead();
SELECT * FROM outbox_relay();
SELECT event_type, attempts, delivered_at IS NOT NULL AS delivered, dead_at IS NOT NULL AS dead
  FROM outbox WHERE event_type IN ('task.created', 'billing.failed') ORDER BY id;
ROLLBACK;
RESET client_min_messages;

SELECT outbox_set_routing('all');
