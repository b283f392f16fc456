-- A build without the Kafka kind (make with_kafka=no): a Kafka
-- destination is refused when written, and the other kinds work as ever.
-- Runs instead of kafka.sql on that build.
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options)
    VALUES ('k', 'kafka', 'k.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "t"}')$$);
SELECT count(*) AS destinations FROM outbox_destinations;
INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('chan', 'left_out.*', 'regress_left_out');
SELECT name, kind FROM outbox_destinations;
DELETE FROM outbox_destinations;
