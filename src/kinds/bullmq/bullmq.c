/*-------------------------------------------------------------------------
 *
 * bullmq.c
 *	  The BullMQ kind of destination: an event becomes a job of a BullMQ
 *	  queue whose PostgreSQL schema (BullMQ 6's PostgreSQL backend) is in
 *	  the relay's own database.
 *
 * The job is added by BullMQ's own function, add_job, called in the claim's
 * transaction, the one that marks the event delivered (an at-commit kind,
 * as NOTIFY is): the job exists if and only if the event is marked, and a
 * crash at any point leaves exactly one of each or neither. The job id is
 * the event_id (a UUID: BullMQ refuses an all-digit id and ':'), so an
 * event sent again after outbox_redeliver() finds its job there and
 * add_job adds nothing (its ON CONFLICT (queue, id) DO NOTHING) while
 * BullMQ keeps the job (removeOnComplete ends that).
 *
 * The job is what BullMQ's Queue.add(name, data, opts) writes: its name is
 * the event type (or the destination's job_name), its data the event's
 * payload (or, with job_data 'envelope', the whole envelope: id, type,
 * aggregate, created_at, attempt and payload), its options those the
 * destination sets, and the event's trace context in opts.telemetry (where
 * BullMQ's OpenTelemetry integration reads it), timestamped when it is
 * added. An ERROR from add_job
 * rolls back the claim, which the relay then sends one event at a time,
 * so that it becomes that event's failed attempt alone (docs/bullmq.md).
 *
 * Only the relay's database is reached: a queue of another database or
 * server is a webhook's job (docs/bullmq.md shows the receiver).
 *
 * src/kinds/bullmq/bullmq.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "destination.h"
#include "envelope.h"
#include "event_template.h"
#include "trace_context.h"
#include "bullmq_int.h"

#define BULLMQ_OPTIONS(ev) ((const BullmqDestOptions *) (ev)->dest.options)

#define JOB_DATA_PAYLOAD "payload"
#define JOB_DATA_ENVELOPE "envelope"

/*
 * The bounds of BullMQ 6's job options, as its Job.validateOptions and
 * Queue check them before Queue.add writes a job (job.ts: PRIORITY_LIMIT
 * = 2^21 - 1; queue-base.ts: no ':' in a queue's name). A day in ms for a
 * retry's delay, a year in ms for a job's delay and in seconds for the
 * ages after which BullMQ removes a finished job: larger values are
 * mistakes, not plans.
 */
#define BULLMQ_PRIORITY_LIMIT ((1 << 21) - 1)
#define BULLMQ_MAX_ATTEMPTS 1000
#define BULLMQ_MAX_BACKOFF_MS (24 * 3600 * 1000)
#define BULLMQ_MAX_DELAY_MS (INT64CONST(366) * 24 * 3600 * 1000)
#define BULLMQ_MAX_AGE_S (366 * 24 * 3600)
/*
 * A queue's name as a template builds it, at most: with the job's id, an
 * entry of BullMQ's primary key on job (queue, id), which a btree holds
 * up to about 2,700 bytes (the row too large for the index fails add_job).
 */
#define BULLMQ_MAX_QUEUE_BYTES 1024
/*
 * How long add_job may wait for a lock of BullMQ's (a queue being
 * obliterated, a migration), when the destination sets no timeout_ms: the
 * claim waits with it, and every destination with the claim.
 */
#define BULLMQ_DEFAULT_LOCK_TIMEOUT_MS 5000

static const OutboxKindOption bullmq_options[] = {
	{"queue", OUTBOX_OPTION_STRING, true, 1, 255},
	{"schema", OUTBOX_OPTION_STRING, false, 1, NAMEDATALEN - 1},
	{"job_name", OUTBOX_OPTION_STRING, false, 1, OUTBOX_MAX_TYPE_BYTES},
	{"job_data", OUTBOX_OPTION_STRING, false, 1, 16},
	{"attempts", OUTBOX_OPTION_INTEGER, false, 1, BULLMQ_MAX_ATTEMPTS},
	{"backoff_type", OUTBOX_OPTION_STRING, false, 1, 16},
	{"backoff_delay_ms", OUTBOX_OPTION_INTEGER, false, 0, BULLMQ_MAX_BACKOFF_MS},
	{"priority", OUTBOX_OPTION_INTEGER, false, 0, BULLMQ_PRIORITY_LIMIT},
	{"delay_ms", OUTBOX_OPTION_INTEGER, false, 0, BULLMQ_MAX_DELAY_MS},
	{"remove_on_complete_seconds", OUTBOX_OPTION_INTEGER, false, 0, BULLMQ_MAX_AGE_S},
	{"remove_on_fail_seconds", OUTBOX_OPTION_INTEGER, false, 0, BULLMQ_MAX_AGE_S},
	{NULL}
};

/*
 * check_destination: the rules across options (the trigger checked each
 * one's type and bounds), then the schema: it must exist with BullMQ 6's
 * add_job and a ledger of BullMQ 6 (bullmq_schema.c). Run by the trigger
 * on outbox_destinations, in the writer's transaction.
 */
static bool
bullmq_check_destination(const OutboxDestinationRow *row, OutboxProblem *p)
{
	char	   *queue = OutboxDestinationOptionText(row, "queue");
	char	   *schema = OutboxDestinationOptionText(row, "schema");
	char	   *data = OutboxDestinationOptionText(row, "job_data");
	char	   *backoff = OutboxDestinationOptionText(row, "backoff_type");
	int64		delay;
	BullmqSchema s;
	StringInfoData sample;
	const char *why = NULL;

	/* a name, or a template of one (each field standing for "x") */
	initStringInfo(&sample);
	if (!OutboxTemplateSample(queue, &sample, &why))
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination option \"queue\" is not valid"),
								psprintf("As a template of a queue's name, %s.", why));
	if (strchr(sample.data, ':') != NULL)
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination option \"queue\" is not a BullMQ queue name"),
								pstrdup("BullMQ refuses a queue name with \":\"."));
	if (data != NULL && strcmp(data, JOB_DATA_PAYLOAD) != 0 &&
		strcmp(data, JOB_DATA_ENVELOPE) != 0)
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination option \"job_data\" is not valid"),
								pstrdup("It is payload or envelope."));
	if (backoff != NULL && strcmp(backoff, "fixed") != 0 && strcmp(backoff, "exponential") != 0)
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination option \"backoff_type\" is not valid"),
								pstrdup("It is fixed or exponential, BullMQ's built-in strategies."));
	if ((backoff != NULL) != OutboxDestinationOptionInt(row, "backoff_delay_ms", &delay))
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination options \"backoff_type\" and \"backoff_delay_ms\" go together"),
								pstrdup("BullMQ's backoff is a strategy and a delay."));
	/* a job has no headers: refused rather than ignored */
	if (OutboxDestinationText(row, "headers") != NULL ||
		OutboxDestinationText(row, "event_headers") != NULL)
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("a BullMQ destination has no headers or event_headers"),
								pstrdup("A job carries its data and options; choose job_data envelope for the event's fields."));

	/*
	 * The schema, and the writer's right to add jobs there, when it is
	 * named: an UPDATE that leaves it alone (disabling the destination
	 * while its schema is being migrated) is not refused for its state.
	 */
	if (row->old_tuple != NULL && !OutboxDestinationOptionChanged(row, "schema"))
		return true;
	if (!BullmqSchemaCheck(schema ? schema : BULLMQ_DEFAULT_SCHEMA, true, &s))
	{
		*p = s.problem;
		return false;
	}
	return true;
}

/* Appends "key": {"age": seconds} to job options buf if the option is set. */
static void
append_age(StringInfo buf, const OutboxDestinationRow *row, const char *option,
		   const char *key)
{
	int64		age;

	if (OutboxDestinationOptionInt(row, option, &age))
		appendStringInfo(buf, ", \"%s\": {\"age\": " INT64_FORMAT "}", key, age);
}

/*
 * The job options BullMQ stores with the job (its opts column, read by its
 * Worker for retries and removal), as Queue.add passes them: only those
 * the destination sets, from options checked when it was written.
 */
static Jsonb *
job_opts(const OutboxDestinationRow *row, const BullmqDestOptions *o)
{
	StringInfoData buf;
	char	   *backoff = OutboxDestinationOptionText(row, "backoff_type");
	int64		n;

	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"attempts\": %d", o->attempts);
	if (backoff != NULL && OutboxDestinationOptionInt(row, "backoff_delay_ms", &n))
		appendStringInfo(&buf, ", \"backoff\": {\"type\": \"%s\", \"delay\": " INT64_FORMAT "}",
						 backoff, n);
	if (o->priority > 0)
		appendStringInfo(&buf, ", \"priority\": %d", o->priority);
	if (o->delay_ms > 0)
		appendStringInfo(&buf, ", \"delay\": " INT64_FORMAT, o->delay_ms);
	append_age(&buf, row, "remove_on_complete_seconds", "removeOnComplete");
	append_age(&buf, row, "remove_on_fail_seconds", "removeOnFail");
	appendStringInfoChar(&buf, '}');
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}

/* decode: the options into a BullmqDestOptions, with the job options built. */
static Size
bullmq_decode(const OutboxDestinationRow *row, OutboxDestination *dest)
{
	BullmqDestOptions *o = palloc0(sizeof(BullmqDestOptions));
	char	   *data = OutboxDestinationOptionText(row, "job_data");
	int64		n;
	Jsonb	   *headers;		/* refused when written: none */

	o->schema = OutboxDestinationOptionText(row, "schema");
	if (o->schema == NULL)
		o->schema = pstrdup(BULLMQ_DEFAULT_SCHEMA);
	o->queue = OutboxDestinationOptionText(row, "queue");
	o->job_name = OutboxDestinationOptionText(row, "job_name");
	o->envelope = data != NULL && strcmp(data, JOB_DATA_ENVELOPE) == 0;
	o->attempts = OutboxDestinationOptionInt(row, "attempts", &n) ? (int32) n : 1;
	o->priority = OutboxDestinationOptionInt(row, "priority", &n) ? (int32) n : 0;
	o->delay_ms = OutboxDestinationOptionInt(row, "delay_ms", &n) ? n : 0;
	o->opts = job_opts(row, o);
	(void) OutboxDestinationSharedOptions(row, &o->lock_timeout_ms, &headers);
	if (o->lock_timeout_ms < 0)
		o->lock_timeout_ms = BULLMQ_DEFAULT_LOCK_TIMEOUT_MS;
	dest->options = o;
	return sizeof(BullmqDestOptions) + VARSIZE(o->opts) + strlen(o->schema) +
		(o->queue ? strlen(o->queue) : 0) + (o->job_name ? strlen(o->job_name) : 0);
}

/*
 * opts with the event's trace context (its traceparent and tracestate
 * headers, as the claim kept them) where BullMQ's telemetry reads it: the
 * job's opts.telemetry.metadata. BullMQ declares it a string, the context
 * serialized by the telemetry's ContextManager.getMetadata, and hands it
 * to fromMetadata when a Worker processes the job; bullmq-otel, BullMQ's
 * OpenTelemetry integration, writes and parses it as the text of a JSON
 * object of W3C propagation headers. So the value is that text, not an
 * object, which its JSON.parse would throw on, failing the job. opts alone
 * without a trace context.
 */
static Jsonb *
with_trace_context(Jsonb *opts, const OutboxEvent *ev)
{
	char	   *traceparent;
	char	   *tracestate;
	StringInfoData carrier;
	StringInfoData buf;

	OutboxTraceContextOf(ev->headers, &traceparent, &tracestate);
	if (traceparent == NULL)
		return opts;
	initStringInfo(&carrier);
	appendStringInfoString(&carrier, "{\"traceparent\":");
	escape_json(&carrier, traceparent);
	if (tracestate != NULL)
	{
		appendStringInfoString(&carrier, ",\"tracestate\":");
		escape_json(&carrier, tracestate);
	}
	appendStringInfoChar(&carrier, '}');
	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"telemetry\": {\"metadata\": ");
	escape_json(&buf, carrier.data);
	appendStringInfoString(&buf, "}}");
	return DatumGetJsonbP(DirectFunctionCall2(jsonb_concat, JsonbPGetDatum(opts),
											  DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data))));
}

/*
 * prepare: the queue's name, built from the event's fields if the option
 * is a template; a template that names a field the event lacks, or a name
 * with ':', fails the event for good. With job_data 'envelope', the body
 * is the envelope, which send reads as jsonb; with 'payload', the payload
 * stays in the event as it was read (same database: no text in between)
 * and the body is empty.
 */
static Size
bullmq_prepare(void *state pg_attribute_unused(), OutboxEvent *ev)
{
	/* this event's copy of the options: its fields are set for it alone */
	BullmqDestOptions *o = (BullmqDestOptions *) ev->dest.options;
	const char *missing;
	const char *why;

	o->queue_name = OutboxTemplateBuild(o->queue, ev, &missing, &why);
	if (o->queue_name == NULL || strchr(o->queue_name, ':') != NULL ||
		strlen(o->queue_name) > BULLMQ_MAX_QUEUE_BYTES)
	{
		ev->permanent = true;
		ev->error = missing ?
			psprintf("the queue template uses %s, which the event does not have", missing) :
			why ? psprintf("destination option \"queue\" is not valid: %s", why) :
			o->queue_name == NULL || strchr(o->queue_name, ':') != NULL ?
			pstrdup("the queue name built from the event's fields has \":\", which BullMQ refuses") :
			psprintf("the queue name built from the event's fields is longer than %d bytes",
					 BULLMQ_MAX_QUEUE_BYTES);
		return 0;
	}
	o->opts = with_trace_context(o->opts, ev);
	if (o->envelope)
		return OutboxPrepareEnvelope(ev, true);
	ev->body = pstrdup("");
	return VARSIZE(ev->payload);
}

/* Now in Unix milliseconds, as BullMQ's job timestamps are (Date.now()). */
static int64
unix_ms_now(void)
{
	return GetCurrentTimestamp() / 1000 +
		(int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * 1000;
}

/*
 * send: adds the event's job with BullMQ's add_job, in the claim's
 * transaction, and sets ev->ok; if the schema cannot be used now (gone,
 * of another major: bullmq_schema.c), sets ev->error and adds nothing, to
 * be retried with backoff. An ERROR from add_job itself propagates (see
 * the file's header). In the relay worker or an outbox_relay() backend.
 */
static void
bullmq_send(void *state pg_attribute_unused(), OutboxEvent *ev)
{
	const BullmqDestOptions *o = BULLMQ_OPTIONS(ev);
	BullmqSchema *s = BullmqSchemaForSend(o->schema);
	NullableDatum a[BULLMQ_ADD_JOB_NARGS];

	Oid			temp_nsp;
	Oid			temp_toast_nsp;

	if (s->problem.sqlstate != 0)
	{
		ev->ok = false;
		ev->error = s->problem.detail ?
			psprintf("%s: %s", s->problem.message, s->problem.detail) :
			pstrdup(s->problem.message);
		return;
	}

	/*
	 * A session's temporary table named as one of BullMQ's would take
	 * add_job's rows, and its triggers would run as add_job's owner
	 * (bullmq_schema.c): a session that has any (outbox_relay()) adds no
	 * job, and the relay worker, which has none, adds it.
	 */
	GetTempNamespaceState(&temp_nsp, &temp_toast_nsp);
	if (OidIsValid(temp_nsp))
	{
		ev->ok = false;
		ev->not_sent = true;
		ev->error = pstrdup("BullMQ jobs are not added from a session that has temporary tables; the relay worker adds them");
		return;
	}
	memset(a, 0, sizeof(a));
	for (int i = 0; i < BULLMQ_ADD_JOB_NARGS; i++)
		a[i].isnull = true;
#define ARG(i, d) (a[i].value = (d), a[i].isnull = false)
	ARG(0, CStringGetTextDatum(o->queue_name));
	ARG(1, CStringGetTextDatum(ev->event_id));
	ARG(2, CStringGetTextDatum(o->job_name ? o->job_name : ev->event_type));
	ARG(3, o->envelope ? DirectFunctionCall1(jsonb_in, CStringGetDatum(ev->body)) :
		JsonbPGetDatum(ev->payload));
	ARG(4, JsonbPGetDatum(o->opts));
	ARG(5, Int32GetDatum(o->priority));
	ARG(6, Int64GetDatum(o->delay_ms));
	ARG(7, Int64GetDatum(unix_ms_now()));
	ARG(8, Int32GetDatum(o->attempts));
	/* 9-13: parent queue, id and key, deduplication id, scheduler id: none */
	ARG(14, BoolGetDatum(false));	/* lifo */
#undef ARG
	(void) BullmqAddJob(s, a, o->lock_timeout_ms);
	ev->ok = true;
}

/* The BullMQ kind: a job added in the claim's transaction. */
extern const OutboxDestinationKind OutboxBullmqKind;	/* src/kinds/registry.c */

const OutboxDestinationKind OutboxBullmqKind = {
	.name = "bullmq",
	.description = "a BullMQ queue",
	.target_column = "queue",
	.own_columns = (const OutboxKindColumn[]) {{NULL}},
	.options = bullmq_options,
	.formats = (const char *const[]) {OUTBOX_FORMAT_ENVELOPE, NULL},
	.send_point = OUTBOX_SEND_AT_COMMIT,
	.options_size = sizeof(BullmqDestOptions),
	.check_destination = bullmq_check_destination,
	.decode = bullmq_decode,
	.prepare = bullmq_prepare,
	.send = bullmq_send,
};
