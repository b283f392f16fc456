// BullMQ 6 on PostgreSQL, as its users run it, for the TAP tests of the
// bullmq destination kind. Reads one JSON command on stdin, prints JSON:
//
//   {"command": "migrate", "connection": {...}, "queue": "q"}
//     BullMQ's own migrations into connection.schema (Queue with
//     migrate: true), then {"version": <the ledger's largest version>}
//   {"command": "work", "connection": {...}, "queue": "q", "count": N,
//    "concurrency": C, "timeout_ms": T, "telemetry": true}
//     a real BullMQ Worker processes jobs until N have completed or T ms
//     have passed: {"jobs": [{"id", "name", "data", "attempts", "telemetry",
//     "trace_id"}, ...]} in the order the Worker started them. With
//     "telemetry", the Worker runs with BullMQ's OpenTelemetry integration
//     (npm bullmq-otel), set up as an application does (the W3C propagator,
//     an AsyncLocalStorage context manager): trace_id is the trace of the
//     span BullMQ opened for the job, as the processor sees it (null when
//     the job carries none); a job whose metadata the integration cannot
//     read fails, and is not counted
//   {"command": "add-bulk", "connection": {...}, "queue": "q", "count": N,
//    "chunk": C}
//     BullMQ's own Queue.addBulk, C jobs a call, N in all, each with a
//     UUID jobId and a payload like the benchmark's events:
//     {"seconds": <wall time of the adds>}
//   {"command": "poll-relay", "connection": {...}, "queue": "q", "batch": B}
//     the seed lesson's relay, for the benchmark (bench/bench.py, section
//     15): claims B undelivered rows of outbox with FOR UPDATE SKIP LOCKED,
//     queue.add of each with jobId = event_id, marks them, commits, until
//     none is left: {"seconds", "events"}
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

// BullMQ's OpenTelemetry integration, as an application sets it up.
function telemetry() {
  const { context, propagation } = require('@opentelemetry/api');
  const { W3CTraceContextPropagator } = require('@opentelemetry/core');
  const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks');
  const { BullMQOtel } = require('bullmq-otel');
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  return new BullMQOtel({ tracerName: 'outbox-test' });
}

// The trace of the span active where the processor runs, or null.
function activeTraceId() {
  const { trace } = require('@opentelemetry/api');
  const span = trace.getActiveSpan();
  return span && trace.isSpanContextValid(span.spanContext()) ? span.spanContext().traceId : null;
}

async function work(input) {
  const jobs = [];
  let done = 0;
  let finish;
  const finished = new Promise((resolve) => { finish = resolve; });
  const worker = new Worker(input.queue, async (job) => {
    jobs.push({ id: job.id, name: job.name, data: job.data, attempts: job.opts.attempts,
      telemetry: job.opts.telemetry, trace_id: input.telemetry ? activeTraceId() : undefined });
    return true;
  }, { connection: input.connection, concurrency: input.concurrency || 1, autorun: false,
    telemetry: input.telemetry ? telemetry() : undefined },
  input.redis ? undefined : createPostgresBackend);
  worker.on('completed', () => { if (++done >= input.count) finish(); });
  worker.on('error', (err) => { process.stderr.write(`worker error: ${err}\n`); });
  let timedOut = false;
  const timer = setTimeout(() => { timedOut = true; finish(); }, input.timeout_ms || 60000);
  worker.run();
  await finished;
  clearTimeout(timer);
  // a Worker whose job failed inside BullMQ may never close: the answer
  // does not wait for it then (the process exits once it is written)
  if (timedOut) worker.close(true).catch(() => {});
  else await worker.close();
  return { jobs };
}

async function addBulk(input) {
  const { randomUUID } = require('crypto');
  const queue = new Queue(input.queue, { connection: input.connection }, createPostgresBackend);
  await queue.waitUntilReady();
  const t0 = process.hrtime.bigint();
  for (let done = 0; done < input.count; done += input.chunk) {
    const jobs = [];
    for (let i = done; i < Math.min(done + input.chunk, input.count); i++) {
      jobs.push({ name: 'bench.task', data: { n: i, title: `task number ${i}` },
        opts: { jobId: randomUUID() } });
    }
    await queue.addBulk(jobs);
  }
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  await queue.close();
  return { seconds };
}

async function pollRelay(input) {
  const { Client } = require('pg');
  const queue = new Queue(input.queue, { connection: input.connection }, createPostgresBackend);
  await queue.waitUntilReady();
  const client = new Client(input.connection);
  await client.connect();
  let events = 0;
  const t0 = process.hrtime.bigint();
  for (;;) {
    await client.query('BEGIN');
    const { rows } = await client.query(
      `SELECT id, event_id, event_type, payload FROM outbox WHERE delivered_at IS NULL
        ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`, [input.batch]);
    for (const row of rows) {
      await queue.add(row.event_type, row.payload, { jobId: row.event_id });
    }
    await client.query('UPDATE outbox SET delivered_at = now() WHERE id = ANY($1)',
      [rows.map((row) => row.id)]);
    await client.query('COMMIT');
    events += rows.length;
    if (rows.length === 0) break;
  }
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  await client.end();
  await queue.close();
  return { seconds, events };
}

const commands = { migrate, work, 'add-bulk': addBulk, 'poll-relay': pollRelay };

readInput()
  .then((input) => commands[input.command](input))
  // exit once the whole answer is written: a pipe takes 64 kB at a time
  .then((out) => process.stdout.write(JSON.stringify(out), () => process.exit(0)))
  .catch((err) => { process.stderr.write(`${err.stack || err}\n`); process.exit(1); });
