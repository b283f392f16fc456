// Reads the trace context of a delivered request as an OpenTelemetry
// consumer does, with the W3C propagator of @opentelemetry/core,
// independently of the extension's code: from the request's HTTP headers,
// and from each CloudEvent in it (structured, binary or batch, read by the
// npm cloudevents SDK) through its Distributed Tracing extension
// attributes. Reads {"headers": {...}, "body": "..."} from stdin (with
// "binding": "kafka", a Kafka message's headers and value, read by the
// SDK's Kafka binding: ce_ headers or a structured value); prints
// {"headers": <trace id or null>, "cloudevents": [<trace id or null>, ...]}
// ("cloudevents" is absent when the body is not CloudEvents).
'use strict';
const { ROOT_CONTEXT, defaultTextMapGetter, trace } = require('@opentelemetry/api');
const { W3CTraceContextPropagator } = require('@opentelemetry/core');
const { HTTP, Kafka } = require('cloudevents');

const propagator = new W3CTraceContextPropagator();

function traceId(carrier) {
  const ctx = propagator.extract(ROOT_CONTEXT, carrier, defaultTextMapGetter);
  const span = trace.getSpanContext(ctx);
  return span ? span.traceId : null;
}

let input = '';
process.stdin.on('data', (chunk) => { input += chunk; });
process.stdin.on('end', () => {
  const m = JSON.parse(input);
  const lower = {};
  for (const [k, v] of Object.entries(m.headers)) lower[k.toLowerCase()] = v;
  const out = { headers: traceId(lower) };
  try {
    const got = m.binding === 'kafka'
      ? Kafka.toEvent({ headers: m.headers, key: m.key, value: m.body, body: m.body })
      : HTTP.toEvent({ headers: m.headers, body: m.body });
    const events = Array.isArray(got) ? got : [got];
    out.cloudevents = events.map((e) => {
      const carrier = {};
      if (e.traceparent !== undefined) carrier.traceparent = e.traceparent;
      if (e.tracestate !== undefined) carrier.tracestate = e.tracestate;
      return traceId(carrier);
    });
  } catch (err) {
    // not CloudEvents: headers only
  }
  process.stdout.write(JSON.stringify(out) + '\n');
});
