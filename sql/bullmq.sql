-- BullMQ destinations: the rules of their options, and the checks of the
-- schema they name, for each state a schema can be in short of BullMQ's
-- migrations (the TAP tests run those: test/t/110_bullmq.pl). The relay
-- running in this database leaves these destinations alone: their
-- patterns take no event.

-- options: the target is "queue", and the kind is named
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types) VALUES ('q', 'bullmq', 'none.*')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('q', 'bullmq', 'none.*', '{"queue": ""}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('q', 'bullmq', 'none.*', '{"queue": "a:b"}')$$);
-- a template of the queue's name: the event's fields, and nothing else
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('q', 'bullmq', 'none.*', '{"queue": "q-{customer}"}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('q', 'bullmq', 'none.*', '{"queue": "q-{aggregate_type"}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('q', 'bullmq', 'none.*', '{"queue": "{aggregate_type}:{aggregate_id}"}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('q', 'bullmq', 'none.*', '{"queue": "q", "topic": "t"}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('q', 'bullmq', 'none.*', '{"queue": "q", "job_data": "body"}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('q', 'bullmq', 'none.*', '{"queue": "q", "attempts": 0}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('q', 'bullmq', 'none.*', '{"queue": "q", "attempts": 1.5}')$$);
-- BullMQ's limit: Priority should be between 0 and 2097151
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('q', 'bullmq', 'none.*', '{"queue": "q", "priority": 2097152}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('q', 'bullmq', 'none.*', '{"queue": "q", "backoff_type": "linear", "backoff_delay_ms": 1000}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('q', 'bullmq', 'none.*', '{"queue": "q", "backoff_type": "fixed"}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('q', 'bullmq', 'none.*', '{"queue": "q", "backoff_delay_ms": 1000}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('q', 'bullmq', 'none.*', '{"queue": "q", "remove_on_complete_seconds": -1}')$$);
-- a kind that does not sign, sends the envelope only, and has no headers
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options, headers) VALUES ('q', 'bullmq', 'none.*', '{"queue": "q"}', '{"x-a": "b"}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options, event_headers) VALUES ('q', 'bullmq', 'none.*', '{"queue": "q"}', '{}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options, secret) VALUES ('q', 'bullmq', 'none.*', '{"queue": "q"}', 'whsec_c2VjcmV0')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options, format) VALUES ('q', 'bullmq', 'none.*', '{"queue": "q"}', 'cloudevents')$$);

-- the schema: missing (the default, bullmq, and a named one)
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('q', 'bullmq', 'none.*', '{"queue": "q"}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('q', 'bullmq', 'none.*', '{"queue": "q", "schema": "jobs"}')$$);
-- there, without BullMQ's ledger
CREATE SCHEMA jobs;
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('q', 'bullmq', 'none.*', '{"queue": "q", "schema": "jobs"}')$$);
-- a ledger, without add_job
CREATE TABLE jobs.migration (version integer PRIMARY KEY, name text NOT NULL,
                             min_client_version integer NOT NULL,
                             applied_at timestamptz NOT NULL DEFAULT now());
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('q', 'bullmq', 'none.*', '{"queue": "q", "schema": "jobs"}')$$);
-- an add_job with other arguments than BullMQ 6's
CREATE FUNCTION jobs.add_job(p_queue text, p_id text) RETURNS text
LANGUAGE sql RETURN p_id;
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('q', 'bullmq', 'none.*', '{"queue": "q", "schema": "jobs"}')$$);
DROP SCHEMA jobs CASCADE;
SELECT count(*) AS bullmq_destinations FROM outbox_destinations WHERE kind = 'bullmq';
