-- Ordered destinations: only the head of an aggregate is claimed, the
-- others are held for the event before them and released by its outcome;
-- skipping or cancelling lets the aggregate go on; the claim stays
-- index-driven. NOTIFY destinations deliver in the claim's transaction, so
-- outbox_relay() shows the rule without a network. In a database of its
-- own, where no relay runs.
CREATE DATABASE regress_ordered;
\c regress_ordered
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
-- each event: its aggregate, whether delivered, what holds it (how long
-- a hold lasts is not shown: one outside outbox_relay()'s own claim lasts
-- a second)
CREATE VIEW regress.events AS
SELECT payload ->> 'n' AS n, aggregate_type AS type, aggregate_id AS id,
       delivered_at IS NOT NULL AS delivered, dead_at IS NOT NULL AS dead,
       (SELECT h.payload ->> 'n' FROM outbox h WHERE h.id = o.held_by) AS held_for
  FROM outbox o;
GRANT USAGE ON SCHEMA regress TO PUBLIC;
GRANT SELECT ON regress.events TO PUBLIC;
CREATE ROLE regress_operator;
GRANT outbox_admin TO regress_operator;
SET ROLE regress_operator;
SET client_min_messages = warning;

-- ids follow emission order: the identity's sequence hands out one at a
-- time (no cache), so sequential emits of a key are in id order
SELECT cache_size FROM pg_sequences WHERE sequencename = 'outbox_id_seq';

INSERT INTO outbox_destinations (name, event_types, channel, ordered) VALUES
    ('orders', 'order.*', 'regress_orders', true),
    ('other', 'other.*', 'regress_other', false);

-- 1..6 alternate between two orders; 7 has no aggregate id (not ordered);
-- 8 and 9 share an id with different types: different keys; a NULL type
-- and an empty one are the same key (10, 11); 12 goes to the unordered
-- destination and is never held
SELECT count(*) FROM (
    SELECT outbox_emit('order.step', jsonb_build_object('n', i::text), 'order', (i % 2)::text)
      FROM generate_series(1, 6) i
    UNION ALL SELECT outbox_emit('order.step', '{"n": "7"}')
    UNION ALL SELECT outbox_emit('order.step', '{"n": "8"}', 'invoice', '1')
    UNION ALL SELECT outbox_emit('order.step', '{"n": "9"}', 'invoice', '1')
    UNION ALL SELECT outbox_emit('order.step', '{"n": "10"}', NULL, 'x')
    UNION ALL SELECT outbox_emit('order.step', '{"n": "11"}', '', 'x')
    UNION ALL SELECT outbox_emit('other.step', '{"n": "12"}', 'order', '1')) e;

-- the first pass delivers one event per key; the second of each key was
-- waiting for one delivered in the same claim, so it stays due; the rest
-- are held
SELECT * FROM outbox_relay(100);
SELECT * FROM regress.events ORDER BY n::int;
-- each pass moves every key one step
SELECT * FROM outbox_relay(100);
SELECT * FROM regress.events WHERE NOT delivered ORDER BY n::int;
SELECT * FROM outbox_relay(100);
SELECT * FROM outbox_relay(100);
SELECT count(*) FILTER (WHERE delivered) AS delivered, count(*) AS events FROM regress.events;

-- a failing head holds back its key only: head 21 of key a backs off (as
-- a failed attempt leaves it), key b flows; the view shows key a
RESET ROLE;
DELETE FROM outbox;
SET ROLE regress_operator;
SELECT count(*) FROM (
    SELECT outbox_emit('order.step', jsonb_build_object('n', (20 + i)::text), 'order', 'a')
      FROM generate_series(1, 3) i
    UNION ALL SELECT outbox_emit('order.step', jsonb_build_object('n', (30 + i)::text), 'order', 'b')
      FROM generate_series(1, 3) i) e;
UPDATE outbox SET attempts = 1, last_error = 'HTTP status 503', next_attempt_at = now() + interval '1 hour'
 WHERE payload ->> 'n' = '21';
SELECT * FROM outbox_relay(100);
SELECT * FROM outbox_relay(100);
SELECT * FROM outbox_relay(100);
SELECT * FROM regress.events ORDER BY n::int;
SELECT destination, aggregate_type, aggregate_id, blocking_event_type, state, attempts, waiting,
       age >= interval '0' AS has_age
  FROM outbox_blocked_keys;

-- dead-lettered, it still holds its key; outbox_redeliver_dead() leaves a
-- skipped event alone
UPDATE outbox SET dead_at = now() WHERE payload ->> 'n' = '21';
SELECT state, waiting FROM outbox_blocked_keys;
SELECT * FROM outbox_relay(100);
SELECT count(*) FILTER (WHERE delivered) AS delivered FROM regress.events WHERE id = 'a';
-- skipping it records who and when, and releases the key at once
SELECT outbox_skip_dead(event_id) AS skipped FROM outbox WHERE payload ->> 'n' = '21';
SELECT skipped_by, skipped_at IS NOT NULL AS skipped, dead_at IS NOT NULL AS dead
  FROM outbox WHERE payload ->> 'n' = '21';
SELECT * FROM regress.events WHERE n = '22';
SELECT * FROM outbox_relay(100);
SELECT * FROM outbox_relay(100);
SELECT n, delivered FROM regress.events WHERE id = 'a' ORDER BY n::int;
SELECT count(*) AS blocked FROM outbox_blocked_keys;
SELECT outbox_redeliver_dead() AS redelivered;
-- skipping: only a dead event, once; NULL is refused
SELECT outbox_skip_dead(event_id) AS skipped FROM outbox WHERE payload ->> 'n' IN ('21', '22') ORDER BY id;
SELECT outbox_skip_dead(gen_random_uuid()) AS unknown;
SELECT regress.try('SELECT outbox_skip_dead(NULL)');

-- cancelling a head releases its key too; redelivering two dead events of
-- one key sends them again in id order, one at a time
RESET ROLE;
DELETE FROM outbox;
SET ROLE regress_operator;
SELECT count(*) FROM (
    SELECT outbox_emit('order.step', jsonb_build_object('n', (40 + i)::text), 'order', 'c')
      FROM generate_series(1, 3) i) e;
UPDATE outbox SET next_attempt_at = now() + interval '1 hour' WHERE payload ->> 'n' = '41';
SELECT * FROM outbox_relay(100);
SELECT * FROM regress.events ORDER BY n::int;
SELECT outbox_cancel(event_id, 'obsolete') AS cancelled FROM outbox WHERE payload ->> 'n' = '41';
SELECT * FROM regress.events ORDER BY n::int;
SELECT * FROM outbox_relay(100);
SELECT * FROM outbox_relay(100);
SELECT n, delivered FROM regress.events ORDER BY n::int;
RESET ROLE;
DELETE FROM outbox;
SET ROLE regress_operator;
SELECT count(*) FROM (
    SELECT outbox_emit('order.step', jsonb_build_object('n', (50 + i)::text), 'order', 'd')
      FROM generate_series(1, 3) i) e;
UPDATE outbox SET dead_at = now(), attempts = 10 WHERE payload ->> 'n' IN ('51', '52');
SELECT * FROM outbox_relay(100);
SELECT * FROM regress.events ORDER BY n::int;
SELECT outbox_redeliver_dead() AS redelivered;
SELECT * FROM outbox_relay(100);
SELECT * FROM regress.events ORDER BY n::int;
SELECT * FROM outbox_relay(100);
SELECT * FROM regress.events ORDER BY n::int;
SELECT * FROM outbox_relay(100);
SELECT n, delivered FROM regress.events ORDER BY n::int;

-- a change of destinations releases every held event; turning ordering
-- off lets the rest go at once
RESET ROLE;
DELETE FROM outbox;
SET ROLE regress_operator;
SELECT count(*) FROM (
    SELECT outbox_emit('order.step', jsonb_build_object('n', (60 + i)::text), 'order', 'e')
      FROM generate_series(1, 4) i) e;
UPDATE outbox SET next_attempt_at = now() + interval '1 hour' WHERE payload ->> 'n' = '61';
SELECT * FROM outbox_relay(100);
SELECT count(*) AS held FROM outbox WHERE held_by IS NOT NULL;
UPDATE outbox_destinations SET ordered = false WHERE name = 'orders';
SELECT count(*) AS held FROM outbox WHERE held_by IS NOT NULL;
SELECT * FROM outbox_relay(100);
SELECT n, delivered FROM regress.events ORDER BY n::int;

-- a transaction that writes several events of a key writes each after
-- the first held already, for the one before it, when both go to the
-- same ordered destination and to no other: claims never walk them
-- (src/emit_hold.c). A writer cannot read destinations: routing runs as
-- their owner. 71-74: a chain; 76 goes to the unordered destination and
-- is not held, 77 is held for 75 across it; 78 and 79, NULL and empty
-- type, are one key; 80 has no aggregate
RESET ROLE;
DELETE FROM outbox;
UPDATE outbox_destinations SET ordered = true WHERE name = 'orders';
CREATE ROLE regress_writer;
GRANT outbox_writer TO regress_writer;
SET ROLE regress_writer;
SELECT count(*) FROM (
    SELECT outbox_emit('order.step', jsonb_build_object('n', (70 + i)::text), 'order', 'f')
      FROM generate_series(1, 4) i
    UNION ALL SELECT outbox_emit('order.step', '{"n": "75"}', 'order', 'g')
    UNION ALL SELECT outbox_emit('other.step', '{"n": "76"}', 'order', 'g')
    UNION ALL SELECT outbox_emit('order.step', '{"n": "77"}', 'order', 'g')
    UNION ALL SELECT outbox_emit('order.step', '{"n": "78"}', NULL, 'h')
    UNION ALL SELECT outbox_emit('order.step', '{"n": "79"}', '', 'h')
    UNION ALL SELECT outbox_emit('order.step', '{"n": "80"}')) e;
-- the next transaction starts no chain from the last one's events (81);
-- a subtransaction rolled back takes its events out of the chain (84 is
-- held for 82, not for 83, gone), and a hold for an event that this
-- transaction no longer has pending is not made (86 after 85 is
-- cancelled)
SELECT outbox_emit('order.step', '{"n": "81"}', 'order', 'f') IS NOT NULL AS emitted;
BEGIN;
SELECT outbox_emit('order.step', '{"n": "82"}', 'order', 'i') IS NOT NULL AS emitted;
SAVEPOINT s;
SELECT outbox_emit('order.step', '{"n": "83"}', 'order', 'i') IS NOT NULL AS emitted;
ROLLBACK TO SAVEPOINT s;
SELECT outbox_emit('order.step', '{"n": "84"}', 'order', 'i') IS NOT NULL AS emitted;
COMMIT;
RESET ROLE;
BEGIN;
SELECT outbox_emit('order.step', '{"n": "85"}', 'order', 'j') IS NOT NULL AS emitted;
SELECT outbox_cancel(event_id, 'obsolete') AS cancelled FROM outbox WHERE payload ->> 'n' = '85';
SELECT outbox_emit('order.step', '{"n": "86"}', 'order', 'j') IS NOT NULL AS emitted;
-- an event given a later time to be due is not held (88)
SELECT outbox_emit('order.step', '{"n": "87"}', 'order', 'k') IS NOT NULL AS emitted;
INSERT INTO outbox (event_type, aggregate_type, aggregate_id, payload, next_attempt_at)
VALUES ('order.step', 'order', 'k', '{"n": "88"}', now() + interval '1 hour');
COMMIT;
-- nor in a SERIALIZABLE transaction (95, 96)
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT count(*) FROM (
    SELECT outbox_emit('order.step', jsonb_build_object('n', (94 + i)::text), 'order', 's')
      FROM generate_series(1, 2) i) e;
COMMIT;
SELECT e.n, e.id, e.held_for, o.next_attempt_at > now() + interval '50 seconds' AS later
  FROM regress.events e JOIN outbox o ON o.payload ->> 'n' = e.n
 ORDER BY n::int;
-- a change of destinations in the transaction routes its earlier events
-- again: 101 goes to 'orders', 102 (held for 101) goes nowhere once
-- 'orders' takes 'order.b' only (the change releases it), and 103 is held
-- for 101, not 102
BEGIN;
SELECT count(*) FROM (
    SELECT outbox_emit('order.b', '{"n": "101"}', 'order', 'u')
    UNION ALL SELECT outbox_emit('order.a', '{"n": "102"}', 'order', 'u')) e;
UPDATE outbox_destinations SET event_types = 'order.b' WHERE name = 'orders';
SELECT outbox_emit('order.b', '{"n": "103"}', 'order', 'u') IS NOT NULL AS emitted;
SELECT n, held_for FROM regress.events WHERE n::int > 100 ORDER BY n::int;
ROLLBACK;
-- fanned out (89 and 90 go to 'orders' and 'audit'), or with no ordered
-- destination at all (91, 92): never held at emit
INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('audit', 'order.audit', 'regress_audit');
SELECT count(*) FROM (
    SELECT outbox_emit('order.audit', jsonb_build_object('n', (88 + i)::text), 'order', 'm')
      FROM generate_series(1, 2) i) e;
UPDATE outbox_destinations SET ordered = false WHERE name = 'orders';
SELECT count(*) FROM (
    SELECT outbox_emit('order.step', jsonb_build_object('n', (90 + i)::text), 'order', 'n')
      FROM generate_series(1, 2) i) e;
UPDATE outbox_destinations SET ordered = true WHERE name = 'orders';
DELETE FROM outbox_destinations WHERE name = 'audit';
SELECT n, held_for FROM regress.events WHERE n::int > 88 ORDER BY n::int;
-- the relay delivers each chain in order, one release at a time
DELETE FROM outbox WHERE payload ->> 'n' IN ('88', '89', '90', '91', '92', '95', '96');
SET ROLE regress_operator;
SELECT * FROM outbox_relay(100);
SELECT * FROM outbox_relay(100);
SELECT * FROM outbox_relay(100);
SELECT * FROM outbox_relay(100);
SELECT * FROM outbox_relay(100);
SELECT n, delivered, held_for FROM regress.events ORDER BY n::int;
RESET ROLE;
SELECT string_agg(payload ->> 'n', ' ' ORDER BY delivered_at, id) AS delivery_order
  FROM outbox WHERE aggregate_id = 'f' AND delivered_at IS NOT NULL;
DELETE FROM outbox;
DROP ROLE regress_writer;
SET ROLE regress_operator;

-- the claim finds heads by the key index: one backward probe per event it
-- walks, whatever the key's backlog (plan of the claim as the relay runs
-- it: generic, with its pinned settings)
RESET ROLE;
DELETE FROM outbox;
UPDATE outbox_destinations SET ordered = true WHERE name = 'orders';
INSERT INTO outbox (event_type, aggregate_type, aggregate_id, payload, delivered_at)
SELECT 'order.step', 'order', (i % 100)::text, '{}', now() FROM generate_series(1, 5000) i;
INSERT INTO outbox (event_type, aggregate_type, aggregate_id, payload)
SELECT 'order.step', 'order', (i % 10)::text, '{}' FROM generate_series(1, 200) i;
ANALYZE outbox;
SET plan_cache_mode = force_generic_plan;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SET enable_sort = off;
\set ECHO none
SELECT format('PREPARE regress_claim(int, text[], bigint[], text[]) AS %s', _outbox_claim_query()) \gexec
\set ECHO all
CREATE FUNCTION regress.claim_plan() RETURNS SETOF text LANGUAGE plpgsql AS $f$
BEGIN
    RETURN QUERY EXECUTE 'EXPLAIN (COSTS OFF) EXECUTE regress_claim(100, ''{}'', ''{1}'', ''{}'')';
END
$f$;
SELECT bool_or(p LIKE '%Index Scan using outbox_pending_idx on outbox o%') AS walks_pending,
       bool_or(p LIKE '%Index Scan Backward using outbox_key_idx on outbox e%') AS probes_key,
       bool_or(p LIKE '%Seq Scan on outbox %') AS scans,
       bool_or(p LIKE '%One-Time Filter: (%.enabled AND %.ordered)%') AS only_for_ordered
  FROM regress.claim_plan() p;
RESET plan_cache_mode;
RESET enable_seqscan;
RESET enable_bitmapscan;
RESET enable_sort;

\c contrib_regression
DROP DATABASE regress_ordered;
DROP ROLE regress_operator;
