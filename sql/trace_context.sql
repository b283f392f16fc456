-- The W3C trace context an event carries (src/trace_context.c): its own
-- traceparent and tracestate headers, or, when it has neither, the
-- settings outbox.traceparent and outbox.tracestate of the writer's
-- transaction. A value that is not a trace context is dropped with a
-- WARNING, never failing the write.
CREATE TABLE trace_orders (id int PRIMARY KEY);
CREATE FUNCTION trace_orders_emit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM outbox_emit('trace.order', jsonb_build_object('id', NEW.id));
    RETURN NEW;
END $$;
CREATE TRIGGER trace_orders_emit AFTER INSERT ON trace_orders
    FOR EACH ROW EXECUTE FUNCTION trace_orders_emit();

-- the transaction's setting, taken by outbox_emit, by a trigger's emit and
-- by a plain INSERT; gone after COMMIT (SET LOCAL)
BEGIN;
SET LOCAL outbox.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
SET LOCAL outbox.tracestate = 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE';
SELECT outbox_emit('trace.emit', '{}') IS NOT NULL AS emitted;
INSERT INTO trace_orders VALUES (1);
INSERT INTO outbox (event_type, payload, headers) VALUES ('trace.insert', '{}', '{"x-tenant": "t1"}');
COMMIT;
SELECT outbox_emit('trace.after', '{}') IS NOT NULL AS emitted;
SELECT event_type, headers FROM outbox WHERE event_type LIKE 'trace.%' ORDER BY id;

-- the writer's own headers win, whatever their case, and are never mixed
-- with the setting's
BEGIN;
SET LOCAL outbox.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
SET LOCAL outbox.tracestate = 'rojo=00f067aa0ba902b7';
SELECT outbox_emit('trace.own', '{}', headers => '{"TraceParent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}') IS NOT NULL AS emitted;
COMMIT;
SELECT headers FROM outbox WHERE event_type = 'trace.own';

-- not a trace context: dropped with a WARNING, the event written
-- the headers an event is written with, given headers h
CREATE FUNCTION trace_emit(h jsonb DEFAULT NULL) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    ev uuid := outbox_emit('trace.try', '{}', headers => h);
BEGIN
    RETURN (SELECT o.headers FROM outbox o WHERE o.event_id = ev);
END $$;
CREATE FUNCTION trace_try(tp text, ts text DEFAULT NULL) RETURNS jsonb LANGUAGE sql AS $$
    SELECT trace_emit(jsonb_strip_nulls(jsonb_build_object('x-keep', 'k', 'traceparent', tp, 'tracestate', ts)))
$$;
SELECT trace_try('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
SELECT trace_try('00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01');  -- upper case
SELECT trace_try('ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');  -- version ff
SELECT trace_try('00-00000000000000000000000000000000-b7ad6b7169203331-01');  -- zero trace-id
SELECT trace_try('00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01');  -- zero parent-id
SELECT trace_try('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x'); -- 00 with more
SELECT trace_try('01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x'); -- later version, more
SELECT trace_try('00-abc-def-01');
SELECT trace_try('Bearer WRITER-CHOSEN');
-- a tracestate: dropped alone when it is not one; without a traceparent, dropped
SELECT trace_try('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'rojo=00f067aa0ba902b7, congo=t61rcWkgMzE');
SELECT trace_try('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'vendor@sys=v,a=b');
SELECT trace_try('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'Rojo=1');
SELECT trace_try('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'rojo=a,b');
SELECT trace_try('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'rojo=a=b');
SELECT trace_try('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
                 (SELECT string_agg('k' || g || '=v', ',') FROM generate_series(1, 33) g));
SELECT trace_try('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
                 (SELECT string_agg('k' || g || '=v', ',') FROM generate_series(1, 32) g)) ? 'tracestate' AS thirty_two_kept;
SELECT trace_try('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'a=' || repeat('v', 511));
SELECT trace_try(NULL, 'rojo=00f067aa0ba902b7');

-- a setting that is not one: SET takes it (tracing never fails the
-- writer's statement), the emit drops it with a WARNING
BEGIN;
SET LOCAL outbox.traceparent = 'not-a-trace';
SELECT trace_emit();
SET LOCAL outbox.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
SET LOCAL outbox.tracestate = 'bad state';
SELECT trace_emit();
COMMIT;

-- the settings change between the events of one session: each event has
-- those in force when it was written (the headers built for the settings
-- are kept only while they keep their values), by outbox_emit and by a
-- plain INSERT
BEGIN;
SET LOCAL outbox.traceparent = '00-11111111111111111111111111111111-1111111111111111-01';
SET LOCAL outbox.tracestate = 'a=1';
SELECT trace_emit();
SET LOCAL outbox.traceparent = '00-22222222222222222222222222222222-2222222222222222-01';
SELECT trace_emit();
SET LOCAL outbox.tracestate = '';
SELECT trace_emit();
SET LOCAL outbox.tracestate = 'b=2';
SELECT trace_emit();
SET LOCAL outbox.tracestate = 'not one';
SELECT trace_emit();
SET LOCAL outbox.traceparent = '00-11111111111111111111111111111111-1111111111111111-01';
SET LOCAL outbox.tracestate = 'a=1';
SELECT trace_emit();
INSERT INTO outbox (event_type, payload) VALUES ('trace.plain', '{}');
SET LOCAL outbox.traceparent = '';
SELECT trace_emit();
COMMIT;
SELECT headers FROM outbox WHERE event_type = 'trace.plain';

-- no room among 64 headers: the event is written as given, with a WARNING
BEGIN;
SET LOCAL outbox.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
SELECT (SELECT count(*) FROM jsonb_object_keys(h)) AS headers, h ? 'traceparent' AS traced
  FROM trace_emit((SELECT jsonb_object_agg('x-h' || g, 'v') FROM generate_series(1, 63) g)) h;
SELECT (SELECT count(*) FROM jsonb_object_keys(h)) AS headers, h ? 'traceparent' AS traced
  FROM trace_emit((SELECT jsonb_object_agg('x-h' || g, 'v') FROM generate_series(1, 62) g)) h;
COMMIT;

-- an UPDATE does not take the setting: redelivery keeps what was written
BEGIN;
SET LOCAL outbox.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
UPDATE outbox SET attempts = 0 WHERE event_type = 'trace.after';
COMMIT;
SELECT headers FROM outbox WHERE event_type = 'trace.after';

SELECT name, setting, context FROM pg_settings WHERE name IN ('outbox.traceparent', 'outbox.tracestate') ORDER BY 1;
DELETE FROM outbox WHERE event_type LIKE 'trace.%';
DROP TABLE trace_orders;
DROP FUNCTION trace_orders_emit(), trace_try(text, text), trace_emit(jsonb);
