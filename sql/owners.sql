-- A database owned by a non-superuser, with the extension installed as the
-- README's Setup does it: in a schema of its own that only a superuser can
-- create objects in, called by schema-qualified names. The owner can shadow
-- outbox_emit in public, where an unqualified call finds it, but not in
-- that schema; settings the owner makes for the database do not break the
-- SQL functions.
CREATE ROLE regress_owner LOGIN;
CREATE ROLE regress_writer LOGIN IN ROLE outbox_writer;
CREATE ROLE regress_ops LOGIN IN ROLE outbox_admin;
CREATE DATABASE regress_owned OWNER regress_owner;
\c regress_owned
CREATE SCHEMA outbox;
CREATE EXTENSION outbox SCHEMA outbox;
SELECT nspname, pg_get_userbyid(nspowner) = current_user AS owned_by_installer,
       has_schema_privilege('regress_owner', oid, 'CREATE') AS owner_may_create,
       has_schema_privilege('regress_writer', oid, 'USAGE') AS writer_may_use
  FROM pg_namespace WHERE nspname IN ('outbox', 'public') ORDER BY 1;

-- the owner shadows outbox_emit: headers text takes the README's
-- headers => '{...}' literal, and the event goes nowhere
SET ROLE regress_owner;
CREATE FUNCTION public.outbox_emit(event_type text, payload jsonb, aggregate_type text DEFAULT NULL,
                                   aggregate_id text DEFAULT NULL, headers text DEFAULT NULL)
RETURNS uuid LANGUAGE sql AS $$ SELECT '00000000-0000-0000-0000-000000000000'::uuid $$;
-- it cannot do the same in the extension's schema
CREATE FUNCTION outbox.outbox_emit(event_type text, payload jsonb, aggregate_type text DEFAULT NULL,
                                   aggregate_id text DEFAULT NULL, headers text DEFAULT NULL)
RETURNS uuid LANGUAGE sql AS $$ SELECT '00000000-0000-0000-0000-000000000000'::uuid $$;
CREATE TABLE outbox.outbox_destinations_copy (name text);
RESET ROLE;

-- the application: an unqualified call is captured even with the
-- extension's schema first on its search_path
SET ROLE regress_writer;
SET search_path = outbox, public;
SELECT outbox_emit('task.created', jsonb_build_object('task_id', 17),
                   aggregate_type => 'task', aggregate_id => '17',
                   headers => '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}') AS captured;
-- the README's call, schema-qualified, stores the event
SELECT outbox.outbox_emit('task.created', jsonb_build_object('task_id', 17),
                          aggregate_type => 'task', aggregate_id => '17',
                          headers => '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}')
       <> '00000000-0000-0000-0000-000000000000' AS stored;
RESET search_path;
RESET ROLE;
SELECT event_type, aggregate_id, headers FROM outbox.outbox;

-- Settings the owner makes for the database apply to every new session.
SET ROLE regress_owner;
ALTER DATABASE regress_owned SET standard_conforming_strings = off;
ALTER DATABASE regress_owned SET search_path = public;
RESET ROLE;
\c regress_owned
SET ROLE regress_ops;
SHOW standard_conforming_strings;
-- routing, outbox_status and outbox_relay() work with it: patterns are
-- still literal, backslashes included
SELECT t, p, t LIKE outbox._outbox_like_pattern(p) AS matches
  FROM (VALUES ('a_b', 'a_b'), ('axb', 'a_b'), (E'a\\b', E'a\\b'), (E'a\\xb', E'a\\b'), ('a.b', 'a*')) v(t, p);
-- and temporary tables named like the extension's change nothing
CREATE TEMP TABLE outbox_destinations (name text, event_types text, channel text, enabled boolean);
CREATE TEMP TABLE _outbox_pending (id bigint);
BEGIN;
INSERT INTO outbox.outbox_destinations (name, event_types, channel) VALUES ('n', 'task.*', 'regress_owned_ch');
SELECT event_type, pending, unroutable FROM outbox.outbox_status;
SELECT * FROM outbox.outbox_relay();
SELECT event_type, destination, delivered_at IS NOT NULL AS delivered FROM outbox.outbox;
ROLLBACK;
RESET ROLE;

\c contrib_regression
DROP DATABASE regress_owned;
DROP ROLE regress_owner, regress_writer, regress_ops;
