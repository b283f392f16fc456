-- NOTIFY destinations: their rules, and outbox_catch_up(), the catch-up of
-- a consumer that was away. Events are written as already delivered (the
-- relay running in this database leaves them alone).

-- a NOTIFY destination may have a secret and a notify_mode; a webhook is
-- sent the full envelope only
INSERT INTO outbox_destinations (name, event_types, channel, secret, notify_mode)
VALUES ('n_signed', 'none.signed', 'signed_events', 'whsec_c2VjcmV0', 'reference');
SELECT name, channel, secret, notify_mode FROM outbox_destinations;
SELECT regress.try($$INSERT INTO outbox_destinations (name, channel, notify_mode) VALUES ('x', 'c', 'payload')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, channel, notify_mode) VALUES ('x', 'c', NULL)$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, url, notify_mode) VALUES ('x', 'http://127.0.0.1:1/', 'reference')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, channel, secret) VALUES ('x', 'c', 'whsec_abc')$$);
-- name and kind are fixed: catch-up shows a NOTIFY destination's events by
-- its name since its creation
SELECT regress.try($$UPDATE outbox_destinations SET name = 'n_renamed' WHERE name = 'n_signed'$$);
SELECT regress.try($$UPDATE outbox_destinations SET channel = NULL, url = 'http://127.0.0.1:1/', notify_mode = 'full' WHERE name = 'n_signed'$$);
UPDATE outbox_destinations SET notify_mode = 'full', secret = NULL, event_types = 'none.*' WHERE name = 'n_signed';
SELECT name, channel, secret, notify_mode FROM outbox_destinations;
DELETE FROM outbox_destinations;

-- Catch-up. Two NOTIFY destinations and a webhook, created an hour ago;
-- events delivered to each at known times, in an order unlike their ids.
INSERT INTO outbox_destinations (name, event_types, channel, created_at, catch_up_from) VALUES
    ('n_orders', 'none.orders', 'order_events', now() - interval '1 hour', now() - interval '1 hour'),
    ('n_other', 'none.other', 'other_events', now() - interval '1 hour', now() - interval '1 hour');
INSERT INTO outbox_destinations (name, event_types, url, created_at, catch_up_from) VALUES
    ('w_hook', 'none.hook', 'http://127.0.0.1:1/hook', now() - interval '1 hour', now() - interval '1 hour');
INSERT INTO outbox (event_type, aggregate_id, payload, delivered_at, destination, attempts)
VALUES ('none.orders', 'o1', '{"n": 1}', now() - interval '10 minutes', 'n_orders', 1),
       ('none.orders', 'o2', '{"n": 2}', now() - interval '30 minutes', 'n_orders', 1),
       ('none.orders', 'o3', '{"n": 3}', now() - interval '20 minutes', 'n_orders', 1),
       ('none.orders', 'o4', '{"ssn": "078-05-1120"}', now() - interval '5 minutes', 'n_orders', 1),
       -- before the destination was created (another one of that name)
       ('none.orders', 'o0', '{"n": 0}', now() - interval '2 hours', 'n_orders', 1),
       ('none.other', 'x1', '{"n": 5}', now() - interval '10 minutes', 'n_other', 1),
       ('none.hook', 'h1', '{"n": 6}', now() - interval '10 minutes', 'w_hook', 1);
-- pending and dead-lettered events are not delivered: never returned
INSERT INTO outbox (event_type, aggregate_id, payload, destination, attempts, dead_at, next_attempt_at)
VALUES ('none.orders', 'o5', '{"n": 7}', 'n_orders', 10, now(), now() + interval '1 hour'),
       ('none.orders', 'o6', '{"n": 8}', 'n_orders', 1, NULL, now() + interval '1 hour');

CREATE ROLE regress_listener;
GRANT outbox_consumer TO regress_listener;
SET ROLE regress_listener;
-- oldest delivery first, payload included; not o0 (before the destination)
SELECT aggregate_id, event_type, payload, delivered_at < now() AS delivered
  FROM outbox_catch_up('n_orders', 'billing');
-- the window and the limit
SELECT aggregate_id FROM outbox_catch_up('n_orders', 'billing', within => '15 minutes');
SELECT aggregate_id FROM outbox_catch_up('n_orders', 'billing', max_events => 2);
-- what the consumer accepted is not returned again; another consumer
-- still gets everything
SELECT inbox_accept(event_id, 'billing') FROM outbox_catch_up('n_orders', 'billing', max_events => 2);
SELECT aggregate_id FROM outbox_catch_up('n_orders', 'billing');
SELECT count(*) FROM outbox_catch_up('n_orders');
SELECT aggregate_id FROM outbox_catch_up('n_other', 'billing');
-- a webhook's events are not readable, nor are unknown destinations
SELECT regress.try($$SELECT * FROM outbox_catch_up('w_hook', 'billing')$$);
SELECT regress.try($$SELECT * FROM outbox_catch_up('nope', 'billing')$$);
-- arguments
SELECT regress.try($$SELECT * FROM outbox_catch_up('n_orders', 'billing', within => '7 days 1 second')$$);
SELECT regress.try($$SELECT * FROM outbox_catch_up('n_orders', 'billing', within => '0')$$);
-- 7 days as an interval comparison counts months, 14 years in seconds
SELECT regress.try($$SELECT * FROM outbox_catch_up('n_orders', 'billing', within => interval '1000 years' - interval '359993 days')$$);
SELECT regress.try($$SELECT * FROM outbox_catch_up('n_orders', 'billing', within => interval '1 month' - interval '23 days 1 second')$$);
SELECT regress.try($$SELECT * FROM outbox_catch_up('n_orders', 'billing', max_events => 0)$$);
SELECT regress.try($$SELECT * FROM outbox_catch_up('n_orders', 'billing', max_events => 10001)$$);
SELECT regress.try($$SELECT * FROM outbox_catch_up('n_orders', NULL)$$);
SELECT count(*) FROM outbox_catch_up('n_orders', 'billing', within => '7 days', max_events => 10000);
-- and nothing else
SELECT regress.try($$SELECT count(*) FROM outbox$$);
SELECT regress.try($$SELECT count(*) FROM outbox_destinations$$);
SELECT regress.try($$SELECT outbox_redeliver(gen_random_uuid())$$);
RESET ROLE;

-- a role without outbox_consumer cannot catch up
CREATE ROLE regress_nobody;
SET ROLE regress_nobody;
SELECT regress.try($$SELECT * FROM outbox_catch_up('n_orders', 'billing')$$);
RESET ROLE;

-- on a large table, catch-up reads the destination's window through
-- outbox_delivered_idx: one index scan per call
INSERT INTO outbox (event_type, payload, delivered_at, destination, attempts)
SELECT 'none.bulk', '{}', now() - (g || ' s')::interval, CASE WHEN g % 2 = 0 THEN 'w_hook' ELSE 'n_other' END, 1
  FROM generate_series(1, 20000) g;
ANALYZE outbox;
SELECT pg_stat_force_next_flush();
SELECT idx_scan AS scans_before FROM pg_stat_user_indexes WHERE indexrelname = 'outbox_delivered_idx' \gset
SELECT aggregate_id FROM outbox_catch_up('n_orders', 'billing');
SELECT pg_stat_force_next_flush();
SELECT idx_scan - :scans_before AS index_scans
  FROM pg_stat_user_indexes WHERE indexrelname = 'outbox_delivered_idx';

DELETE FROM outbox;
DELETE FROM inbox;
DELETE FROM outbox_destinations;
DROP ROLE regress_listener, regress_nobody;
