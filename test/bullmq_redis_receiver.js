// The receiver docs/bullmq.md shows for BullMQ on Redis (or a queue in
// another database): a webhook endpoint that verifies the Standard Webhooks
// signature and adds the event as a job whose id is the webhook-id, so that
// a resend finds the job there. Run by test/t/111_bullmq_redis.pl:
//   node bullmq_redis_receiver.js <redis port> <secret> <port file>
// It listens on a free port of 127.0.0.1 and writes that port to the file.
'use strict';
const http = require('http');
const fs = require('fs');
const { Queue } = require('bullmq');
const { Webhook } = require('standardwebhooks');

const [redisPort, secret, portFile] = process.argv.slice(2);
const queue = new Queue('orders', { connection: { host: '127.0.0.1', port: Number(redisPort) } });
const webhook = new Webhook(secret);

const server = http.createServer((req, res) => {
  let body = '';
  req.on('data', (chunk) => { body += chunk; }).on('end', async () => {
    try {
      const event = webhook.verify(body, req.headers);          // throws if forged
      await queue.add(event.type, event.payload, { jobId: req.headers['webhook-id'] });
      res.writeHead(204).end();                                  // 2xx once the job is added
    } catch (err) {
      res.writeHead(err.name === 'WebhookVerificationError' ? 400 : 503).end(String(err));
    }
  });
});
server.listen(0, '127.0.0.1', () => fs.writeFileSync(portFile, String(server.address().port)));
