/* outbox--1.0.sql: transactional outbox, version 1.0 */

\echo Use "CREATE EXTENSION outbox" to load this file. \quit

/*
 * Group roles. Roles are cluster-wide, so a second database that creates the
 * extension finds them already there; they are not members of the extension
 * and outlive DROP EXTENSION.
 */
DO $roles$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['outbox_writer', 'outbox_admin', 'outbox_consumer']
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) r) THEN
            EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$roles$;

/*
 * True if every key of headers is an HTTP field name (an RFC 9110 token)
 * and every value is free of control characters: the relay refuses to send
 * anything else. Used to reject such headers when they are written rather
 * than when every event they apply to fails.
 */
CREATE FUNCTION @extschema@._outbox_valid_headers(headers jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT headers IS NULL OR (
        pg_catalog.jsonb_typeof(headers) OPERATOR(pg_catalog.=) 'object'
        AND NOT EXISTS (
            SELECT FROM pg_catalog.jsonb_each_text(headers) h
             WHERE h.key OPERATOR(pg_catalog.!~) '^[!#$%&''*+.^_`|~0-9A-Za-z-]+$'
                OR h.value OPERATOR(pg_catalog.~) '[\x01-\x08\x0a-\x1f\x7f]'))
$$;

COMMENT ON FUNCTION @extschema@._outbox_valid_headers(jsonb) IS
    'Internal: whether a headers object has only valid HTTP field names and values';

/*
 * The events. Written in the application's transaction by outbox_emit() (or a
 * plain INSERT), read and marked by the relay. WAL-logged on purpose: a
 * committed event must survive a crash.
 */
CREATE TABLE @extschema@.outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        uuid NOT NULL UNIQUE DEFAULT pg_catalog.gen_random_uuid(),
    event_type      text NOT NULL CHECK (event_type OPERATOR(pg_catalog.<>) ''),
    aggregate_type  text,
    aggregate_id    text,
    payload         jsonb NOT NULL,
    headers         jsonb CHECK (@extschema@._outbox_valid_headers(headers)),
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    delivered_at    timestamptz,
    attempts        integer NOT NULL DEFAULT 0 CHECK (attempts OPERATOR(pg_catalog.>=) 0),
    next_attempt_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    last_error      text,
    dead_at         timestamptz,
    destination     text
);

COMMENT ON TABLE @extschema@.outbox IS
    'Events written in the application''s transaction; the relay delivers them at least once';
COMMENT ON COLUMN @extschema@.outbox.event_id IS
    'Idempotency key, sent as the webhook-id header and stable across retries';
COMMENT ON COLUMN @extschema@.outbox.next_attempt_at IS
    'The event is not claimed before this time (retry backoff)';
COMMENT ON COLUMN @extschema@.outbox.dead_at IS
    'Set when the event was dead-lettered; it is kept and can be redelivered';
COMMENT ON COLUMN @extschema@.outbox.destination IS
    'Destination of the latest attempt';

/*
 * The relay's claim query walks this index in (next_attempt_at, id) order; it
 * holds undelivered, live events only, so it stays small however many
 * delivered events are retained.
 */
CREATE INDEX outbox_pending_idx ON @extschema@.outbox (next_attempt_at, id)
    WHERE delivered_at IS NULL AND dead_at IS NULL;

/*
 * Where events go. event_types is a pattern in which '*' matches any run of
 * characters ('task.*', '*'); an event goes to the enabled destination with
 * the first name, in name order, whose pattern matches its event_type.
 */
CREATE TABLE @extschema@.outbox_destinations (
    name        text PRIMARY KEY CHECK (name OPERATOR(pg_catalog.<>) ''),
    event_types text NOT NULL DEFAULT '*' CHECK (event_types OPERATOR(pg_catalog.<>) ''),
    url         text CHECK (url OPERATOR(pg_catalog.~*) '^https?://[^[:space:]]+$'
                        AND pg_catalog.octet_length(url) OPERATOR(pg_catalog.<=) 8192),
    channel     text CHECK (pg_catalog.octet_length(channel) BETWEEN 1 AND 63),
    headers     jsonb CHECK (@extschema@._outbox_valid_headers(headers)),
    secret      text CHECK (secret OPERATOR(pg_catalog.<>) ''
                            AND (secret OPERATOR(pg_catalog.!~) '^whsec_'
                                 OR pg_catalog.substr(secret, 7) OPERATOR(pg_catalog.~) '^[A-Za-z0-9+/]+={0,2}$')),
    timeout_ms  integer CHECK (timeout_ms BETWEEN 1 AND 600000),
    enabled     boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT outbox_destinations_one_target CHECK ((url IS NULL) OPERATOR(pg_catalog.<>) (channel IS NULL)),
    CONSTRAINT outbox_destinations_secret_needs_url CHECK (secret IS NULL OR url IS NOT NULL)
);

/*
 * A destination's event_types pattern as a LIKE pattern: '*' matches any
 * run of characters, everything else (LIKE's own % and _ included) itself.
 * Inlined into the relay's queries and the status view.
 */
CREATE FUNCTION @extschema@._outbox_like_pattern(pattern text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(
               pattern, '\', '\\'), '%', '\%'), '_', '\_'), '*', '%')
$$;

COMMENT ON FUNCTION @extschema@._outbox_like_pattern(text) IS
    'Internal: a destination''s event_types pattern as a LIKE pattern';

/*
 * The relay parks events that no destination takes (last_error says so,
 * next_attempt_at a few seconds ahead); a new or changed destination makes
 * them due again at once. The text must match OUTBOX_UNROUTABLE_ERROR in
 * src/relay.h.
 */
CREATE FUNCTION @extschema@._outbox_destinations_changed()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE @extschema@.outbox
       SET next_attempt_at = now()
     WHERE delivered_at IS NULL AND dead_at IS NULL
       AND next_attempt_at > now()
       AND last_error = 'no enabled destination matches the event type';
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION @extschema@._outbox_destinations_changed() IS
    'Internal: makes parked events without a destination due again when destinations change';

CREATE TRIGGER outbox_destinations_changed
    AFTER INSERT OR UPDATE ON @extschema@.outbox_destinations
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@._outbox_destinations_changed();

COMMENT ON TABLE @extschema@.outbox_destinations IS
    'Webhook URLs and NOTIFY channels that events are relayed to, chosen by event type pattern';
COMMENT ON COLUMN @extschema@.outbox_destinations.event_types IS
    'Event type pattern; * matches any run of characters';
COMMENT ON COLUMN @extschema@.outbox_destinations.secret IS
    'Standard Webhooks signing secret (whsec_<base64> or raw text); readable by outbox_admin only';
COMMENT ON COLUMN @extschema@.outbox_destinations.timeout_ms IS
    'Per-request timeout in milliseconds; NULL means outbox.http_timeout';

/* The consumer side: one row per (consumer, event) already processed. */
CREATE TABLE @extschema@.inbox (
    consumer     text NOT NULL DEFAULT 'default',
    event_id     uuid NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (consumer, event_id)
);

COMMENT ON TABLE @extschema@.inbox IS
    'Events already processed by each consumer, for idempotent consumers';

/* pg_dump keeps the rows of every table that holds user data. */
SELECT pg_catalog.pg_extension_config_dump('@extschema@.outbox', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.outbox_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.outbox_destinations', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.inbox', '');

CREATE FUNCTION @extschema@.outbox_emit(
    event_type     text,
    payload        jsonb,
    aggregate_type text DEFAULT NULL,
    aggregate_id   text DEFAULT NULL,
    headers        jsonb DEFAULT NULL)
RETURNS uuid
AS 'MODULE_PATHNAME', 'outbox_emit'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.outbox_emit(text, jsonb, text, text, jsonb) IS
    'Writes one event in the current transaction and returns its event_id; the relay is woken at COMMIT';

CREATE FUNCTION @extschema@._outbox_envelope(
    event_id       uuid,
    event_type     text,
    aggregate_type text,
    aggregate_id   text,
    created_at     timestamptz,
    attempt        integer,
    payload        jsonb)
RETURNS text
AS 'MODULE_PATHNAME', '_outbox_envelope'
LANGUAGE C STABLE PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@._outbox_envelope(uuid, text, text, text, timestamptz, integer, jsonb) IS
    'Internal: the JSON envelope the relay sends for an attempt of an event';

CREATE FUNCTION @extschema@._outbox_claim_query()
RETURNS text
AS 'MODULE_PATHNAME', '_outbox_claim_query'
LANGUAGE C STABLE PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@._outbox_claim_query() IS
    'Internal: the text of the relay''s claim query ($1 is the batch size), for EXPLAIN';

CREATE FUNCTION @extschema@.outbox_relay(
    batch_size integer DEFAULT NULL,
    OUT delivered integer,
    OUT failed integer)
RETURNS record
AS 'MODULE_PATHNAME', 'outbox_relay'
LANGUAGE C VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION @extschema@.outbox_relay(integer) IS
    'Runs one relay pass in this session (same code as the background worker); returns delivered and failed counts';

CREATE FUNCTION @extschema@.outbox_purge(retention interval DEFAULT '7 days')
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cutoff  timestamptz;
    lo      bigint;
    hi      bigint;
    step    constant bigint := 10000;
    n       bigint;
    total   bigint := 0;
BEGIN
    IF retention IS NULL OR retention < interval '0' THEN
        RAISE EXCEPTION 'retention must be a non-negative interval'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    cutoff := now() - retention;
    /*
     * Walk the primary key in ranges of ids so that every DELETE is bounded
     * and index-driven, whatever the size of the table. Dead-lettered and
     * pending events are never purged.
     */
    SELECT min(id) INTO lo FROM @extschema@.outbox;
    WHILE lo IS NOT NULL LOOP
        -- the range [lo, hi]: step ids, or what is left below the maximum
        hi := CASE WHEN lo > 9223372036854775807 - step THEN 9223372036854775807
                   ELSE lo + step - 1 END;
        DELETE FROM @extschema@.outbox
         WHERE id BETWEEN lo AND hi
           AND delivered_at < cutoff;
        GET DIAGNOSTICS n = ROW_COUNT;
        total := total + n;
        -- the next existing id: gaps cost one index probe, not a loop
        SELECT min(id) INTO lo FROM @extschema@.outbox WHERE id > hi;
    END LOOP;
    RETURN total;
END
$$;

COMMENT ON FUNCTION @extschema@.outbox_purge(interval) IS
    'Deletes delivered events delivered longer ago than retention; returns how many were deleted';

CREATE FUNCTION @extschema@.outbox_redeliver(event_id uuid)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    WITH r AS (
        UPDATE @extschema@.outbox o
           SET delivered_at = NULL, dead_at = NULL, next_attempt_at = now()
         WHERE o.event_id = outbox_redeliver.event_id
           AND (o.delivered_at IS NOT NULL OR o.dead_at IS NOT NULL OR o.next_attempt_at > now())
        RETURNING 1)
    SELECT count(*) > 0 FROM r
$$;

COMMENT ON FUNCTION @extschema@.outbox_redeliver(uuid) IS
    'Makes a delivered or dead-lettered event due again; returns false if it was already due';

CREATE FUNCTION @extschema@.outbox_redeliver_dead()
RETURNS bigint
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    WITH r AS (
        UPDATE @extschema@.outbox
           SET dead_at = NULL, next_attempt_at = now()
         WHERE dead_at IS NOT NULL
        RETURNING 1)
    SELECT count(*) FROM r
$$;

COMMENT ON FUNCTION @extschema@.outbox_redeliver_dead() IS
    'Makes every dead-lettered event due again; returns how many';

CREATE FUNCTION @extschema@.inbox_accept(event_id uuid, consumer text DEFAULT 'default')
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF event_id IS NULL OR consumer IS NULL THEN
        RAISE EXCEPTION 'event_id and consumer must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    /*
     * A concurrent call for the same key waits here for the first
     * transaction: true if that one rolled back, false if it committed.
     */
    INSERT INTO @extschema@.inbox (consumer, event_id)
    VALUES (inbox_accept.consumer, inbox_accept.event_id)
    ON CONFLICT DO NOTHING;
    RETURN FOUND;
END
$$;

COMMENT ON FUNCTION @extschema@.inbox_accept(uuid, text) IS
    'Records that consumer processed event_id in the current transaction; true the first time, false for a duplicate';

CREATE FUNCTION @extschema@.inbox_purge(retention interval DEFAULT '30 days')
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    IF retention IS NULL OR retention < interval '0' THEN
        RAISE EXCEPTION 'retention must be a non-negative interval'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    DELETE FROM @extschema@.inbox WHERE processed_at < now() - retention;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

COMMENT ON FUNCTION @extschema@.inbox_purge(interval) IS
    'Deletes inbox rows older than retention; keep it longer than the longest redelivery delay';

/* Pending work per event type; scans only undelivered events. */
CREATE VIEW @extschema@.outbox_status AS
SELECT o.event_type,
       count(*) FILTER (WHERE o.dead_at IS NULL) AS pending,
       count(*) FILTER (WHERE o.dead_at IS NULL AND o.attempts > 0) AS retrying,
       count(*) FILTER (WHERE o.dead_at IS NOT NULL) AS dead,
       count(*) FILTER (WHERE o.dead_at IS NULL AND NOT EXISTS (
           SELECT 1 FROM @extschema@.outbox_destinations d
            WHERE d.enabled
              AND o.event_type LIKE @extschema@._outbox_like_pattern(d.event_types))) AS unroutable,
       min(o.created_at) FILTER (WHERE o.dead_at IS NULL) AS oldest_pending
  FROM @extschema@.outbox o
 WHERE o.delivered_at IS NULL
 GROUP BY o.event_type;

COMMENT ON VIEW @extschema@.outbox_status IS
    'Undelivered events per event type: pending, retrying, dead-lettered, without a destination';

/* Privileges: PUBLIC gets nothing; each group role gets just its part. */
REVOKE ALL ON FUNCTION @extschema@.outbox_emit(text, jsonb, text, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_relay(integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_purge(interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_redeliver(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_redeliver_dead() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_accept(uuid, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_purge(interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@._outbox_destinations_changed() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@._outbox_like_pattern(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@._outbox_valid_headers(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@._outbox_claim_query() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@._outbox_envelope(uuid, text, text, text, timestamptz, integer, jsonb) FROM PUBLIC;
REVOKE ALL ON @extschema@.outbox, @extschema@.outbox_destinations,
              @extschema@.inbox, @extschema@.outbox_status FROM PUBLIC;

GRANT USAGE ON SCHEMA @extschema@ TO outbox_writer, outbox_admin, outbox_consumer;

/*
 * The writer may add events and nothing else: no SELECT, UPDATE or DELETE,
 * and INSERT only of the event's own columns, so it cannot choose an id or
 * forge delivery state (attempts, delivered_at, dead_at, next_attempt_at).
 */
GRANT INSERT (event_id, event_type, aggregate_type, aggregate_id, payload, headers)
    ON @extschema@.outbox TO outbox_writer;
GRANT EXECUTE ON FUNCTION @extschema@.outbox_emit(text, jsonb, text, text, jsonb),
    @extschema@._outbox_valid_headers(jsonb) TO outbox_writer;

GRANT SELECT, INSERT, UPDATE, DELETE ON @extschema@.outbox, @extschema@.outbox_destinations TO outbox_admin;
GRANT SELECT ON @extschema@.outbox_status TO outbox_admin;
GRANT EXECUTE ON FUNCTION
    @extschema@.outbox_emit(text, jsonb, text, text, jsonb),
    @extschema@._outbox_like_pattern(text),
    @extschema@._outbox_valid_headers(jsonb),
    @extschema@._outbox_claim_query(),
    @extschema@._outbox_envelope(uuid, text, text, text, timestamptz, integer, jsonb),
    @extschema@.outbox_relay(integer),
    @extschema@.outbox_purge(interval),
    @extschema@.outbox_redeliver(uuid),
    @extschema@.outbox_redeliver_dead()
TO outbox_admin;

GRANT SELECT, INSERT, DELETE ON @extschema@.inbox TO outbox_consumer;
GRANT EXECUTE ON FUNCTION
    @extschema@.inbox_accept(uuid, text),
    @extschema@.inbox_purge(interval)
TO outbox_consumer;
