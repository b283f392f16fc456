-- A build without the RabbitMQ kind (make with_rabbitmq=no): a RabbitMQ
-- destination is refused when written, and the other kinds work as ever.
-- Runs instead of rabbitmq.sql on that build.
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options)
    VALUES ('r', 'rabbitmq', 'r.*', '{"urls": "amqp://127.0.0.1:5672"}')$$);
SELECT count(*) AS destinations FROM outbox_destinations;
INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('chan', 'left_out.*', 'regress_left_out');
SELECT name, kind FROM outbox_destinations;
DELETE FROM outbox_destinations;
