-- Installing the extension creates its tables, index, functions, view and
-- group roles, and leaves nothing to PUBLIC.
CREATE EXTENSION outbox;

SELECT extname, extversion, extrelocatable, nspname
  FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
 WHERE extname = 'outbox';

-- every member object of the extension (row types are members from 17 on)
SELECT pg_describe_object(classid, objid, 0) AS object
  FROM pg_depend
 WHERE refclassid = 'pg_extension'::regclass
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'outbox')
   AND deptype = 'e'
   AND classid <> 'pg_type'::regclass
 ORDER BY 1;

-- the table and its columns
SELECT attname, format_type(atttypid, atttypmod) AS type, attnotnull,
       pg_get_expr(adbin, adrelid) AS default, attidentity
  FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE attrelid = 'outbox'::regclass AND attnum > 0 AND NOT attisdropped
 ORDER BY attnum;

-- WAL-logged, never UNLOGGED: a committed event survives a crash
SELECT relname, relpersistence FROM pg_class
 WHERE relname IN ('outbox', 'inbox', 'outbox_destinations') ORDER BY relname;

-- the partial index over undelivered events
SELECT indexdef FROM pg_indexes WHERE tablename = 'outbox' ORDER BY indexname;

-- pg_dump keeps every table that holds user data, and the event id sequence
SELECT unnest(extconfig)::regclass AS dumped
  FROM pg_extension WHERE extname = 'outbox' ORDER BY 1;

-- group roles exist and cannot log in
SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname LIKE 'outbox\_%' ORDER BY 1;

-- PUBLIC can execute none of the functions and use none of the tables, but
-- _outbox_aggregate_key: outbox_key_idx's expression, which every role that
-- inserts an event runs (a hash of its arguments, nothing more)
SELECT p.proname, has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
  FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'outbox')
 ORDER BY 1;
SELECT c.relname, c.relacl IS NOT NULL AND EXISTS (
           SELECT 1 FROM aclexplode(c.relacl) a WHERE a.grantee = 0) AS public_has_any
  FROM pg_class c
 WHERE c.relname IN ('outbox', 'inbox', 'outbox_destinations', 'outbox_status')
 ORDER BY 1;

-- every function is documented
SELECT p.proname, obj_description(p.oid, 'pg_proc') IS NOT NULL AS has_comment
  FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'outbox')
 ORDER BY 1;

-- Helper for the following files: runs a statement and returns its SQLSTATE
-- and message instead of failing, so that error codes show in the output.
CREATE SCHEMA regress;
CREATE FUNCTION regress.try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
-- The same, with the error's detail in parentheses when it has one.
CREATE FUNCTION regress.try_detail(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    detail text;
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
    RETURN SQLSTATE || ': ' || SQLERRM || coalesce(' (' || nullif(detail, '') || ')', '');
END
$$;
GRANT USAGE ON SCHEMA regress TO PUBLIC;

-- the seed lesson's tasks table
CREATE TABLE tasks (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, user_id int NOT NULL, title text NOT NULL);
