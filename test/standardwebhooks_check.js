// Verifies a request's v1 signatures with the npm standardwebhooks package,
// the Standard Webhooks reference library, as a receiver would. Reads
// {"headers": {...}, "body": "...", "secrets": [secret, ...]} from stdin
// and prints a JSON array: for each secret, whether Webhook.verify accepts
// the request with it. A whsec_ secret is base64 after its prefix; any
// other is the raw key, as the extension reads it.
'use strict';
const { Webhook } = require('standardwebhooks');

let input = '';
process.stdin.on('data', (chunk) => { input += chunk; });
process.stdin.on('end', () => {
  const m = JSON.parse(input);
  const verdicts = m.secrets.map((secret) => {
    try {
      const wh = secret.startsWith('whsec_') ? new Webhook(secret) : new Webhook(secret, { format: 'raw' });
      wh.verify(m.body, m.headers);
      return true;
    } catch (err) {
      return false;
    }
  });
  process.stdout.write(JSON.stringify(verdicts) + '\n');
});
