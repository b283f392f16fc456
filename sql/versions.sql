-- The library knows its version. When the extension's SQL objects are of
-- another (an upgrade half done), the functions that depend on them fail
-- with the step that is missing, and outbox_emit() keeps working. The SQL
-- version is set by hand here, in a database of its own.
SELECT outbox_library_version() = extversion AS same_version
  FROM pg_extension WHERE extname = 'outbox';
CREATE DATABASE regress_versions;
\c regress_versions
CREATE EXTENSION outbox;
-- SQL objects older than the library: ALTER EXTENSION UPDATE is missing
UPDATE pg_extension SET extversion = '1.0' WHERE extname = 'outbox';
SELECT * FROM outbox_relay();
SELECT outbox_emit('still.written', '{}') IS NOT NULL AS emitted;
-- newer: the restart is missing
UPDATE pg_extension SET extversion = '1.10' WHERE extname = 'outbox';
SELECT * FROM outbox_relay();
-- not a version this library can compare
UPDATE pg_extension SET extversion = '1.1beta' WHERE extname = 'outbox';
SELECT * FROM outbox_relay();
UPDATE pg_extension SET extversion = outbox_library_version() WHERE extname = 'outbox';
SELECT * FROM outbox_relay();
SELECT count(*) AS events FROM outbox;
\c contrib_regression
DROP DATABASE regress_versions;
