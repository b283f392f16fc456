-- Kafka destinations: the rules of their options, checked when written
-- (the TAP tests deliver to librdkafka's mock cluster: test/t/130_kafka.pl).
-- No message quotes a value: the options hold the SASL password.

-- the target is "bootstrap_servers", the topic is required, the kind is named
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types) VALUES ('k', 'kafka', 'none.*')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092"}')$$);
-- servers: host:port, no scheme, at most 16
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "kafka://127.0.0.1:9092", "topic": "t"}')$$);
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1", "topic": "t"}')$$);
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:0", "topic": "t"}')$$);
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092x", "topic": "t"}')$$);
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "user@host:9092", "topic": "t"}')$$);
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": " , ", "topic": "t"}')$$);
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*',
    jsonb_build_object('topic', 't', 'bootstrap_servers', (SELECT string_agg('127.0.0.1:' || (9000 + g), ',') FROM generate_series(1, 17) g)))$$);
-- a topic's name, as Kafka takes it, or a template of one
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "a b"}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": ".."}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', jsonb_build_object('bootstrap_servers', '127.0.0.1:9092', 'topic', repeat('t', 250)))$$);
-- nor one of Kafka's internal topics, which start with "__"
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "__consumer_offsets"}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "__{aggregate_type}"}')$$);
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "orders.{customer}"}')$$);
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "t", "key": "{nothing}"}')$$);
-- the words of security_protocol, sasl_mechanism and compression_type
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "t", "security_protocol": "SSL"}')$$);
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "t", "security_protocol": "sasl_ssl", "sasl_mechanism": "GSSAPI", "sasl_username": "u", "sasl_password": "p"}')$$);
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "t", "compression_type": "brotli"}')$$);
-- SASL's options go together, and with a SASL protocol only
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "t", "security_protocol": "sasl_ssl", "sasl_mechanism": "PLAIN", "sasl_username": "u"}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "t", "sasl_mechanism": "PLAIN", "sasl_username": "u", "sasl_password": "s3cret"}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "t", "security_protocol": "sasl_plaintext"}')$$);
-- a CA file: with TLS only, an absolute path, which only a role with
-- pg_read_server_files may write, as a webhook's ca_file
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "t", "tls_ca_file": "/etc/ssl/certs/ca-certificates.crt"}')$$);
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9093", "topic": "t", "security_protocol": "ssl", "tls_ca_file": "ca.pem"}')$$);
CREATE ROLE regress_kafka_admin IN ROLE outbox_admin;
SET ROLE regress_kafka_admin;
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9093", "topic": "t", "security_protocol": "ssl", "tls_ca_file": "/etc/ssl/certs/ca-certificates.crt"}')$$);
RESET ROLE;
DROP ROLE regress_kafka_admin;
-- linger_ms below the time limit (librdkafka: message.timeout.ms > linger.ms)
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, timeout_ms, options) VALUES ('k', 'kafka', 'none.*', 1000, '{"bootstrap_servers": "127.0.0.1:9092", "topic": "t", "linger_ms": 1000}')$$);
-- bounds
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "t", "max_outstanding": 0}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "t", "max_outstanding": 100001}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "t", "max_message_bytes": 999}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "t", "linger_ms": -1}')$$);
-- anything else is refused, librdkafka's own property names included
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "t", "enable.idempotence": false}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "t", "acks": 1}')$$);
-- headers the relay sets, and the CloudEvents binding's ce_*: refused on the destination
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, options, headers) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "t"}', '{"ce_type": "x"}')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options, headers) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "t"}', '{"Outbox-Event-Id": "x"}')$$);
-- a kind that does not sign
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, options, secret) VALUES ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092", "topic": "t"}', 'whsec_c2VjcmV0')$$);
SELECT count(*) AS destinations FROM outbox_destinations;

-- what is taken: several servers (IPv6 too), SASL over TLS, templates, a
-- header, the producer's settings and each of the kind's formats
INSERT INTO outbox_destinations (name, kind, event_types, options, headers, format) VALUES
    ('k', 'kafka', 'none.*', '{"bootstrap_servers": "127.0.0.1:9092, [::1]:9093,kafka-1.example:9094", "topic": "{aggregate_type}.events",
      "key": "{aggregate_id}", "security_protocol": "sasl_ssl", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "relay",
      "sasl_password": "s3cret", "compression_type": "zstd", "linger_ms": 5, "batch_size": 65536, "max_outstanding": 500}',
      '{"tenant": "acme"}', 'cloudevents');
UPDATE outbox_destinations SET format = 'cloudevents-binary';
UPDATE outbox_destinations SET format = 'envelope';
SELECT name, kind, format FROM outbox_destinations;
-- a change is checked as a new row is
SELECT regress.try_detail($$UPDATE outbox_destinations SET options = options || '{"topic": "a/b"}' WHERE name = 'k'$$);
DELETE FROM outbox_destinations;
