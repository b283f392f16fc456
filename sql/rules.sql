-- Each rule has one home that the check constraints, the relay and the
-- status view share: header validity, secret validity, routing, and the
-- text that marks a parked event. These are their exact answers.

-- headers: keys are RFC 9110 tokens; values (as jsonb_each_text gives them)
-- have no control character but tab; a JSON null value is not sent, but
-- its key must still be a token
SELECT h, _outbox_valid_headers(h::jsonb) AS valid
  FROM (VALUES (NULL), ('{}'), ('{"traceparent": "00-abc"}'),
               ('{"n": 1, "b": true, "nested": {"x": "a\nb"}}'),
               ('{"a": "tab\tok"}'), ('{"a": ""}'), ('{"a": null}'),
               ('{"bad name": "v"}'), ('{"bad name": null}'), ('{"": "v"}'),
               ('{"é": "v"}'), ('{"a": "é"}'), ('{"a": "nl\n"}'), ('{"a": "cr\r"}'),
               ('{"a": "del\u007f"}'), ('{"a": "bell\u0007"}'),
               ('[1]'), ('"text"'), ('7')) v(h)
 ORDER BY 1;
-- the same rule refuses such headers when an event is written
SELECT regress.try($$SELECT outbox_emit('rules.h', '{}', headers => '{"bad name": null}')$$);

-- secrets: raw text, or whsec_ and canonical base64 of at least one byte
SELECT s, _outbox_valid_secret(s) AS valid
  FROM (VALUES (NULL), (''), ('raw secret'), ('whsec_c2VjcmV0'), ('whsec_YWJjZA=='),
               ('whsec_YQ=='), ('whsec_YWJjZA'), ('whsec_abc'), ('whsec_'),
               ('whsec_===='), ('whsec_YWJj ZA=='), ('whsec_not base64!'),
               ('whsec_YWJj-A==')) v(s)
 ORDER BY 1;
SELECT regress.try($$INSERT INTO outbox_destinations (name, url, secret) VALUES ('x', 'http://127.0.0.1:1/', 'whsec_abc')$$);

-- routing: under 'first', the destination with the first name whose
-- pattern matches; '*' is the only wildcard; a disabled one keeps its
-- types' events, which wait for it (unroutable meanwhile), even where
-- another would match. Under 'all' (fan-out), every one that matches
BEGIN;
SELECT outbox_set_routing('first');
INSERT INTO outbox_destinations (name, event_types, channel, enabled) VALUES
    ('b_tasks', 'task.*', 'c1', true),
    ('a_created', 'task.created', 'c2', true),
    ('0_disabled', 'other', 'c3', false),
    ('z_other', 'oth*', 'c5', true),
    ('c_literal', '100%_*', 'c4', true);
SELECT t, (SELECT string_agg(name, ', ' ORDER BY name) FROM _outbox_routes(t, NULL, NULL, NULL, NULL)) AS destination
  FROM (VALUES ('task.created'), ('task.done'), ('other'), ('100%_x'), ('100ab_x')) v(t)
 ORDER BY 1;
-- the status view counts unroutable events with the same rule
INSERT INTO outbox (event_type, payload) VALUES ('task.done', '{}'), ('other', '{}'), ('100ab_x', '{}');
SELECT event_type, pending, unroutable FROM outbox_status ORDER BY 1;
SELECT outbox_set_routing('all');
SELECT t, (SELECT string_agg(name, ', ' ORDER BY name) FROM _outbox_routes(t, NULL, NULL, NULL, NULL)) AS destinations
  FROM (VALUES ('task.created'), ('task.done'), ('other'), ('100%_x'), ('100ab_x')) v(t)
 ORDER BY 1;
SELECT event_type, pending, unroutable FROM outbox_status ORDER BY 1;
ROLLBACK;

-- the claim's routing (_outbox_route) answers from the destinations held
-- in memory (_outbox_route_first); with or without a filter it
-- gives the same first route, a disabled one included, and the row's own
-- destination for a fanned-out row
BEGIN;
INSERT INTO outbox_destinations (name, event_types, channel, enabled) VALUES
    ('r_b', 'task.*', 'c1', true), ('r_a', 'task.created', 'c2', true),
    ('r_0', 'other', 'c3', false), ('r_z', 'oth*', 'c5', true), ('r_c', '100%_*', 'c4', true);
CREATE TEMP TABLE route_inputs AS
SELECT t, i
  FROM unnest(ARRAY['task.created', 'task.done', 'other', 'otherwise', '100%_x', '100ab_x', 'none']) t,
       unnest(ARRAY[NULL, (SELECT id FROM outbox_destinations WHERE name = 'r_z'),
                    (SELECT id FROM outbox_destinations WHERE name = 'r_0'), -1]) i;
CREATE TEMP TABLE by_type AS
SELECT t, i, (r.route).name, r.several
  FROM route_inputs LEFT JOIN LATERAL _outbox_route(t, NULL, NULL, NULL, i) r ON true;
SELECT t, name FROM by_type WHERE i IS NULL ORDER BY t;
SELECT DISTINCT coalesce(name, '-') AS name, several
  FROM by_type WHERE i IS NOT NULL ORDER BY 1;
INSERT INTO outbox_destinations (name, event_types, channel, filter)
    VALUES ('zz_filtered', 'none.*', 'c6', '$.payload.x == 1');
SELECT count(*) AS differences
  FROM (SELECT t, i, (r.route).name, r.several
          FROM route_inputs LEFT JOIN LATERAL _outbox_route(t, NULL, NULL, NULL, i) r ON true
        EXCEPT ALL TABLE by_type) x;
ROLLBACK;

-- the destinations are read again when the same call is evaluated under
-- another snapshot, as a PL/pgSQL expression is after a change
BEGIN;
DO $$
DECLARE
    r outbox_destinations;
BEGIN
    FOR i IN 1..2 LOOP
        r := (_outbox_route_first('rt.one', NULL, NULL, NULL, NULL)).route;    -- one call, evaluated twice
        RAISE NOTICE 'pass %: %', i, coalesce(r.name, '-');
        IF i = 1 THEN
            INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('rt_new', 'rt.*', 'c7');
        END IF;
    END LOOP;
END $$;
ROLLBACK;

-- the destinations read are kept from statement to statement while the
-- row versions a statement sees are the same: any change is seen at once,
-- in the transaction that makes it, after a rollback to a savepoint, and
-- by the next transaction; so is the routing mode
CREATE FUNCTION pg_temp.first_route(t text, p jsonb DEFAULT NULL) RETURNS text
LANGUAGE sql AS $$
    SELECT coalesce(((f).route).name, '-') || CASE WHEN (f).several THEN ' +' ELSE '' END
      FROM (SELECT _outbox_route_first(t, 'rt', 'a1', p, NULL) f) x
$$;
BEGIN;
INSERT INTO outbox_destinations (name, event_types, channel, filter) VALUES
    ('rt_b', 'rt.*', 'c8', '$.payload.n == 1'), ('rt_c', 'rt.two', 'c9', NULL);
SELECT pg_temp.first_route('rt.one') AS one, pg_temp.first_route('rt.one', '{"n": 1}') AS one_n1,
       pg_temp.first_route('rt.two') AS two;
SAVEPOINT s;
UPDATE outbox_destinations SET event_types = 'rt.*' WHERE name = 'rt_c';
SELECT pg_temp.first_route('rt.one') AS one, pg_temp.first_route('rt.one', '{"n": 1}') AS one_n1;
ROLLBACK TO SAVEPOINT s;
SELECT pg_temp.first_route('rt.one') AS one, pg_temp.first_route('rt.one', '{"n": 1}') AS one_n1;
UPDATE outbox_destinations SET filter = '$.payload.n == 2' WHERE name = 'rt_b';
SELECT pg_temp.first_route('rt.one', '{"n": 1}') AS one_n1, pg_temp.first_route('rt.one', '{"n": 2}') AS one_n2;
SELECT outbox_set_routing('first');
SELECT pg_temp.first_route('rt.two', '{"n": 2}') AS two_n2_first;
SELECT outbox_set_routing('all');
SELECT pg_temp.first_route('rt.two', '{"n": 2}') AS two_n2_all;
ROLLBACK;
SELECT pg_temp.first_route('rt.two') AS two_after_rollback;
BEGIN;
INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('rt_d', 'rt.two', 'c10');
COMMIT;
SELECT pg_temp.first_route('rt.two') AS two_next_transaction;
DELETE FROM outbox_destinations WHERE name = 'rt_d';
SELECT pg_temp.first_route('rt.two') AS two_deleted;

-- routing reads every destination, so it refuses row level security on
-- them, which would hide some from it, for a role it applies to; and it
-- asks for the privilege a SELECT would, of each role that calls it, even
-- with the destinations it holds read under the same snapshot by another
BEGIN;
CREATE ROLE regress_rls_admin IN ROLE outbox_admin;
ALTER TABLE outbox_destinations ENABLE ROW LEVEL SECURITY;
SET LOCAL ROLE regress_rls_admin;
\set VERBOSITY terse
SELECT _outbox_route_first('rt.one', NULL, NULL, NULL, NULL);
\set VERBOSITY default
ROLLBACK;
BEGIN ISOLATION LEVEL REPEATABLE READ;
CREATE ROLE regress_no_select;
GRANT EXECUTE ON FUNCTION _outbox_route_first(text, text, text, jsonb, bigint) TO regress_no_select;
SELECT (_outbox_route_first('rt.one', NULL, NULL, NULL, NULL)).route IS NULL AS no_route;
SET LOCAL ROLE regress_no_select;
\set VERBOSITY terse
SELECT _outbox_route_first('rt.one', NULL, NULL, NULL, NULL);
\set VERBOSITY default
ROLLBACK;

-- a pattern matches as the LIKE pattern 1.1 built from it did: '*' any
-- run of characters, the empty one too; %, _ and \ are literals; a
-- multibyte character is matched whole
SELECT p, t, _outbox_type_matches(t, p) AS matches
  FROM (VALUES ('*', 'a'), ('a*', 'a'), ('a*', 'ba'), ('*a', 'ba'), ('*a', 'ab'),
               ('a*b*c', 'aXbYc'), ('a*b*c', 'acb'), ('a*b*c', 'abcb'), ('**', 'x'),
               ('*aab', 'aaab'), ('*.paid', 'order.paid'), ('*.paid', 'order.paidx'),
               ('a%b', 'axb'), ('a%b', 'a%b'), ('a_b', 'axb'), ('a\b', 'a\b'), ('a\b', 'ab'),
               ('A', 'a'), ('é*', 'éa'), ('*é', 'aé'), ('*é*', 'ée'), ('u', 'ü'), ('', '')) v(p, t);
-- and agrees with it on every pattern of up to four of a, é and *, and
-- every type of up to four of a and é
WITH RECURSIVE pat(s) AS (SELECT '' UNION ALL SELECT s || c FROM pat, unnest('{a,é,*}'::text[]) c WHERE length(s) < 4),
     typ(s) AS (SELECT '' UNION ALL SELECT s || c FROM typ, unnest('{a,é}'::text[]) c WHERE length(s) < 4)
SELECT count(*) AS pairs,
       count(*) FILTER (WHERE _outbox_type_matches(typ.s, pat.s)
                              IS DISTINCT FROM (typ.s LIKE _outbox_like_pattern(pat.s))) AS disagreements,
       count(*) FILTER (WHERE _outbox_type_matches(typ.s, pat.s)) AS matching
  FROM pat, typ;

-- a parked event carries the relay's marker text, and a new destination
-- makes it due again through the trigger that looks for the same text
BEGIN;
SELECT outbox_emit('rules.parked', '{}') IS NOT NULL AS emitted;
SELECT * FROM outbox_relay();
SELECT last_error = _outbox_unroutable_error() AS marked, next_attempt_at > now() AS parked
  FROM outbox WHERE event_type = 'rules.parked';
INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('rules', 'rules.*', 'rules_events');
SELECT next_attempt_at <= now() AS due_again FROM outbox WHERE event_type = 'rules.parked';
ROLLBACK;
SELECT _outbox_unroutable_error();

-- kinds: a destination written without a kind takes the kind of its one
-- target; a kind needs its own target and no other; an unknown kind or
-- format is refused; the kind is fixed once written
BEGIN;
INSERT INTO outbox_destinations (name, event_types, url) VALUES ('k_hook', 'k.hook', 'http://127.0.0.1:1/');
INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('k_chan', 'k.chan', 'k_chan');
INSERT INTO outbox_destinations (name, event_types, kind, url) VALUES ('k_explicit', 'k.explicit', 'http', 'http://127.0.0.1:1/');
SELECT name, kind, format FROM outbox_destinations ORDER BY name;
-- the relay's claim reads the kind and format with each event's destination
SELECT outbox_emit(t, '{}') IS NOT NULL AS emitted FROM unnest(ARRAY['k.hook', 'k.chan']) t;
SELECT event_type, dest_name, (dest).kind AS dest_kind, (dest).format AS dest_format FROM _outbox_pending
 WHERE event_type LIKE 'k.%' ORDER BY 1;
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, url) VALUES ('x', 'notify', 'http://127.0.0.1:1/')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, channel) VALUES ('x', 'nats', 'c')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind) VALUES ('x', 'http')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name) VALUES ('x')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, url, channel) VALUES ('x', 'http://127.0.0.1:1/', 'c')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, url, format) VALUES ('x', 'http://127.0.0.1:1/', 'avro')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, url, format) VALUES ('x', 'http://127.0.0.1:1/', NULL)$$);
SELECT regress.try($$UPDATE outbox_destinations SET kind = 'notify', url = NULL, channel = 'c' WHERE name = 'k_hook'$$);
SELECT regress.try($$UPDATE outbox_destinations SET kind = 'notify' WHERE name = 'k_hook'$$);
-- a NULL kind is taken from the target again; the same kind is no change
SELECT regress.try($$UPDATE outbox_destinations SET kind = NULL WHERE name = 'k_hook'$$);
SELECT regress.try($$UPDATE outbox_destinations SET kind = 'notify', enabled = false WHERE name = 'k_chan'$$);
SELECT name, kind, enabled FROM outbox_destinations ORDER BY name;
-- a kind's own columns: another kind's destination leaves them unset (or
-- at their default); the target columns are the kinds' too
SELECT regress.try($$INSERT INTO outbox_destinations (name, channel, retry_client_errors) VALUES ('x', 'c', true)$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, event_types, channel, retry_client_errors) VALUES ('x', 'none.x', 'c', false)$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, event_types, url, notify_mode) VALUES ('y', 'none.y', 'http://127.0.0.1:1/', 'full')$$);
SELECT regress.try($$UPDATE outbox_destinations SET retry_client_errors = true WHERE name = 'k_chan'$$);
SELECT regress.try($$UPDATE outbox_destinations SET notify_mode = 'reference' WHERE name = 'k_hook'$$);
-- a row that got past the trigger with a kind or format this library does
-- not have (a newer version's) fails its events with the reason, and they
-- are retried
ALTER TABLE outbox_destinations DISABLE TRIGGER outbox_destinations_check;
UPDATE outbox_destinations SET kind = 'nats' WHERE name = 'k_hook';
UPDATE outbox_destinations SET format = 'avro', enabled = true WHERE name = 'k_chan';
ALTER TABLE outbox_destinations ENABLE TRIGGER outbox_destinations_check;
SET LOCAL client_min_messages = error;
SELECT * FROM outbox_relay();
SELECT event_type, attempts, dead_at IS NULL AS alive, next_attempt_at > now() AS backoff, last_error
  FROM outbox WHERE event_type LIKE 'k.%' ORDER BY 1;
ROLLBACK;
-- disabled_at and disabled_reason: disabled_at is set when enabled becomes
-- false, the reason is the writer's; enabling clears both
BEGIN;
INSERT INTO outbox_destinations (name, event_types, channel, enabled) VALUES
    ('dis_a', 'none.dis_a', 'c', false), ('dis_b', 'none.dis_b', 'c', true);
SELECT name, enabled, disabled_at = now() AS disabled_now, disabled_reason
  FROM outbox_destinations WHERE name LIKE 'dis\_%' ORDER BY name;
UPDATE outbox_destinations SET enabled = false, disabled_reason = 'endpoint moving' WHERE name = 'dis_b';
UPDATE outbox_destinations SET event_types = 'none.dis_x' WHERE name = 'dis_b';
UPDATE outbox_destinations SET enabled = false WHERE name = 'dis_a';
SELECT name, enabled, disabled_at = now() AS disabled_now, disabled_reason
  FROM outbox_destinations WHERE name LIKE 'dis\_%' ORDER BY name;
UPDATE outbox_destinations SET enabled = true WHERE name LIKE 'dis\_%';
SELECT name, enabled, disabled_at, disabled_reason
  FROM outbox_destinations WHERE name LIKE 'dis\_%' ORDER BY name;
ROLLBACK;
-- formats: a webhook sends the envelope or a CloudEvent (structured or
-- binary mode), a channel and a stream the envelope only; the source of a
-- CloudEvents webhook is a URI-reference
BEGIN;
INSERT INTO outbox_destinations (name, event_types, url, format, cloudevents_source) VALUES
    ('ce_s', 'none.ce_s', 'http://127.0.0.1:1/', 'cloudevents', 'https://shop.example/orders'),
    ('ce_b', 'none.ce_b', 'http://127.0.0.1:1/', 'cloudevents-binary', NULL);
SELECT name, format, cloudevents_source FROM outbox_destinations WHERE name LIKE 'ce\_%' ORDER BY name;
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, event_types, channel, format) VALUES ('ce_c', 'none.ce_c', 'c', 'cloudevents')$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET format = 'CloudEvents' WHERE name = 'ce_s'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET cloudevents_source = '' WHERE name = 'ce_s'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET cloudevents_source = '/shop orders' WHERE name = 'ce_s'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET cloudevents_source = '/café' WHERE name = 'ce_s'$$);
SELECT regress.try_detail(format($$UPDATE outbox_destinations SET cloudevents_source = %L WHERE name = 'ce_s'$$, '/' || repeat('s', 1024)));
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, event_types, channel, cloudevents_source) VALUES ('ce_c', 'none.ce_c', 'c', '/x')$$);
ROLLBACK;
-- batches: a webhook takes 1 to 1000 events per request, 1 in the
-- CloudEvents binary mode (one event per request); other kinds 1 only
BEGIN;
INSERT INTO outbox_destinations (name, event_types, url, format, events_per_request) VALUES
    ('b_env', 'none.b_env', 'http://127.0.0.1:1/', 'envelope', 1000),
    ('b_ce', 'none.b_ce', 'http://127.0.0.1:1/', 'cloudevents', 2),
    ('b_bin', 'none.b_bin', 'http://127.0.0.1:1/', 'cloudevents-binary', 1);
INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('b_chan', 'none.b_chan', 'c');
SELECT name, format, events_per_request FROM outbox_destinations WHERE name LIKE 'b\_%' ORDER BY name;
SELECT regress.try_detail($$UPDATE outbox_destinations SET events_per_request = 0 WHERE name = 'b_env'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET events_per_request = 1001 WHERE name = 'b_env'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET events_per_request = -2147483648 WHERE name = 'b_env'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET events_per_request = 2 WHERE name = 'b_bin'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET format = 'cloudevents-binary' WHERE name = 'b_ce'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET events_per_request = 2 WHERE name = 'b_chan'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET events_per_request = NULL WHERE name = 'b_env'$$);
ROLLBACK;
-- event headers a destination forwards: NULL (every one, as in 1.1), an
-- empty array (none), or names and prefixes ending in -*, at most 64
BEGIN;
INSERT INTO outbox_destinations (name, event_types, url, event_headers) VALUES
    ('eh_null', 'none.eh_null', 'http://127.0.0.1:1/', NULL),
    ('eh_none', 'none.eh_none', 'http://127.0.0.1:1/', '{}'),
    ('eh_list', 'none.eh_list', 'http://127.0.0.1:1/', '{X-Tenant,x-envoy-*,traceparent}');
INSERT INTO outbox_destinations (name, event_types, channel, event_headers) VALUES ('eh_chan', 'none.eh_chan', 'c', '{x-a}');
SELECT name, event_headers FROM outbox_destinations WHERE name LIKE 'eh\_%' ORDER BY name;
SELECT regress.try_detail($$UPDATE outbox_destinations SET event_headers = '{x-tenant,"bad name"}' WHERE name = 'eh_list'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET event_headers = '{""}' WHERE name = 'eh_list'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET event_headers = '{*}' WHERE name = 'eh_list'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET event_headers = '{-*}' WHERE name = 'eh_list'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET event_headers = '{x-envoy*}' WHERE name = 'eh_list'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET event_headers = '{x-*-id}' WHERE name = 'eh_list'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET event_headers = '{x-é}' WHERE name = 'eh_list'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET event_headers = '{x-a,NULL}' WHERE name = 'eh_list'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET event_headers = '{{x-a},{x-b}}' WHERE name = 'eh_list'$$);
SELECT regress.try_detail(format($$UPDATE outbox_destinations SET event_headers = %L WHERE name = 'eh_list'$$, ARRAY['x-' || repeat('a', 255)]));
SELECT regress.try_detail(format($$UPDATE outbox_destinations SET event_headers = %L WHERE name = 'eh_list'$$, ARRAY['x-' || repeat('a', 254)]));
SELECT regress.try_detail(format($$UPDATE outbox_destinations SET event_headers = %L WHERE name = 'eh_list'$$,
       (SELECT array_agg('x-h' || g) FROM generate_series(1, 65) g)));
SELECT regress.try_detail(format($$UPDATE outbox_destinations SET event_headers = %L WHERE name = 'eh_list'$$,
       (SELECT array_agg('x-h' || g) FROM generate_series(1, 64) g)));
ROLLBACK;
-- a kind's own settings without a column: options, a JSON object whose
-- keys the kind declares (src/kind_options.c); none of the kinds of 1.1
-- declares one, so every key is refused on them, naming key and kind,
-- never the value
BEGIN;
INSERT INTO outbox_destinations (name, event_types, url) VALUES ('o_hook', 'none.o_hook', 'http://127.0.0.1:1/');
INSERT INTO outbox_destinations (name, event_types, channel, options) VALUES ('o_chan', 'none.o_chan', 'c', '{}');
SELECT name, options FROM outbox_destinations WHERE name LIKE 'o\_%' ORDER BY name;
SELECT regress.try_detail($$UPDATE outbox_destinations SET options = '{"topic": "secret-value"}' WHERE name = 'o_hook'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET options = '{"mode": "full"}' WHERE name = 'o_chan'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET options = '{"Bad Key\u0001": 1}' WHERE name = 'o_chan'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET options = '[]' WHERE name = 'o_hook'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET options = '"x"' WHERE name = 'o_hook'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET options = 'null' WHERE name = 'o_hook'$$);
SELECT regress.try_detail($$UPDATE outbox_destinations SET options = NULL WHERE name = 'o_hook'$$);
SELECT regress.try_detail(format($$UPDATE outbox_destinations SET options = %L WHERE name = 'o_hook'$$,
       jsonb_build_object('a', repeat('x', 65536))));
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, event_types, url, options)
       VALUES ('o_new', 'none.o_new', 'http://127.0.0.1:1/', '{"url": "http://127.0.0.1:2/"}')$$);
SELECT col_description('outbox_destinations'::regclass,
       (SELECT attnum FROM pg_attribute WHERE attrelid = 'outbox_destinations'::regclass AND attname = 'options'));
ROLLBACK;
-- filters: a jsonpath predicate over the event's type, aggregate_type,
-- aggregate_id and payload; (under 'first') the first destination by name
-- whose pattern matches and whose filter is true takes the event. A filter that cannot
-- be evaluated on an event (a string compared with a number, a payload
-- that is not an object, a key missing in strict mode, a payload nested
-- 13,000 deep) does not take it
BEGIN;
SELECT outbox_set_routing('first');
INSERT INTO outbox_destinations (name, event_types, channel, filter) VALUES
    ('f_a', 'f.*', 'c', '$.payload.customer == "a"'),
    ('f_big', 'f.*', 'c', '$.payload.amount > 100 && $.aggregate_type == "order"'),
    ('f_id', 'f.*', 'c', '$.aggregate_id starts with "vip-"'),
    ('f_strict', 'f.*', 'c', 'strict $.payload.tags[0] == "x"'),
    ('f_time', 'f.*', 'c', '$.payload.at < "2026-01-01"'),
    ('f_type', 'f.*', 'c', '$.type like_regex "^f\\.late"'),
    ('g_rest', 'f.*', 'c', NULL);
SELECT e.n, (SELECT name FROM _outbox_routes(e.t, e.at, e.ai, e.p, NULL)) AS destination
  FROM (VALUES (1, 'f.x', NULL, NULL, '{"customer": "a"}'::jsonb),
               (2, 'f.x', NULL, NULL, '{"customer": "b"}'),
               (3, 'f.x', 'order', NULL, '{"amount": 101}'),
               (4, 'f.x', 'order', NULL, '{"amount": "101"}'),
               (5, 'f.x', 'user', NULL, '{"amount": 101}'),
               (6, 'f.x', NULL, 'vip-7', '[1, 2]'),
               (7, 'f.x', NULL, NULL, '{"tags": ["x"]}'),
               (8, 'f.x', NULL, NULL, '{"tags": "x"}'),
               (9, 'f.x', NULL, NULL, '{"at": "2025-06-01T00:00:00Z"}'),
               (10, 'f.x', NULL, NULL, '{"at": 20250601}'),
               (11, 'f.late', NULL, NULL, '"scalar"'),
               (12, 'g.x', NULL, NULL, '{"customer": "a"}'),
               (13, 'f.x', NULL, NULL, (repeat('{"customer":', 13000) || '"a"' || repeat('}', 13000))::jsonb))
       e(n, t, at, ai, p)
 ORDER BY 1;
-- the claim, the status view and the backlog route each event by its
-- fields; an event that no filter takes and no other destination takes
-- waits, unroutable
DELETE FROM outbox_destinations WHERE name = 'g_rest';
INSERT INTO outbox (event_type, aggregate_type, payload) VALUES
    ('f.x', NULL, '{"customer": "a"}'), ('f.x', 'order', '{"amount": 500}'),
    ('f.x', NULL, '{"customer": "z"}');
SELECT payload, dest_name FROM _outbox_pending WHERE event_type = 'f.x' ORDER BY id;
SELECT event_type, pending, unroutable FROM outbox_status WHERE event_type = 'f.x';
SELECT destination, pending FROM outbox_backlog() WHERE destination LIKE 'f\_%' OR destination IS NULL;
-- what a filter may be: a predicate or a boolean, at most 4096 bytes,
-- without what would raise an error on some event whatever silent says
-- (variables, datetime methods, .**); the message never shows the filter
SELECT f, regress.try_detail(format($$UPDATE outbox_destinations SET filter = %L WHERE name = 'f_a'$$, f))
  FROM (VALUES ('$.payload.customer'), ('$.payload ? (@.customer == "a")'),
               ('exists($.payload ? (@.customer == "a"))'), ('$.payload.customer == $c'),
               ('$.payload.customer == "$\"c"'), ('true'), ('false'), ('null'), ('1 == 1'),
               ('!($.payload.paid == true)'), ('($.a == 1) is unknown'), ('$'),
               ('$.payload.at.datetime() < "2026-01-01".datetime()'),
               ('$.payload.at.datetime("yyyy-mm-dd") == "x" || true'),
               ('$.payload.datetime == "x" && $."date" == "y"'),
               ('exists($.payload.** ? (@ == 2))'), ('$.payload.a.**{2 to 3} == 1'),
               ('$.payload.a[*] == 1 && $.payload.* == 2')) v(f);
-- PostgreSQL 17's datetime methods: refused, where they parse
SELECT m, regress.try(format($$UPDATE outbox_destinations SET filter = %L WHERE name = 'f_a'$$,
                             '$.payload.at.' || m || '() < "2026-01-01"'))
          ~ '^(23514: destination filter must not use datetime methods|42601: )' AS refused
  FROM (VALUES ('date'), ('time'), ('time_tz'), ('timestamp'), ('timestamp_tz')) v(m);
SELECT regress.try_detail(format($$UPDATE outbox_destinations SET filter = %L WHERE name = 'f_a'$$,
       '$.payload.k == "' || repeat('x', 5000) || '"'));
SELECT left(regress.try($$UPDATE outbox_destinations SET filter = 'not a path' WHERE name = 'f_a'$$), 5);
ROLLBACK;
-- an ordered destination holds an event back for the one before it of its
-- key that goes to the same destination: one that a filter sends
-- elsewhere does not hold it
BEGIN;
SELECT outbox_set_routing('first');
INSERT INTO outbox_destinations (name, event_types, channel, ordered, filter) VALUES
    ('k_paid', 'k.*', 'c', true, '$.payload.paid == true'),
    ('k_rest', 'k.*', 'c', true, NULL);
INSERT INTO outbox (event_type, aggregate_type, aggregate_id, payload) VALUES
    ('k.x', 'order', '1', '{"paid": true}'), ('k.x', 'order', '1', '{"paid": false}'),
    ('k.x', 'order', '1', '{"paid": true}'), ('k.x', 'order', '1', '{}');
SELECT p.payload, p.dest_name, b.payload AS held_for
  FROM _outbox_pending p LEFT JOIN outbox b ON b.id = p.blocked_by
 WHERE p.event_type = 'k.x' ORDER BY p.id;
SELECT destination, aggregate_id, blocking_event_type, waiting FROM outbox_blocked_keys ORDER BY 1;
ROLLBACK;
