-- RabbitMQ destinations: the rules of their options, checked when written
-- (the TAP tests deliver to a real broker: test/t/120_rabbitmq.pl). No
-- message quotes a value: the options hold the password.

-- the target is "urls", and the kind is named
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types) VALUES ('r', 'rabbitmq', 'none.*')$$);
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": "http://127.0.0.1:5672"}')$$);
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": "amqp://guest:s3cret@127.0.0.1:5672"}')$$);
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": "amqp://127.0.0.1:5672/orders"}')$$);
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": "amqp://127.0.0.1:notaport"}')$$);
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": " , "}')$$);
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('r', 'rabbitmq', 'none.*',
    jsonb_build_object('urls', (SELECT string_agg('amqp://127.0.0.1:' || (5000 + g), ',') FROM generate_series(1, 17) g)))$$);
-- a CA file for amqps:// servers: an absolute path, which only a role with
-- pg_read_server_files may write, as a webhook's ca_file
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": "amqps://127.0.0.1:5671", "tls_ca_file": "ca.pem"}')$$);
CREATE ROLE regress_rmq_admin IN ROLE outbox_admin;
SET ROLE regress_rmq_admin;
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": "amqps://127.0.0.1:5671", "tls_ca_file": "/etc/ssl/certs/ca-certificates.crt"}')$$);
-- nor move a destination that names one to other servers
RESET ROLE;
INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": "amqps://127.0.0.1:5671", "tls_ca_file": "/etc/ssl/certs/ca-certificates.crt"}');
SET ROLE regress_rmq_admin;
SELECT regress.try_detail($$UPDATE outbox_destinations SET options = options || '{"urls": "amqps://127.0.0.1:5999"}' WHERE name = 'r'$$);
UPDATE outbox_destinations SET enabled = false WHERE name = 'r';
RESET ROLE;
DELETE FROM outbox_destinations;
DROP ROLE regress_rmq_admin;

-- the exchange's name, as RabbitMQ takes it
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": "amqp://127.0.0.1", "exchange": "a b"}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('r', 'rabbitmq', 'none.*', jsonb_build_object('urls', 'amqp://127.0.0.1', 'exchange', repeat('e', 256)))$$);
-- a routing key or a template of one from the event's fields, at most 255 bytes
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": "amqp://127.0.0.1", "routing_key": "orders.{customer}"}')$$);
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('r', 'rabbitmq', 'none.*', jsonb_build_object('urls', 'amqp://127.0.0.1', 'routing_key', repeat('k', 256)))$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": "amqp://127.0.0.1", "max_unconfirmed": 0}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": "amqp://127.0.0.1", "max_unconfirmed": 4097}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": "amqp://127.0.0.1", "queue": "q"}')$$);
-- headers that RabbitMQ reads as its own (CC and BCC route, x-* are its
-- arguments) or that the relay sets: refused on the destination
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options, headers) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": "amqp://127.0.0.1"}', '{"CC": "other"}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options, headers) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": "amqp://127.0.0.1"}', '{"bcc": "other"}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options, headers) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": "amqp://127.0.0.1"}', '{"X-Delay": "1000"}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options, headers) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": "amqp://127.0.0.1"}', '{"outbox-event-id": "x"}')$$);
-- an AMQP header's name is a short string: 255 bytes at most
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options, headers) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": "amqp://127.0.0.1"}', jsonb_build_object(repeat('h', 256), 'v'))$$);
-- a message's size, at most: 1 kB to RabbitMQ 3.10's 128 MiB
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": "amqp://127.0.0.1", "max_message_bytes": 1023}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": "amqp://127.0.0.1", "max_message_bytes": 134217729}')$$);
-- a kind that does not sign
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options, secret) VALUES ('r', 'rabbitmq', 'none.*', '{"urls": "amqp://127.0.0.1"}', 'whsec_c2VjcmV0')$$);
SELECT count(*) AS destinations FROM outbox_destinations;

-- what is taken: several URLs, a vhost, credentials, a template, a header,
-- and each of the kind's formats
INSERT INTO outbox_destinations (name, kind, event_types, options, headers, format) VALUES
    ('r', 'rabbitmq', 'none.*', '{"urls": "amqp://127.0.0.1:5672, amqps://[::1]:5671/", "vhost": "shop", "user": "relay", "password": "s3cret",
      "exchange": "amq.topic", "routing_key": "{aggregate_type}.{event_type}", "max_unconfirmed": 64}', '{"tenant": "acme"}', 'cloudevents');
UPDATE outbox_destinations SET format = 'cloudevents-binary';
UPDATE outbox_destinations SET format = 'envelope';
SELECT name, kind, format FROM outbox_destinations;
-- a change is checked as a new row is
SELECT regress.try_detail($$UPDATE outbox_destinations SET options = options || '{"urls": "amqp://u:p@127.0.0.1"}' WHERE name = 'r'$$);
DELETE FROM outbox_destinations;
