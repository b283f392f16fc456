-- Each rule has one home that the check constraints, the relay and the
-- status view share: header validity, secret validity, routing, and the
-- text that marks a parked event. These are their exact answers.

-- headers: keys are RFC 9110 tokens; values (as jsonb_each_text gives them)
-- have no control character but tab; a JSON null value is not sent, but
-- its key must still be a token
SELECT h, _outbox_valid_headers(h::jsonb) AS valid
  FROM (VALUES (NULL), ('{}'), ('{"traceparent": "00-abc"}'),
               ('{"n": 1, "b": true, "nested": {"x": "a\nb"}}'),
               ('{"a": "tab\tok"}'), ('{"a": ""}'), ('{"a": null}'),
               ('{"bad name": "v"}'), ('{"bad name": null}'), ('{"": "v"}'),
               ('{"é": "v"}'), ('{"a": "é"}'), ('{"a": "nl\n"}'), ('{"a": "cr\r"}'),
               ('{"a": "del\u007f"}'), ('{"a": "bell\u0007"}'),
               ('[1]'), ('"text"'), ('7')) v(h)
 ORDER BY 1;
-- the same rule refuses such headers when an event is written
SELECT regress.try($$SELECT outbox_emit('rules.h', '{}', headers => '{"bad name": null}')$$);

-- secrets: raw text, or whsec_ and canonical base64 of at least one byte
SELECT s, _outbox_valid_secret(s) AS valid
  FROM (VALUES (NULL), (''), ('raw secret'), ('whsec_c2VjcmV0'), ('whsec_YWJjZA=='),
               ('whsec_YQ=='), ('whsec_YWJjZA'), ('whsec_abc'), ('whsec_'),
               ('whsec_===='), ('whsec_YWJj ZA=='), ('whsec_not base64!'),
               ('whsec_YWJj-A==')) v(s)
 ORDER BY 1;
SELECT regress.try($$INSERT INTO outbox_destinations (name, url, secret) VALUES ('x', 'http://127.0.0.1:1/', 'whsec_abc')$$);

-- routing: the enabled destination with the first name whose pattern
-- matches; '*' is the only wildcard
BEGIN;
INSERT INTO outbox_destinations (name, event_types, channel, enabled) VALUES
    ('b_tasks', 'task.*', 'c1', true),
    ('a_created', 'task.created', 'c2', true),
    ('0_disabled', '*', 'c3', false),
    ('c_literal', '100%_*', 'c4', true);
SELECT t, (SELECT name FROM _outbox_route(t)) AS destination
  FROM (VALUES ('task.created'), ('task.done'), ('other'), ('100%_x'), ('100ab_x')) v(t)
 ORDER BY 1;
-- the status view counts unroutable events with the same rule
INSERT INTO outbox (event_type, payload) VALUES ('task.done', '{}'), ('other', '{}'), ('100ab_x', '{}');
SELECT event_type, pending, unroutable FROM outbox_status ORDER BY 1;
ROLLBACK;

-- a parked event carries the relay's marker text, and a new destination
-- makes it due again through the trigger that looks for the same text
BEGIN;
SELECT outbox_emit('rules.parked', '{}') IS NOT NULL AS emitted;
SELECT * FROM outbox_relay();
SELECT last_error = _outbox_unroutable_error() AS marked, next_attempt_at > now() AS parked
  FROM outbox WHERE event_type = 'rules.parked';
INSERT INTO outbox_destinations (name, event_types, channel) VALUES ('rules', 'rules.*', 'rules_events');
SELECT next_attempt_at <= now() AS due_again FROM outbox WHERE event_type = 'rules.parked';
ROLLBACK;
SELECT _outbox_unroutable_error();
