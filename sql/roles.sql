-- The writer role may add events and nothing else.
CREATE ROLE regress_app LOGIN;
GRANT outbox_writer TO regress_app;
GRANT INSERT ON tasks TO regress_app;

SET ROLE regress_app;
BEGIN;
INSERT INTO tasks (user_id, title) VALUES (1, 'written by the app');
SELECT outbox_emit('task.created', '{"title": "written by the app"}', 'task', '1') IS NOT NULL AS got_event_id;
COMMIT;
-- it cannot read events, nor mark or delete them
SELECT count(*) FROM outbox;
UPDATE outbox SET delivered_at = now();
DELETE FROM outbox;
-- a plain INSERT of the event's own columns is allowed too (the identity
-- column needs no grant), but not of the id or the delivery state
INSERT INTO outbox (event_type, payload) VALUES ('plain.insert', '{}');
INSERT INTO outbox (event_type, payload, attempts) VALUES ('forged', '{}', 2147483647);
INSERT INTO outbox (event_type, payload, delivered_at) VALUES ('forged', '{}', now());
INSERT INTO outbox (id, event_type, payload) OVERRIDING SYSTEM VALUE VALUES (9000000000, 'forged', '{}');
-- nor read destinations (secrets), run the relay, purge or use the inbox
SELECT count(*) FROM outbox_destinations;
SELECT * FROM outbox_relay();
SELECT outbox_purge();
SELECT inbox_accept('00000000-0000-0000-0000-000000000001');
RESET ROLE;

SELECT event_type, aggregate_id, delivered_at IS NULL AS pending FROM outbox ORDER BY id;

-- a role without outbox_writer cannot emit at all
CREATE ROLE regress_stranger;
SET ROLE regress_stranger;
SELECT outbox_emit('task.created', '{}');
RESET ROLE;

-- the consumer role uses the inbox and cannot read events
CREATE ROLE regress_consumer;
GRANT outbox_consumer TO regress_consumer;
SET ROLE regress_consumer;
SELECT inbox_accept('00000000-0000-0000-0000-000000000001', 'regress') AS first,
       inbox_accept('00000000-0000-0000-0000-000000000001', 'regress') AS again;
SELECT count(*) FROM outbox;
RESET ROLE;

-- the admin role reads and marks events, and manages destinations
CREATE ROLE regress_ops;
GRANT outbox_admin TO regress_ops;
SET ROLE regress_ops;
SELECT count(*) AS events FROM outbox;
INSERT INTO outbox_destinations (name, event_types, url, secret, enabled)
VALUES ('regress', 'none.*', 'http://127.0.0.1:1/hook', 'whsec_c2VjcmV0', false);
SELECT name, secret FROM outbox_destinations;
SELECT event_type, pending FROM outbox_status ORDER BY 1;
SELECT outbox_purge('1 day');
DELETE FROM outbox_destinations;
RESET ROLE;

DELETE FROM outbox;
DELETE FROM inbox;
DELETE FROM tasks;
REVOKE ALL ON tasks FROM regress_app;
DROP ROLE regress_app, regress_stranger, regress_consumer, regress_ops;
