/* outbox--1.1--1.2.sql: upgrade from 1.1 to 1.2 */

\echo Use "ALTER EXTENSION outbox UPDATE TO '1.2'" to load this file. \quit

/*
 * First of all: the library this session runs must be 1.2's or later (see
 * outbox--1.0--1.1.sql): a server keeps the library it loaded at startup
 * until it restarts, and the objects below may need what only 1.2's has.
 * The update stops here, changing nothing, with the step that is missing.
 */
DO $guard$
BEGIN
    IF pg_catalog.string_to_array(@extschema@.outbox_library_version(), '.')::int[]
       OPERATOR(pg_catalog.<) '{1,2}'::int[] THEN
        RAISE EXCEPTION 'the outbox library loaded in this server is older than version 1.2'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'The server keeps the library it loaded at startup until it restarts; the SQL objects of 1.2 need the library installed with them.',
                  HINT = 'Restart the server, then run the statement again (CREATE EXTENSION outbox, or ALTER EXTENSION outbox UPDATE).';
    END IF;
END
$guard$;

/*
 * Which of an event's headers a destination forwards. Writers may set x-
 * headers that an endpoint, or a proxy before it, may read as trust or
 * identity (x-is-admin, x-ms-client-principal, x-envoy-internal, ...). NULL
 * forwards every header the header rules allow, as 1.1 did, so existing
 * destinations keep their behaviour; an empty array forwards none;
 * otherwise header names and prefixes ending in -* (x-envoy-*), compared
 * without case. It applies to every kind that forwards event headers (the
 * claim filters them, src/claim_decode.c); a destination's own headers are not
 * affected. The validation trigger checks it (src/headers.c).
 */
ALTER TABLE @extschema@.outbox_destinations
    ADD COLUMN event_headers text[];

COMMENT ON COLUMN @extschema@.outbox_destinations.event_headers IS
    'The event headers forwarded: header names and prefixes ending in -* (x-envoy-*), without case, at most 64; NULL: every one events may carry, as in 1.1; empty: none. The destination''s own headers are always sent';

/*
 * A kind's own settings, as a foreign server's OPTIONS: one JSON object
 * per destination, its keys declared by the destination's kind and checked
 * by the validation trigger (src/kind_options.c), so that a kind added
 * later brings no column and no schema change. The settings that 1.0 and
 * 1.1 made columns stay columns, under the names users wrote. Why:
 * docs/kind-settings.md. Existing rows get the empty object; a constant
 * default adds the column without rewriting the table.
 */
ALTER TABLE @extschema@.outbox_destinations
    ADD COLUMN options jsonb NOT NULL DEFAULT '{}';

COMMENT ON COLUMN @extschema@.outbox_destinations.options IS
    'The destination kind''s own settings that have no column: a JSON object whose keys the kind declares (see its page in docs/); {} for none';

/*
 * A destination's filter: a jsonpath predicate over the event (its type,
 * aggregate_type, aggregate_id and payload, as the envelope names them),
 * so that a destination takes only some events of the types it matches:
 * one webhook per customer, each taking its customer's events. NULL takes
 * every event its pattern matches, as in 1.1. The validation trigger
 * refuses a path that is not a predicate or that names variables (see
 * src/route_filter.c): either would make every claim fail.
 */
ALTER TABLE @extschema@.outbox_destinations
    ADD COLUMN filter jsonpath;

COMMENT ON COLUMN @extschema@.outbox_destinations.filter IS
    'A jsonpath predicate over the event''s type, aggregate_type, aggregate_id and payload: the destination takes the events of its event_types for which it is true; NULL: all of them';

/*
 * Fan-out. Through 1.1 an event went to one destination, the first by
 * name that takes it, and its delivery state (attempts, backoff, dead
 * letter, hold) is on its row. From 1.2 an event goes to every destination
 * that takes it: when the relay claims an event that more than one takes,
 * it replaces the event's row by one row per destination, in the claim's
 * transaction (src/fan_out.c), each with the event's event_id, content
 * and created_at, its own delivery state, destination_id naming its
 * destination and origin_id the row it came from; the next claims take
 * them as any row. So every rule of a delivery (backoff, Retry-After, dead
 * letters, 410 Gone, holds, the in-flight journal) applies to each
 * destination apart, and an event that one destination takes keeps the
 * one row it has, with no write added. docs/fan-out.md says why rows, and
 * what they cost.
 *
 * outbox_destinations.id names a destination for good: one deleted and
 * created again under its name is another, whose rows these are not.
 */
ALTER TABLE @extschema@.outbox_destinations
    ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY UNIQUE;

COMMENT ON COLUMN @extschema@.outbox_destinations.id IS
    'The destination''s number, never reused: the rows of a fanned-out event name it in outbox.destination_id';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.outbox_destinations_id_seq', '');

/*
 * Routing by key (src/route_key.c): what lets 1,000 destinations, one per
 * customer, route an event with a few index probes instead of evaluating
 * 1,000 patterns and filters. route_type is the one type a pattern without
 * '*' matches; route_path and route_value the field and literal of a
 * filter that is one equality ($.aggregate_id == "c42",
 * $.payload.tenant == 7). Generated: nobody writes them, and they follow
 * every change of event_types and filter.
 */
CREATE FUNCTION @extschema@._outbox_filter_key_path(filter jsonpath)
RETURNS text[]
AS 'MODULE_PATHNAME', '_outbox_filter_key_path'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION @extschema@._outbox_filter_key_value(filter jsonpath)
RETURNS jsonb
AS 'MODULE_PATHNAME', '_outbox_filter_key_value'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION @extschema@._outbox_route_keys(payload jsonb, fields text[],
                                               OUT field text, OUT value jsonb)
RETURNS SETOF record
AS 'MODULE_PATHNAME', '_outbox_route_keys'
LANGUAGE C STABLE PARALLEL SAFE ROWS 8;

COMMENT ON FUNCTION @extschema@._outbox_filter_key_path(jsonpath) IS
    'Internal: the field a filter that is one equality with a literal compares (type, aggregate_type, aggregate_id, or payload and one of its fields); NULL for any other filter';
COMMENT ON FUNCTION @extschema@._outbox_filter_key_value(jsonpath) IS
    'Internal: the literal a filter that is one equality compares its field with, as jsonb; NULL for any other filter';
COMMENT ON FUNCTION @extschema@._outbox_route_keys(jsonb, text[]) IS
    'Internal: the (field, value) keys an event''s payload presents on the fields destinations use (NULL: all); (NULL, NULL) for a payload with too many';

-- whoever writes a destination computes its generated columns
REVOKE ALL ON FUNCTION
    @extschema@._outbox_filter_key_path(jsonpath),
    @extschema@._outbox_filter_key_value(jsonpath)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    @extschema@._outbox_filter_key_path(jsonpath),
    @extschema@._outbox_filter_key_value(jsonpath)
TO outbox_admin;
REVOKE ALL ON FUNCTION @extschema@._outbox_route_keys(jsonb, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@._outbox_route_keys(jsonb, text[]) TO outbox_admin;

ALTER TABLE @extschema@.outbox_destinations
    ADD COLUMN route_type text
        GENERATED ALWAYS AS (CASE WHEN pg_catalog.strpos(event_types, '*') = 0
                                  THEN event_types END) STORED,
    ADD COLUMN route_path text[]
        GENERATED ALWAYS AS (@extschema@._outbox_filter_key_path(filter)) STORED,
    ADD COLUMN route_value jsonb
        GENERATED ALWAYS AS (@extschema@._outbox_filter_key_value(filter)) STORED;

COMMENT ON COLUMN @extschema@.outbox_destinations.route_type IS
    'Generated: the one event type event_types matches, when it has no *; routing finds the destination by it';
COMMENT ON COLUMN @extschema@.outbox_destinations.route_path IS
    'Generated: the field a filter of one equality compares; routing finds the destination by it and route_value';
COMMENT ON COLUMN @extschema@.outbox_destinations.route_value IS
    'Generated: the literal a filter of one equality compares route_path with';

CREATE INDEX outbox_destinations_type_idx ON @extschema@.outbox_destinations (route_type)
    WHERE route_type IS NOT NULL;
CREATE INDEX outbox_destinations_key_idx ON @extschema@.outbox_destinations (route_path, route_value)
    WHERE route_type IS NULL AND route_path IS NOT NULL;
CREATE INDEX outbox_destinations_unkeyed_idx ON @extschema@.outbox_destinations (id)
    WHERE route_type IS NULL AND route_path IS NULL;

/*
 * The destinations that may take an event: those found by key (its type,
 * its keys) and those without one. Routing (below) evaluates each one's
 * pattern and filter on them when there are more than 32 destinations;
 * with fewer, a scan of them all costs less than the probes, and it reads
 * them all. OFFSET 0 keeps this query a plan of its own: planned with
 * its callers' ORDER BY d.name, it would walk the name index of every
 * destination, filtering by candidate, rather than sort a few found by
 * key (the relay plans with sorting disabled). d.id = ANY (ARRAY(...)):
 * the candidates are
 * found before outbox_destinations is read, each once. The keys' probes
 * are a lateral subquery kept apart (OFFSET 0): one index probe per key,
 * where a join of the keys with the table could hash the whole table. The
 * envelope's keys are probed as they are, and the payload's read
 * (_outbox_route_keys), only on the fields that destinations use (fields:
 * uncorrelated, once per statement), so a field no destination keys on
 * costs no probe.
 */
CREATE FUNCTION @extschema@._outbox_candidates(event_type text, aggregate_type text,
                                               aggregate_id text, payload jsonb)
RETURNS SETOF @extschema@.outbox_destinations
LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT d.*
      FROM @extschema@.outbox_destinations d
     WHERE d.id OPERATOR(pg_catalog.=) ANY (ARRAY(
           WITH fields AS MATERIALIZED (
               SELECT pg_catalog.array_agg(DISTINCT p.route_path[2])
                          FILTER (WHERE p.route_path[1] OPERATOR(pg_catalog.=) 'payload') AS names,
                      pg_catalog.array_agg(DISTINCT p.route_path[1])
                          FILTER (WHERE p.route_path[1] OPERATOR(pg_catalog.<>) 'payload') AS envelope
                 FROM @extschema@.outbox_destinations p
                WHERE p.route_type IS NULL AND p.route_path IS NOT NULL),
           k AS MATERIALIZED (
               SELECT k.field, k.value
                 FROM fields f,
                      @extschema@._outbox_route_keys(_outbox_candidates.payload, f.names) k
                WHERE f.names IS NOT NULL)
           SELECT c.id
             FROM @extschema@.outbox_destinations c
            WHERE c.route_type OPERATOR(pg_catalog.=) _outbox_candidates.event_type
           UNION ALL
           SELECT c.id
             FROM (VALUES ('{type}'::text[], pg_catalog.to_jsonb(_outbox_candidates.event_type)),
                          ('{aggregate_type}', pg_catalog.to_jsonb(_outbox_candidates.aggregate_type)),
                          ('{aggregate_id}', pg_catalog.to_jsonb(_outbox_candidates.aggregate_id)),
                          (NULL, NULL)) e(path, value)
                  CROSS JOIN LATERAL (
                  SELECT c.id
                    FROM @extschema@.outbox_destinations c
                   WHERE c.route_path OPERATOR(pg_catalog.=) e.path
                     AND c.route_value OPERATOR(pg_catalog.=) coalesce(e.value, 'null')
                     AND c.route_type IS NULL AND c.route_path IS NOT NULL
                  OFFSET 0) c
            WHERE e.path[1] OPERATOR(pg_catalog.=) ANY (coalesce((SELECT f.envelope FROM fields f), '{}'))
           UNION ALL
           SELECT c.id
             FROM k CROSS JOIN LATERAL (
                  SELECT c.id
                    FROM @extschema@.outbox_destinations c
                   WHERE c.route_path OPERATOR(pg_catalog.=) ARRAY['payload', k.field]
                     AND c.route_value OPERATOR(pg_catalog.=) k.value
                     AND c.route_type IS NULL AND c.route_path IS NOT NULL
                  OFFSET 0) c
           UNION ALL
           SELECT c.id
             FROM @extschema@.outbox_destinations c
            WHERE c.route_type IS NULL AND c.route_path IS NULL
           UNION ALL
           SELECT c.id
             FROM @extschema@.outbox_destinations c
            WHERE c.route_type IS NULL AND c.route_path IS NOT NULL
              AND c.route_path[1] OPERATOR(pg_catalog.=) 'payload'
              AND EXISTS (SELECT FROM k WHERE k.field IS NULL)))
    OFFSET 0;
END;

COMMENT ON FUNCTION @extschema@._outbox_candidates(text, text, text, jsonb) IS
    'Internal: the destinations that may take this event, found by key among many; routing evaluates each one''s pattern and filter';

REVOKE ALL ON FUNCTION @extschema@._outbox_candidates(text, text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@._outbox_candidates(text, text, text, jsonb) TO outbox_admin;

ALTER TABLE @extschema@.outbox
    ADD COLUMN destination_id bigint,
    ADD COLUMN origin_id bigint;

COMMENT ON COLUMN @extschema@.outbox.destination_id IS
    'The destination (outbox_destinations.id) that this row of a fanned-out event goes to; NULL: routing chooses at each claim';
COMMENT ON COLUMN @extschema@.outbox.origin_id IS
    'For a row of a fanned-out event, the id of the row it replaced: its place in its aggregate''s order';

/*
 * The rows of a fanned-out event carry content that was checked when it
 * was written: the relay's claim checks its limits again, and dead-letters
 * a row over one, but an error here would fail the claim of every event.
 * Writers cannot set origin_id (they may insert only the event's own
 * columns).
 */
DROP TRIGGER outbox_check ON @extschema@.outbox;
CREATE TRIGGER outbox_check
    BEFORE INSERT OR UPDATE OF event_type, aggregate_type, aggregate_id, payload, headers
    ON @extschema@.outbox
    FOR EACH ROW WHEN (NEW.origin_id IS NULL)
    EXECUTE FUNCTION @extschema@._outbox_check_event();

/*
 * event_id stays unique among the rows writers make (destination_id NULL)
 * and per destination among those of a fanned-out event. The constraint's
 * index is replaced by one with NULLS NOT DISTINCT (PostgreSQL 15).
 */
ALTER TABLE @extschema@.outbox DROP CONSTRAINT outbox_event_id_key;
CREATE UNIQUE INDEX outbox_event_id_key ON @extschema@.outbox (event_id, destination_id)
    NULLS NOT DISTINCT;

/*
 * Which routing a database has: 'all' (fan-out) or 'first', 1.1's first
 * match by name. No row means 'all', as in a new installation; the update
 * from 1.1 writes 'first' where there are destinations, so that no
 * delivery changes until the DBA switches (outbox_set_routing). A table of
 * the extension's, dumped by pg_dump with its row.
 */
CREATE TABLE @extschema@.outbox_config (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    routing text NOT NULL CHECK (routing IN ('first', 'all'))
);

COMMENT ON TABLE @extschema@.outbox_config IS
    'This database''s routing: all (fan-out, the default without a row) or first (1.1''s first match by name); set with outbox_set_routing()';

INSERT INTO @extschema@.outbox_config (routing)
SELECT 'first' WHERE EXISTS (SELECT FROM @extschema@.outbox_destinations);

SELECT pg_catalog.pg_extension_config_dump('@extschema@.outbox_config', '');
REVOKE ALL ON @extschema@.outbox_config FROM PUBLIC;
GRANT SELECT ON @extschema@.outbox_config TO outbox_admin;

/*
 * Whether an event type matches a destination's event_types pattern ('*'
 * any run of characters, the rest literal): what LIKE with
 * _outbox_like_pattern(pattern) answers, without building that pattern
 * for each row and destination (src/route_pattern.c).
 */
CREATE FUNCTION @extschema@._outbox_type_matches(event_type text, pattern text)
RETURNS boolean
AS 'MODULE_PATHNAME', '_outbox_type_matches'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@._outbox_type_matches(text, text) IS
    'Internal: whether an event type matches an event_types pattern, * standing for any run of characters';

REVOKE ALL ON FUNCTION @extschema@._outbox_type_matches(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@._outbox_type_matches(text, text) TO outbox_admin;

/*
 * Whether a destination (its event_types and filter) takes an event: its
 * pattern matches the type and its filter, if any, is true for the event.
 * The document a filter reads is built only for a destination whose
 * pattern matched and that has a filter (a CASE: the planner orders the
 * terms of an AND by their estimated cost; OR evaluates left to right and
 * stops at the first true). silent: a filter that cannot be evaluated on
 * an event does not take it, rather than failing the claim of every event.
 * One expression, not STRICT, with no SET clause: the planner inlines it
 * into the routing functions below, as if written there.
 */
CREATE FUNCTION @extschema@._outbox_takes(event_types text, filter jsonpath, event_type text,
                                          aggregate_type text, aggregate_id text, payload jsonb)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE WHEN @extschema@._outbox_type_matches(event_type, event_types)
            THEN filter IS NULL
                 OR pg_catalog.jsonb_path_match(
                        pg_catalog.jsonb_build_object('type', event_type,
                                                      'aggregate_type', aggregate_type,
                                                      'aggregate_id', aggregate_id,
                                                      'payload', payload),
                        filter, '{}', true) IS TRUE
            ELSE false END;

COMMENT ON FUNCTION @extschema@._outbox_takes(text, jsonpath, text, text, text, jsonb) IS
    'Internal: whether a destination with these event_types and filter takes this event';

REVOKE ALL ON FUNCTION @extschema@._outbox_takes(text, jsonpath, text, text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@._outbox_takes(text, jsonpath, text, text, text, jsonb) TO outbox_admin;

/*
 * Routing: the destinations a row goes to. A row of a fanned-out event
 * goes to its destination_id's, whatever it is now. Any other row goes to
 * each destination whose pattern matches its type and whose filter takes
 * it, enabled or not, under 'all'; under 'first', to the first of them by
 * name. A disabled one keeps its events waiting (parked, as events no
 * destination takes), never sent on to the next match: a webhook that
 * answered 410 Gone, disabled by the relay, would otherwise send its
 * events to a catch-all NOTIFY channel that any consumer may read.
 *
 * It takes the event's fields, as a filter reads them (1.1's
 * _outbox_route(text) is dropped below, once the views are created again
 * on this one), and evaluates _outbox_takes on the candidates
 * (_outbox_candidates). A single SELECT, so the planner inlines it. Its
 * d.* is expanded when it is created: the columns added above are in it.
 */
CREATE FUNCTION @extschema@._outbox_routes(event_type text, aggregate_type text,
                                           aggregate_id text, payload jsonb,
                                           destination_id bigint)
RETURNS SETOF @extschema@.outbox_destinations
LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT d.*
      FROM @extschema@.outbox_destinations d
     WHERE d.id OPERATOR(pg_catalog.=) _outbox_routes.destination_id
    UNION ALL
    SELECT (m.d).*
      FROM (SELECT d, pg_catalog.row_number() OVER (ORDER BY d.name) AS n
              FROM @extschema@.outbox_destinations d
             WHERE _outbox_routes.destination_id IS NULL
               AND (SELECT pg_catalog.count(*) FROM (SELECT FROM @extschema@.outbox_destinations LIMIT 33) n)
                   OPERATOR(pg_catalog.<=) 32
               AND @extschema@._outbox_takes(d.event_types, d.filter, _outbox_routes.event_type,
                                             _outbox_routes.aggregate_type, _outbox_routes.aggregate_id,
                                             _outbox_routes.payload)) m
     WHERE m.n OPERATOR(pg_catalog.=) 1
        OR coalesce((SELECT c.routing FROM @extschema@.outbox_config c WHERE c.one), 'all')
           OPERATOR(pg_catalog.=) 'all'
    UNION ALL
    SELECT (m.d).*
      FROM (SELECT d, pg_catalog.row_number() OVER (ORDER BY d.name) AS n
              FROM @extschema@._outbox_candidates(_outbox_routes.event_type,
                                                  _outbox_routes.aggregate_type,
                                                  _outbox_routes.aggregate_id,
                                                  _outbox_routes.payload) d
             WHERE _outbox_routes.destination_id IS NULL
               AND (SELECT pg_catalog.count(*) FROM (SELECT FROM @extschema@.outbox_destinations LIMIT 33) n)
                   OPERATOR(pg_catalog.>) 32
               AND @extschema@._outbox_takes(d.event_types, d.filter, _outbox_routes.event_type,
                                             _outbox_routes.aggregate_type, _outbox_routes.aggregate_id,
                                             _outbox_routes.payload)) m
     WHERE m.n OPERATOR(pg_catalog.=) 1
        OR coalesce((SELECT c.routing FROM @extschema@.outbox_config c WHERE c.one), 'all')
           OPERATOR(pg_catalog.=) 'all';
END;

COMMENT ON FUNCTION @extschema@._outbox_routes(text, text, text, jsonb, bigint) IS
    'Internal: the destinations that this event (or this row of a fanned-out event, by its destination_id) goes to; a disabled one keeps it waiting';

REVOKE ALL ON FUNCTION @extschema@._outbox_routes(text, text, text, jsonb, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@._outbox_routes(text, text, text, jsonb, bigint) TO outbox_admin;

/*
 * What a relay found holding back the removal of old row versions for
 * longer than outbox.horizon_warning (src/horizon.c): outbox_status shows
 * it on every row, as horizon_pid (NULL for a prepared transaction) and
 * horizon_since, so that whoever looks at a backlog sees why claims slow.
 */
CREATE FUNCTION @extschema@._outbox_horizon(OUT pid integer, OUT since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', '_outbox_horizon'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@._outbox_horizon() IS
    'Internal: the transaction a relay of this database found holding back the removal of old row versions (pid NULL: a prepared one), and its start';

REVOKE ALL ON FUNCTION @extschema@._outbox_horizon() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@._outbox_horizon() TO outbox_admin;

CREATE OR REPLACE VIEW @extschema@.outbox_status AS
SELECT o.event_type,
       count(*) FILTER (WHERE o.dead_at IS NULL) AS pending,
       count(*) FILTER (WHERE o.dead_at IS NULL AND o.attempts > 0) AS retrying,
       count(*) FILTER (WHERE o.dead_at IS NOT NULL) AS dead,
       count(*) FILTER (WHERE o.dead_at IS NULL AND NOT EXISTS (
           SELECT FROM @extschema@._outbox_routes(o.event_type, o.aggregate_type, o.aggregate_id,
                                                  o.payload, o.destination_id) r
            WHERE r.enabled)) AS unroutable,
       min(o.created_at) FILTER (WHERE o.dead_at IS NULL) AS oldest_pending,
       count(*) FILTER (WHERE o.dead_at IS NULL AND (o.id, o.attempts) IN (
           SELECT f.id, f.attempts
             FROM @extschema@.outbox_in_flight j,
                  unnest(j.ids, j.attempts) AS f(id, attempts))) AS in_flight,
       -- a relay that keeps up claims a due event within outbox.poll_interval:
       -- one due long ago means delivery is stalled (no relay, a paused one,
       -- one whose steps fail), whatever shared memory says
       min(o.next_attempt_at) FILTER (WHERE o.dead_at IS NULL AND o.next_attempt_at <= now()
           AND (o.id, o.attempts) NOT IN (
               SELECT f.id, f.attempts
                 FROM @extschema@.outbox_in_flight j,
                      unnest(j.ids, j.attempts) AS f(id, attempts))) AS oldest_due,
       h.pid AS horizon_pid, h.since AS horizon_since
  FROM @extschema@.outbox o
  LEFT JOIN @extschema@._outbox_horizon() h ON true
 WHERE o.delivered_at IS NULL
 GROUP BY o.event_type, h.pid, h.since;

/*
 * Ordered delivery: outbox_key_idx is keyed by 64 bits of a SHA-256 of the
 * aggregate key (src/aggregate_key.c), no longer by hashtextextended,
 * whose values a writer could make collide at will: with many aggregate
 * ids of one hash value pending, each probe for the event before another
 * read all of them, and claims stalled every ordered key. The probe still
 * compares the key itself. DROP INDEX takes an ACCESS EXCLUSIVE lock on
 * outbox, held until the update commits, the build included: see
 * Upgrading in the README for a large table.
 */
CREATE FUNCTION @extschema@._outbox_aggregate_key(text, text)
RETURNS bigint
AS 'MODULE_PATHNAME', '_outbox_aggregate_key'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@._outbox_aggregate_key(text, text) IS
    'Internal: the key of an event''s aggregate (aggregate_type, aggregate_id) in outbox_key_idx, 64 bits of a SHA-256';

-- an index expression runs for whoever inserts: writers included
GRANT EXECUTE ON FUNCTION @extschema@._outbox_aggregate_key(text, text) TO PUBLIC;

DROP INDEX @extschema@.outbox_key_idx;
-- keyed by the event's place in its aggregate's order: a row of a
-- fanned-out event takes the place of the row it replaced (origin_id)
CREATE INDEX outbox_key_idx
    ON @extschema@.outbox (@extschema@._outbox_aggregate_key(aggregate_type, aggregate_id),
                           coalesce(origin_id, id))
    WHERE aggregate_id IS NOT NULL AND delivered_at IS NULL
      AND cancelled_at IS NULL AND skipped_at IS NULL;

/*
 * The claim's routing (src/router.c): the first destination by name that
 * takes a row (its destination_id's for a row of a fanned-out event), and,
 * under 'all' routing, whether another does too (the row is then to be
 * fanned out). The destinations are held in memory, read again when a
 * statement sees them changed, and each row is answered from there,
 * finding candidates by type and key as _outbox_candidates does, and
 * testing each with _outbox_takes' rule: in SQL, each row cost about
 * 1.9 us with one destination, 10 us with 1,000.
 */
CREATE FUNCTION @extschema@._outbox_route_first(event_type text, aggregate_type text,
                                                aggregate_id text, payload jsonb,
                                                destination_id bigint,
                                                OUT route @extschema@.outbox_destinations,
                                                OUT several boolean)
RETURNS record
AS 'MODULE_PATHNAME', '_outbox_route_first'
LANGUAGE C STABLE PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@._outbox_route_first(text, text, text, jsonb, bigint) IS
    'Internal: the first by name of the destinations this row goes to, and whether there are several; NULL if none';

REVOKE ALL ON FUNCTION @extschema@._outbox_route_first(text, text, text, jsonb, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@._outbox_route_first(text, text, text, jsonb, bigint) TO outbox_admin;

/*
 * What the claim needs of a row's routes (_outbox_pending): a row of
 * _outbox_route_first, none when the row has no route. A single SELECT,
 * so the planner inlines it into the claim; OFFSET 0 keeps the call one
 * per row, not one per column read.
 */
CREATE FUNCTION @extschema@._outbox_route(event_type text, aggregate_type text,
                                          aggregate_id text, payload jsonb,
                                          destination_id bigint)
RETURNS TABLE (route @extschema@.outbox_destinations, several boolean)
LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT (f.r).route, (f.r).several
      FROM (SELECT @extschema@._outbox_route_first(_outbox_route.event_type,
                                                   _outbox_route.aggregate_type,
                                                   _outbox_route.aggregate_id,
                                                   _outbox_route.payload,
                                                   _outbox_route.destination_id) AS r
            OFFSET 0) f
     WHERE ((f.r).route).id IS NOT NULL;
END;

COMMENT ON FUNCTION @extschema@._outbox_route(text, text, text, jsonb, bigint) IS
    'Internal: the first by name of the destinations this row goes to, and whether there are several';

REVOKE ALL ON FUNCTION @extschema@._outbox_route(text, text, text, jsonb, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@._outbox_route(text, text, text, jsonb, bigint) TO outbox_admin;

/*
 * What the relay reads, as in 1.1, with its routes (_outbox_route): dest,
 * the first by name of the destinations the row goes to, while it is
 * enabled, and fan_out, true when there are several (enabled or not): the
 * claim then replaces the row by one per destination (src/fan_out.c) and
 * sends nothing from it (the probe below runs for it all the same, and is
 * not read). The probe of ordered delivery looks for the row before this
 * one, by place in the aggregate's order, that goes to the same ordered
 * destination: one backward probe of outbox_key_idx. A row goes to it if
 * it is its row of a fanned-out event, or if it takes the row and, under
 * 'first' routing, no destination before it by name does (1.1's walk,
 * which tests the keys of routing by key before any pattern or filter:
 * with 1,000 filtered destinations, a filter each would cost 2 ms per
 * event held). Tested on d directly, not through _outbox_routes, whose
 * parts would all be started at every claim. A subquery in the select list, not a
 * lateral join, so that the claim's FOR UPDATE OF p locks the event only,
 * never that one; the routes are a function, for the same reason.
 */
CREATE OR REPLACE VIEW @extschema@._outbox_pending WITH (security_invoker = true) AS
SELECT o.id, o.ctid AS tid, o.event_id, o.attempts, o.event_type,
       o.aggregate_type, o.aggregate_id, o.created_at, o.payload, o.headers,
       o.next_attempt_at,
       CASE WHEN (r.d).enabled THEN (r.d).name END AS dest_name,
       CASE WHEN (r.d).enabled THEN r.d END AS dest,
       o.cut_off_attempts,
       -- a subquery that does not run: a CASE, so that its nodes are not
       -- started again for each row (0.5 us per event when unordered)
       CASE WHEN (r.d).enabled AND (r.d).ordered THEN
       (SELECT e.id
          FROM @extschema@.outbox e
         WHERE (r.d).enabled AND (r.d).ordered
           AND @extschema@._outbox_aggregate_key(e.aggregate_type, e.aggregate_id)
               OPERATOR(pg_catalog.=)
               @extschema@._outbox_aggregate_key(o.aggregate_type, o.aggregate_id)
           AND e.aggregate_id OPERATOR(pg_catalog.=) o.aggregate_id
           AND coalesce(e.aggregate_type, '') OPERATOR(pg_catalog.=) coalesce(o.aggregate_type, '')
           AND coalesce(e.origin_id, e.id) OPERATOR(pg_catalog.<) coalesce(o.origin_id, o.id)
           AND e.delivered_at IS NULL AND e.cancelled_at IS NULL AND e.skipped_at IS NULL
           AND CASE WHEN e.destination_id IS NOT NULL
                    THEN e.destination_id OPERATOR(pg_catalog.=) (r.d).id
                    ELSE @extschema@._outbox_takes((r.d).event_types, (r.d).filter, e.event_type,
                                                   e.aggregate_type, e.aggregate_id, e.payload)
                         AND (coalesce((SELECT c.routing FROM @extschema@.outbox_config c WHERE c.one), 'all')
                              OPERATOR(pg_catalog.=) 'all'
                              OR NOT EXISTS (
                                  SELECT FROM @extschema@.outbox_destinations f
                                   WHERE f.name OPERATOR(pg_catalog.<) (r.d).name
                                     -- a key is necessary (_outbox_candidates): cheap
                                     -- tests first, then the pattern and filter
                                     AND (f.route_type IS NULL
                                          OR f.route_type OPERATOR(pg_catalog.=) e.event_type)
                                     AND (f.route_path IS NULL
                                          OR f.route_path[1] OPERATOR(pg_catalog.<>)
                                             ALL ('{type,aggregate_type,aggregate_id}')
                                          OR f.route_value OPERATOR(pg_catalog.=) coalesce(pg_catalog.to_jsonb(
                                                 CASE f.route_path[1] WHEN 'type' THEN e.event_type
                                                      WHEN 'aggregate_type' THEN e.aggregate_type
                                                      ELSE e.aggregate_id END), 'null'))
                                     AND @extschema@._outbox_takes(f.event_types, f.filter, e.event_type,
                                                                   e.aggregate_type, e.aggregate_id,
                                                                   e.payload))) END
         ORDER BY coalesce(e.origin_id, e.id) DESC
         LIMIT 1) END AS blocked_by,
       coalesce(r.several, false) AS fan_out
  FROM @extschema@.outbox o
  LEFT JOIN LATERAL @extschema@._outbox_route(o.event_type, o.aggregate_type, o.aggregate_id,
                                              o.payload, o.destination_id) r(d, several) ON true
 WHERE o.delivered_at IS NULL AND o.dead_at IS NULL;

/*
 * 1.1's view, routing each row with its fields (a filter reads them) and
 * its destination_id; the first of a key is the first by place in its
 * aggregate's order.
 */
CREATE OR REPLACE VIEW @extschema@.outbox_blocked_keys AS
SELECT w.destination, h.aggregate_type, h.aggregate_id,
       h.event_id AS blocking_event_id, h.event_type AS blocking_event_type,
       CASE WHEN h.dead_at IS NOT NULL THEN 'dead'
            WHEN (h.id, h.attempts) IN (
                SELECT f.id, f.attempts
                  FROM @extschema@.outbox_in_flight j,
                       unnest(j.ids, j.attempts) AS f(id, attempts)) THEN 'in flight'
            WHEN h.next_attempt_at > now() THEN 'backing off'
            ELSE 'due' END AS state,
       h.attempts, now() - h.created_at AS age, w.waiting
  FROM (SELECT r.name AS destination,
               (pg_catalog.array_agg(o.id ORDER BY coalesce(o.origin_id, o.id)))[1] AS head,
               count(*) - 1 AS waiting
          FROM @extschema@.outbox o
          CROSS JOIN LATERAL @extschema@._outbox_routes(o.event_type, o.aggregate_type,
                                                        o.aggregate_id, o.payload,
                                                        o.destination_id) r
         WHERE o.aggregate_id IS NOT NULL AND o.delivered_at IS NULL
           AND o.cancelled_at IS NULL AND o.skipped_at IS NULL AND r.ordered
         GROUP BY r.name, o.aggregate_id, coalesce(o.aggregate_type, '')
        HAVING count(*) > 1) w
  JOIN @extschema@.outbox h ON h.id = w.head;

-- nothing calls 1.1's routing function any more
DROP FUNCTION @extschema@._outbox_route(text);

/*
 * The routes of every undelivered row, for the statement that fans an
 * event out (src/fan_out.c): the relay's statements name relations, never
 * functions (see _outbox_pending in outbox--1.0--1.1.sql). Under 'all'
 * routing, as fan-out happens only then.
 */
CREATE VIEW @extschema@._outbox_routes_of WITH (security_invoker = true) AS
SELECT o.id, r.id AS destination_id, r.name AS destination
  FROM @extschema@.outbox o
 CROSS JOIN LATERAL @extschema@._outbox_routes(o.event_type, o.aggregate_type, o.aggregate_id,
                                               o.payload, o.destination_id) r
 WHERE o.delivered_at IS NULL;

COMMENT ON VIEW @extschema@._outbox_routes_of IS
    'Internal: each undelivered row with each destination it goes to, as the relay fans events out';

REVOKE ALL ON @extschema@._outbox_routes_of FROM PUBLIC;
GRANT SELECT ON @extschema@._outbox_routes_of TO outbox_admin;

COMMENT ON COLUMN @extschema@.outbox.destination IS
    'Destination of the latest attempt; NULL for a delivery whose destination was replaced (deleted, and another created under its name) while it was in flight';

/*
 * outbox_destination_stats() gets two last columns: deduplicated,
 * deliveries the receiver already had (a JetStream PubAck flagged
 * duplicate), counted among delivered too; and dead_lettered, the failed
 * attempts that dead-lettered their event, among failed (a counter for
 * alerts: the number of dead letters in the table falls when they are
 * redelivered or purged, and moves when a destination is deleted). Its
 * OUT columns change, so it is dropped and created
 * again, with 1.1's comment, revoke and grants; 1.1's C symbol stays in the
 * library for a database not updated yet.
 */
DROP FUNCTION @extschema@.outbox_destination_stats(boolean);

CREATE FUNCTION @extschema@.outbox_destination_stats(
    all_databases boolean DEFAULT false,
    OUT database name,
    OUT destination text,
    OUT delivered bigint,
    OUT failed bigint,
    OUT last_success_at timestamptz,
    OUT last_failure_at timestamptz,
    OUT last_error text,
    OUT latency_p50_ms double precision,
    OUT latency_p99_ms double precision,
    OUT stats_since timestamptz,
    OUT deduplicated bigint,
    OUT dead_lettered bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'outbox_destination_stats_1_2'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.outbox_destination_stats(boolean) IS
    'One row per destination of this database (all databases: needs pg_read_all_stats): outcomes, deliveries the receiver already had, dead letters, last success and failure, latency from created_at to delivery';

REVOKE ALL ON FUNCTION @extschema@.outbox_destination_stats(boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.outbox_destination_stats(boolean)
    TO outbox_admin, outbox_monitor;

/*
 * outbox_relay_stats() gets three last columns on the relay's memory:
 * held_bytes, what the events it holds in flight cost it at its last claim;
 * memory_budget, the most it holds (OUTBOX_RELAY_BYTES, src/event.h); and
 * memory_full_since, since when its claims leave events out because they
 * would not fit (NULL when the last claim did not), for an alert. Dropped and created again as
 * outbox_destination_stats() above; 1.1's C symbol stays.
 */
DROP FUNCTION @extschema@.outbox_relay_stats(boolean);

CREATE FUNCTION @extschema@.outbox_relay_stats(
    all_databases boolean DEFAULT false,
    OUT database name,
    OUT relay integer,
    OUT pid integer,
    OUT state text,
    OUT reason text,
    OUT next_start timestamptz,
    OUT started_at timestamptz,
    OUT restarts bigint,
    OUT passes bigint,
    OUT last_pass_at timestamptz,
    OUT delivered bigint,
    OUT failed bigint,
    OUT last_error text,
    OUT last_error_at timestamptz,
    OUT failing_since timestamptz,
    OUT stats_since timestamptz,
    OUT held_bytes bigint,
    OUT memory_budget bigint,
    OUT memory_full_since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'outbox_relay_stats_1_2'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.outbox_relay_stats(boolean) IS
    'One row per relay of this database (all databases: needs pg_read_all_stats): state, passes, outcomes, last error, and the bytes of events it holds against its memory budget, from shared memory';

REVOKE ALL ON FUNCTION @extschema@.outbox_relay_stats(boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.outbox_relay_stats(boolean)
    TO outbox_admin, outbox_monitor;

/*
 * What waits, destination by destination, for a monitor: outbox_status
 * reads events and is outbox_admin's; outbox_backlog() gives outbox_monitor
 * counts and times only, never an event's content, an error or a
 * destination's settings. A pending event counts at the destination that
 * routing gives its type now (a disabled one too: its events wait for it),
 * from its created_at or, redelivered, from then; a dead letter at the
 * destination of its last attempt, until an operator decides on it
 * (cancelled, or skipped so that its key goes on, it is not counted). The row whose destination is
 * NULL holds the rest: pending events that no destination takes, and dead
 * letters of destinations deleted since. It reads every pending event
 * (their number is what it says) and, through outbox_dead_idx, every dead
 * letter: see docs/monitoring.md for what a scrape costs. Events are routed
 * by type, once per type, until a destination has a filter; then each
 * pending event is routed. An event that several destinations take and
 * that no claim has fanned out yet counts at each.
 */
CREATE INDEX outbox_dead_idx ON @extschema@.outbox (destination)
    WHERE dead_at IS NOT NULL AND delivered_at IS NULL AND cancelled_at IS NULL
      AND skipped_at IS NULL;

CREATE FUNCTION @extschema@.outbox_backlog(
    OUT destination text,
    OUT kind text,
    OUT enabled boolean,
    OUT disabled_at timestamptz,
    OUT pending bigint,
    OUT oldest_pending_at timestamptz,
    OUT dead bigint)
RETURNS SETOF record
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH by_type AS (
        SELECT o.event_type, o.destination_id, count(*) AS n,
               min(greatest(o.created_at, o.redelivered_at)) AS oldest
          FROM @extschema@.outbox o
         WHERE o.delivered_at IS NULL AND o.dead_at IS NULL
         GROUP BY o.event_type, o.destination_id),
    -- by type while no destination has a filter; event by event otherwise
    -- (a row of a fanned-out event goes to its destination_id's either way)
    filtered AS (
        SELECT EXISTS (SELECT FROM @extschema@.outbox_destinations d
                        WHERE d.filter IS NOT NULL) AS any),
    routed AS (
        SELECT u.name, sum(u.n)::bigint AS n, min(u.oldest) AS oldest
          FROM (SELECT r.name, t.n, t.oldest
                  FROM by_type t
                  LEFT JOIN LATERAL @extschema@._outbox_routes(t.event_type, NULL, NULL, NULL,
                                                               t.destination_id) r ON true
                 WHERE NOT (SELECT f.any FROM filtered f) OR t.destination_id IS NOT NULL
                UNION ALL
                SELECT r.name, 1, greatest(o.created_at, o.redelivered_at)
                  FROM @extschema@.outbox o
                  LEFT JOIN LATERAL @extschema@._outbox_routes(o.event_type, o.aggregate_type,
                                                               o.aggregate_id, o.payload, NULL) r ON true
                 WHERE (SELECT f.any FROM filtered f) AND o.destination_id IS NULL
                   AND o.delivered_at IS NULL AND o.dead_at IS NULL) u
         GROUP BY u.name),
    dead AS (
        SELECT o.destination AS name, count(*) AS n
          FROM @extschema@.outbox o
         WHERE o.dead_at IS NOT NULL AND o.delivered_at IS NULL AND o.cancelled_at IS NULL
           AND o.skipped_at IS NULL
         GROUP BY o.destination)
    SELECT d.name, d.kind, d.enabled, d.disabled_at,
           coalesce(p.n, 0), p.oldest, coalesce(x.n, 0)
      FROM @extschema@.outbox_destinations d
      LEFT JOIN routed p ON p.name OPERATOR(pg_catalog.=) d.name
      LEFT JOIN dead x ON x.name OPERATOR(pg_catalog.=) d.name
    UNION ALL
    SELECT NULL, NULL, NULL, NULL,
           (SELECT coalesce(sum(p.n), 0)::bigint FROM routed p WHERE p.name IS NULL),
           (SELECT min(p.oldest) FROM routed p WHERE p.name IS NULL),
           (SELECT coalesce(sum(x.n), 0)::bigint FROM dead x
             WHERE NOT EXISTS (SELECT FROM @extschema@.outbox_destinations d
                                WHERE d.name OPERATOR(pg_catalog.=) x.name))
    ORDER BY 1 NULLS LAST;
END;

COMMENT ON FUNCTION @extschema@.outbox_backlog() IS
    'For monitoring: per destination, its kind and state, its pending events and when the oldest became pending (created or redelivered), its dead letters not cancelled or skipped; the row with a NULL destination holds events no destination takes';

REVOKE ALL ON FUNCTION @extschema@.outbox_backlog() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.outbox_backlog() TO outbox_admin, outbox_monitor;

/*
 * Which kinds sign is the kinds' to say (src/destination.h, signs), not a
 * list in SQL: the trigger on outbox_destination_secrets asks the library.
 * Anyone may call it: it only raises 23514 for a kind that does not sign.
 */
CREATE FUNCTION @extschema@._outbox_check_signing_kind(kind text)
RETURNS void
AS 'MODULE_PATHNAME', '_outbox_check_signing_kind'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@._outbox_check_signing_kind(text) IS
    'Internal: raises 23514, naming the kinds that sign, unless destinations of this kind sign what they send';

CREATE OR REPLACE FUNCTION @extschema@._outbox_check_secret()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    dest_kind text;
BEGIN
    -- before PostgreSQL's own NOT NULL error, whose detail prints the row
    IF NEW.destination IS NULL OR NEW.secret IS NULL OR NEW.added_at IS NULL THEN
        RAISE EXCEPTION 'destination, secret and added_at of outbox_destination_secrets must not be NULL'
            USING ERRCODE = 'not_null_violation';
    END IF;
    SELECT d.kind INTO dest_kind
      FROM @extschema@.outbox_destinations d WHERE d.name = NEW.destination;
    -- the foreign key reports a destination that does not exist
    IF FOUND THEN
        PERFORM @extschema@._outbox_check_signing_kind(dest_kind);
    END IF;
    -- raises, with the reason and without the secret, if it breaks a rule
    PERFORM @extschema@.outbox_public_key(NEW.secret);
    -- among the rows in use (the secret column may hold one of them too:
    -- it signs twice, harmless); a row past its retire_at may be added again
    IF (NEW.retire_at IS NULL OR NEW.retire_at > now()) AND EXISTS (
           SELECT FROM @extschema@.outbox_destination_secrets s
            WHERE s.destination = NEW.destination AND s.secret = NEW.secret
              AND (s.retire_at IS NULL OR s.retire_at > now())
              AND (TG_OP = 'INSERT' OR s.id <> OLD.id)) THEN
        RAISE EXCEPTION 'destination "%" already has this secret', NEW.destination
            USING ERRCODE = 'unique_violation';
    END IF;
    -- each signs every message: a NOTIFY payload (8000 bytes) must still
    -- hold the id form with all the signatures (src/kinds/notify/notify.c)
    IF (NEW.retire_at IS NULL OR NEW.retire_at > now()) AND (
           SELECT count(*) FROM @extschema@.outbox_destination_secrets s
            WHERE s.destination = NEW.destination
              AND (s.retire_at IS NULL OR s.retire_at > now())
              AND (TG_OP = 'INSERT' OR s.id <> OLD.id)) >= 10 THEN
        RAISE EXCEPTION 'destination "%" has 10 secrets in use, the most it may have', NEW.destination
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'Retire one with outbox_retire_secret() first.';
    END IF;
    RETURN NEW;
END
$$;

/*
 * A format is its own axis (src/format.c): CloudEvents go to JetStream
 * streams too, and cloudevents_source is the CloudEvents formats' option
 * for any kind that has one.
 */
COMMENT ON COLUMN @extschema@.outbox_destinations.format IS
    'What is sent for an event: envelope (the outbox envelope, JSON); cloudevents (CloudEvents 1.0, structured mode) for webhooks and JetStream; cloudevents-binary (binary mode, ce-* headers) for webhooks';
COMMENT ON COLUMN @extschema@.outbox_destinations.cloudevents_source IS
    'A CloudEvents format''s source attribute, a URI-reference; NULL: /outbox/<database>';

/*
 * The group roles are created NOLOGIN when they do not exist; one that
 * exists already (roles are the cluster's, created by hand or by another
 * database's installation) is used as it is, and gets the privileges
 * granted here. A WARNING names, at every installation and update, one
 * that hands them, or more, to others: it can log in (whoever logs in as
 * it has them), it has SUPERUSER or BYPASSRLS (whoever it is granted to
 * may SET ROLE to it), or a role other than a superuser holds ADMIN
 * OPTION on it (and may grant it to anyone: from PostgreSQL 16 the
 * CREATEROLE role that made it does).
 */
DO $roles$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT a.rolname,
                    pg_catalog.concat_ws(', ',
                        CASE WHEN a.rolcanlogin THEN 'it can log in'
                             || CASE WHEN a.rolpassword IS NOT NULL THEN ', with a password' ELSE '' END END,
                        CASE WHEN a.rolsuper THEN 'it is a superuser' END,
                        CASE WHEN a.rolbypassrls THEN 'it bypasses row level security' END,
                        (SELECT 'role ' || pg_catalog.string_agg(pg_catalog.quote_ident(h.rolname), ', ' ORDER BY h.rolname)
                                || ' may grant it'
                           FROM pg_catalog.pg_auth_members m
                           JOIN pg_catalog.pg_authid h ON h.oid OPERATOR(pg_catalog.=) m.member
                          WHERE m.roleid OPERATOR(pg_catalog.=) a.oid AND m.admin_option
                            AND NOT h.rolsuper)) AS why
               FROM pg_catalog.pg_authid a
              WHERE a.rolname OPERATOR(pg_catalog.=) ANY
                    ('{outbox_writer,outbox_consumer,outbox_admin,outbox_monitor}'::name[])
              ORDER BY a.rolname
    LOOP
        CONTINUE WHEN r.why OPERATOR(pg_catalog.=) '';
        RAISE WARNING 'group role % hands its privileges on: %', r.rolname, r.why
            USING DETAIL = 'The outbox extension grants its group roles their privileges; a role that exists already is used as it is.',
                  HINT = pg_catalog.format('Unless that is meant: ALTER ROLE %I NOLOGIN PASSWORD NULL NOSUPERUSER NOBYPASSRLS, REVOKE the ADMIN OPTION, and GRANT %I to the roles that need it.',
                                           r.rolname, r.rolname);
    END LOOP;
END
$roles$;

/*
 * Fan-out, the SQL surface: redelivering, cancelling and skipping act on
 * an event's rows, one per destination once it is fanned out, so each
 * takes the destination to act at (NULL: every one). outbox_redeliver(uuid)
 * acts on every row of the event, as it is (a second argument would make
 * 1.1's calls of outbox_redeliver(since, until) ambiguous); the range form
 * outbox_redeliver(since, until, event_type, destination) takes one. A row is at
 * destination d when it is a fanned-out row of d; or, if delivered or
 * dead, when its last attempt went to d; or, pending, when routing sends
 * it to d now. A pending event that several destinations take and that no
 * claim has fanned out yet has one row for all of them: it cannot be acted
 * on for one of them (55000) until the relay has claimed it.
 */
CREATE FUNCTION @extschema@._outbox_at(o @extschema@.outbox, destination text)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
    here boolean;
BEGIN
    IF destination IS NULL THEN
        RETURN true;
    ELSIF o.destination_id IS NOT NULL THEN
        RETURN EXISTS (SELECT FROM @extschema@.outbox_destinations d
                        WHERE d.id = o.destination_id AND d.name = _outbox_at.destination);
    ELSIF o.delivered_at IS NOT NULL OR o.dead_at IS NOT NULL THEN
        RETURN o.destination IS NOT DISTINCT FROM _outbox_at.destination;
    END IF;
    SELECT count(*), bool_or(r.name = _outbox_at.destination) INTO n, here
      FROM @extschema@._outbox_routes(o.event_type, o.aggregate_type, o.aggregate_id,
                                      o.payload, NULL) r;
    IF n > 1 THEN
        RAISE EXCEPTION 'event % has not been fanned out to its destinations yet', o.event_id
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Give no destination to act at every one, or try again once the relay has claimed the event.';
    END IF;
    RETURN coalesce(here, false);
END
$$;

COMMENT ON FUNCTION @extschema@._outbox_at(@extschema@.outbox, text) IS
    'Internal: whether this row of an event is its delivery at that destination (NULL: any)';

REVOKE ALL ON FUNCTION @extschema@._outbox_at(@extschema@.outbox, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@._outbox_at(@extschema@.outbox, text) TO outbox_admin;

DROP FUNCTION @extschema@.outbox_redeliver_dead();
CREATE FUNCTION @extschema@.outbox_redeliver_dead(destination text DEFAULT NULL)
RETURNS bigint
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    WITH r AS (
        UPDATE @extschema@.outbox o
           SET dead_at = NULL, next_attempt_at = now(), redelivered_at = now()
         WHERE o.dead_at IS NOT NULL AND o.cancelled_at IS NULL AND o.skipped_at IS NULL
           AND @extschema@._outbox_at(o, outbox_redeliver_dead.destination)
        RETURNING 1)
    SELECT count(*) FROM r
$$;

COMMENT ON FUNCTION @extschema@.outbox_redeliver_dead(text) IS
    'Makes every dead-lettered event due again, at one destination or (NULL) every one, except cancelled and skipped ones; returns how many';

DROP FUNCTION @extschema@.outbox_cancel(uuid, text);
CREATE FUNCTION @extschema@.outbox_cancel(event_id uuid, reason text, destination text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cancelled bigint[];
BEGIN
    IF event_id IS NULL OR reason IS NULL THEN
        RAISE EXCEPTION 'event_id and reason must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF reason = '' THEN
        RAISE EXCEPTION 'reason must not be empty'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF octet_length(reason) > 1024 THEN
        RAISE EXCEPTION 'reason must be at most 1024 bytes'
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    WITH c AS (
        UPDATE @extschema@.outbox o
           SET dead_at = now(), cancelled_at = now(),
               last_error = 'cancelled by ' || current_user || ': ' || reason
         WHERE o.event_id = outbox_cancel.event_id
           AND o.delivered_at IS NULL AND o.dead_at IS NULL
           AND @extschema@._outbox_at(o, outbox_cancel.destination)
        RETURNING o.id)
    SELECT array_agg(c.id) INTO cancelled FROM c;
    IF cancelled IS NULL THEN
        RETURN false;
    END IF;
    UPDATE @extschema@.outbox o
       SET held_by = NULL, next_attempt_at = now()
     WHERE o.held_by = ANY (cancelled) AND o.delivered_at IS NULL AND o.next_attempt_at > now();
    RETURN true;
END
$$;

COMMENT ON FUNCTION @extschema@.outbox_cancel(uuid, text, text) IS
    'Dead-letters a pending event by hand, at one destination or (NULL) every one, with the reason in last_error; returns false if it was not pending there';

DROP FUNCTION @extschema@.outbox_skip_dead(uuid);
CREATE FUNCTION @extschema@.outbox_skip_dead(event_id uuid, destination text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    skipped bigint[];
BEGIN
    IF event_id IS NULL THEN
        RAISE EXCEPTION 'event_id must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    WITH s AS (
        UPDATE @extschema@.outbox o
           SET skipped_at = now(), skipped_by = current_user
         WHERE o.event_id = outbox_skip_dead.event_id
           AND o.dead_at IS NOT NULL AND o.delivered_at IS NULL
           AND o.cancelled_at IS NULL AND o.skipped_at IS NULL
           AND @extschema@._outbox_at(o, outbox_skip_dead.destination)
        RETURNING o.id)
    SELECT array_agg(s.id) INTO skipped FROM s;
    IF skipped IS NULL THEN
        RETURN false;
    END IF;
    UPDATE @extschema@.outbox o
       SET held_by = NULL, next_attempt_at = now()
     WHERE o.held_by = ANY (skipped) AND o.delivered_at IS NULL AND o.next_attempt_at > now();
    RETURN true;
END
$$;

COMMENT ON FUNCTION @extschema@.outbox_skip_dead(uuid, text) IS
    'Lets the later events of a dead-lettered event''s aggregate go on without it (ordered destinations), at one destination or (NULL) every one, recording who and when; returns false if it is not dead there, or cancelled or skipped already';

REVOKE ALL ON FUNCTION
    @extschema@.outbox_redeliver_dead(text),
    @extschema@.outbox_cancel(uuid, text, text),
    @extschema@.outbox_skip_dead(uuid, text)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    @extschema@.outbox_redeliver_dead(text),
    @extschema@.outbox_cancel(uuid, text, text),
    @extschema@.outbox_skip_dead(uuid, text)
TO outbox_admin;

/*
 * The routing of this database, set by its DBA: 'all' (fan-out) or
 * 'first'. Switching to 'all' says in a NOTICE how many pending events
 * more than one destination takes now: each of them goes to all of them
 * from its next claim on. Rows already fanned out keep their destinations
 * under 'first'. Routing changes as destinations do: parked events are
 * due again (the trigger on outbox_destinations does the same).
 */
CREATE FUNCTION @extschema@.outbox_set_routing(routing text)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    IF routing IS NULL OR routing NOT IN ('first', 'all') THEN
        RAISE EXCEPTION 'routing must be ''all'' or ''first''' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO @extschema@.outbox_config AS c (routing) VALUES (outbox_set_routing.routing)
        ON CONFLICT (one) DO UPDATE SET routing = excluded.routing;
    IF routing = 'all' THEN
        SELECT count(*) INTO n
          FROM @extschema@.outbox o
         WHERE o.delivered_at IS NULL AND o.dead_at IS NULL AND o.destination_id IS NULL
           AND (SELECT count(*) FROM @extschema@._outbox_routes(o.event_type, o.aggregate_type,
                                                                o.aggregate_id, o.payload, NULL)) > 1;
        RAISE NOTICE '% pending event(s) go to more than one destination from now on', n;
    END IF;
    UPDATE @extschema@.outbox
       SET next_attempt_at = now()
     WHERE delivered_at IS NULL AND dead_at IS NULL
       AND next_attempt_at > now()
       AND last_error = @extschema@._outbox_unroutable_error();
    RETURN routing;
END
$$;

COMMENT ON FUNCTION @extschema@.outbox_set_routing(text) IS
    'Sets this database''s routing: all (every destination that takes an event gets it) or first (the first by name, as in 1.1); returns it';

REVOKE ALL ON FUNCTION @extschema@.outbox_set_routing(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.outbox_set_routing(text) TO outbox_admin;
GRANT INSERT, UPDATE ON @extschema@.outbox_config TO outbox_admin;

/*
 * Purge waits for the slowest destination: a row of a fanned-out event
 * (origin_id set) goes only once every row of its event was delivered
 * before the cut-off. A delivery pending, dead-lettered or cancelled at
 * one destination keeps the event's other rows, so that its deliveries
 * stay together (outbox_deliveries) and a redelivery of the event finds
 * every one. The other rows take nothing more: their origin_id is NULL.
 * The sibling lookup is a scalar subquery, one probe of
 * outbox_event_id_key per row, never a hashed scan of the table; the
 * relay's batches (src/purge.c) apply the same rule.
 */
CREATE OR REPLACE FUNCTION @extschema@.outbox_purge(retention interval DEFAULT '7 days')
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cut timestamptz;
    dest text;
    k bigint;
    n bigint := 0;
BEGIN
    IF retention IS NULL OR retention < interval '0' THEN
        RAISE EXCEPTION 'retention must be a non-negative interval'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    cut := now() - make_interval(secs => extract(epoch FROM retention));
    -- a range scan of outbox_delivered_idx per destination, each found
    -- from the previous one: pending events are not in that index
    SELECT min(o.destination) INTO dest
      FROM @extschema@.outbox o WHERE o.delivered_at IS NOT NULL;
    WHILE dest IS NOT NULL LOOP
        DELETE FROM @extschema@.outbox o
         WHERE o.destination = dest AND o.delivered_at < cut
           AND (o.origin_id IS NULL
                OR (SELECT 1 FROM @extschema@.outbox s
                     WHERE s.event_id = o.event_id
                       AND (s.delivered_at IS NULL OR s.delivered_at >= cut)
                     LIMIT 1) IS NULL);
        GET DIAGNOSTICS k = ROW_COUNT;
        n := n + k;
        SELECT min(o.destination) INTO dest
          FROM @extschema@.outbox o
         WHERE o.delivered_at IS NOT NULL AND o.destination > dest;
    END LOOP;
    DELETE FROM @extschema@.outbox o
     WHERE o.destination IS NULL AND o.delivered_at < cut
       AND (o.origin_id IS NULL
            OR (SELECT 1 FROM @extschema@.outbox s
                 WHERE s.event_id = o.event_id
                   AND (s.delivered_at IS NULL OR s.delivered_at >= cut)
                 LIMIT 1) IS NULL);
    GET DIAGNOSTICS k = ROW_COUNT;
    n := n + k;
    RETURN n;
END
$$;

COMMENT ON FUNCTION @extschema@.outbox_purge(interval) IS
    'Deletes events delivered longer ago than retention (an event fanned out to several destinations once every one delivered it before then); returns how many rows';

/*
 * An event's deliveries, one row per destination: a row of a fanned-out
 * event is its delivery at destination_id's destination (at the last one
 * it was attempted to, if that destination was deleted). Another row is
 * one delivery: to the destination of its last attempt once final; while
 * pending, to each destination that routing sends it to now (the claim
 * fans it out to them), none ('unroutable') when no destination takes it.
 * For operators: WHERE event_id = ... reads one range of
 * outbox_event_id_key. security_invoker: the caller's own rights on outbox
 * apply, which outbox_admin has.
 */
CREATE VIEW @extschema@.outbox_deliveries WITH (security_invoker = true) AS
SELECT o.event_id, o.event_type,
       coalesce(d.name, r.name, o.destination) AS destination,
       CASE WHEN o.delivered_at IS NOT NULL THEN 'delivered'
            WHEN o.cancelled_at IS NOT NULL THEN 'cancelled'
            WHEN o.skipped_at IS NOT NULL THEN 'skipped'
            WHEN o.dead_at IS NOT NULL THEN 'dead'
            WHEN o.destination_id IS NULL AND r.name IS NULL THEN 'unroutable'
            WHEN o.held_by IS NOT NULL THEN 'held'
            WHEN o.attempts > 0 THEN 'retrying'
            ELSE 'pending' END AS state,
       o.attempts, o.next_attempt_at, o.last_error, o.delivered_at, o.dead_at,
       o.created_at, o.id
  FROM @extschema@.outbox o
  LEFT JOIN @extschema@.outbox_destinations d ON d.id = o.destination_id
  LEFT JOIN LATERAL (
       SELECT r.name
         FROM @extschema@._outbox_routes(o.event_type, o.aggregate_type, o.aggregate_id,
                                         o.payload, NULL) r
        WHERE o.destination_id IS NULL AND o.delivered_at IS NULL AND o.dead_at IS NULL) r
    ON true;

COMMENT ON VIEW @extschema@.outbox_deliveries IS
    'Each event''s deliveries, one row per destination: state (pending, retrying, held, delivered, dead, cancelled, skipped, unroutable), attempts, next attempt, last error';

REVOKE ALL ON @extschema@.outbox_deliveries FROM PUBLIC;
GRANT SELECT ON @extschema@.outbox_deliveries TO outbox_admin;
