-- outbox_emit() writes in the caller's transaction.

-- ROLLBACK leaves neither the task nor its event
BEGIN;
INSERT INTO tasks (user_id, title) VALUES (7, 'rolled back');
SELECT outbox_emit('task.created', '{"title": "rolled back"}', 'task', '7') IS NOT NULL AS emitted;
ROLLBACK;
SELECT (SELECT count(*) FROM tasks) AS tasks, (SELECT count(*) FROM outbox) AS events;

-- COMMIT keeps both, the event pending with no attempt yet
BEGIN;
INSERT INTO tasks (user_id, title) VALUES (7, 'committed');
SELECT outbox_emit('task.created', jsonb_build_object('title', 'committed'), 'task', '7',
                   '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}') IS NOT NULL AS emitted;
COMMIT;
SELECT (SELECT count(*) FROM tasks) AS tasks, (SELECT count(*) FROM outbox) AS events;
SELECT event_type, aggregate_type, aggregate_id, payload, headers,
       delivered_at IS NULL AS pending, attempts, dead_at IS NULL AS live
  FROM outbox;

-- the returned value is the stored event_id, a version 7 UUID
SELECT outbox_emit('task.updated', '{}') AS new_event_id \gset
SELECT count(*) AS stored, substr(:'new_event_id', 15, 1) AS version
  FROM outbox WHERE event_id = :'new_event_id';

-- event ids of a session are strictly increasing, like ids
SELECT count(outbox_emit('seq', to_jsonb(i))) FROM generate_series(1, 200) i;
SELECT bool_and(ok) AS increasing, count(*) AS events FROM (
    SELECT event_id > lag(event_id) OVER (ORDER BY id) AS ok
      FROM outbox WHERE event_type = 'seq') s;

-- bad arguments: clear errors with SQLSTATEs, the transaction alone affected
SELECT regress.try($$SELECT outbox_emit(NULL, '{}')$$);
SELECT regress.try($$SELECT outbox_emit('', '{}')$$);
SELECT regress.try($$SELECT outbox_emit('task.created', NULL)$$);
SELECT regress.try($$SELECT outbox_emit('task.created', '{"broken": ')$$);
SELECT regress.try($$SELECT outbox_emit('task.created', '{}', headers => '[1, 2]')$$);
SELECT regress.try($$SELECT outbox_emit('task.created', '{}', headers => '"text"')$$);
-- headers the relay could not send are refused when written
SELECT regress.try($$SELECT outbox_emit('task.created', '{}', headers => jsonb_build_object('x-evil', E'a\r\nx-injected: 1'))$$);
SELECT regress.try($$SELECT outbox_emit('task.created', '{}', headers => '{"bad name": "v"}')$$);
SELECT regress.try($$SELECT outbox_emit('task.huge', jsonb_build_object('a', repeat('x', 65 * 1024 * 1024)))$$);

-- JSON null and scalars are valid payloads
SELECT outbox_emit('scalar', 'null') IS NOT NULL AS null_payload,
       outbox_emit('scalar', '42') IS NOT NULL AS number_payload;

-- an error later in the transaction takes the event with it
BEGIN;
SELECT outbox_emit('doomed', '{}') IS NOT NULL AS emitted;
SELECT 1 / 0;
ROLLBACK;
SELECT count(*) AS doomed FROM outbox WHERE event_type = 'doomed';

-- a savepoint rolled back removes only the events emitted after it
BEGIN;
SELECT outbox_emit('kept', '{}') IS NOT NULL AS emitted;
SAVEPOINT s;
SELECT outbox_emit('undone', '{}') IS NOT NULL AS emitted;
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT event_type, count(*) FROM outbox WHERE event_type IN ('kept', 'undone') GROUP BY 1;

-- from a trigger: every task insert emits an event in the same transaction
CREATE FUNCTION tasks_emit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM outbox_emit('task.created', to_jsonb(NEW), 'task', NEW.id::text);
    RETURN NEW;
END
$$;
CREATE TRIGGER tasks_emit AFTER INSERT ON tasks FOR EACH ROW EXECUTE FUNCTION tasks_emit();
INSERT INTO tasks (user_id, title) SELECT 8, 'bulk ' || i FROM generate_series(1, 3) i;
SELECT aggregate_id, payload->>'title' AS title FROM outbox
 WHERE event_type = 'task.created' AND aggregate_type = 'task' AND payload ? 'user_id'
 ORDER BY id;

-- from a procedure that commits between events
CREATE PROCEDURE emit_twice() LANGUAGE plpgsql AS $$
BEGIN
    PERFORM outbox_emit('proc', '1');
    COMMIT;
    PERFORM outbox_emit('proc', '2');
    ROLLBACK;
END
$$;
CALL emit_twice();
SELECT payload FROM outbox WHERE event_type = 'proc';

DROP TRIGGER tasks_emit ON tasks;
DELETE FROM outbox;
DELETE FROM tasks;
