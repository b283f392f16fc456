/* outbox--1.0--1.1.sql: upgrade from 1.0 to 1.1 */

\echo Use "ALTER EXTENSION outbox UPDATE TO '1.1'" to load this file. \quit

/*
 * First of all: the library this session runs must be 1.1's. A server keeps
 * the library it loaded at startup until it restarts, and every CREATE
 * FUNCTION below that names a C function of 1.1 would fail against 1.0's
 * with "could not find function ... in file". outbox_library_version() is
 * the first of them; creating it tells the two apart, and the update stops
 * here, changing nothing, with the step that is missing. Later scripts call
 * it and compare.
 */
DO $guard$
BEGIN
    CREATE FUNCTION @extschema@.outbox_library_version()
    RETURNS text
    AS 'MODULE_PATHNAME', 'outbox_library_version'
    LANGUAGE C STABLE PARALLEL SAFE;
EXCEPTION WHEN undefined_function THEN
    RAISE EXCEPTION 'the outbox library loaded in this server is older than version 1.1'
        USING ERRCODE = 'object_not_in_prerequisite_state',
              DETAIL = 'The server keeps the library it loaded at startup until it restarts; the SQL objects of 1.1 need the library installed with them.',
              HINT = 'Restart the server, then run ALTER EXTENSION outbox UPDATE again.';
END
$guard$;

/*
 * Relay v2: no transaction stays open while an event is in flight (sent
 * after the claim commits, as webhooks are). The claim commits at once and
 * writes nothing to the events it puts in flight: the relays keep the set
 * of events in flight in shared memory, where every claim looks. What must
 * survive a crash is the count of the attempts it cuts off, and that is
 * this journal: one row per claim of events in flight, the ids and their
 * attempt counts as claimed, written in the claim's transaction and
 * deleted once their outcomes are recorded (the outcome counts the
 * attempt). The rows of a relay that is gone (a crash, an exit) are
 * released by the next relay to start, or within a second by a running
 * one: each event still at its claimed count gets its attempt counted, and
 * is then free to be claimed again.
 */
CREATE TABLE @extschema@.outbox_in_flight (
    run        bigint NOT NULL,
    claim      bigint NOT NULL,
    relay      integer NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    ids        bigint[] NOT NULL,
    attempts   integer[] NOT NULL,
    -- also its replica identity: under a publication FOR ALL TABLES,
    -- PostgreSQL refuses to delete rows of a table without one
    PRIMARY KEY (run, claim)
);

COMMENT ON TABLE @extschema@.outbox_in_flight IS
    'Journal of the events relays have in flight, one row per claim: written by the relays only';
COMMENT ON COLUMN @extschema@.outbox_in_flight.run IS
    'The relay process that claimed them (a random number per relay start)';
COMMENT ON COLUMN @extschema@.outbox_in_flight.claim IS
    'Number of the claim in that run';
COMMENT ON COLUMN @extschema@.outbox_in_flight.relay IS
    'Number of that relay in its database';
COMMENT ON COLUMN @extschema@.outbox_in_flight.ids IS
    'outbox.id of each event of the claim';
COMMENT ON COLUMN @extschema@.outbox_in_flight.attempts IS
    'outbox.attempts of each event when it was claimed: the attempt is counted once it is past that';
COMMENT ON COLUMN @extschema@.outbox.attempts IS
    'Deliveries started: each counted with its outcome, or, if a crash cut it off, when the journal of events in flight is released';

/*
 * An event whose relay ends while it is in flight: a crash, an OOM kill, a
 * signal, or the endpoint's answer doing that. Its cut-off attempts count
 * like others, and so do those in a row: at 2 (or at outbox.max_attempts)
 * it is sent alone, with nothing else of its relay in flight, and if the
 * relay ends then too, it is dead-lettered, so that one event cannot keep
 * ending its relay (or, by a crash, restarting the server). The index
 * finds such events, of which there are none in normal operation.
 */
ALTER TABLE @extschema@.outbox
    ADD COLUMN cut_off_attempts integer NOT NULL DEFAULT 0;

COMMENT ON COLUMN @extschema@.outbox.cut_off_attempts IS
    'Attempts in a row that the end of the relay sending the event cut off (any outcome sets it back to 0): from 2 the event is sent alone, and dead-lettered if its relay ends again';

CREATE INDEX outbox_alone_idx ON @extschema@.outbox (next_attempt_at, id)
    WHERE cut_off_attempts OPERATOR(pg_catalog.>=) 2
      AND delivered_at IS NULL AND dead_at IS NULL;

/*
 * What an operator did to an event is kept in its row: redelivered_at is
 * set by every redelivery function, cancelled_at (with dead_at, and the
 * reason in last_error) by outbox_cancel().
 */
ALTER TABLE @extschema@.outbox
    ADD COLUMN redelivered_at timestamptz,
    ADD COLUMN cancelled_at timestamptz;

COMMENT ON COLUMN @extschema@.outbox.redelivered_at IS
    'When an operator last made the event due again (outbox_redeliver, outbox_redeliver_dead); NULL if never';
COMMENT ON COLUMN @extschema@.outbox.cancelled_at IS
    'When an operator cancelled the event (outbox_cancel): it is dead-lettered, with the reason in last_error';

/*
 * Ordered delivery (a destination's ordered option, below). The key of an
 * event is its aggregate: (aggregate_type, aggregate_id), a NULL type the
 * same as an empty one; events without an aggregate_id have none. For an
 * ordered destination only the head of a key is claimed: the event with no
 * earlier undelivered one of its key going to that destination, dead or
 * not, unless cancelled or skipped. outbox_key_idx finds the event before
 * one in its key with one probe, whatever the key's backlog. It is keyed
 * by a 64-bit hash of the key, not the key itself: an index entry must fit
 * a third of a page, and an aggregate id written before the limits (or
 * with triggers off) can be any size; the probe compares the key too.
 *
 * A claim that meets an event that is not a head holds it: held_by is the
 * event before it, and it is not due again until that one is delivered,
 * cancelled or skipped (which makes the events held for it due at once,
 * through outbox_held_idx) or, in case a release was missed (the event
 * before it deleted by hand), as long as it has waited already (at least
 * a minute, at most ten; a second when the claim could not be sure: see
 * src/queue.c); so a claim walks heads, not every key's backlog.
 * Correctness rests on the claim's test alone: a held event is tested
 * again when it is claimed.
 */
ALTER TABLE @extschema@.outbox
    ADD COLUMN held_by bigint,
    ADD COLUMN skipped_at timestamptz,
    ADD COLUMN skipped_by text;

COMMENT ON COLUMN @extschema@.outbox.held_by IS
    'Ordered destinations: the id of the earlier event of the same aggregate that this one waits for; NULL when it waits for none';
COMMENT ON COLUMN @extschema@.outbox.skipped_at IS
    'When an operator skipped the dead-lettered event (outbox_skip_dead): it no longer holds back later events of its aggregate';
COMMENT ON COLUMN @extschema@.outbox.skipped_by IS
    'The role that skipped the dead-lettered event';

CREATE INDEX outbox_key_idx
    ON @extschema@.outbox (pg_catalog.hashtextextended(aggregate_id,
                               pg_catalog.hashtextextended(coalesce(aggregate_type, ''), 0)), id)
    WHERE aggregate_id IS NOT NULL AND delivered_at IS NULL
      AND cancelled_at IS NULL AND skipped_at IS NULL;
CREATE INDEX outbox_held_idx ON @extschema@.outbox (held_by)
    WHERE held_by IS NOT NULL;

REVOKE ALL ON @extschema@.outbox_in_flight FROM PUBLIC;
GRANT SELECT ON @extschema@.outbox_in_flight TO outbox_admin;
-- a dump keeps the count of attempts that a crash cut off
SELECT pg_catalog.pg_extension_config_dump('@extschema@.outbox_in_flight', '');

/*
 * Destinations. A destination is a kind, a target and a format: the kind
 * says how events are sent (http: a webhook, the url; notify: a NOTIFY
 * channel, the channel), each with its own options, and the format what
 * is sent (the envelope; more formats later). A row written without a kind
 * takes the kind of the one target it has, so 1.0's INSERTs work as they
 * are. The kind cannot change once written (see the trigger below).
 */
ALTER TABLE @extschema@.outbox_destinations
    ADD COLUMN kind text,
    ADD COLUMN format text NOT NULL DEFAULT 'envelope';

UPDATE @extschema@.outbox_destinations
   SET kind = CASE WHEN url IS NOT NULL THEN 'http' ELSE 'notify' END;

ALTER TABLE @extschema@.outbox_destinations
    ALTER COLUMN kind SET NOT NULL;

COMMENT ON COLUMN @extschema@.outbox_destinations.kind IS
    'How events are sent: http (a webhook, to url), notify (a NOTIFY channel) or jetstream (a NATS JetStream stream, at nats_servers); set from the target when not given, fixed once written';
COMMENT ON COLUMN @extschema@.outbox_destinations.format IS
    'What is sent for an event: envelope (the outbox envelope, JSON); webhooks also cloudevents (CloudEvents 1.0, structured mode) or cloudevents-binary (binary mode, ce-* headers)';

/*
 * http: a 4xx answer other than 408, 409, 425 and 429 dead-letters an
 * event at once: the request itself is wrong. A destination can have them
 * retried.
 */
ALTER TABLE @extschema@.outbox_destinations
    ADD COLUMN retry_client_errors boolean NOT NULL DEFAULT false;

COMMENT ON COLUMN @extschema@.outbox_destinations.retry_client_errors IS
    'Retry 4xx answers (other than 408, 409, 425, 429, always retried) like 5xx instead of dead-lettering at once';

/*
 * notify: what a NOTIFY destination puts on its channel. 'full' is the
 * whole envelope; 'reference' leaves the payload out, so that a listener
 * without privileges (any role that can connect may LISTEN) learns only
 * the event's id, type and aggregate; the payload is read with
 * outbox_catch_up(). A NOTIFY destination may now have a secret: its
 * notifications are then signed (see docs/notify.md).
 */
ALTER TABLE @extschema@.outbox_destinations
    ADD COLUMN notify_mode text NOT NULL DEFAULT 'full';

COMMENT ON COLUMN @extschema@.outbox_destinations.notify_mode IS
    'NOTIFY destinations: full (the envelope with its payload) or reference (without the payload, read with outbox_catch_up)';
COMMENT ON COLUMN @extschema@.outbox_destinations.secret IS
    'Standard Webhooks signing secret (whsec_<base64> or raw text) of a webhook or a NOTIFY channel; readable by outbox_admin only';
COMMENT ON COLUMN @extschema@.outbox_destinations.created_at IS
    'When the destination was created';

/*
 * Catch-up (outbox_catch_up) returns the events delivered under a NOTIFY
 * destination's name since catch_up_from: the destination's creation, or,
 * for one that 1.0 had, this update. 1.0 let an UPDATE turn a webhook
 * into a channel in place, and the webhook's deliveries, kept under the
 * same name, must not be read as the channel's; since 1.1 a destination's
 * kind cannot change (the trigger below).
 */
ALTER TABLE @extschema@.outbox_destinations
    ADD COLUMN catch_up_from timestamptz NOT NULL DEFAULT pg_catalog.now();

COMMENT ON COLUMN @extschema@.outbox_destinations.catch_up_from IS
    'outbox_catch_up returns only events delivered to this NOTIFY destination since then: its creation, or the update from 1.0';

/*
 * An ordered destination receives the events of one aggregate one at a
 * time, in id order: see outbox_key_idx above.
 */
ALTER TABLE @extschema@.outbox_destinations
    ADD COLUMN ordered boolean NOT NULL DEFAULT false;

COMMENT ON COLUMN @extschema@.outbox_destinations.ordered IS
    'Deliver the events of one aggregate (aggregate_type, aggregate_id) one at a time, in id order, each after the one before is delivered, skipped or cancelled';

/*
 * jetstream: a NATS JetStream stream (deliver_jetstream.c). nats_servers
 * is its target; the subject may be a template of the event's fields. The
 * credentials, like the secret, are readable by outbox_admin only (the
 * table's privileges); the files are read by the relay as the server's OS
 * user, so naming one needs the privileges of pg_read_server_files (the
 * validation trigger).
 */
ALTER TABLE @extschema@.outbox_destinations
    ADD COLUMN nats_servers text,
    ADD COLUMN nats_subject text,
    ADD COLUMN nats_stream text,
    ADD COLUMN nats_user text,
    ADD COLUMN nats_password text,
    ADD COLUMN nats_token text,
    ADD COLUMN nats_creds_file text,
    ADD COLUMN nats_ca_file text;

COMMENT ON COLUMN @extschema@.outbox_destinations.nats_servers IS
    'JetStream destinations: the NATS servers, a comma-separated list of nats:// or tls:// URLs (host and port, no credentials)';
COMMENT ON COLUMN @extschema@.outbox_destinations.nats_subject IS
    'JetStream destinations: the subject events are published to, or a template with {event_type}, {aggregate_type}, {aggregate_id}';
COMMENT ON COLUMN @extschema@.outbox_destinations.nats_stream IS
    'JetStream destinations: the stream that stores the subject; every publish expects it (Nats-Expected-Stream), and its duplicate window is checked';
COMMENT ON COLUMN @extschema@.outbox_destinations.nats_user IS
    'JetStream destinations: user name, with nats_password';
COMMENT ON COLUMN @extschema@.outbox_destinations.nats_password IS
    'JetStream destinations: password, with nats_user; readable by outbox_admin only';
COMMENT ON COLUMN @extschema@.outbox_destinations.nats_token IS
    'JetStream destinations: authentication token; readable by outbox_admin only';
COMMENT ON COLUMN @extschema@.outbox_destinations.nats_creds_file IS
    'JetStream destinations: absolute path of a .creds file (user JWT and NKey seed), read by the server''s OS user; needs pg_read_server_files to set';
COMMENT ON COLUMN @extschema@.outbox_destinations.nats_ca_file IS
    'JetStream destinations: absolute path of the CA certificates (PEM) that sign the servers'' TLS certificates; needs pg_read_server_files to set';

/*
 * When and why a destination was disabled: the relay disables a webhook
 * that answers 410 Gone (the Standard Webhooks specification: the sender
 * should stop sending to it), and says so here. Its events stay pending
 * (parked as unroutable while no enabled destination takes their type)
 * and go once it is enabled again, which clears both columns.
 */
ALTER TABLE @extschema@.outbox_destinations
    ADD COLUMN disabled_at timestamptz,
    ADD COLUMN disabled_reason text;

COMMENT ON COLUMN @extschema@.outbox_destinations.disabled_at IS
    'When enabled last became false; NULL while enabled';
COMMENT ON COLUMN @extschema@.outbox_destinations.disabled_reason IS
    'Why the destination was disabled, when the relay did it (a webhook that answered 410 Gone) or the writer of enabled = false gave one; NULL while enabled';

UPDATE @extschema@.outbox_destinations SET disabled_at = pg_catalog.now() WHERE NOT enabled;

/* webhooks in a CloudEvents format: the source attribute (cloudevents.c) */
ALTER TABLE @extschema@.outbox_destinations
    ADD COLUMN cloudevents_source text;

COMMENT ON COLUMN @extschema@.outbox_destinations.cloudevents_source IS
    'Webhooks in a CloudEvents format: the events'' source attribute, a URI-reference; NULL: /outbox/<database>';

/*
 * https endpoints with a private CA: the CA certificates (PEM) that sign
 * the endpoint's certificate, instead of the system's. The relay reads the
 * file as the server's OS user, so naming one needs the privileges of
 * pg_read_server_files (the validation trigger).
 */
ALTER TABLE @extschema@.outbox_destinations
    ADD COLUMN ca_file text;

COMMENT ON COLUMN @extschema@.outbox_destinations.ca_file IS
    'Webhooks: absolute path of the CA certificates (PEM) that sign an https endpoint''s certificate, instead of the system''s; needs pg_read_server_files to set';

/*
 * Webhooks in batches: up to this many events per request, as a JSON array
 * (the envelope) or a CloudEvents batch. 1: one event per request, as an
 * object, as in 1.0. The validation trigger checks the range and refuses
 * more than 1 with the CloudEvents binary mode (deliver_http.c).
 */
ALTER TABLE @extschema@.outbox_destinations
    ADD COLUMN events_per_request integer NOT NULL DEFAULT 1;

COMMENT ON COLUMN @extschema@.outbox_destinations.events_per_request IS
    'Webhooks: the most events one request carries, 1 to 1000; above 1 every request is a batch (a JSON array, or application/cloudevents-batch+json)';

CREATE FUNCTION @extschema@._outbox_destination_enabled()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NEW.enabled THEN
        NEW.disabled_at := NULL;
        NEW.disabled_reason := NULL;
        -- the events its endpoint answered 410 go now, not after their backoff
        IF TG_OP = 'UPDATE' AND NOT OLD.enabled THEN
            UPDATE @extschema@.outbox o
               SET next_attempt_at = now()
             WHERE o.destination = NEW.name AND o.delivered_at IS NULL AND o.dead_at IS NULL
               AND o.next_attempt_at > now() AND o.last_error LIKE 'HTTP status 410 %';
        END IF;
    ELSIF TG_OP = 'INSERT' THEN
        -- a restored row keeps its time
        NEW.disabled_at := coalesce(NEW.disabled_at, now());
    ELSIF OLD.enabled THEN
        NEW.disabled_at := now();
    END IF;
    RETURN NEW;
END
$$;

COMMENT ON FUNCTION @extschema@._outbox_destination_enabled() IS
    'Internal: sets disabled_at when a destination is disabled; when it is enabled, clears disabled_at and disabled_reason and makes due the events its endpoint answered 410';

CREATE TRIGGER outbox_destinations_enabled
    BEFORE INSERT OR UPDATE OF enabled, disabled_at, disabled_reason ON @extschema@.outbox_destinations
    FOR EACH ROW EXECUTE FUNCTION @extschema@._outbox_destination_enabled();

/*
 * Settings a database owner can change must not change what the extension
 * does. The 1.0 body of _outbox_like_pattern was text, parsed on each use
 * with the session's settings: with standard_conforming_strings = off, its
 * backslashes made every routing decision (the relay's claim, outbox_status)
 * fail. Its body is now SQL-standard, parsed once, here, and it spells its
 * backslashes as E'' literals, which mean the same under either setting.
 * It is still a single expression without SET clauses, so it is inlined.
 */
CREATE OR REPLACE FUNCTION @extschema@._outbox_like_pattern(pattern text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(
           pattern, E'\\', E'\\\\'), '%', E'\\%'), '_', E'\\_'), '*', '%');

/*
 * Routing has one home: the destination an event goes to is the enabled one
 * with the first name whose pattern matches its type. The relay's claim and
 * its parking of unroutable events, and the outbox_status view, all call
 * this function. A single SELECT, not STRICT, not VOLATILE and without SET
 * clauses, so the planner inlines it into each query. The body is SQL-standard
 * (BEGIN ATOMIC): parsed once, it refers to the objects themselves rather
 * than to their names, so it keeps working if the schema is renamed. Its
 * d.* is expanded when it is created: a later version that adds a column
 * to outbox_destinations must create it again.
 */
CREATE FUNCTION @extschema@._outbox_route(event_type text)
RETURNS SETOF @extschema@.outbox_destinations
LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT d.*
      FROM @extschema@.outbox_destinations d
     WHERE d.enabled
       AND _outbox_route.event_type OPERATOR(pg_catalog.~~) @extschema@._outbox_like_pattern(d.event_types)
     ORDER BY d.name
     LIMIT 1;
END;

COMMENT ON FUNCTION @extschema@._outbox_route(text) IS
    'Internal: the destination that events of this type go to, if any';

/*
 * The rules for headers and secrets have one home, in C, shared with the
 * relay that sends them: 1.0's check constraint on headers called this
 * function, and the triggers below apply the same rules from 1.1 on.
 */
CREATE OR REPLACE FUNCTION @extschema@._outbox_valid_headers(headers jsonb)
RETURNS boolean
AS 'MODULE_PATHNAME', '_outbox_valid_headers'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@._outbox_valid_headers(jsonb) IS
    'Internal: whether a headers object is one a destination may have (valid names and values, within the limits)';

CREATE FUNCTION @extschema@._outbox_valid_secret(secret text)
RETURNS boolean
AS 'MODULE_PATHNAME', '_outbox_valid_secret'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@._outbox_valid_secret(text) IS
    'Internal: whether the relay can sign with a destination''s secret: whsec_ and canonical base64, or printable ASCII';

/* The text that marks a parked event has one home too: the relay's. */
CREATE FUNCTION @extschema@._outbox_unroutable_error()
RETURNS text
AS 'MODULE_PATHNAME', '_outbox_unroutable_error'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@._outbox_unroutable_error() IS
    'Internal: the last_error text of an event parked for want of a destination';

/*
 * A change of destinations may route an event elsewhere, or make an ordered
 * destination unordered: events parked for want of a destination, and
 * those held for an earlier event of their key, are due again at once (a
 * claim holds the latter again if they still have to wait). Deleting a
 * destination counts too.
 */
CREATE OR REPLACE FUNCTION @extschema@._outbox_destinations_changed()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE @extschema@.outbox
       SET next_attempt_at = now()
     WHERE delivered_at IS NULL AND dead_at IS NULL
       AND next_attempt_at > now()
       AND last_error = @extschema@._outbox_unroutable_error();
    UPDATE @extschema@.outbox
       SET held_by = NULL, next_attempt_at = now()
     WHERE held_by IS NOT NULL AND delivered_at IS NULL AND next_attempt_at > now();
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION @extschema@._outbox_destinations_changed() IS
    'Internal: makes parked events without a destination, and events held for an earlier one of their aggregate, due again when destinations change';

CREATE OR REPLACE TRIGGER outbox_destinations_changed
    AFTER INSERT OR UPDATE OR DELETE ON @extschema@.outbox_destinations
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@._outbox_destinations_changed();

CREATE OR REPLACE VIEW @extschema@.outbox_status AS
SELECT o.event_type,
       count(*) FILTER (WHERE o.dead_at IS NULL) AS pending,
       count(*) FILTER (WHERE o.dead_at IS NULL AND o.attempts > 0) AS retrying,
       count(*) FILTER (WHERE o.dead_at IS NOT NULL) AS dead,
       count(*) FILTER (WHERE o.dead_at IS NULL AND NOT EXISTS (
           SELECT FROM @extschema@._outbox_route(o.event_type))) AS unroutable,
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
                      unnest(j.ids, j.attempts) AS f(id, attempts))) AS oldest_due
  FROM @extschema@.outbox o
 WHERE o.delivered_at IS NULL
 GROUP BY o.event_type;

REVOKE ALL ON FUNCTION @extschema@._outbox_route(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@._outbox_valid_secret(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@._outbox_unroutable_error() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    @extschema@._outbox_route(text),
    @extschema@._outbox_valid_secret(text),
    @extschema@._outbox_unroutable_error()
TO outbox_admin;

/*
 * What the relay reads: every undelivered, live event with the destination
 * that _outbox_route() chooses for it (NULLs when none does). The relay's
 * statements name only tables and this view, never a function: a function
 * name can be made ambiguous by anyone who may create functions in the
 * extension's schema (the owner of public, from PostgreSQL 15 on the
 * database's owner) with an overload such as _outbox_route(text, int
 * DEFAULT 0), which would stop the relay; a relation name cannot, and the
 * view's own references were bound here, by OID. security_invoker: those
 * who run outbox_relay() need the privileges on the tables themselves, as
 * before. The destination is one column, dest, of the table's row type:
 * the claim reads the columns every kind has from it and each kind its own
 * (src/destination.h), so a new kind or option adds no column here (but
 * _outbox_route must be created again, see above).
 */
CREATE VIEW @extschema@._outbox_pending WITH (security_invoker = true) AS
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
           AND pg_catalog.hashtextextended(e.aggregate_id,
                   pg_catalog.hashtextextended(coalesce(e.aggregate_type, ''), 0))
               OPERATOR(pg_catalog.=)
               pg_catalog.hashtextextended(o.aggregate_id,
                   pg_catalog.hashtextextended(coalesce(o.aggregate_type, ''), 0))
           AND e.aggregate_id OPERATOR(pg_catalog.=) o.aggregate_id
           AND coalesce(e.aggregate_type, '') OPERATOR(pg_catalog.=) coalesce(o.aggregate_type, '')
           AND e.id OPERATOR(pg_catalog.<) o.id
           AND e.delivered_at IS NULL AND e.cancelled_at IS NULL AND e.skipped_at IS NULL
           AND EXISTS (SELECT FROM @extschema@._outbox_route(e.event_type) r
                        WHERE r.name OPERATOR(pg_catalog.=) d.name)
         ORDER BY e.id DESC
         LIMIT 1) AS blocked_by
  FROM @extschema@.outbox o
  LEFT JOIN LATERAL @extschema@._outbox_route(o.event_type) d ON true
 WHERE o.delivered_at IS NULL AND o.dead_at IS NULL;

COMMENT ON VIEW @extschema@._outbox_pending IS
    'Internal: undelivered, live events with the destination each goes to, as the relay reads them';

REVOKE ALL ON @extschema@._outbox_pending FROM PUBLIC;
-- UPDATE: the relay's claim locks the events FOR UPDATE through the view
GRANT SELECT, UPDATE ON @extschema@._outbox_pending TO outbox_admin;

/*
 * Hardening. The rules and size limits of events and destinations are
 * applied by BEFORE triggers in C (src/validate.c) instead of check
 * constraints: a violated constraint prints the whole row ("Failing row
 * contains ...": the payload, header values, the secret) to the client and
 * the server log, and the triggers raise errors that name the field and
 * the rule only. They run before PostgreSQL's own NOT NULL checks and test
 * those too, for the same reason. The relay applies the same rules again
 * to what it claims, so a row that gets past them is dead-lettered alone.
 */
CREATE FUNCTION @extschema@._outbox_check_event()
RETURNS trigger
AS 'MODULE_PATHNAME', '_outbox_check_event'
LANGUAGE C;

COMMENT ON FUNCTION @extschema@._outbox_check_event() IS
    'Internal: trigger that refuses an event over a size limit or with headers an event may not carry, without printing the row';

/*
 * The measure behind the limit on an event's envelope, for tests and for
 * an operator who wants to know how large an event's text will be.
 */
CREATE FUNCTION @extschema@._outbox_payload_text_bytes(payload jsonb)
RETURNS bigint
AS 'MODULE_PATHNAME', '_outbox_payload_text_bytes'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@._outbox_payload_text_bytes(jsonb) IS
    'Internal: the bytes of the JSON text of a payload as the envelope carries it (strings escaped, numbers printed), which the event size limit counts';

REVOKE ALL ON FUNCTION @extschema@._outbox_payload_text_bytes(jsonb) FROM PUBLIC;

CREATE FUNCTION @extschema@._outbox_check_destination()
RETURNS trigger
AS 'MODULE_PATHNAME', '_outbox_check_destination'
LANGUAGE C;

COMMENT ON FUNCTION @extschema@._outbox_check_destination() IS
    'Internal: trigger that refuses an invalid destination (kind and target, headers, secret, timeout, format, the kind''s own options) without printing the row';

ALTER TABLE @extschema@.outbox
    DROP CONSTRAINT outbox_event_type_check,
    DROP CONSTRAINT outbox_headers_check,
    DROP CONSTRAINT outbox_attempts_check;

ALTER TABLE @extschema@.outbox_destinations
    DROP CONSTRAINT outbox_destinations_name_check,
    DROP CONSTRAINT outbox_destinations_event_types_check,
    DROP CONSTRAINT outbox_destinations_url_check,
    DROP CONSTRAINT outbox_destinations_channel_check,
    DROP CONSTRAINT outbox_destinations_headers_check,
    DROP CONSTRAINT outbox_destinations_secret_check,
    DROP CONSTRAINT outbox_destinations_timeout_ms_check,
    DROP CONSTRAINT outbox_destinations_one_target,
    DROP CONSTRAINT outbox_destinations_secret_needs_url;

/* only when an event's own columns are written: the relay's marks skip it */
CREATE TRIGGER outbox_check
    BEFORE INSERT OR UPDATE OF event_type, aggregate_type, aggregate_id, payload, headers
    ON @extschema@.outbox
    FOR EACH ROW EXECUTE FUNCTION @extschema@._outbox_check_event();

CREATE TRIGGER outbox_check_attempts
    BEFORE UPDATE OF attempts ON @extschema@.outbox
    FOR EACH ROW WHEN (NEW.attempts OPERATOR(pg_catalog.<) 0)
    EXECUTE FUNCTION @extschema@._outbox_check_event();

CREATE TRIGGER outbox_destinations_check
    BEFORE INSERT OR UPDATE ON @extschema@.outbox_destinations
    FOR EACH ROW EXECUTE FUNCTION @extschema@._outbox_check_destination();

/*
 * The writer does not choose event_id: with the column granted, it could
 * send a purged event's id again with another payload, and learn from ON
 * CONFLICT which ids exist. The default is a UUIDv7 from the library, which
 * is also the id outbox_emit() returns (see src/emit.c).
 */
CREATE FUNCTION @extschema@._outbox_event_id()
RETURNS uuid
AS 'MODULE_PATHNAME', '_outbox_event_id'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION @extschema@._outbox_event_id() IS
    'Internal: default of outbox.event_id, a time-ordered UUIDv7 (the id outbox_emit() returns)';

ALTER TABLE @extschema@.outbox
    ALTER COLUMN event_id SET DEFAULT @extschema@._outbox_event_id();

REVOKE INSERT (event_id) ON @extschema@.outbox FROM outbox_writer;

REVOKE ALL ON FUNCTION
    @extschema@._outbox_check_event(),
    @extschema@._outbox_check_destination(),
    @extschema@._outbox_destination_enabled(),
    @extschema@._outbox_event_id()
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@._outbox_event_id() TO outbox_writer, outbox_admin;

/*
 * Health in SQL. What the relays and destinations have done since the
 * server started (or since outbox_stats_reset()), read from shared memory
 * (src/health.c): they need the library in shared_preload_libraries.
 * Counters survive a relay's restart, not a server restart.
 */
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
    OUT stats_since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'outbox_relay_stats'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.outbox_relay_stats(boolean) IS
    'One row per relay of this database (all databases: needs pg_read_all_stats): state, passes, outcomes and last error, from shared memory';

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
    OUT stats_since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'outbox_destination_stats'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.outbox_destination_stats(boolean) IS
    'One row per destination of this database (all databases: needs pg_read_all_stats): outcomes, last success and failure, latency from created_at to delivery';

CREATE FUNCTION @extschema@.outbox_destination_latency(
    all_databases boolean DEFAULT false,
    OUT database name,
    OUT destination text,
    OUT le_ms double precision,
    OUT count bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'outbox_destination_latency'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.outbox_destination_latency(boolean) IS
    'The latency histogram of each destination as cumulative buckets (le_ms, count), for Prometheus';

CREATE FUNCTION @extschema@.outbox_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'outbox_stats_reset'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.outbox_stats_reset() IS
    'Zeroes the relay counters and drops the destination statistics of this database';

REVOKE ALL ON FUNCTION
    @extschema@.outbox_relay_stats(boolean),
    @extschema@.outbox_destination_stats(boolean),
    @extschema@.outbox_destination_latency(boolean),
    @extschema@.outbox_stats_reset()
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    @extschema@.outbox_relay_stats(boolean),
    @extschema@.outbox_destination_stats(boolean),
    @extschema@.outbox_destination_latency(boolean),
    @extschema@.outbox_stats_reset()
TO outbox_admin;

/*
 * A role for monitoring: the statistics functions, nothing else (not
 * outbox_status: its routing reads outbox_destinations, secrets included,
 * with the caller's privileges). Before it, an exporter needed outbox_admin, which reads
 * every destination's secret, in every database (roles are cluster-wide).
 * Created like the other group roles (outbox--1.0.sql), if it is not
 * there.
 */
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) 'outbox_monitor') THEN
        CREATE ROLE outbox_monitor NOLOGIN;
    END IF;
END
$roles$;

GRANT USAGE ON SCHEMA @extschema@ TO outbox_monitor;
GRANT EXECUTE ON FUNCTION
    @extschema@.outbox_relay_stats(boolean),
    @extschema@.outbox_destination_stats(boolean),
    @extschema@.outbox_destination_latency(boolean)
TO outbox_monitor;

/*
 * Purge by index, in absolute time. The relay purges by itself when
 * outbox.retention or outbox.inbox_retention is set (src/purge.c); both
 * it and the functions below find purgeable rows through these indexes,
 * so their cost follows what they delete, not the table's size: pending
 * events are not in outbox_delivered_idx at all. It is keyed by
 * destination first, for NOTIFY consumers' catch-up (outbox_catch_up);
 * a purge takes one destination after the other, each found from the
 * previous one with a probe of the index. One index serves both: every
 * index on outbox is one more insert for each event the relay marks
 * delivered.
 *
 * Building them takes a SHARE lock on each table for the length of the
 * build, so inserts (outbox_emit, inbox_accept) wait meanwhile: about a
 * second per million rows. On a large table, build them first without
 * blocking, with the same names and definitions; the upgrade then keeps
 * them:
 *   CREATE INDEX CONCURRENTLY outbox_delivered_idx ON outbox (destination, delivered_at, id)
 *       WHERE delivered_at IS NOT NULL;
 *   CREATE INDEX CONCURRENTLY inbox_processed_at_idx ON inbox (processed_at);
 */
CREATE INDEX IF NOT EXISTS outbox_delivered_idx ON @extschema@.outbox (destination, delivered_at, id)
    WHERE delivered_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS inbox_processed_at_idx ON @extschema@.inbox (processed_at);

/*
 * The cut-off is now() minus the retention as a length of time: a day is
 * 86400 seconds and a month 30 days (extract(epoch FROM interval)), so
 * the same rows are purged under any TimeZone. now() - interval '30 days'
 * counted calendar days in the session's zone instead, an hour off across
 * a clock change.
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
         WHERE o.destination = dest AND o.delivered_at < cut;
        GET DIAGNOSTICS k = ROW_COUNT;
        n := n + k;
        SELECT min(o.destination) INTO dest
          FROM @extschema@.outbox o
         WHERE o.delivered_at IS NOT NULL AND o.destination > dest;
    END LOOP;
    DELETE FROM @extschema@.outbox o
     WHERE o.destination IS NULL AND o.delivered_at < cut;
    GET DIAGNOSTICS k = ROW_COUNT;
    RETURN n + k;
END
$$;

/*
 * Operating for years: time-zone-proof times, redelivery by time range,
 * cancelling by hand, and the library's version.
 */

COMMENT ON FUNCTION @extschema@.outbox_library_version() IS
    'Version of the outbox library this server runs; differs from the extension''s version until both steps of an upgrade are done';

/* inbox_purge: the same absolute cut-off as outbox_purge */
CREATE OR REPLACE FUNCTION @extschema@.inbox_purge(retention interval DEFAULT '30 days')
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
    DELETE FROM @extschema@.inbox
     WHERE processed_at < now() - make_interval(secs => extract(epoch FROM retention));
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

COMMENT ON FUNCTION @extschema@.outbox_purge(interval) IS
    'Deletes events delivered longer ago than retention (absolute time), in the caller''s transaction; returns how many';
COMMENT ON FUNCTION @extschema@.inbox_purge(interval) IS
    'Deletes inbox rows processed longer ago than retention (absolute time); keep it longer than the longest redelivery delay';

CREATE OR REPLACE FUNCTION @extschema@.outbox_redeliver(event_id uuid)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    WITH r AS (
        UPDATE @extschema@.outbox o
           SET delivered_at = NULL, dead_at = NULL, cancelled_at = NULL,
               skipped_at = NULL, skipped_by = NULL,
               next_attempt_at = now(), redelivered_at = now()
         WHERE o.event_id = outbox_redeliver.event_id
           AND (o.delivered_at IS NOT NULL OR o.dead_at IS NOT NULL OR o.next_attempt_at > now())
        RETURNING 1)
    SELECT count(*) > 0 FROM r
$$;

COMMENT ON FUNCTION @extschema@.outbox_redeliver(uuid) IS
    'Makes a delivered, dead-lettered, cancelled or skipped event due again; returns false if it was already due';

/* a cancelled event was stopped on purpose: only outbox_redeliver(uuid) brings it back */
CREATE OR REPLACE FUNCTION @extschema@.outbox_redeliver_dead()
RETURNS bigint
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    WITH r AS (
        UPDATE @extschema@.outbox
           SET dead_at = NULL, next_attempt_at = now(), redelivered_at = now()
         WHERE dead_at IS NOT NULL AND cancelled_at IS NULL AND skipped_at IS NULL
        RETURNING 1)
    SELECT count(*) FROM r
$$;

COMMENT ON FUNCTION @extschema@.outbox_redeliver_dead() IS
    'Makes every dead-lettered event due again, except cancelled and skipped ones; returns how many';

/*
 * Replay: delivered events whose delivery was recorded in [since, until),
 * optionally only of one event type and one destination, are made due
 * again. The bounds are instants (timestamptz): no time zone enters. They
 * must be given: a NULL from a subquery must not replay everything
 * ('-infinity' and 'infinity' say so on purpose). With a destination, it
 * is a range of outbox_delivered_idx; without, it reads the whole table,
 * once.
 */
CREATE FUNCTION @extschema@.outbox_redeliver(
    since       timestamptz,
    until       timestamptz,
    event_type  text DEFAULT NULL,
    destination text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    IF since IS NULL OR until IS NULL THEN
        RAISE EXCEPTION 'since and until must not be null'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Use ''-infinity'' or ''infinity'' for an open end.';
    END IF;
    IF since > until THEN
        RAISE EXCEPTION 'since must not be later than until'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE @extschema@.outbox o
       SET delivered_at = NULL, next_attempt_at = now(), redelivered_at = now()
     WHERE o.delivered_at >= outbox_redeliver.since
       AND o.delivered_at < outbox_redeliver.until
       AND (outbox_redeliver.event_type IS NULL OR o.event_type = outbox_redeliver.event_type)
       AND (outbox_redeliver.destination IS NULL OR o.destination = outbox_redeliver.destination);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

COMMENT ON FUNCTION @extschema@.outbox_redeliver(timestamptz, timestamptz, text, text) IS
    'Makes the events delivered in [since, until) due again, optionally of one event type and one destination; returns how many';

/*
 * Cancelling by hand: a pending event is dead-lettered with the reason,
 * and who gave it, in last_error. One in flight is cancelled too: its
 * request may still arrive, but the relay records outcomes only for rows
 * that are neither delivered nor dead (src/queue.c), so the cancel stands.
 */
CREATE FUNCTION @extschema@.outbox_cancel(event_id uuid, reason text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cancelled bigint;
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
    UPDATE @extschema@.outbox o
       SET dead_at = now(), cancelled_at = now(),
           last_error = 'cancelled by ' || current_user || ': ' || reason
     WHERE o.event_id = outbox_cancel.event_id
       AND o.delivered_at IS NULL AND o.dead_at IS NULL
    RETURNING o.id INTO cancelled;
    IF cancelled IS NULL THEN
        RETURN false;
    END IF;
    -- a cancelled event holds back nothing: the next one of its key is due
    UPDATE @extschema@.outbox o
       SET held_by = NULL, next_attempt_at = now()
     WHERE o.held_by = cancelled AND o.delivered_at IS NULL AND o.next_attempt_at > now();
    RETURN true;
END
$$;

COMMENT ON FUNCTION @extschema@.outbox_cancel(uuid, text) IS
    'Dead-letters a pending event by hand, with the reason in last_error; returns false if it was not pending';

/*
 * Ordered destinations: a dead-lettered event holds back the later events
 * of its aggregate until it is redelivered or skipped. Skipping keeps it
 * dead (outbox_redeliver_dead passes it over; outbox_redeliver(uuid)
 * still brings it back) and records who skipped it and when; the next
 * event of its aggregate is due at once.
 */
CREATE FUNCTION @extschema@.outbox_skip_dead(event_id uuid)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    skipped bigint;
BEGIN
    IF event_id IS NULL THEN
        RAISE EXCEPTION 'event_id must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    UPDATE @extschema@.outbox o
       SET skipped_at = now(), skipped_by = current_user
     WHERE o.event_id = outbox_skip_dead.event_id
       AND o.dead_at IS NOT NULL AND o.delivered_at IS NULL
       AND o.cancelled_at IS NULL AND o.skipped_at IS NULL
    RETURNING o.id INTO skipped;
    IF skipped IS NULL THEN
        RETURN false;
    END IF;
    UPDATE @extschema@.outbox o
       SET held_by = NULL, next_attempt_at = now()
     WHERE o.held_by = skipped AND o.delivered_at IS NULL AND o.next_attempt_at > now();
    RETURN true;
END
$$;

COMMENT ON FUNCTION @extschema@.outbox_skip_dead(uuid) IS
    'Lets the later events of a dead-lettered event''s aggregate go on without it (ordered destinations), recording who and when; returns false if it is not dead, or cancelled or skipped already';

/*
 * The aggregates whose events wait at an ordered destination: those with
 * more than one event not yet delivered, cancelled or skipped that goes
 * there, each with the first of them (the event that holds the others
 * back), its state and age, and how many wait behind it. Found from the
 * events themselves, not from what claims have held: it is right at once
 * after a change of destinations (which releases every hold). It reads
 * every undelivered event that has an aggregate id, as outbox_status
 * reads every undelivered event.
 */
CREATE VIEW @extschema@.outbox_blocked_keys AS
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
          CROSS JOIN LATERAL @extschema@._outbox_route(o.event_type) r
         WHERE o.aggregate_id IS NOT NULL AND o.delivered_at IS NULL
           AND o.cancelled_at IS NULL AND o.skipped_at IS NULL AND r.ordered
         GROUP BY r.name, o.aggregate_id, coalesce(o.aggregate_type, '')
        HAVING count(*) > 1) w
  JOIN @extschema@.outbox h ON h.id = w.head;

COMMENT ON VIEW @extschema@.outbox_blocked_keys IS
    'Aggregates whose events wait at an ordered destination: the event that holds them back, its state (due, in flight, backing off, dead) and age, and how many wait';

REVOKE ALL ON @extschema@.outbox_blocked_keys FROM PUBLIC;
GRANT SELECT ON @extschema@.outbox_blocked_keys TO outbox_admin;

REVOKE ALL ON FUNCTION
    @extschema@.outbox_library_version(),
    @extschema@.outbox_redeliver(timestamptz, timestamptz, text, text),
    @extschema@.outbox_cancel(uuid, text),
    @extschema@.outbox_skip_dead(uuid)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    @extschema@.outbox_library_version(),
    @extschema@.outbox_redeliver(timestamptz, timestamptz, text, text),
    @extschema@.outbox_cancel(uuid, text),
    @extschema@.outbox_skip_dead(uuid)
TO outbox_admin;

/*
 * A JetStream destination checked as a relay would check it, at will:
 * after creating or changing one, before events flow (a relay checks it
 * when it connects, for the first event). It connects with the
 * destination's credentials (so it is outbox_admin's, like the row), reads
 * the stream, and says whether every resend of the retry schedule falls
 * within its duplicate window. The backend waits up to the destination's
 * time limit, interruptibly.
 */
CREATE FUNCTION @extschema@._outbox_jetstream_check(d @extschema@.outbox_destinations,
    OUT stream text, OUT duplicate_window interval, OUT max_age interval,
    OUT retry_span interval, OUT exactly_once boolean, OUT problem text)
RETURNS record
AS 'MODULE_PATHNAME', '_outbox_jetstream_check'
LANGUAGE C VOLATILE STRICT;

COMMENT ON FUNCTION @extschema@._outbox_jetstream_check(@extschema@.outbox_destinations) IS
    'Internal: connects to a JetStream destination and reads its stream, for outbox_jetstream_check';

CREATE FUNCTION @extschema@.outbox_jetstream_check(destination text,
    OUT stream text, OUT duplicate_window interval, OUT max_age interval,
    OUT retry_span interval, OUT exactly_once boolean, OUT problem text)
RETURNS record
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d @extschema@.outbox_destinations;
BEGIN
    IF destination IS NULL THEN
        RAISE EXCEPTION 'destination must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO d FROM @extschema@.outbox_destinations o
     WHERE o.name = outbox_jetstream_check.destination;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'destination "%" does not exist', destination
            USING ERRCODE = 'undefined_object';
    END IF;
    SELECT c.stream, c.duplicate_window, c.max_age, c.retry_span, c.exactly_once, c.problem
      INTO stream, duplicate_window, max_age, retry_span, exactly_once, problem
      FROM @extschema@._outbox_jetstream_check(d) c;
END
$$;

COMMENT ON FUNCTION @extschema@.outbox_jetstream_check(text) IS
    'Connects to a JetStream destination as a relay would and reads its stream: the duplicate window, max_age, the retry schedule''s longest span, whether every resend falls within the window (exactly_once), and the problem if not or if the connection fails';

REVOKE ALL ON FUNCTION
    @extschema@._outbox_jetstream_check(@extschema@.outbox_destinations),
    @extschema@.outbox_jetstream_check(text)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    @extschema@._outbox_jetstream_check(@extschema@.outbox_destinations),
    @extschema@.outbox_jetstream_check(text)
TO outbox_admin;

/*
 * The catch-up of a NOTIFY consumer: the events delivered to NOTIFY
 * destination dest within the last `within` that consumer has not
 * accepted with inbox_accept(), oldest delivery first, at most max_events.
 * Keyed by the inbox, not by a position: events commit, and are
 * delivered, out of id order, and a listener that was away or failed to
 * process one gets it here whatever came after it.
 *
 * SECURITY DEFINER, for outbox_consumer, which may not read outbox: it
 * reveals only events delivered to a destination that is a NOTIFY channel
 * (never a webhook's) since that destination was created (a webhook
 * deleted and replaced by a channel of the same name does not expose its
 * events; names and kinds of destinations cannot be changed in place).
 * Any NOTIFY destination may be named: members of outbox_consumer read
 * every NOTIFY destination's events of the window, payloads included.
 * The window is at most 7 days (outbox_purge's default retention), in
 * seconds, as the window is computed: comparing intervals counts a month
 * as 30 days and extract(epoch) a year as 365.25, so '1000 years' -
 * '359993 days' is 7 days to the one and 14 years to the other; cost:
 * a range scan of outbox_delivered_idx over the destination's window and
 * one inbox lookup per event in it, until max_events are found.
 */
CREATE FUNCTION @extschema@.outbox_catch_up(
    destination text,
    consumer    text DEFAULT 'default',
    within      interval DEFAULT '1 day',
    max_events  integer DEFAULT 100)
RETURNS TABLE (event_id uuid, event_type text, aggregate_type text, aggregate_id text,
               created_at timestamptz, delivered_at timestamptz, payload jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    since timestamptz;
BEGIN
    IF outbox_catch_up.destination IS NULL OR outbox_catch_up.consumer IS NULL
       OR within IS NULL OR max_events IS NULL THEN
        RAISE EXCEPTION 'destination, consumer, within and max_events must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF extract(epoch FROM within) <= 0 OR extract(epoch FROM within) > 7 * 86400 THEN
        RAISE EXCEPTION 'within must be more than 0 and at most 7 days'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_events < 1 OR max_events > 10000 THEN
        RAISE EXCEPTION 'max_events must be between 1 and 10000'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- in seconds: a day of the session's time zone can have 23 or 25 hours
    SELECT greatest(now() - make_interval(secs => extract(epoch FROM within)), d.catch_up_from)
      INTO since
      FROM @extschema@.outbox_destinations d
     WHERE d.name = outbox_catch_up.destination AND d.kind = 'notify';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no NOTIFY destination named "%"', outbox_catch_up.destination
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Catch-up reads events of NOTIFY destinations only.';
    END IF;
    RETURN QUERY
    SELECT o.event_id, o.event_type, o.aggregate_type, o.aggregate_id,
           o.created_at, o.delivered_at, o.payload
      FROM @extschema@.outbox o
     WHERE o.destination = outbox_catch_up.destination
       AND o.delivered_at >= since
       AND NOT EXISTS (SELECT FROM @extschema@.inbox i
                        WHERE i.consumer = outbox_catch_up.consumer
                          AND i.event_id = o.event_id)
     ORDER BY o.delivered_at, o.id
     LIMIT max_events;
END
$$;

COMMENT ON FUNCTION @extschema@.outbox_catch_up(text, text, interval, integer) IS
    'Events delivered to a NOTIFY destination within the window that consumer has not accepted with inbox_accept, oldest first';

REVOKE ALL ON FUNCTION @extschema@.outbox_catch_up(text, text, interval, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.outbox_catch_up(text, text, interval, integer)
    TO outbox_consumer, outbox_admin;

/*
 * Key rotation and ed25519 signatures (Standard Webhooks). A destination
 * signs each message with its secret column's secret and with each of its
 * rows here not yet retired: one signature per secret, all in one
 * webhook-signature value, and a receiver accepts the message when any
 * verifies with a secret it holds. So a secret can be replaced without a
 * failed verification: add the new one, let receivers take it, retire the
 * old one (now, or after an overlap). A "whsk_" secret signs v1a
 * (ed25519); receivers verify with its public key, public_key here. Rows
 * past retire_at are no longer used; they stay as a record until deleted.
 * There is no unique constraint on the secret: its violation would print
 * the secret; the trigger refuses a destination's secret twice instead.
 * The primary key is a number (a publication FOR ALL TABLES needs one for
 * the updates and deletes of outbox_retire_secret and of the cascade).
 */
CREATE FUNCTION @extschema@._outbox_new_secret(scheme text)
RETURNS text
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', '_outbox_new_secret';

COMMENT ON FUNCTION @extschema@._outbox_new_secret(text) IS
    'Internal: a new random secret, whsec_ (scheme v1, 32 bytes) or whsk_ (scheme v1a, an ed25519 seed)';

CREATE FUNCTION @extschema@.outbox_public_key(secret text)
RETURNS text
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'outbox_public_key';

COMMENT ON FUNCTION @extschema@.outbox_public_key(text) IS
    'The whpk_ public key that receivers verify v1a signatures with, of a whsk_ (ed25519) secret; NULL for a v1 secret';

CREATE TABLE @extschema@.outbox_destination_secrets (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    destination text NOT NULL
        REFERENCES @extschema@.outbox_destinations (name) ON UPDATE CASCADE ON DELETE CASCADE,
    secret      text NOT NULL,
    public_key  text GENERATED ALWAYS AS (@extschema@.outbox_public_key(secret)) STORED,
    added_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    retire_at   timestamptz
);

CREATE INDEX outbox_destination_secrets_destination_idx
    ON @extschema@.outbox_destination_secrets (destination);

COMMENT ON TABLE @extschema@.outbox_destination_secrets IS
    'More signing secrets of webhooks and NOTIFY channels, beside their secret column: each message is signed with each one in use (key rotation); readable by outbox_admin only';
COMMENT ON COLUMN @extschema@.outbox_destination_secrets.secret IS
    'A Standard Webhooks secret: whsec_<base64> or raw text (v1, HMAC-SHA256), or whsk_<base64> (v1a, ed25519)';
COMMENT ON COLUMN @extschema@.outbox_destination_secrets.public_key IS
    'For a whsk_ secret, the whpk_ public key that receivers verify v1a signatures with';
COMMENT ON COLUMN @extschema@.outbox_destination_secrets.retire_at IS
    'From then on the secret no longer signs; NULL: in use until retired (outbox_retire_secret)';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.outbox_destination_secrets', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.outbox_destination_secrets_id_seq', '');

CREATE FUNCTION @extschema@._outbox_check_secret()
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
    IF FOUND AND dest_kind NOT IN ('http', 'notify') THEN
        RAISE EXCEPTION 'destination secret is for a webhook or a NOTIFY channel'
            USING ERRCODE = 'check_violation';
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
    -- hold the id form with all the signatures (deliver_notify.c)
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

COMMENT ON FUNCTION @extschema@._outbox_check_secret() IS
    'Internal: trigger that refuses a secret that breaks the rules, a destination that does not sign, or a secret the destination already has, without printing the secret';

CREATE TRIGGER outbox_destination_secrets_check
    BEFORE INSERT OR UPDATE OF destination, secret, added_at, retire_at ON @extschema@.outbox_destination_secrets
    FOR EACH ROW EXECUTE FUNCTION @extschema@._outbox_check_secret();

CREATE FUNCTION @extschema@.outbox_add_secret(destination text, secret text DEFAULT NULL,
                                              scheme text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_secret text := outbox_add_secret.secret;
BEGIN
    IF outbox_add_secret.destination IS NULL THEN
        RAISE EXCEPTION 'destination must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF scheme IS NOT NULL AND scheme NOT IN ('v1', 'v1a') THEN
        RAISE EXCEPTION 'signature scheme must be v1 or v1a' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF new_secret IS NULL THEN
        new_secret := @extschema@._outbox_new_secret(coalesce(scheme, 'v1'));
    ELSIF scheme IS NOT NULL AND (scheme = 'v1a') <> starts_with(new_secret, 'whsk_') THEN
        RAISE EXCEPTION 'the secret is not of signature scheme %', scheme
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'v1a secrets start with whsk_; any other secret signs v1.';
    END IF;
    PERFORM FROM @extschema@.outbox_destinations d
      WHERE d.name = outbox_add_secret.destination FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'destination "%" does not exist', outbox_add_secret.destination
            USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM FROM @extschema@.outbox_destinations d
      WHERE d.name = outbox_add_secret.destination AND d.secret = new_secret;
    IF FOUND THEN
        RAISE EXCEPTION 'destination "%" already has this secret', outbox_add_secret.destination
            USING ERRCODE = 'unique_violation';
    END IF;
    -- a secret in its overlap, retiring later, is kept: a rotation undone
    UPDATE @extschema@.outbox_destination_secrets s SET retire_at = NULL
     WHERE s.destination = outbox_add_secret.destination AND s.secret = new_secret
       AND s.retire_at > now();
    IF FOUND THEN
        RETURN coalesce(@extschema@.outbox_public_key(new_secret), new_secret);
    END IF;
    INSERT INTO @extschema@.outbox_destination_secrets (destination, secret)
    VALUES (outbox_add_secret.destination, new_secret);
    RETURN coalesce(@extschema@.outbox_public_key(new_secret), new_secret);
END
$$;

COMMENT ON FUNCTION @extschema@.outbox_add_secret(text, text, text) IS
    'Adds a signing secret to a destination (given, or a new random one of scheme v1 or v1a); returns what receivers verify with: the secret (v1) or its whpk_ public key (v1a)';

CREATE FUNCTION @extschema@.outbox_retire_secret(destination text, secret text,
                                                 after interval DEFAULT '0')
RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d record;
    retire timestamptz := now() + after;
    in_column boolean;
    in_table integer;
    staying integer;
BEGIN
    IF outbox_retire_secret.destination IS NULL OR outbox_retire_secret.secret IS NULL
       OR after IS NULL THEN
        RAISE EXCEPTION 'destination, secret and after must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF after < interval '0' THEN
        RAISE EXCEPTION 'after must not be negative' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT o.name, o.secret INTO d FROM @extschema@.outbox_destinations o
     WHERE o.name = outbox_retire_secret.destination FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'destination "%" does not exist', outbox_retire_secret.destination
            USING ERRCODE = 'undefined_object';
    END IF;
    -- a secret is named by itself or, for a v1a secret, by its public key
    in_column := d.secret IS NOT NULL
        AND (d.secret = outbox_retire_secret.secret
             OR CASE WHEN @extschema@._outbox_valid_secret(d.secret)
                     THEN @extschema@.outbox_public_key(d.secret) END = outbox_retire_secret.secret);
    SELECT count(*) FILTER (WHERE s.secret = outbox_retire_secret.secret
                               OR s.public_key = outbox_retire_secret.secret),
           count(*) FILTER (WHERE s.retire_at IS NULL
                              AND s.secret <> outbox_retire_secret.secret
                              AND s.public_key IS DISTINCT FROM outbox_retire_secret.secret)
      INTO in_table, staying
      FROM @extschema@.outbox_destination_secrets s
     WHERE s.destination = d.name AND (s.retire_at IS NULL OR s.retire_at > now());
    IF NOT in_column AND in_table = 0 THEN
        RAISE EXCEPTION 'destination "%" has no such secret in use', d.name
            USING ERRCODE = 'undefined_object',
                  HINT = 'Name the secret, or the whpk_ public key of a v1a secret.';
    END IF;
    IF staying + (d.secret IS NOT NULL AND NOT in_column)::integer = 0 THEN
        RAISE EXCEPTION 'destination "%" would have no signing secret left', d.name
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'Its receivers would get unsigned messages.',
                  HINT = 'Add the next secret with outbox_add_secret() first. To stop signing, set secret to NULL in outbox_destinations and delete the destination''s rows of outbox_destination_secrets.';
    END IF;
    IF in_column THEN
        UPDATE @extschema@.outbox_destinations o SET secret = NULL WHERE o.name = d.name;
        -- signs on from the table until it retires (there already, if a row has it)
        IF after > interval '0' AND NOT EXISTS (
               SELECT FROM @extschema@.outbox_destination_secrets s
                WHERE s.destination = d.name AND s.secret = d.secret
                  AND (s.retire_at IS NULL OR s.retire_at > now())) THEN
            INSERT INTO @extschema@.outbox_destination_secrets (destination, secret, retire_at)
            VALUES (d.name, d.secret, retire);
        END IF;
    END IF;
    IF after > interval '0' THEN
        UPDATE @extschema@.outbox_destination_secrets s SET retire_at = retire
         WHERE s.destination = d.name
           AND (s.secret = outbox_retire_secret.secret OR s.public_key = outbox_retire_secret.secret)
           AND (s.retire_at IS NULL OR s.retire_at > retire);
    ELSE
        DELETE FROM @extschema@.outbox_destination_secrets s
         WHERE s.destination = d.name
           AND (s.secret = outbox_retire_secret.secret OR s.public_key = outbox_retire_secret.secret);
    END IF;
    RETURN retire;
END
$$;

COMMENT ON FUNCTION @extschema@.outbox_retire_secret(text, text, interval) IS
    'Stops signing with a destination''s secret (named by itself, or a v1a secret by its public key) now or after an overlap; refuses to leave the destination without a secret; returns when it stops';

REVOKE ALL ON FUNCTION
    @extschema@._outbox_new_secret(text),
    @extschema@.outbox_public_key(text),
    @extschema@._outbox_check_secret(),
    @extschema@.outbox_add_secret(text, text, text),
    @extschema@.outbox_retire_secret(text, text, interval)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    @extschema@._outbox_new_secret(text),
    @extschema@.outbox_public_key(text),
    @extschema@.outbox_add_secret(text, text, text),
    @extschema@.outbox_retire_secret(text, text, interval)
TO outbox_admin;
GRANT SELECT, INSERT, UPDATE, DELETE ON @extschema@.outbox_destination_secrets TO outbox_admin;

/*
 * A 1.0 secret that 1.1's rules refuse (base64 that is not canonical, a
 * raw one that contains whsk_ or whpk_, which now start ed25519 keys)
 * cannot sign: every event of its destination would be dead-lettered.
 * Say so at the update.
 */
DO $$
DECLARE
    bad text;
BEGIN
    SELECT string_agg(pg_catalog.quote_ident(d.name), ', ' ORDER BY d.name) INTO bad
      FROM @extschema@.outbox_destinations d
     WHERE d.secret IS NOT NULL AND NOT @extschema@._outbox_valid_secret(d.secret);
    IF bad IS NOT NULL THEN
        RAISE WARNING 'the secret of destination % cannot sign under version 1.1''s rules', bad
            USING DETAIL = 'Version 1.1 refuses secrets that Standard Webhooks libraries would read differently: base64 after whsec_ that is not canonical (padded, no stray bits), and raw secrets that contain whsec_, whsk_ or whpk_.',
                  HINT = 'Set a valid secret in their secret column, and give it to their receivers, before their events are sent: they would be dead-lettered.';
    END IF;
END
$$;
