-- The idempotent consumer: inbox_accept() in the business transaction.
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO accounts VALUES (1, 0);

-- the consumer's handler: credit the account once per event
CREATE FUNCTION handle_payment(event uuid, amount bigint, die boolean DEFAULT false)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    IF NOT inbox_accept(event, 'billing') THEN
        RETURN 'duplicate, skipped';
    END IF;
    UPDATE accounts SET balance = balance + amount WHERE id = 1;
    IF die THEN
        RAISE EXCEPTION 'consumer died in the middle of the payment';
    END IF;
    RETURN 'credited';
END
$$;

-- one event delivered three times: the action runs once
SELECT handle_payment('11111111-1111-1111-1111-111111111111', 50000);
SELECT handle_payment('11111111-1111-1111-1111-111111111111', 50000);
SELECT handle_payment('11111111-1111-1111-1111-111111111111', 50000);
SELECT balance FROM accounts;

-- three deliveries of another event, the first of which dies mid-action:
-- no inbox row is left behind, so the next delivery runs the action
UPDATE accounts SET balance = 0;
SELECT handle_payment('22222222-2222-2222-2222-222222222222', 50000, die => true);
SELECT balance, (SELECT count(*) FROM inbox WHERE event_id = '22222222-2222-2222-2222-222222222222') AS inbox_rows
  FROM accounts;
SELECT handle_payment('22222222-2222-2222-2222-222222222222', 50000);
SELECT handle_payment('22222222-2222-2222-2222-222222222222', 50000);
SELECT balance FROM accounts;

-- consumers are independent; the default consumer is 'default'
SELECT inbox_accept('11111111-1111-1111-1111-111111111111') AS default_first,
       inbox_accept('11111111-1111-1111-1111-111111111111', 'mailer') AS mailer_first,
       inbox_accept('11111111-1111-1111-1111-111111111111', 'mailer') AS mailer_again;
SELECT consumer, count(*) FROM inbox GROUP BY 1 ORDER BY 1;

-- errors
SELECT regress.try($$SELECT inbox_accept(NULL)$$);
SELECT regress.try($$SELECT inbox_accept('11111111-1111-1111-1111-111111111111', NULL)$$);

-- inbox_purge removes old rows only
UPDATE inbox SET processed_at = now() - interval '40 days' WHERE consumer = 'mailer';
SELECT inbox_purge();
SELECT consumer, count(*) FROM inbox GROUP BY 1 ORDER BY 1;
SELECT regress.try($$SELECT inbox_purge(NULL)$$);
SELECT regress.try($$SELECT inbox_purge('-1 day')$$);

DELETE FROM inbox;
DROP FUNCTION handle_payment(uuid, bigint, boolean);
DROP TABLE accounts;
