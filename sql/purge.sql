-- outbox_purge() deletes delivered events older than the retention, and
-- nothing else: pending and dead-lettered events stay.
INSERT INTO outbox (event_type, payload, created_at, delivered_at, dead_at) VALUES
    ('old.delivered', '{}', now() - interval '10 days', now() - interval '9 days', NULL),
    ('recent.delivered', '{}', now() - interval '2 days', now() - interval '1 day', NULL),
    ('old.pending', '{}', now() - interval '10 days', NULL, NULL),
    ('old.dead', '{}', now() - interval '10 days', NULL, now() - interval '9 days');

SELECT outbox_purge() AS purged;
SELECT event_type FROM outbox ORDER BY 1;
SELECT outbox_purge('12 hours') AS purged;
SELECT event_type FROM outbox ORDER BY 1;
SELECT outbox_purge('0') AS purged;

-- ids far apart and many rows: every batch of the walk is bounded
INSERT INTO outbox (event_type, payload, created_at, delivered_at)
SELECT 'bulk', '{}', now() - interval '30 days', now() - interval '30 days'
  FROM generate_series(1, 25000);
SELECT outbox_purge('1 day') AS purged;
SELECT event_type, count(*) FROM outbox GROUP BY 1 ORDER BY 1;

-- an id near the top of bigint: the walk jumps the gap and does not overflow
INSERT INTO outbox (id, event_type, payload, delivered_at) OVERRIDING SYSTEM VALUE
VALUES (9223372036854775000, 'far', '{}', now() - interval '30 days');
SELECT outbox_purge('1 day') AS purged;
SELECT event_type, count(*) FROM outbox GROUP BY 1 ORDER BY 1;

-- errors
SELECT regress.try($$SELECT outbox_purge(NULL)$$);
SELECT regress.try($$SELECT outbox_purge('-1 day')$$);

DELETE FROM outbox;
