-- A build without the JetStream kind (make with_jetstream=no): the
-- extension installs, a JetStream destination is refused when written,
-- with or without its kind named, and outbox_jetstream_check() says the
-- build has no such kind. Runs instead of jetstream.sql on that build.
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream)
    VALUES ('js', 'js.*', 'nats://127.0.0.1:4222', 'events', 'EVENTS')$$);
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, kind, event_types, nats_servers, nats_subject, nats_stream)
    VALUES ('js', 'jetstream', 'js.*', 'nats://127.0.0.1:4222', 'events', 'EVENTS')$$);
-- a kind that exists in no build is still just not valid
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, event_types, url)
    VALUES ('k', 'mqtt', 'k.*', 'http://127.0.0.1:1/')$$);
SELECT count(*) AS destinations FROM outbox_destinations;
SELECT regress.try_detail($$SELECT * FROM _outbox_jetstream_check(jsonb_populate_record(NULL::outbox_destinations, '{"name": "js"}'))$$);
-- no setting of the kind is defined
SELECT count(*) AS jetstream_settings FROM pg_settings WHERE name LIKE 'outbox.jetstream\_%';
-- the other kinds work as ever
INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('chan', 'left_out.*', 'regress_left_out');
SELECT name, kind FROM outbox_destinations;
DELETE FROM outbox_destinations;
-- nor may another kind's destination hold the left-out kind's target or
-- its own columns (credentials among them), which no kind built checks
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, event_types, url, nats_servers)
    VALUES ('w', 'w.*', 'http://127.0.0.1:1/', 'nats://127.0.0.1:4222')$$);
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, event_types, url, nats_password)
    VALUES ('w', 'w.*', 'http://127.0.0.1:1/', 'secret')$$);
INSERT INTO outbox_destinations (name, event_types, url) VALUES ('w', 'w.*', 'http://127.0.0.1:1/');
SELECT regress.try_detail($$UPDATE outbox_destinations SET nats_token = 't' WHERE name = 'w'$$);
SELECT name, kind FROM outbox_destinations;
DELETE FROM outbox_destinations;
