-- A second database of the cluster can create the extension too: the group
-- roles exist already and are reused. Another schema can be chosen.
CREATE DATABASE regress_second;
\c regress_second
CREATE SCHEMA events;
CREATE EXTENSION outbox SCHEMA events;
SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
 WHERE e.extname = 'outbox';
SELECT events.outbox_emit('x.y', '{}') IS NOT NULL AS emitted;
SELECT event_type FROM events.outbox;
-- not relocatable
ALTER EXTENSION outbox SET SCHEMA public;
-- the writer role can use the schema it was installed in
SELECT has_schema_privilege('outbox_writer', 'events', 'USAGE') AS writer_usage;
-- a session that emitted keeps emitting after the schema is renamed
ALTER SCHEMA events RENAME TO events2;
SELECT events2.outbox_emit('x.renamed', '{}') IS NOT NULL AS emitted;
SELECT * FROM events2.outbox_relay();
SELECT event_type FROM events2.outbox ORDER BY id;
\c contrib_regression
-- DROP DATABASE is not blocked (no relay runs there, but the guard runs)
DROP DATABASE regress_second;
SELECT count(*) FROM pg_roles WHERE rolname IN ('outbox_writer', 'outbox_admin', 'outbox_consumer');
