// Verifies Standard Webhooks signatures with Node's own crypto module, the
// way a receiver does, independently of the extension's code. Reads one
// JSON object from stdin:
//   {"id": webhook-id, "timestamp": webhook-timestamp, "body": the body,
//    "signature": the webhook-signature value, "keys": [key, ...]}
// and prints a JSON array: for each key, whether one of the signatures
// verifies with it. A key is a v1 secret (whsec_<base64>, or raw text) or
// a v1a public key (whpk_<base64>, ed25519). Signed content:
// "<id>.<timestamp>.<body>"; signatures: space-separated "v1,<base64>" and
// "v1a,<base64>" (the specification's "Signature scheme").
'use strict';
const crypto = require('crypto');

// DER prefix of an ed25519 SubjectPublicKeyInfo (RFC 8410): the key follows
const ED25519_SPKI = Buffer.from('302a300506032b6570032100', 'hex');

let input = '';
process.stdin.on('data', (chunk) => { input += chunk; });
process.stdin.on('end', () => {
  const m = JSON.parse(input);
  const content = Buffer.from(`${m.id}.${m.timestamp}.${m.body}`, 'utf8');
  const sigs = m.signature.split(' ').map((s) => {
    const comma = s.indexOf(',');
    return { scheme: s.slice(0, comma), value: Buffer.from(s.slice(comma + 1), 'base64') };
  });
  const verdicts = m.keys.map((key) => {
    if (key.startsWith('whpk_')) {
      const pub = crypto.createPublicKey({
        key: Buffer.concat([ED25519_SPKI, Buffer.from(key.slice(5), 'base64')]),
        format: 'der',
        type: 'spki',
      });
      return sigs.some((s) => s.scheme === 'v1a' && crypto.verify(null, content, pub, s.value));
    }
    const secret = key.startsWith('whsec_') ? Buffer.from(key.slice(6), 'base64') : Buffer.from(key, 'utf8');
    const expected = crypto.createHmac('sha256', secret).update(content).digest();
    return sigs.some((s) => s.scheme === 'v1' && s.value.length === expected.length &&
      crypto.timingSafeEqual(s.value, expected));
  });
  process.stdout.write(JSON.stringify(verdicts) + '\n');
});
