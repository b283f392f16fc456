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

-- the monitoring role reads the statistics, and nothing else: no event, no
-- destination (secrets), not outbox_status (its routing reads them), no
-- reset, no relay
CREATE ROLE regress_monitor;
GRANT outbox_monitor TO regress_monitor;
SET ROLE regress_monitor;
SELECT count(*) >= 0 AS relays FROM outbox_relay_stats();
SELECT count(*) >= 0 AS destinations FROM outbox_destination_stats();
SELECT count(*) >= 0 AS buckets FROM outbox_destination_latency();
SELECT count(*) FROM outbox_status;
SELECT count(*) FROM outbox;
SELECT count(*) FROM outbox_destinations;
SELECT count(*) FROM _outbox_routes('task.created', NULL, NULL, NULL, NULL);
SELECT outbox_stats_reset();
SELECT * FROM outbox_relay();
RESET ROLE;

-- a role without outbox_writer cannot emit at all
CREATE ROLE regress_stranger;
SET ROLE regress_stranger;
SELECT outbox_emit('task.created', '{}');
RESET ROLE;

-- the consumer role uses the inbox and cannot read events, but those
-- delivered to a NOTIFY destination, through outbox_catch_up; not those of
-- a webhook
INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('regress_n', 'none.n', 'regress_n');
INSERT INTO outbox_destinations (name, event_types, url) VALUES ('regress_w', 'none.w', 'http://127.0.0.1:1/');
INSERT INTO outbox (event_type, payload, delivered_at, destination)
VALUES ('none.n', '{"to": "listeners"}', now(), 'regress_n'), ('none.w', '{"to": "webhook"}', now(), 'regress_w');
CREATE ROLE regress_consumer;
GRANT outbox_consumer TO regress_consumer;
SET ROLE regress_consumer;
SELECT inbox_accept('00000000-0000-0000-0000-000000000001', 'regress') AS first,
       inbox_accept('00000000-0000-0000-0000-000000000001', 'regress') AS again;
SELECT count(*) FROM outbox;
SELECT event_type, payload FROM outbox_catch_up('regress_n', 'regress');
SELECT * FROM outbox_catch_up('regress_w', 'regress');
RESET ROLE;
-- the writer cannot catch up
SET ROLE regress_app;
SELECT * FROM outbox_catch_up('regress_n', 'regress');
RESET ROLE;
DELETE FROM outbox WHERE destination IN ('regress_n', 'regress_w');
DELETE FROM outbox_destinations;

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
DROP ROLE regress_app, regress_stranger, regress_consumer, regress_ops, regress_monitor;

-- The role matrix: what PUBLIC, each group role and a non-superuser owner
-- of the database may do with the extension's schema and with each of its
-- tables, views, sequences and functions. Letters as in aclitem: r SELECT,
-- a INSERT (a(...): of those columns only), w UPDATE, d DELETE, D TRUNCATE,
-- x REFERENCES, t TRIGGER, U USAGE, C CREATE, X EXECUTE.
CREATE ROLE regress_dbowner;
SELECT pg_get_userbyid(datdba) AS original_owner FROM pg_database
 WHERE datname = current_database() \gset
ALTER DATABASE contrib_regression OWNER TO regress_dbowner;
CREATE FUNCTION pg_temp.privs(r text, classid oid, objid oid) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN classid = 'pg_namespace'::regclass THEN
            concat(CASE WHEN has_schema_privilege(r, objid, 'USAGE') THEN 'U' END,
                   CASE WHEN has_schema_privilege(r, objid, 'CREATE') THEN 'C' END)
        WHEN classid = 'pg_proc'::regclass THEN
            CASE WHEN has_function_privilege(r, objid, 'EXECUTE') THEN 'X' END
        WHEN (SELECT relkind FROM pg_class WHERE oid = objid) = 'S' THEN
            concat(CASE WHEN has_sequence_privilege(r, objid, 'USAGE') THEN 'U' END,
                   CASE WHEN has_sequence_privilege(r, objid, 'SELECT') THEN 'r' END,
                   CASE WHEN has_sequence_privilege(r, objid, 'UPDATE') THEN 'w' END)
        ELSE
            concat(CASE WHEN has_table_privilege(r, objid, 'SELECT') THEN 'r' END,
                   CASE WHEN has_table_privilege(r, objid, 'INSERT') THEN 'a'
                        WHEN has_any_column_privilege(r, objid, 'INSERT') THEN
                            'a(' || (SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
                                      WHERE attrelid = objid AND attnum > 0
                                        AND has_column_privilege(r, objid, attnum, 'INSERT')) || ')' END,
                   CASE WHEN has_table_privilege(r, objid, 'UPDATE') THEN 'w' END,
                   CASE WHEN has_table_privilege(r, objid, 'DELETE') THEN 'd' END,
                   CASE WHEN has_table_privilege(r, objid, 'TRUNCATE') THEN 'D' END,
                   CASE WHEN has_table_privilege(r, objid, 'REFERENCES') THEN 'x' END,
                   CASE WHEN has_table_privilege(r, objid, 'TRIGGER') THEN 't' END)
        END
$$;
WITH objects AS (
    SELECT classid, objid FROM pg_depend
     WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
       AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'outbox')
       AND classid IN ('pg_class'::regclass, 'pg_proc'::regclass)
    UNION ALL
    SELECT 'pg_namespace'::regclass, extnamespace FROM pg_extension WHERE extname = 'outbox')
SELECT pg_describe_object(classid, objid, 0) AS object,
       pg_temp.privs('public', classid, objid) AS public,
       pg_temp.privs('outbox_writer', classid, objid) AS writer,
       pg_temp.privs('outbox_consumer', classid, objid) AS consumer,
       pg_temp.privs('outbox_admin', classid, objid) AS admin,
       pg_temp.privs('outbox_monitor', classid, objid) AS monitor,
       pg_temp.privs('regress_dbowner', classid, objid) AS db_owner
  FROM objects ORDER BY 1;
-- the owner of the database is no superuser and owns none of them
SELECT rolsuper, pg_has_role('regress_dbowner', 'pg_database_owner', 'USAGE') AS database_owner
  FROM pg_roles WHERE rolname = 'regress_dbowner';
ALTER DATABASE contrib_regression OWNER TO :"original_owner";
DROP ROLE regress_dbowner;
-- a group role that exists already and can log in (made by hand, with a
-- password) is used as it is, with a WARNING, by CREATE EXTENSION and by
-- every update
ALTER ROLE outbox_monitor LOGIN PASSWORD 'known';
CREATE DATABASE regress_login_role;
\c regress_login_role
CREATE EXTENSION outbox;
DROP EXTENSION outbox;
CREATE EXTENSION outbox VERSION '1.1';
ALTER EXTENSION outbox UPDATE;
-- so is one that is a superuser, bypasses row level security, or that a
-- role other than a superuser may grant
ALTER ROLE outbox_monitor NOLOGIN PASSWORD NULL;
ALTER ROLE outbox_consumer SUPERUSER;
ALTER ROLE outbox_writer BYPASSRLS;
CREATE ROLE regress_granter;
GRANT outbox_admin TO regress_granter WITH ADMIN OPTION;
DROP EXTENSION outbox;
CREATE EXTENSION outbox;
ALTER ROLE outbox_consumer NOSUPERUSER;
ALTER ROLE outbox_writer NOBYPASSRLS;
REVOKE outbox_admin FROM regress_granter;
DROP ROLE regress_granter;
-- and none of them any more
DROP EXTENSION outbox;
CREATE EXTENSION outbox;
\c contrib_regression
DROP DATABASE regress_login_role;
