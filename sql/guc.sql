-- Settings: names, defaults, units, ranges and how they can be changed.
-- (a kind's own, outbox.<kind>_*, in the kind's test when it is optional)
SELECT name, boot_val, unit, context, vartype, min_val, max_val
  FROM pg_settings WHERE name LIKE 'outbox.%' AND name NOT LIKE 'outbox.jetstream\_%'
 ORDER BY name;

-- reloadable settings cannot be changed in a session
SET outbox.batch_size = 10;
-- the prefix is reserved: a misspelt setting is an error
SET outbox.batchsize = 10;
-- times are shown with their unit
SHOW outbox.poll_interval;
SHOW outbox.http_timeout;
SHOW outbox.backoff_max;
