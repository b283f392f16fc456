// RabbitMQ as its users reach it (npm amqplib), for the TAP tests of the
// rabbitmq destination kind: an independent client that declares what a
// test needs and reads what the relay published. Reads one JSON command on
// stdin, prints JSON:
//
//   {"command": "setup", "url": U, "exchanges": [{"name", "type"}],
//    "queues": [{"name", "arguments"}], "bindings": [{"queue", "exchange", "key"}],
//    "purge": [queue names], "delete_exchanges": [names]}
//     declares durable exchanges and queues and binds them: {"ok": true}
//   {"command": "consume", "url": U, "queue": Q, "count": N, "timeout_ms": T,
//    "idle_ms": I}
//     reads (and acks, in order) messages until N have come, T ms have
//     passed, or (with I) none came for I ms: {"messages": [{"message_id", "type",
//     "content_type", "delivery_mode", "timestamp", "app_id", "headers",
//     "exchange", "routing_key", "redelivered", "body"}, ...]} in arrival order
//   {"command": "count", "url": U, "queue": Q}
//     the queue's ready messages: {"messages": N}
//   {"command": "publish", "url": U, "queue": Q, "count": N, "size": S, "window": W}
//     the broker's own ceiling for the benchmark: N persistent messages of
//     S bytes published to Q through the default exchange on a confirm
//     channel, at most W (256) unconfirmed at any time:
//     {"seconds": <wall time until the last confirm>}
'use strict';
const amqp = require('amqplib');

async function readInput() {
  let text = '';
  for await (const chunk of process.stdin) text += chunk;
  return JSON.parse(text);
}

async function setup(input) {
  const conn = await amqp.connect(input.url);
  const ch = await conn.createChannel();
  for (const e of input.delete_exchanges || []) await ch.deleteExchange(e.name || e);
  for (const e of input.exchanges || []) await ch.assertExchange(e.name, e.type || 'direct', { durable: true });
  for (const q of input.queues || []) {
    await ch.assertQueue(q.name, { durable: true, arguments: q.arguments || {} });
  }
  for (const b of input.bindings || []) await ch.bindQueue(b.queue, b.exchange, b.key);
  for (const q of input.purge || []) await ch.purgeQueue(q);
  await conn.close();
  return { ok: true };
}

async function consume(input) {
  const conn = await amqp.connect(input.url);
  const ch = await conn.createChannel();
  await ch.prefetch(100);
  const messages = [];
  await new Promise((resolve) => {
    let done = false;
    let idle = null;
    const finish = () => {
      done = true;
      clearTimeout(timer);
      clearTimeout(idle);
      resolve();
    };
    const timer = setTimeout(finish, input.timeout_ms || 10000);
    // with idle_ms: done once no message came for that long (the queue is drained)
    if (input.idle_ms) idle = setTimeout(finish, input.idle_ms);
    ch.consume(input.queue, (m) => {
      // prefetched after the end: not acked, so the broker keeps it
      if (done) return;
      if (input.idle_ms) {
        clearTimeout(idle);
        idle = setTimeout(finish, input.idle_ms);
      }
      const p = m.properties;
      messages.push({
        message_id: p.messageId, type: p.type, content_type: p.contentType,
        delivery_mode: p.deliveryMode, timestamp: p.timestamp, app_id: p.appId,
        headers: p.headers, exchange: m.fields.exchange, routing_key: m.fields.routingKey,
        redelivered: m.fields.redelivered, body: m.content.toString('utf8'),
      });
      ch.ack(m);
      if (messages.length >= (input.count || Infinity)) finish();
    });
  });
  // the channel's close-ok comes after the broker took every ack before it
  await ch.close();
  await conn.close();
  return { messages };
}

async function count(input) {
  const conn = await amqp.connect(input.url);
  const ch = await conn.createChannel();
  const q = await ch.checkQueue(input.queue);
  await conn.close();
  return { messages: q.messageCount };
}

async function publish(input) {
  const conn = await amqp.connect(input.url);
  const ch = await conn.createConfirmChannel();
  const body = Buffer.alloc(input.size || 200, 'x');
  const start = process.hrtime.bigint();
  const window = input.window || 256;
  const inFlight = [];
  for (let i = 0; i < input.count; i++) {
    // a sliding window: the next publish waits only for the oldest confirm
    if (inFlight.length >= window) await inFlight.shift();
    inFlight.push(new Promise((resolve, reject) => {
      ch.publish('', input.queue, body, { persistent: true, messageId: `m-${i}` },
        (err) => (err ? reject(err) : resolve()));
    }));
  }
  await Promise.all(inFlight);
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  await conn.close();
  return { seconds };
}

(async () => {
  const input = await readInput();
  const commands = { setup, consume, count, publish };
  if (!commands[input.command]) throw new Error(`unknown command ${input.command}`);
  process.stdout.write(JSON.stringify(await commands[input.command](input)));
})().catch((e) => {
  process.stderr.write(`${e.stack || e}\n`);
  process.exit(1);
});
