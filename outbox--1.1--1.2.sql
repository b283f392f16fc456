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
 * Routing: an event goes to the destination with the first name whose
 * pattern matches its type and whose filter takes it, enabled or not; if
 * that one is disabled, the event waits for it (parked, as an event no
 * destination takes), never sent on to the next match: a webhook that
 * answered 410 Gone, disabled by the relay, sent its events on to the
 * next match, such as a catch-all NOTIFY channel that any consumer may
 * read. The claim view takes the destination only while it is enabled;
 * outbox_status counts an event whose destination is disabled as
 * unroutable, as the relay parks it.
 *
 * It takes the event's fields, no longer its type only, as a filter reads
 * them: 1.1's _outbox_route(text) is dropped below, once the views are
 * created again on this one. Still a single SELECT, so the planner
 * inlines it; the document a filter reads is built only for a
 * destination whose pattern matched and that has a filter (a CASE, as the
 * planner orders the terms of an AND by their estimated cost, and OR
 * evaluates left to right and stops at the first true). silent: a filter that cannot be evaluated on an event (a
 * string compared with a number, a datetime without a time zone) does not
 * take it, rather than failing the claim of every event. Its d.* is
 * expanded when it is created: the columns added above are in it.
 */
CREATE FUNCTION @extschema@._outbox_route(event_type text, aggregate_type text,
                                          aggregate_id text, payload jsonb)
RETURNS SETOF @extschema@.outbox_destinations
LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT d.*
      FROM @extschema@.outbox_destinations d
     WHERE CASE WHEN _outbox_route.event_type OPERATOR(pg_catalog.~~)
                     @extschema@._outbox_like_pattern(d.event_types)
                THEN d.filter IS NULL
                     OR pg_catalog.jsonb_path_match(
                            pg_catalog.jsonb_build_object(
                                'type', _outbox_route.event_type,
                                'aggregate_type', _outbox_route.aggregate_type,
                                'aggregate_id', _outbox_route.aggregate_id,
                                'payload', _outbox_route.payload),
                            d.filter, '{}', true) IS TRUE
                ELSE false END
     ORDER BY d.name
     LIMIT 1;
END;

COMMENT ON FUNCTION @extschema@._outbox_route(text, text, text, jsonb) IS
    'Internal: the destination that this event goes to, if any (a disabled one keeps it waiting)';

REVOKE ALL ON FUNCTION @extschema@._outbox_route(text, text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@._outbox_route(text, text, text, jsonb) TO outbox_admin;

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
           SELECT FROM @extschema@._outbox_route(o.event_type, o.aggregate_type, o.aggregate_id, o.payload) r
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
CREATE INDEX outbox_key_idx
    ON @extschema@.outbox (@extschema@._outbox_aggregate_key(aggregate_type, aggregate_id), id)
    WHERE aggregate_id IS NOT NULL AND delivered_at IS NULL
      AND cancelled_at IS NULL AND skipped_at IS NULL;

-- the same view as 1.1's, its probe on the new key, the destination only
-- while it is enabled (see _outbox_route above)
CREATE OR REPLACE VIEW @extschema@._outbox_pending WITH (security_invoker = true) AS
SELECT o.id, o.ctid AS tid, o.event_id, o.attempts, o.event_type,
       o.aggregate_type, o.aggregate_id, o.created_at, o.payload, o.headers,
       o.next_attempt_at,
       d.name AS dest_name, d AS dest, o.cut_off_attempts,
       -- the event before this one of its key that goes to the same
       -- ordered destination: one backward probe of outbox_key_idx. A
       -- subquery in the select list, not a lateral join, so that the
       -- claim's FOR UPDATE OF p locks the event only, never this one.
       (SELECT e.id
          FROM @extschema@.outbox e
         WHERE d.ordered
           AND @extschema@._outbox_aggregate_key(e.aggregate_type, e.aggregate_id)
               OPERATOR(pg_catalog.=)
               @extschema@._outbox_aggregate_key(o.aggregate_type, o.aggregate_id)
           AND e.aggregate_id OPERATOR(pg_catalog.=) o.aggregate_id
           AND coalesce(e.aggregate_type, '') OPERATOR(pg_catalog.=) coalesce(o.aggregate_type, '')
           AND e.id OPERATOR(pg_catalog.<) o.id
           AND e.delivered_at IS NULL AND e.cancelled_at IS NULL AND e.skipped_at IS NULL
           AND EXISTS (SELECT FROM @extschema@._outbox_route(e.event_type, e.aggregate_type,
                                                              e.aggregate_id, e.payload) r
                        WHERE r.name OPERATOR(pg_catalog.=) d.name)
         ORDER BY e.id DESC
         LIMIT 1) AS blocked_by
  FROM @extschema@.outbox o
  LEFT JOIN LATERAL @extschema@._outbox_route(o.event_type, o.aggregate_type,
                                              o.aggregate_id, o.payload) d ON d.enabled
 WHERE o.delivered_at IS NULL AND o.dead_at IS NULL;

-- 1.1's view, routing each event with its fields (a filter reads them)
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
  FROM (SELECT r.name AS destination, min(o.id) AS head, count(*) - 1 AS waiting
          FROM @extschema@.outbox o
          CROSS JOIN LATERAL @extschema@._outbox_route(o.event_type, o.aggregate_type,
                                                       o.aggregate_id, o.payload) r
         WHERE o.aggregate_id IS NOT NULL AND o.delivered_at IS NULL
           AND o.cancelled_at IS NULL AND o.skipped_at IS NULL AND r.ordered
         GROUP BY r.name, o.aggregate_id, coalesce(o.aggregate_type, '')
        HAVING count(*) > 1) w
  JOIN @extschema@.outbox h ON h.id = w.head;

-- nothing calls 1.1's routing function any more
DROP FUNCTION @extschema@._outbox_route(text);

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
 * pending event is routed.
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
        SELECT o.event_type, count(*) AS n,
               min(greatest(o.created_at, o.redelivered_at)) AS oldest
          FROM @extschema@.outbox o
         WHERE o.delivered_at IS NULL AND o.dead_at IS NULL
         GROUP BY o.event_type),
    -- by type while no destination has a filter; event by event otherwise
    filtered AS (
        SELECT EXISTS (SELECT FROM @extschema@.outbox_destinations d
                        WHERE d.filter IS NOT NULL) AS any),
    routed AS (
        SELECT r.name, sum(t.n)::bigint AS n, min(t.oldest) AS oldest
          FROM by_type t
          LEFT JOIN LATERAL @extschema@._outbox_route(t.event_type, NULL, NULL, NULL) r ON true
         WHERE NOT (SELECT f.any FROM filtered f)
         GROUP BY r.name
        UNION ALL
        SELECT r.name, count(*), min(greatest(o.created_at, o.redelivered_at))
          FROM @extschema@.outbox o
          LEFT JOIN LATERAL @extschema@._outbox_route(o.event_type, o.aggregate_type,
                                                      o.aggregate_id, o.payload) r ON true
         WHERE (SELECT f.any FROM filtered f)
           AND o.delivered_at IS NULL AND o.dead_at IS NULL
         GROUP BY r.name),
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
