-- What a writer (outbox_writer) and an admin (outbox_admin) can and cannot
-- do with the values they control: every limit and rule refused with a
-- clear error that names the field, never a value (the DETAIL included).
CREATE ROLE regress_writer;
GRANT outbox_writer TO regress_writer;
CREATE ROLE regress_admin;
GRANT outbox_admin TO regress_admin;
-- default verbosity shows the DETAIL of each error, where a value would show
\set VERBOSITY default

SET ROLE regress_writer;
-- 1. a writer's 100,000 headers are refused at once, by size then count
SELECT outbox_emit('hh.n', '{}', NULL, NULL,
                   (SELECT jsonb_object_agg('h' || i, 'v' || i) FROM generate_series(1, 100000) i));
SELECT outbox_emit('hh.n', '{}', NULL, NULL,
                   (SELECT jsonb_object_agg('x-h' || i, 'v') FROM generate_series(1, 65) i));
SELECT outbox_emit('hh.n', '{}', headers => jsonb_build_object('x-' || repeat('n', 255), 'v'));
SELECT outbox_emit('hh.n', '{}', headers => jsonb_build_object('x-long', repeat('v', 8193)));
-- 64 headers of 8 kB names and values at the limits are fine
SELECT outbox_emit('hh.ok', '{}', NULL, NULL,
                   (SELECT jsonb_object_agg('x-h' || i, 'v') FROM generate_series(1, 64) i)) IS NOT NULL AS at_limit;
SELECT outbox_emit('hh.ok', '{}', headers => jsonb_build_object('x-' || repeat('n', 254), repeat('v', 8192))) IS NOT NULL AS at_limit;

-- 2. and 3. every field has a limit, checked on its stored size
SELECT outbox_emit('bad.' || repeat(chr(1), 1021), '{}');
SELECT outbox_emit(repeat('t', 1024), '{}') IS NOT NULL AS type_at_limit;
SELECT outbox_emit('agg', '{}', repeat('a', 1025));
SELECT outbox_emit('agg', '{}', 'task', repeat('6', 60 * 1024 * 1024));
-- the envelope is measured before it is built: numbers print much larger
-- than they are stored, control characters escape to six bytes
SELECT outbox_emit('env', (SELECT jsonb_agg('1e1000'::numeric) FROM generate_series(1, 140000)));
SELECT outbox_emit('env', jsonb_build_array(repeat(chr(1), 23 * 1024 * 1024)));
-- 112 kB stored, 917 MB as text: the measure is exact, not a multiple of
-- the stored size; 1,000 such numbers (131 MB of text) fit, 1,025 do not
SELECT outbox_emit('env', (SELECT jsonb_agg('1e131071'::numeric) FROM generate_series(1, 7000)));
SELECT outbox_emit('env', (SELECT jsonb_agg('1e131071'::numeric) FROM generate_series(1, 1025)));
BEGIN;
SELECT outbox_emit('env', (SELECT jsonb_agg('1e131071'::numeric) FROM generate_series(1, 1000))) IS NOT NULL AS fits;
ROLLBACK;
-- a plain INSERT meets the same trigger
INSERT INTO outbox (event_type, payload, aggregate_id) VALUES ('plain', '{}', repeat('6', 2000));
INSERT INTO outbox (event_type, payload) VALUES ('', '{}');
INSERT INTO outbox (event_type, payload) VALUES (NULL, '{"card": "4111 1111 1111 1111"}');

-- 4. an event may not set credential or routing headers
SELECT h, regress.try(format($$SELECT outbox_emit('hdr', '{}', headers => jsonb_build_object(%L, 'Bearer WRITER-CHOSEN'))$$, h)) AS result
  FROM (VALUES ('Authorization'), ('proxy-authorization'), ('Cookie'), ('Host'),
               ('Forwarded'), ('x-forwarded-for'), ('x-real-ip'), ('X-API-Key'),
               ('x-auth-token'), ('x-session'), ('x-http-method-override'),
               ('webhook-signature'), ('content-type'), ('user-agent'), ('via'),
               ('traceparent'), ('TraceState'), ('baggage'), ('x-tenant'),
               ('x-request-id'), ('x-')) v(h)
 ORDER BY 1;

-- 5. a rejected header shows neither its value nor the payload (23514)
SELECT regress.try($$SELECT outbox_emit('card.charged', '{"card": "4111 1111 1111 1111"}', headers => jsonb_build_object('x-note', E'4111\n'))$$);
SELECT outbox_emit('card.charged', '{"card": "4111 1111 1111 1111"}',
                   headers => jsonb_build_object('x-note', E'4111 1111 1111 1111\n'));
INSERT INTO outbox (event_type, payload, headers)
VALUES ('card.charged', '{"card": "4111 1111 1111 1111"}', '{"x-note": "4111\u0007"}');

-- 14. the writer does not choose event_id; the id outbox_emit returns is
-- the stored one, and a plain INSERT gets a UUIDv7 too
INSERT INTO outbox (event_id, event_type, payload)
VALUES ('00000000-0000-7000-8000-000000000001', 'replay', '{}');
INSERT INTO outbox (event_id, event_type, payload)
VALUES ('00000000-0000-7000-8000-000000000001', 'replay', '{}') ON CONFLICT DO NOTHING;
SELECT outbox_emit('mine', '{}') AS emitted_id \gset
INSERT INTO outbox (event_type, payload) VALUES ('plain.mine', '{}');
RESET ROLE;
SELECT count(*) AS stored FROM outbox WHERE event_id = :'emitted_id' AND event_type = 'mine';
SELECT substr(event_id::text, 15, 1) AS version FROM outbox WHERE event_type = 'plain.mine';
-- an admin still may (a restore, a manual fix)
SET ROLE regress_admin;
INSERT INTO outbox (event_id, event_type, payload)
VALUES ('00000000-0000-7000-8000-000000000001', 'by.admin', '{}');
RESET ROLE;

SET ROLE regress_admin;
-- 5. a destination's secret and headers never show in an error
INSERT INTO outbox_destinations (name, url, secret, headers)
VALUES ('billing', 'http://127.0.0.1:1/hook', 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQ=',
        '{"authorization": "Bearer ADMIN-TOKEN"}');
UPDATE outbox_destinations SET timeout_ms = 0 WHERE name = 'billing';
UPDATE outbox_destinations SET name = 'billing2' WHERE name = 'billing';
UPDATE outbox_destinations SET event_types = NULL WHERE name = 'billing';
UPDATE outbox_destinations SET headers = '{"x-h": "ADMIN-TOKEN\r\n"}' WHERE name = 'billing';
UPDATE outbox SET attempts = -1 WHERE event_type = 'mine';

-- 6. and 13. secrets the relay cannot sign with, or that libraries would
-- read differently, are refused when written
SELECT left(s, 20) AS secret, length(s), _outbox_valid_secret(s) AS valid
  FROM (VALUES ('whsec_YWJjZA'), ('whsec_abc'), (' whsec_YWJjZA=='), ('WHSEC_YWJjZA=='),
               ('v1,whsec_YWJjZA=='), ('"whsec_YWJjZA=="'), ('whsec_YR=='), ('whsec_YWJjZB=='),
               ('whsec_YWJjZA=='), ('raw secret'), (' raw'), ('raw '), ('sécret'),
               (E'raw\tsecret'), ('raw-whsec_x'), (repeat('k', 1024)), (repeat('k', 1025))) v(s)
 ORDER BY s;
SELECT regress.try($$UPDATE outbox_destinations SET secret = 'whsec_abc' WHERE name = 'billing'$$);
SELECT regress.try($$UPDATE outbox_destinations SET secret = 'sécret' WHERE name = 'billing'$$);

-- 8. impossible URLs are refused when written
SELECT u, regress.try(format($$UPDATE outbox_destinations SET url = %L WHERE name = 'billing'$$, u)) AS result
  FROM (VALUES ('http://127.0.0.1:99999/hook'), ('http://127.0.0.1:0/hook'), ('http://127.0.0.1:65535/hook'),
               ('https://user:pass@hooks.example/x'), ('ftp://127.0.0.1/x'),
               ('http://127.0.0.1/a b'), ('http://[::1]:8080/hook'), ('http://[::1/hook')) v(u)
 ORDER BY 1;
-- event headers a destination may set are those of any admin
SELECT regress.try($$UPDATE outbox_destinations SET headers = '{"Authorization": "Basic x", "Cookie": "c"}' WHERE name = 'billing'$$);
RESET ROLE;

-- 8. the allowlist is parsed when it is set, and only a superuser sees it
ALTER SYSTEM SET outbox.http_allowed_targets = 'hooks.example.com:443, 10.0.0.0/8:8000-8999, [fd00::/8]:443, ::1, *.example.org, 127.0.0.1';
ALTER SYSTEM SET outbox.http_allowed_targets = 'hooks.example.com:99999';
ALTER SYSTEM SET outbox.http_allowed_targets = '10.0.0.0/33';
ALTER SYSTEM SET outbox.http_allowed_targets = 'bad host!';
ALTER SYSTEM RESET outbox.http_allowed_targets;
SET ROLE regress_admin;
-- the message differs between versions; the SQLSTATE does not
SELECT split_part(regress.try($$SHOW outbox.http_allowed_targets$$), ':', 1) AS sqlstate;
RESET ROLE;
SHOW outbox.http_allowed_targets;

DELETE FROM outbox;
DELETE FROM outbox_destinations;
DROP ROLE regress_writer, regress_admin;
