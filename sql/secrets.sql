-- Signing secrets (signature.c, outbox_destination_secrets): v1a keys and
-- key rotation. What the relay sends is checked in TAP
-- (test/t/036_signatures.pl); here, the rules and the functions.

-- ed25519 keys: the public key of RFC 8032's first test vector (section
-- 7.1, TEST 1), from its 32-byte seed and from the 64-byte form (seed,
-- then public key); the expected value is the RFC's public key
SELECT outbox_public_key('whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=')
       = 'whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=' AS rfc8032_seed,
       outbox_public_key('whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2DXWpgBgrEKt9VL/tPJZAc6DuFy89qmIyWvAhpo9wdRGg==')
       = 'whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=' AS rfc8032_64_bytes,
       outbox_public_key('whsec_YWJjZA==') IS NULL AS v1_has_none,
       outbox_public_key('raw secret') IS NULL AS raw_has_none;
-- what is not an ed25519 secret key: the detail says why, never the key
SELECT regress.try_detail($$SELECT outbox_public_key('whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2CdYbGd7/1aYLqESvSS7CzEREnFaXsyaRlwO6wDHK5/YA==')$$);
SELECT regress.try_detail($$SELECT outbox_public_key('whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyufw==')$$);
SELECT regress.try_detail($$SELECT outbox_public_key('whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A')$$);
SELECT regress.try_detail($$SELECT outbox_public_key('whsk_')$$);
SELECT regress.try_detail($$SELECT outbox_public_key('whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=')$$);
SELECT regress.try_detail($$SELECT outbox_public_key('raw-whsk_x')$$);
SELECT regress.try_detail($$SELECT outbox_public_key('WHSK_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=')$$);
SELECT regress.try_detail($$SELECT outbox_public_key('my whpk_ key')$$);

-- generated secrets: whsec_ and 32 random bytes, or whsk_ and a 32-byte seed
SELECT s ~ '^whsec_[A-Za-z0-9+/]{43}=$' AS v1_form, _outbox_valid_secret(s) AS valid
  FROM _outbox_new_secret('v1') s;
SELECT s ~ '^whsk_[A-Za-z0-9+/]{43}=$' AS v1a_form, outbox_public_key(s) ~ '^whpk_[A-Za-z0-9+/]{43}=$' AS has_public_key
  FROM _outbox_new_secret('v1a') s;
SELECT count(DISTINCT _outbox_new_secret('v1')) AS distinct_of_100 FROM generate_series(1, 100);
SELECT regress.try($$SELECT _outbox_new_secret('v2')$$);

-- a destination whose secret column is an ed25519 key
INSERT INTO outbox_destinations (name, event_types, url, secret) VALUES
    ('sig_hook', 'none.sig', 'http://127.0.0.1:1/', 'whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=');
INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('sig_chan', 'none.sig_chan', 'sig_c');
SELECT regress.try_detail($$INSERT INTO outbox_destinations (name, event_types, url, secret) VALUES ('x', 'none.x', 'http://127.0.0.1:1/', 'whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=')$$);

-- rotation: add a secret (generated, or given), then retire the old one
SELECT outbox_add_secret('sig_hook') ~ '^whsec_' AS added_v1;
SELECT outbox_add_secret('sig_hook', 'second raw secret') AS added_raw;
SELECT outbox_add_secret('sig_hook', scheme => 'v1a') ~ '^whpk_' AS added_v1a_returns_public_key;
SELECT outbox_add_secret('sig_hook', 'whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2DXWpgBgrEKt9VL/tPJZAc6DuFy89qmIyWvAhpo9wdRGg==') AS added_given_v1a;
SELECT destination, left(secret, 5) AS secret, public_key IS NOT NULL AS has_public_key, retire_at
  FROM outbox_destination_secrets ORDER BY added_at, secret;
-- refused: the secret the destination has already (the column's too), a
-- secret that breaks the rules, a scheme that does not match, a NULL, a
-- destination that does not exist or does not sign
SELECT regress.try($$SELECT outbox_add_secret('sig_hook', 'second raw secret')$$);
SELECT regress.try($$SELECT outbox_add_secret('sig_hook', 'whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=')$$);
SELECT regress.try_detail($$SELECT outbox_add_secret('sig_hook', 'whsec_abc')$$);
SELECT regress.try_detail($$SELECT outbox_add_secret('sig_hook', ' padded')$$);
SELECT regress.try($$SELECT outbox_add_secret('sig_hook', 'raw', 'v1a')$$);
SELECT regress.try($$SELECT outbox_add_secret('sig_hook', scheme => 'v2')$$);
SELECT regress.try($$SELECT outbox_add_secret(NULL)$$);
SELECT regress.try($$SELECT outbox_add_secret('nowhere')$$);
SELECT regress.try($$INSERT INTO outbox_destination_secrets (destination, secret) VALUES ('nowhere', 'raw')$$);
SELECT regress.try($$UPDATE outbox_destination_secrets SET secret = 'sécret' WHERE secret = 'second raw secret'$$);
-- NULLs: refused without PostgreSQL's detail, which would print the row
SELECT regress.try_detail($$INSERT INTO outbox_destination_secrets (destination, secret) VALUES (NULL, 'a raw secret')$$);
SELECT regress.try_detail($$UPDATE outbox_destination_secrets SET added_at = NULL WHERE secret = 'second raw secret'$$);
-- the secret column may hold one of the table's: it signs twice, harmless;
-- outbox_add_secret refuses the column's
BEGIN;
UPDATE outbox_destinations SET secret = 'second raw secret' WHERE name = 'sig_hook';
SELECT regress.try($$SELECT outbox_add_secret('sig_hook', 'second raw secret')$$);
ROLLBACK;
-- a channel signs too
SELECT outbox_add_secret('sig_chan', 'channel secret');

-- retire the column's ed25519 key by its public key, after a day: it moves
-- to outbox_destination_secrets with its retire time; the raw secret now
BEGIN;
SELECT outbox_retire_secret('sig_hook', 'whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=', '1 day')
       = now() + interval '1 day' AS retires_in_a_day;
SELECT outbox_retire_secret('sig_hook', 'second raw secret') = now() AS retired_now;
SELECT secret IS NULL AS column_cleared FROM outbox_destinations WHERE name = 'sig_hook';
SELECT left(secret, 5) AS secret,
       public_key IS NOT DISTINCT FROM 'whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=' AS rfc8032_key,
       retire_at - now() AS retires_in
  FROM outbox_destination_secrets WHERE destination = 'sig_hook' ORDER BY retire_at, secret;
-- the given 64-byte key has the same public key: retiring by it names both
-- the moved one and the added one; the next retirement of one already
-- retiring does not postpone it
SELECT outbox_retire_secret('sig_hook', 'whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=', '2 days')
       = now() + interval '2 days' AS returns_the_time_asked;
SELECT count(*) FILTER (WHERE retire_at - now() = interval '1 day') AS in_a_day,
       count(*) FILTER (WHERE retire_at - now() = interval '2 days') AS in_two_days
  FROM outbox_destination_secrets WHERE public_key = 'whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=';
ROLLBACK;
-- refused: a secret not in use, a negative overlap, NULLs, and leaving a
-- destination without a secret in use that is not retiring
SELECT regress.try($$SELECT outbox_retire_secret('sig_hook', 'never added')$$);
SELECT regress.try($$SELECT outbox_retire_secret('sig_hook', 'second raw secret', '-1 hour')$$);
SELECT regress.try($$SELECT outbox_retire_secret('sig_hook', NULL)$$);
SELECT regress.try($$SELECT outbox_retire_secret('nowhere', 'x')$$);
SELECT regress.try($$SELECT outbox_retire_secret('sig_chan', 'channel secret', '1 hour')$$);
SELECT regress.try($$SELECT outbox_retire_secret('sig_chan', 'channel secret')$$);
-- a secret past its retire time is no longer in use, and is not found
BEGIN;
UPDATE outbox_destination_secrets SET retire_at = now() - interval '1 second' WHERE secret = 'second raw secret';
SELECT regress.try($$SELECT outbox_retire_secret('sig_hook', 'second raw secret')$$);
ROLLBACK;
-- the column's secret also in the table (allowed: it signs twice) retires
-- with an overlap: one row left, retiring then
BEGIN;
INSERT INTO outbox_destinations (name, event_types, url, secret)
VALUES ('sig_twice', 'none.twice', 'http://127.0.0.1:1/', 'twice secret');
INSERT INTO outbox_destination_secrets (destination, secret) VALUES ('sig_twice', 'twice secret'), ('sig_twice', 'next secret');
SELECT outbox_retire_secret('sig_twice', 'twice secret', '1 hour') - now() AS retires_in;
SELECT (SELECT secret FROM outbox_destinations WHERE name = 'sig_twice') AS column_secret,
       count(*) AS rows, max(retire_at) - now() AS retires_in
  FROM outbox_destination_secrets WHERE destination = 'sig_twice' AND secret = 'twice secret';
-- added again during its overlap: kept, no longer retiring
SELECT outbox_add_secret('sig_twice', 'twice secret') AS added_back;
SELECT count(*) AS rows, max(retire_at) AS retire_at
  FROM outbox_destination_secrets WHERE destination = 'sig_twice' AND secret = 'twice secret';
ROLLBACK;
-- a secret past its retire time may be added again
BEGIN;
UPDATE outbox_destination_secrets SET retire_at = now() - interval '1 second' WHERE secret = 'second raw secret';
SELECT outbox_add_secret('sig_hook', 'second raw secret') AS added_again;
SELECT count(*) AS rows, count(*) FILTER (WHERE retire_at IS NULL) AS in_use
  FROM outbox_destination_secrets WHERE secret = 'second raw secret';
-- but not twice in use, nor made in use again by an UPDATE beside it
SELECT regress.try($$SELECT outbox_add_secret('sig_hook', 'second raw secret')$$);
SELECT regress.try($$UPDATE outbox_destination_secrets SET retire_at = NULL WHERE secret = 'second raw secret' AND retire_at IS NOT NULL$$);
ROLLBACK;
-- at most 10 secrets in use in the table per destination (54000)
BEGIN;
SELECT count(outbox_add_secret('sig_chan')) AS added FROM generate_series(1, 10 - (
    SELECT count(*) FROM outbox_destination_secrets WHERE destination = 'sig_chan'
       AND (retire_at IS NULL OR retire_at > now()))::int);
SELECT regress.try($$SELECT outbox_add_secret('sig_chan')$$);
ROLLBACK;

-- only outbox_admin reads or changes secrets
SET ROLE outbox_writer;
SELECT regress.try($$SELECT count(*) FROM outbox_destination_secrets$$);
SELECT regress.try($$SELECT outbox_add_secret('sig_hook')$$);
SELECT regress.try($$SELECT outbox_public_key('raw')$$);
RESET ROLE;
SET ROLE outbox_admin;
SELECT count(*) > 0 AS admin_reads FROM outbox_destination_secrets;
RESET ROLE;

-- deleting a destination deletes its secrets
DELETE FROM outbox_destinations WHERE name LIKE 'sig\_%';
SELECT count(*) AS secrets_left FROM outbox_destination_secrets;
