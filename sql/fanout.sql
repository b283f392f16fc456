-- Fan-out: every destination that takes an event gets it. The claim that
-- finds an event several destinations take replaces its row by one per
-- destination (destination_id, origin_id), each with its own delivery
-- state. NOTIFY destinations deliver in the claim's transaction and a
-- webhook on a closed port fails at once, so outbox_relay() shows the
-- rules without a relay. In a database of its own, where no relay runs.
CREATE DATABASE regress_fanout;
\c regress_fanout
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
CREATE ROLE regress_fan_admin;
GRANT outbox_admin TO regress_fan_admin;
CREATE ROLE regress_fan_writer;
GRANT outbox_writer TO regress_fan_writer;
-- the rows of the events: for which destination, in their order
CREATE VIEW regress.rows AS
SELECT o.payload->>'n' AS n, coalesce(d.name, '-') AS row_for,
       CASE WHEN o.origin_id IS NULL THEN 'event row' ELSE 'fanned out' END AS kind,
       o.attempts, o.delivered_at IS NOT NULL AS delivered, o.dead_at IS NOT NULL AS dead,
       o.destination AS last_attempt_to
  FROM outbox o LEFT JOIN outbox_destinations d ON d.id = o.destination_id
 ORDER BY coalesce(o.origin_id, o.id), d.name;
GRANT SELECT ON regress.rows TO regress_fan_admin;
SET ROLE regress_fan_admin;
-- outbox_relay() warns of each failed attempt, naming its event_id
SET client_min_messages = error;

-- a new installation fans out: no row in outbox_config means 'all'
SELECT count(*) AS config_rows FROM outbox_config;

INSERT INTO outbox_destinations (name, event_types, channel) VALUES
    ('a_all', 'task.*', 'regress_a'),
    ('b_created', 'task.created', 'regress_b');
INSERT INTO outbox_destinations (name, event_types, url) VALUES
    ('c_down', 'task.*', 'http://127.0.0.1:1/hook');
SELECT outbox_emit('task.created', '{"n": 1}', 'task', 't1') AS e1 \gset
SELECT outbox_emit('task.done', '{"n": 2}', 'task', 't1') AS e2 \gset
SELECT outbox_emit('other', '{"n": 3}') IS NOT NULL AS e3;
SELECT payload->>'n' AS n, dest_name, fan_out FROM _outbox_pending ORDER BY id;
-- the backlog counts an event not fanned out yet at each destination
SELECT destination, pending FROM outbox_backlog();

-- the first claim replaces the two events' rows, sends nothing of them,
-- and parks the third, which no destination takes
SELECT * FROM outbox_relay();
SELECT * FROM regress.rows;
-- each row keeps the event's event_id and content; origin_id is the row
-- it replaced, gone now
SELECT count(DISTINCT o.event_id) AS event_ids, count(*) AS rows_of_e1,
       bool_and(o.created_at = (SELECT min(created_at) FROM outbox)) AS created_at_kept,
       bool_and(NOT EXISTS (SELECT FROM outbox x WHERE x.id = o.origin_id)) AS replaced
  FROM outbox o WHERE o.event_id = :'e1';

-- the next claim takes each row as any row: the channels deliver, the
-- webhook fails and backs off, on its own rows only
SELECT * FROM outbox_relay();
SELECT * FROM regress.rows;
SELECT destination, pending, dead FROM outbox_backlog();
SELECT event_type, pending, retrying, unroutable FROM outbox_status ORDER BY 1;

-- what an operator does to an event is done at one destination or all:
-- cancelling at c_down leaves the delivered rows as they are
SELECT outbox_cancel(:'e1', 'endpoint retired', 'c_down') AS cancelled;
SELECT outbox_cancel(:'e1', 'again', 'c_down') AS cancelled_again;
SELECT outbox_cancel(:'e1', 'nowhere', 'no_such_destination') AS elsewhere;
SELECT * FROM regress.rows WHERE n = '1';
-- skipped and redelivered at one destination; outbox_redeliver(uuid) at all
SELECT outbox_skip_dead(:'e1', 'a_all') AS skipped_where_not_dead,
       outbox_skip_dead(:'e1', 'c_down') AS skipped_cancelled;
UPDATE outbox SET dead_at = now(), last_error = 'HTTP status 500'
 WHERE event_id = :'e2' AND destination_id = (SELECT id FROM outbox_destinations WHERE name = 'c_down');
SELECT outbox_redeliver_dead('a_all') AS redelivered_at_a, outbox_redeliver_dead('c_down') AS redelivered_at_c;
SELECT outbox_redeliver(:'e1') AS redelivered_everywhere;
SELECT * FROM regress.rows WHERE n IN ('1', '2');
-- outbox_deliveries: an event's deliveries, one row per destination
SELECT destination, state, attempts, last_error FROM outbox_deliveries
 WHERE event_id IN (:'e1', :'e2') ORDER BY event_type, destination;
SELECT event_type, destination, state FROM outbox_deliveries WHERE event_type = 'other';

-- an event that several destinations take and no claim has fanned out yet
-- has one row for all: it is acted on for all of them, or not at all
SELECT outbox_emit('task.created', '{"n": 4}') AS e4 \gset
SELECT destination, state, attempts FROM outbox_deliveries WHERE event_id = :'e4' ORDER BY 1;
SELECT replace(regress.try(format($$SELECT outbox_cancel(%L, 'r', 'a_all')$$, :'e4')), :'e4', '<e4>') AS try;
SELECT outbox_cancel(:'e4', 'not wanted') AS cancelled_unsplit;

-- an event retried at its one destination, that a second destination
-- takes later: the first keeps its attempts and error, the new one starts
DELETE FROM outbox;
DELETE FROM outbox_destinations WHERE name <> 'c_down';
SELECT outbox_emit('task.created', '{"n": 5}') IS NOT NULL AS e5;
SELECT * FROM outbox_relay();
UPDATE outbox SET next_attempt_at = now();
INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('a_all', 'task.*', 'regress_a');
SELECT * FROM outbox_relay();
SELECT * FROM regress.rows;
SELECT d.name, o.last_error IS NOT NULL AS has_error FROM outbox o
  JOIN outbox_destinations d ON d.id = o.destination_id ORDER BY 1;

-- ordered destinations: a row takes its place in its aggregate's order
-- from the row it replaced, so an event that one ordered destination
-- takes waits for the earlier event's row there, not for its other rows
DELETE FROM outbox;
DELETE FROM outbox_destinations;
INSERT INTO outbox_destinations (name, event_types, channel, ordered) VALUES
    ('o_orders', 'order.*', 'regress_o', true),
    ('p_paid', 'order.paid', 'regress_p', false);
SELECT outbox_emit('order.paid', '{"n": 6}', 'order', 'k') IS NOT NULL AS e6,
       outbox_emit('order.shipped', '{"n": 7}', 'order', 'k') IS NOT NULL AS e7;
SELECT p.payload->>'n' AS n, p.fan_out, b.payload->>'n' AS waits_for
  FROM _outbox_pending p LEFT JOIN outbox b ON b.id = p.blocked_by ORDER BY p.id;
SELECT * FROM outbox_relay();
SELECT p.payload->>'n' AS n, d.name AS row_for, b.payload->>'n' AS waits_for,
       (SELECT name FROM outbox_destinations WHERE id = b.destination_id) AS its_row_for
  FROM _outbox_pending p
  LEFT JOIN outbox_destinations d ON d.id = (p.dest).id
  LEFT JOIN outbox b ON b.id = p.blocked_by
 ORDER BY coalesce((SELECT origin_id FROM outbox WHERE id = p.id), p.id), d.name;
SELECT destination, aggregate_id, waiting FROM outbox_blocked_keys;
SELECT * FROM outbox_relay();
SELECT * FROM outbox_relay();
SELECT * FROM regress.rows;

-- switching routing: under 'first' a new event goes to the first by name
-- only; rows already fanned out keep their destinations. Back to 'all',
-- a NOTICE says how many pending events go to more than one from then on
SET client_min_messages = notice;
SELECT regress.try($$SELECT outbox_set_routing('some')$$);
SELECT regress.try($$SELECT outbox_set_routing(NULL)$$);
SELECT outbox_set_routing('first');
SELECT outbox_emit('order.paid', '{"n": 8}', 'order', 'j') IS NOT NULL AS e8;
SELECT payload->>'n' AS n, dest_name, fan_out FROM _outbox_pending ORDER BY id;
SELECT outbox_set_routing('all');
SELECT payload->>'n' AS n, dest_name, fan_out FROM _outbox_pending ORDER BY id;
SELECT routing FROM outbox_config;

-- purge waits for the slowest destination: an event's rows go once every
-- destination delivered it before the retention; an event delivered
-- through its one route before fan-out goes as before
DELETE FROM outbox;
DELETE FROM outbox_destinations;
INSERT INTO outbox_destinations (name, event_types, channel) VALUES
    ('q_fast', 'job.*', 'regress_q'),
    ('r_slow', 'job.*', 'regress_r');
SELECT outbox_emit('job.done', jsonb_build_object('n', g)) IS NOT NULL AS emitted
  FROM generate_series(9, 11) g;
INSERT INTO outbox (event_type, payload, destination, delivered_at, attempts)
VALUES ('job.done', '{"n": 12}', 'q_fast', now() - interval '2 days', 1);
SELECT * FROM outbox_relay();
SELECT * FROM outbox_relay();
UPDATE outbox SET delivered_at = now() - interval '2 days' WHERE delivered_at IS NOT NULL;
-- 9 is still pending at r_slow, 10 was delivered there within the retention,
-- 11 is dead there
UPDATE outbox SET delivered_at = NULL, next_attempt_at = now() + interval '1 hour'
 WHERE payload->>'n' = '9' AND destination = 'r_slow';
UPDATE outbox SET delivered_at = now() - interval '1 hour'
 WHERE payload->>'n' = '10' AND destination = 'r_slow';
UPDATE outbox SET delivered_at = NULL, dead_at = now(), last_error = 'HTTP status 500'
 WHERE payload->>'n' = '11' AND destination = 'r_slow';
SELECT outbox_purge('1 day') AS purged;
SELECT * FROM regress.rows;
-- once the last destination's delivery is older than the retention, both go
UPDATE outbox SET delivered_at = now() - interval '2 days' WHERE payload->>'n' IN ('9', '10');
SELECT outbox_purge('1 day') AS purged;
SELECT * FROM regress.rows;
SELECT destination, state FROM outbox_deliveries ORDER BY 1;

-- a writer cannot choose the rows' destination or origin, nor read them
RESET ROLE;
SET ROLE regress_fan_writer;
SELECT regress.try($$INSERT INTO outbox (event_type, payload, destination_id) VALUES ('order.paid', '{}', 1)$$);
SELECT regress.try($$INSERT INTO outbox (event_type, payload, origin_id) VALUES ('order.paid', '{}', 1)$$);
SELECT regress.try($$SELECT * FROM outbox_config$$);
SELECT regress.try($$SELECT * FROM outbox_deliveries$$);
SELECT regress.try($$SELECT outbox_set_routing('first')$$);
RESET ROLE;

\c contrib_regression
DROP DATABASE regress_fanout;
DROP ROLE regress_fan_admin;
DROP ROLE regress_fan_writer;
