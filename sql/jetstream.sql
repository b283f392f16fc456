-- JetStream destinations: the rules of a row (jetstream_rules.c). No
-- server is needed: rows are checked when written; the relay's side is in
-- the TAP tests (test/t/09*_jetstream_*.pl).

-- a minimal destination: the kind comes from its one target
INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream)
VALUES ('js', 'none.js', 'nats://127.0.0.1:4222', 'orders.{aggregate_type}.{aggregate_id}', 'ORDERS');
SELECT name, kind, nats_servers, nats_subject, nats_stream FROM outbox_destinations;

-- servers: nats:// or tls://, host and optional port, no credentials, 1 to 16
SELECT regress.try($$UPDATE outbox_destinations SET nats_servers = 'nats://a:4222, nats://b:4223,nats://[::1]:4224,nats://c' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_servers = 'tls://a:4222,tls://b' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_servers = 'nats://a:4222,tls://b' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_servers = 'http://a:4222' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_servers = 'nats://user:secret-pw@a:4222' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_servers = 'nats://a:0' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_servers = 'nats://a:65536' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_servers = 'nats://a:4222/path' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_servers = 'nats://:4222' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_servers = ' , ' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_servers = E'nats://a\n:4222' WHERE name = 'js'$$);
SELECT regress.try(format($$UPDATE outbox_destinations SET nats_servers = %L WHERE name = 'js'$$,
       (SELECT string_agg('nats://h' || g || ':4222', ',') FROM generate_series(1, 17) g)));
SELECT regress.try(format($$UPDATE outbox_destinations SET nats_servers = %L WHERE name = 'js'$$,
       (SELECT string_agg('nats://h' || g || ':4222', ',') FROM generate_series(1, 16) g) || ', ,'));
SELECT regress.try(format($$UPDATE outbox_destinations SET nats_servers = %L WHERE name = 'js'$$,
       'nats://' || repeat('h', 8200)));

-- subjects and templates
SELECT regress.try($$UPDATE outbox_destinations SET nats_subject = 'events' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_subject = '{event_type}' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_subject = 'orders.*' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_subject = 'orders.>' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_subject = 'orders..x' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_subject = '.orders' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_subject = 'orders x' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_subject = '$JS.API.STREAM.DELETE.{aggregate_id}' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_subject = '_INBOX.{aggregate_id}' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_subject = 'orders.{aggregate}' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_subject = 'orders.{event_type' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_subject = 'orders.}' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_subject = NULL WHERE name = 'js'$$);

-- the stream
SELECT regress.try($$UPDATE outbox_destinations SET nats_stream = 'ORDERS_2' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_stream = 'ORDERS.A' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_stream = 'a b' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_stream = '' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_stream = NULL WHERE name = 'js'$$);

-- credentials: one way, files by absolute path, no signing secret
SELECT regress.try($$UPDATE outbox_destinations SET nats_user = 'relay', nats_password = 'pw-1' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_user = NULL WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_password = E'pw\n2' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_user = 'relay', nats_password = 'pw-ü' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_token = 'tok' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_user = NULL, nats_password = NULL, nats_token = E'tok\t' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_user = NULL, nats_password = NULL, nats_token = 'tok' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_token = NULL, nats_creds_file = 'relay.creds' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_token = NULL, nats_creds_file = '/etc/nats/relay.creds', nats_ca_file = '/etc/nats/ca.pem' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_ca_file = 'ca.pem' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET secret = 'whsec_c2VjcmV0' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET timeout_ms = 2000 WHERE name = 'js'$$);
SELECT name, nats_user, nats_token, nats_creds_file, nats_ca_file, timeout_ms FROM outbox_destinations;

-- headers: none whose name or value nats-server could read as one of its
-- own (it finds Nats-Msg-Id, Nats-Expected-Stream... anywhere in the block)
SELECT regress.try($$UPDATE outbox_destinations SET headers = '{"Nats-Rollup": "all"}' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET headers = '{"X-Delta-Nats-Msg-Id-Ref": "1"}' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET headers = '{"x-ref": "Nats-Msg-Id Nats-Expected-Stream"}' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET headers = '{"x-team": "core", "x-ref": "pre-NATS-x"}' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET headers = '{"x-team": "nats", "x-nats": "natsx"}' WHERE name = 'js'$$);
SELECT name, headers FROM outbox_destinations WHERE name = 'js';
SELECT regress.try($$UPDATE outbox_destinations SET headers = NULL WHERE name = 'js'$$);

-- naming a file the relay reads needs pg_read_server_files; other changes,
-- and taking a file out, do not
CREATE ROLE regress_js_admin IN ROLE outbox_admin;
SET ROLE regress_js_admin;
SELECT regress.try($$UPDATE outbox_destinations SET nats_ca_file = NULL, nats_creds_file = NULL, nats_token = 'tok' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_ca_file = '/etc/ssl/private/server.key' WHERE name = 'js'$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, nats_servers, nats_subject, nats_stream, nats_creds_file) VALUES ('x', 'nats://a', 's', 'S', '/var/lib/postgresql/.pgpass')$$);
RESET ROLE;
UPDATE outbox_destinations SET nats_ca_file = '/etc/nats/ca.pem', nats_token = NULL WHERE name = 'js';
SET ROLE regress_js_admin;
SELECT regress.try($$UPDATE outbox_destinations SET enabled = false, nats_token = 'tok2' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_ca_file = '/etc/nats/other-ca.pem' WHERE name = 'js'$$);
-- nor send what a file holds elsewhere: the servers of a destination that
-- names a file (a creds file's identity and signatures would go there)
RESET ROLE;
UPDATE outbox_destinations SET nats_ca_file = NULL, nats_token = NULL, nats_creds_file = '/etc/nats/relay.creds' WHERE name = 'js';
SET ROLE regress_js_admin;
SELECT regress.try_detail($$UPDATE outbox_destinations SET nats_servers = 'nats://admins-own-host:4222' WHERE name = 'js'$$);
SELECT regress.try($$UPDATE outbox_destinations SET nats_creds_file = NULL, nats_token = 'tok3' WHERE name = 'js'$$);
RESET ROLE;
UPDATE outbox_destinations SET nats_token = 'tok2', nats_ca_file = '/etc/nats/ca.pem' WHERE name = 'js';
SET ROLE regress_js_admin;
SELECT regress.try($$UPDATE outbox_destinations SET nats_ca_file = NULL WHERE name = 'js'$$);
RESET ROLE;
GRANT pg_read_server_files TO regress_js_admin;
SET ROLE regress_js_admin;
SELECT regress.try($$UPDATE outbox_destinations SET nats_token = NULL, nats_ca_file = '/etc/nats/ca.pem' WHERE name = 'js'$$);
RESET ROLE;

-- the kind's columns belong to it: a webhook or a channel cannot have them,
-- and a JetStream destination has no url or channel
SELECT regress.try($$INSERT INTO outbox_destinations (name, url, nats_subject) VALUES ('x', 'http://127.0.0.1:1/', 's')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, channel, nats_stream) VALUES ('x', 'c', 'S')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, url, nats_token) VALUES ('x', 'http://127.0.0.1:1/', 't')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, nats_servers, url, nats_subject, nats_stream) VALUES ('x', 'nats://a', 'http://127.0.0.1:1/', 's', 'S')$$);
SELECT regress.try($$INSERT INTO outbox_destinations (name, kind, url) VALUES ('x', 'jetstream', 'http://127.0.0.1:1/')$$);
SELECT regress.try($$UPDATE outbox_destinations SET kind = 'http' WHERE name = 'js'$$);

-- an ordered JetStream destination
SELECT regress.try($$UPDATE outbox_destinations SET ordered = true WHERE name = 'js'$$);

-- outbox_jetstream_check: a JetStream destination only (the TAP tests
-- check one against a server)
INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('chan', 'none.chan', 'c');
SELECT regress.try($$SELECT * FROM outbox_jetstream_check('chan')$$);
SELECT regress.try($$SELECT * FROM outbox_jetstream_check('nothing')$$);
SELECT regress.try($$SELECT * FROM outbox_jetstream_check(NULL)$$);
SET ROLE regress_js_admin;
SELECT regress.try($$SELECT * FROM outbox_jetstream_check('chan')$$);
RESET ROLE;
SET ROLE outbox_writer;
SELECT regress.try($$SELECT * FROM outbox_jetstream_check('js')$$);
RESET ROLE;

-- the check reads the stored destination, which its trigger checked: a row
-- value made by the caller counts for its name only. An admin who may not
-- name files learns nothing of one through it: a made-up row naming
-- /etc/shadow gets the error of a destination that does not exist
CREATE ROLE regress_js_nofiles IN ROLE outbox_admin;
SET ROLE regress_js_nofiles;
SELECT regress.try($$SELECT * FROM _outbox_jetstream_check(jsonb_populate_record(NULL::outbox_destinations,
       '{"name": "nothing", "kind": "jetstream", "nats_servers": "nats://127.0.0.1:1", "nats_subject": "s",
         "nats_stream": "S", "nats_creds_file": "/etc/shadow"}'))$$);
SELECT regress.try($$SELECT * FROM _outbox_jetstream_check(jsonb_populate_record(NULL::outbox_destinations,
       '{"name": "nothing", "kind": "jetstream", "nats_servers": "nats://127.0.0.1:1", "nats_subject": "s",
         "nats_stream": "S", "nats_ca_file": "/etc/no-such-file"}'))$$);
SELECT regress.try($$SELECT * FROM _outbox_jetstream_check(jsonb_populate_record(NULL::outbox_destinations,
       '{"name": "chan", "kind": "jetstream", "nats_servers": "nats://127.0.0.1:1", "nats_subject": "s",
         "nats_stream": "S", "nats_creds_file": "/etc/shadow"}'))$$);
SELECT regress.try($$SELECT * FROM _outbox_jetstream_check(jsonb_populate_record(NULL::outbox_destinations,
       '{"kind": "jetstream"}'))$$);
RESET ROLE;

-- files are read only when regular and at most 1 MB, never waiting for a
-- writer: a FIFO, a device and an oversize file named by a superuser
SET statement_timeout = '20s';
DO $$
DECLARE
    dir text := current_setting('data_directory');
BEGIN
    EXECUTE format('COPY (SELECT 1) TO PROGRAM %L', format('rm -f %1$s/js_fifo && mkfifo %1$s/js_fifo', dir));
    EXECUTE format('COPY (SELECT repeat(%L, 1048576)) TO %L', 'x', dir || '/js_big.pem');
    EXECUTE format('COPY (SELECT repeat(%L, 1048574)) TO %L', 'x', dir || '/js_just.pem');
    INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream, nats_ca_file, nats_creds_file)
    VALUES ('fifo_ca', 'none.f', 'nats://127.0.0.1:1', 's', 'S', dir || '/js_fifo', NULL),
           ('fifo_creds', 'none.f', 'nats://127.0.0.1:1', 's', 'S', NULL, dir || '/js_fifo'),
           ('zero_ca', 'none.f', 'nats://127.0.0.1:1', 's', 'S', '/dev/zero', NULL),
           ('zero_creds', 'none.f', 'nats://127.0.0.1:1', 's', 'S', NULL, '/dev/zero'),
           ('dir_ca', 'none.f', 'nats://127.0.0.1:1', 's', 'S', dir, NULL),
           ('big_ca', 'none.f', 'nats://127.0.0.1:1', 's', 'S', dir || '/js_big.pem', NULL),
           ('just_ca', 'none.f', 'nats://127.0.0.1:1', 's', 'S', dir || '/js_just.pem', NULL),
           ('no_jwt', 'none.f', 'nats://127.0.0.1:1', 's', 'S', NULL, dir || '/js_just.pem');
END
$$;
SELECT d, c.problem
  FROM unnest(ARRAY['fifo_ca', 'fifo_creds', 'zero_ca', 'zero_creds', 'dir_ca', 'big_ca', 'just_ca', 'no_jwt']) d,
       LATERAL outbox_jetstream_check(d) c;
-- and the made-up row's files are not the ones read
SET ROLE regress_js_nofiles;
SELECT problem FROM _outbox_jetstream_check(jsonb_populate_record(NULL::outbox_destinations,
       '{"name": "fifo_ca", "kind": "jetstream", "nats_servers": "nats://127.0.0.1:1", "nats_subject": "s",
         "nats_stream": "S"}'));
RESET ROLE;
RESET statement_timeout;
DO $$
BEGIN
    EXECUTE format('COPY (SELECT 1) TO PROGRAM %L',
                   format('rm -f %1$s/js_fifo %1$s/js_big.pem %1$s/js_just.pem', current_setting('data_directory')));
END
$$;

-- the kind's settings
SELECT name, boot_val, unit, context, vartype, min_val, max_val
  FROM pg_settings WHERE name LIKE 'outbox.jetstream\_%' ORDER BY name;

-- JetStream messages are not signed: a secret is refused in either table
INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream)
VALUES ('sig_js', 'none.sig_js', 'nats://127.0.0.1:4222', 'events', 'EVENTS');
SELECT regress.try($$SELECT outbox_add_secret('sig_js')$$);
SELECT regress.try($$INSERT INTO outbox_destination_secrets (destination, secret) VALUES ('sig_js', 'raw')$$);

DELETE FROM outbox_destinations;
DROP ROLE regress_js_admin;
DROP ROLE regress_js_nofiles;
