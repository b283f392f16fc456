// BullMQ 6 on PostgreSQL, as its users run it, for the TAP tests of the
// bullmq destination kind. Reads one JSON command on stdin, prints JSON:
//
//   {"command": "migrate", "connection": {...}, "queue": "q"}
//     BullMQ's own migrations into connection.schema (Queue with
//     migrate: true), then {"version": <the ledger's largest version>}
//   {"command": "work", "connection": {...}, "queue": "q", "count": N,
//    "concurrency": C, "timeout_ms": T}
//     a real BullMQ Worker processes jobs until N have completed or T ms
//     have passed: {"jobs": [{"id", "name", "data", "attempts"}, ...]} in
//     the order the Worker started them
//
// connection: node-postgres settings (host, port, user, database) plus
// BullMQ's schema; with "redis": true, the host and port of a Redis server
// (BullMQ's default backend) instead.
'use strict';
const { Queue, Worker, createPostgresBackend } = require('bullmq');

async function readInput() {
  let text = '';
  for await (const chunk of process.stdin) text += chunk;
  return JSON.parse(text);
}

async function migrate(input) {
  const queue = new Queue(input.queue, { connection: { ...input.connection, migrate: true } },
    createPostgresBackend);
  await queue.waitUntilReady();
  await queue.close();
  const { Client } = require('pg');
  const client = new Client(input.connection);
  await client.connect();
  const schema = input.connection.schema || 'bullmq';
  const { rows } = await client.query(`SELECT max(version) AS v FROM "${schema}".migration`);
  await client.end();
  return { version: rows[0].v };
}

async function work(input) {
  const jobs = [];
  let done = 0;
  let finish;
  const finished = new Promise((resolve) => { finish = resolve; });
  const worker = new Worker(input.queue, async (job) => {
    jobs.push({ id: job.id, name: job.name, data: job.data, attempts: job.opts.attempts });
    return true;
  }, { connection: input.connection, concurrency: input.concurrency || 1, autorun: false },
  input.redis ? undefined : createPostgresBackend);
  worker.on('completed', () => { if (++done >= input.count) finish(); });
  worker.on('error', (err) => { process.stderr.write(`worker error: ${err}\n`); });
  const timer = setTimeout(finish, input.timeout_ms || 60000);
  worker.run();
  await finished;
  clearTimeout(timer);
  await worker.close();
  return { jobs };
}

readInput()
  .then((input) => (input.command === 'migrate' ? migrate(input) : work(input)))
  // exit once the whole answer is written: a pipe takes 64 kB at a time
  .then((out) => process.stdout.write(JSON.stringify(out), () => process.exit(0)))
  .catch((err) => { process.stderr.write(`${err.stack || err}\n`); process.exit(1); });
