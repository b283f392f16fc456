-- Routing by key: with more than 32 destinations, routing finds the
-- destinations that may take an event by index (a pattern without *, a
-- filter that is one equality) and evaluates only those. A key is a
-- necessary condition: for every event here, hostile ones included, the
-- routes found so are exactly those of evaluating every destination's
-- pattern and filter. In a database of its own, where no relay runs.
CREATE DATABASE regress_route_keys;
\c regress_route_keys
CREATE EXTENSION outbox;

-- the key of a filter: one equality of an envelope field, or of one field
-- of the payload, with a literal, on either side; anything else has none
SELECT f AS filter, _outbox_filter_key_path(f::jsonpath) AS path,
       _outbox_filter_key_value(f::jsonpath) AS value
  FROM unnest(ARRAY[
    '$.aggregate_id == "c42"',
    '"c42" == $.aggregate_id',
    '$.type == "order.paid"',
    '$.aggregate_type == null',
    '$.payload.tenant == 7',
    '$.payload.tenant == 1.50',
    '$.payload."a b" == true',
    'strict $.payload.t == "x"',
    '$.payload.a.b == 1',
    '$.payload == 1',
    '$.payload[0] == 1',
    '$.payload.* == 1',
    '$.other == 1',
    '$.aggregate_id != "c42"',
    '$.aggregate_id == "c1" || $.aggregate_id == "c2"',
    '$.aggregate_id == "c1" && $.type == "t"',
    '$.payload.t == $.payload.u',
    '$.payload.t.size() == 1',
    '$.payload.t == "x" ? (@ == 1)'
  ]) f;

-- a literal and field name over 1024 bytes give no key: the key index
-- holds both, and a btree entry is at most about 2700 bytes
SELECT _outbox_filter_key_path(format('$.aggregate_id == "%s"', repeat('x', 900))::jsonpath) AS path_900,
       _outbox_filter_key_path(format('$.aggregate_id == "%s"', repeat('x', 1100))::jsonpath) AS path_1100,
       _outbox_filter_key_value(format('$.payload."%s" == 1', repeat('k', 1100))::jsonpath) AS long_field;

-- the generated columns follow event_types and filter; nobody writes them
INSERT INTO outbox_destinations (name, event_types, channel, filter) VALUES
    ('k1', 'order.paid', 'regress_k1', '$.payload.tenant == "t1"');
SELECT name, route_type, route_path, route_value FROM outbox_destinations;
UPDATE outbox_destinations SET event_types = 'order.*', filter = '$.aggregate_id == "c9"';
SELECT name, route_type, route_path, route_value FROM outbox_destinations;
\set VERBOSITY terse
UPDATE outbox_destinations SET route_type = 'x';
\set VERBOSITY default
DELETE FROM outbox_destinations;

-- 1,000 customer webhooks keyed on the aggregate id, 200 on a payload
-- field, 50 on an exact type, and some without a key: a wildcard pattern,
-- a range filter, a strict-mode equality, a key on each envelope field
INSERT INTO outbox_destinations (name, event_types, channel, filter)
SELECT format('agg%s', k), 'order.*', format('regress_a%s', k), format('$.aggregate_id == "c%s"', k)::jsonpath
  FROM generate_series(1, 1000) k;
INSERT INTO outbox_destinations (name, event_types, channel, filter)
SELECT format('ten%s', k), '*', format('regress_t%s', k), format('$.payload.tenant == %s', k)::jsonpath
  FROM generate_series(1, 200) k;
INSERT INTO outbox_destinations (name, event_types, channel)
SELECT format('typ%s', k), format('type.%s', k), format('regress_y%s', k) FROM generate_series(1, 50) k;
INSERT INTO outbox_destinations (name, event_types, channel, filter) VALUES
    ('all', '*', 'regress_all', NULL),
    ('big', 'order.*', 'regress_big', '$.payload.amount > 900'),
    ('strict_t', '*', 'regress_strict', 'strict $.payload.tag == "x"'),
    ('lax_t', '*', 'regress_lax', '$.payload.tag == "x"'),
    ('null_agg', '*', 'regress_null', '$.aggregate_type == null'),
    ('by_type', '*', 'regress_bytype', '$.type == "type.7"'),
    ('typ7_t1', 'type.7', 'regress_typ7', '$.payload.tenant == 1'),
    -- keys on envelope fields, which decide without the filter: a number
    -- never equals a string field; strict mode as lax; null on either side
    ('num_agg', '*', 'regress_num', '$.aggregate_id == 7'),
    ('strict_agg', 'order.*', 'regress_strict_agg', 'strict $.aggregate_id == "c7"'),
    ('null_lit', '*', 'regress_null_lit', 'null == $.aggregate_id'),
    -- too long for a key (random text does not compress below the limit)
    ('long', '*', 'regress_long',
     format('$.payload.code == "%s"', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 90) g))::jsonpath);
SELECT count(*) AS destinations, count(route_type) AS by_type, count(route_path) AS by_key
  FROM outbox_destinations;

-- the events: ordinary, and those lax mode finds keys in (arrays on
-- either side, a payload that is an array), numbers equal by value,
-- strings that differ by one byte, NULL envelope fields, a payload with
-- more keys than routing probes, and a payload that is not an object
CREATE TEMP TABLE ev (n int, type text, aggregate_type text, aggregate_id text, payload jsonb);
INSERT INTO ev VALUES
    (1, 'order.paid', 'order', 'c7', '{"amount": 1000, "tenant": 3}'),
    (2, 'order.paid', 'order', 'c1000', '{"amount": 5}'),
    (3, 'order.paid', 'order', 'c1001', '{"tenant": 3.0}'),
    (4, 'type.7', NULL, NULL, '{"tenant": 1}'),
    (5, 'type.7', 'x', 'c7', '{"tenant": [1, 2, [3]]}'),
    (6, 'other', 'x', 'y', '[{"tenant": 4}, {"tenant": [5]}, 6, [{"tenant": 7}]]'),
    (7, 'other', 'x', 'y', '{"tag": ["x", "y"]}'),
    (8, 'other', 'x', 'y', '{"tag": "x "}'),
    (9, 'other', 'x', 'y', '"just a string"'),
    (10, 'order.x', 'x', 'c5', (SELECT jsonb_object_agg('f' || g, g) || '{"tenant": 9}' FROM generate_series(1, 300) g)),
    (11, 'order.paid', 'order', 'C7', '{"tenant": "3"}'),
    (12, 'type.50', 'x', 'y', '{"tenant": {"id": 2}}'),
    (15, 'other', 'x', '7', '{}'),
    (16, 'other', 'x', NULL, '{}'),
    (14, 'other', 'x', 'y', (SELECT jsonb_build_object('code', string_agg(md5(g::text), ''))
                              FROM generate_series(1, 90) g)),
    -- 301 values on a keyed field, the one that matches last: past the
    -- 256 that routing probes, found by evaluating the payload-keyed ones
    (13, 'other', 'x', 'y', (SELECT jsonb_build_object('tenant', jsonb_agg(g) || '[150]')
                              FROM generate_series(1000, 1299) g));

-- routing through the keys against every destination evaluated
CREATE TEMP VIEW reference AS
SELECT e.n, d.name
  FROM ev e, outbox_destinations d
 WHERE e.type LIKE _outbox_like_pattern(d.event_types)
   AND (d.filter IS NULL OR jsonb_path_match(
            jsonb_build_object('type', e.type, 'aggregate_type', e.aggregate_type,
                               'aggregate_id', e.aggregate_id, 'payload', e.payload),
            d.filter, '{}', true) IS TRUE);
CREATE TEMP VIEW keyed AS
SELECT e.n, r.name
  FROM ev e, _outbox_routes(e.type, e.aggregate_type, e.aggregate_id, e.payload, NULL) r;
SELECT e.n, string_agg(r.name, ' ' ORDER BY r.name) AS routes
  FROM ev e LEFT JOIN keyed r USING (n) GROUP BY e.n ORDER BY e.n;
SELECT count(*) AS differences
  FROM ((TABLE reference EXCEPT ALL TABLE keyed) UNION ALL (TABLE keyed EXCEPT ALL TABLE reference)) x;
-- the first route and whether there are several, as the claim reads them
SELECT e.n, (f.route).name AS first, f.several
  FROM ev e
  LEFT JOIN LATERAL _outbox_route(e.type, e.aggregate_type, e.aggregate_id, e.payload, NULL) f ON true
 ORDER BY e.n;
-- which are the first by name of every destination evaluated, and whether
-- there is another
SELECT count(*) AS first_differences
  FROM ev e
  LEFT JOIN LATERAL _outbox_route(e.type, e.aggregate_type, e.aggregate_id, e.payload, NULL) f ON true
 WHERE (f.route).name IS DISTINCT FROM (SELECT min(r.name) FROM reference r WHERE r.n = e.n)
    OR coalesce(f.several, false) IS DISTINCT FROM ((SELECT count(*) FROM reference r WHERE r.n = e.n) > 1);

-- a payload presents keys only on the fields destinations use; one with
-- too many presents (NULL, NULL) too, and routing then evaluates every
-- destination keyed on a payload field
SELECT field, value FROM _outbox_route_keys('{"tenant": [1, 1, [2], {"a": 3}], "other": 2}', '{tenant}')
 ORDER BY 1, 2;
SELECT field, value FROM _outbox_route_keys('[{"tenant": 4}, 5, {"tenant": "6"}]', NULL) ORDER BY 1, 2;
SELECT count(*) AS keys, count(*) FILTER (WHERE field IS NULL) AS all_of_them
  FROM _outbox_route_keys((SELECT jsonb_object_agg('f' || g, g) FROM generate_series(1, 300) g), NULL);
SELECT count(*) AS keys
  FROM _outbox_route_keys((SELECT jsonb_object_agg('f' || g, g) FROM generate_series(1, 300) g), '{f7}');

-- the claim routes each row from memory (_outbox_route_first, which
-- finds the candidates by key in a hash of the destinations it reads once
-- per statement): its plan reads outbox_destinations in no per-row step
-- but the ordered probe's, which runs only for an ordered destination
ANALYZE outbox_destinations;
INSERT INTO outbox (event_type, payload, aggregate_type, aggregate_id)
SELECT type, payload, aggregate_type, aggregate_id FROM ev;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SET enable_sort = off;
SET jit = off;
SELECT format('PREPARE claim(int, text[], bigint[], text[]) AS %s', _outbox_claim_query()) \gexec
SET plan_cache_mode = force_generic_plan;
CREATE FUNCTION pg_temp.claim_plan() RETURNS SETOF text LANGUAGE plpgsql AS $f$
BEGIN
    RETURN QUERY EXECUTE 'EXPLAIN (COSTS OFF, VERBOSE) EXECUTE claim(100, ''{}'', ''{}'', ''{}'')';
END
$f$;
SELECT bool_or(p LIKE '%Output: %_outbox_route_first(o.event_type, o.aggregate_type, o.aggregate_id, o.payload, o.destination_id)%') AS routes_in_memory,
       count(*) FILTER (WHERE p LIKE '% on %.outbox_destinations %') AS destination_scans,
       bool_or(p LIKE '%One-Time Filter: (%.enabled AND %.ordered)%') AS only_for_ordered
  FROM pg_temp.claim_plan() p;
-- and claims every event, each with its first route and whether it has
-- another (to be fanned out), as routing gives them above
BEGIN;
CREATE TEMP TABLE claimed AS EXECUTE claim(100, '{}', '{}', '{}');
SELECT c.event_type, c.aggregate_id, c.dest_name, c.fan_out FROM claimed c ORDER BY c.id;
ROLLBACK;
-- a kind left out ($4, all of its connections taken) leaves out its
-- events but those to be fanned out, which others wait for, and those
-- with no destination, to be parked; a kind with no destination here
-- changes nothing
BEGIN;
-- (the destinations of every type taken out, so that one has none)
UPDATE outbox_destinations SET enabled = false WHERE event_types = '*';
INSERT INTO outbox (event_type, payload) VALUES ('nobody.takes', '{}');
CREATE TEMP TABLE claimed AS EXECUTE claim(100, '{}', '{}', '{}');
CREATE TEMP TABLE notify_out AS EXECUTE claim(100, '{}', '{}', '{notify}');
CREATE TEMP TABLE http_out AS EXECUTE claim(100, '{}', '{}', '{http,kafka}');
SELECT (SELECT count(*) FROM notify_out) AS claimed_without_notify,
       (SELECT count(*) FROM notify_out WHERE dest_name IS NULL) AS without_destination,
       (SELECT array_agg(id ORDER BY id) FROM notify_out) =
       (SELECT array_agg(id ORDER BY id) FROM claimed WHERE fan_out OR dest_name IS NULL) AS fanned_out_and_unroutable,
       (SELECT array_agg(id ORDER BY id) FROM http_out) =
       (SELECT array_agg(id ORDER BY id) FROM claimed) AS other_kinds_change_nothing;
ROLLBACK;

-- the claim's ordered probe tests the destination it has, not every
-- route of the events before: the same event before, under both routings,
-- as evaluating every route of each (every destination ordered here)
UPDATE outbox_destinations SET ordered = true;
-- the second goes to 'all' alone; the first is taken by 'all' too, but its
-- first by name is agg3: held under 'all' routing, not under 'first'
INSERT INTO outbox (event_type, payload, aggregate_type, aggregate_id) VALUES
    ('order.paid', '{"amount": 1000}', 'k', 'c3'), ('other', '{}', 'k', 'c3');
CREATE TEMP VIEW probe_differences AS
SELECT count(*) FILTER (WHERE p.blocked_by IS NOT NULL) AS held,
       count(*) FILTER (WHERE p.blocked_by IS DISTINCT FROM (
           SELECT e.id FROM outbox e
            WHERE e.aggregate_id = o.aggregate_id
              AND coalesce(e.aggregate_type, '') = coalesce(o.aggregate_type, '')
              AND coalesce(e.origin_id, e.id) < coalesce(o.origin_id, o.id)
              AND e.delivered_at IS NULL AND e.cancelled_at IS NULL AND e.skipped_at IS NULL
              AND EXISTS (SELECT FROM _outbox_routes(e.event_type, e.aggregate_type, e.aggregate_id,
                                                     e.payload, e.destination_id) r
                           WHERE r.id = (p.dest).id)
            ORDER BY coalesce(e.origin_id, e.id) DESC LIMIT 1)) AS differences
  FROM _outbox_pending p JOIN outbox o ON o.id = p.id;
SELECT * FROM probe_differences;
-- under 'first' routing: the first by name of those that take it, alone
SELECT outbox_set_routing('first');
SELECT e.n, (f.route).name AS first, f.several
  FROM ev e
  LEFT JOIN LATERAL _outbox_route(e.type, e.aggregate_type, e.aggregate_id, e.payload, NULL) f ON true
 WHERE (f.route).name IS DISTINCT FROM (SELECT min(r.name) FROM reference r WHERE r.n = e.n)
    OR f.several;
SELECT * FROM probe_differences;

\c contrib_regression
DROP DATABASE regress_route_keys;
