// Reads an HTTP request as a CloudEvents receiver does, with the npm
// cloudevents SDK's HTTP binding (HTTP.toEvent), independently of the
// extension's code. Reads {"headers": {...}, "body": "..."} from stdin;
// prints {"events": [each event as the SDK has it], "valid": [each one's
// validate()]} or {"error": "..."} when the SDK refuses the request.
'use strict';
const { HTTP } = require('cloudevents');

let input = '';
process.stdin.on('data', (chunk) => { input += chunk; });
process.stdin.on('end', () => {
  const m = JSON.parse(input);
  let out;
  try {
    const got = HTTP.toEvent({ headers: m.headers, body: m.body });
    const events = Array.isArray(got) ? got : [got];
    out = { events: events.map((e) => e.toJSON()), valid: events.map((e) => e.validate()) };
  } catch (err) {
    out = { error: String(err && err.message ? err.message : err) };
  }
  process.stdout.write(JSON.stringify(out) + '\n');
});
