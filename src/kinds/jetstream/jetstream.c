/*-------------------------------------------------------------------------
 *
 * jetstream.c
 *	  The JetStream kind of destination: events published to a NATS
 *	  JetStream stream with the C client library (libnats), deduplicated by
 *	  the broker on the Nats-Msg-Id header, which is the event_id.
 *
 * What counts as delivered is the stream's PubAck (a positive answer that
 * names the stream and the sequence, or says the message is a duplicate).
 * An error answer, no responders (no stream takes the subject) and no
 * answer within the time limit are failed attempts, retried with backoff;
 * the resend carries the same Nats-Msg-Id, so a message stored before its
 * PubAck was lost is not stored twice within the stream's duplicate window.
 *
 * Publishing is asynchronous (js_PublishMsgAsync): at most
 * outbox.jetstream_max_pending messages per destination wait for their
 * PubAck, and a claim takes no more events of a destination than leave
 * room for (js_room), so that none waits for room. An event's time limit
 * runs from when the relay takes it, right after its claim: what is left
 * of it when its message is published bounds the PubAck, which libnats
 * enforces by answering the message itself with a timeout.
 *
 * Each destination's connection has a thread of its own, which connects,
 * then publishes the messages the relay queues, then closes the
 * connection; libnats runs threads of its own (reading, flushing, timers,
 * reconnecting, and the thread that calls the PubAck handler). None of
 * these threads calls into PostgreSQL: they record outcomes in a fixed
 * ring under a mutex and set the relay's latch; the relay turns them into
 * text in collect. What runs on them, and the contract it keeps, is in
 * jetstream_thread.c.
 *
 * This file holds the kind's table and settings, its callbacks, the
 * message built for an event and the outcome made of what a thread
 * recorded; the rest of the family is listed in jetstream_int.h. A
 * destination's connection is kept across claims (jetstream_conn.c).
 *
 * Runs in the relay worker, or in a backend running outbox_relay().
 *
 * src/kinds/jetstream/jetstream.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <nats/nats.h>

#include "lib/ilist.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "destination.h"
#include "envelope.h"
#include "format.h"
#include "headers.h"
#include "log_limit.h"

#include "jetstream_columns.h"
#include "jetstream_int.h"

/* outbox.jetstream_max_pending: its largest value */
#define JS_MAX_PENDING_LIMIT 4096
/* connections unused this long are closed (a destination deleted, renamed) */
#define JS_IDLE_CLOSE_MS (5 * 60 * 1000)

/* outbox.jetstream_timeout (ms) and outbox.jetstream_max_pending */
int			outbox_jetstream_timeout = 5000;
int			outbox_jetstream_max_pending = 1024;

/* ---------------------------------------------------------------------
 * The message of an event
 * ---------------------------------------------------------------------
 */

/*
 * Adds header name: value to m if the value is a valid header value that
 * nats-server cannot read as one of its own headers (JetStreamHoldsNatsPrefix);
 * otherwise leaves it out (the envelope in the body carries every field).
 */
static natsStatus
add_header(natsMsg *m, const char *name, const char *value)
{
	if (value == NULL || !OutboxHeaderValueValid(value, strlen(value)) ||
		JetStreamHoldsNatsPrefix(value))
		return NATS_OK;
	return natsMsgHeader_Set(m, name, value);
}

/*
 * Whether an event's or a destination's header may go to the broker:
 * neither its name nor its value holds "nats-" (JetStreamHoldsNatsPrefix), and it
 * is none of the ones this kind sets itself. A destination's rules refuse
 * such headers when written (JetStreamCheckDestination); this also covers rows
 * written before that rule, and events, whose headers may go to other
 * kinds too.
 */
static bool
header_forwarded(const OutboxHeader *h)
{
	return !JetStreamHoldsNatsPrefix(h->name) && !JetStreamHoldsNatsPrefix(h->value) &&
		pg_strncasecmp(h->name, "outbox-", 7) != 0 &&
		pg_strcasecmp(h->name, "content-type") != 0;
}

/*
 * The message for ev: its body in the destination's format (the envelope,
 * or a CloudEvent in the JSON event format, the NATS binding's structured
 * mode), labelled with the format's media type, and its metadata and
 * headers as NATS headers. Returns NULL with the outcome set on failure.
 */
natsMsg *
JetStreamBuildMessage(OutboxEvent *ev, const char *subject)
{
	natsMsg    *m = NULL;
	natsStatus	s;
	OutboxHeader *headers;
	int			nheaders = OutboxMergeHeaders(JS_OPTIONS(ev)->headers, ev->headers, &headers);
	char	   *attempt = psprintf("%d", ev->attempts + 1);

	s = natsMsg_Create(&m, subject, NULL, ev->body, (int) strlen(ev->body));
	if (s == NATS_OK)
		s = natsMsgHeader_Set(m, "Content-Type", ev->dest.fmt->content_type);
	if (s == NATS_OK)
		s = add_header(m, "Outbox-Event-Id", ev->event_id);
	if (s == NATS_OK)
		s = add_header(m, "Outbox-Event-Type", ev->event_type);
	if (s == NATS_OK)
		s = add_header(m, "Outbox-Aggregate-Type", ev->aggregate_type);
	if (s == NATS_OK)
		s = add_header(m, "Outbox-Aggregate-Id", ev->aggregate_id);
	if (s == NATS_OK)
		s = add_header(m, "Outbox-Attempt", attempt);
	for (int i = 0; s == NATS_OK && i < nheaders; i++)
		if (header_forwarded(&headers[i]))
			s = add_header(m, headers[i].name, headers[i].value);
	if (s != NATS_OK)
	{
		natsMsg_Destroy(m);
		JetStreamFail(ev, psprintf("cannot build the NATS message: %s", natsStatus_GetText(s)), false);
		return NULL;
	}
	return m;
}
/* ---------------------------------------------------------------------
 * Outcomes
 * ---------------------------------------------------------------------
 */

/* Sets ev's outcome to a failure with error (palloc'd). */
void
JetStreamFail(OutboxEvent *ev, char *error, bool permanent)
{
	ev->ok = false;
	ev->permanent = permanent;
	ev->error = error;
}

/* The text of a failed publish's status, for last_error. */
static char *
publish_error(natsStatus s, const char *text)
{
	return psprintf("cannot publish to JetStream: %s",
					OutboxRedact(text && text[0] ? text : natsStatus_GetText(s),
								 strlen(text && text[0] ? text : natsStatus_GetText(s))));
}

/* Duplicate PubAcks are logged at most this often. */
#define JS_DUPLICATE_LOG_MS 10000

/*
 * Logs that c's stream already had ev's message (a duplicate PubAck), at
 * most once per JS_DUPLICATE_LOG_MS, counting those left out; the
 * destination's statistics count every one (deduplicated).
 */
static void
log_duplicate(JsKindState *ks, const OutboxEvent *ev, const JsConn *c)
{
	int			left_out;

	if (!OutboxLogLimitAllows(&ks->duplicate_log, JS_DUPLICATE_LOG_MS, &left_out))
		return;
	ereport(LOG,
			(errmsg("outbox destination \"%s\": stream \"%s\" already had event %s, which counts as delivered without a second copy",
					c->name, c->stream, ev->event_id),
			 left_out > 0 ?
			 errdetail("%d more such duplicates were not logged in the last %d seconds.",
					   left_out, JS_DUPLICATE_LOG_MS / 1000) : 0,
			 errhint("An earlier attempt or a redelivery stored it within the stream's duplicate window; outbox_destination_stats() counts these as deduplicated.")));
}

/*
 * What a JSON answer that is no PubAck of c's stream had (a->not_puback),
 * for last_error.
 */
static char *
not_puback_text(const JsAck *a)
{
	if (a->text[0] != '\0')
		return psprintf("JSON naming stream \"%s\" without a sequence",
						OutboxPrintable(a->text, strlen(a->text)));
	if (a->sequence > 0)
		return psprintf("JSON with sequence %llu and no stream", (unsigned long long) a->sequence);
	return pstrdup("JSON without a stream or a sequence");
}

/* libnats's error text without where in libnats it was set: "(conn.c:1905): " */
static const char *
lib_words(const char *text)
{
	if (text[0] == '(' && strstr(text, "): ") != NULL)
		return strstr(text, "): ") + 3;
	return text;
}

/* The outcome of a PubAck (or its absence) for ev, published to subject. */
void
JetStreamAckOutcome(JsKindState *ks, OutboxEvent *ev, const JsAck *a, const char *subject,
					const JsConn *c)
{
	if (a->status == NATS_OK)
	{
		ev->ok = true;
		ev->duplicate = a->duplicate;
		if (a->duplicate)
			log_duplicate(ks, ev, c);
		return;
	}
	if (a->other_stream)
		JetStreamFail(ev, psprintf("the PubAck came from stream \"%s\", not from the destination's stream \"%s\": not retried, as each retry could store another copy there",
								   OutboxPrintable(a->text, strlen(a->text)), c->stream), true);
	else if (a->not_puback)
		JetStreamFail(ev, psprintf("an answer that is no PubAck of stream \"%s\" came for subject \"%s\" (%s): something else answers it",
								   c->stream, OutboxPrintable(subject, strlen(subject)), not_puback_text(a)), false);
	else if (a->unreadable)
	{
		const char *words = lib_words(a->text);

		JetStreamFail(ev, psprintf("an answer that is not JSON came for subject \"%s\" (%s): something else answers it",
								   OutboxPrintable(subject, strlen(subject)), OutboxRedact(words, strlen(words))), false);
	}
	else if (a->status == NATS_TIMEOUT)
		JetStreamFail(ev, psprintf("no PubAck from JetStream within %d ms (the message may be stored: the retry carries the same Nats-Msg-Id)",
								   c->timeout_ms), false);
	else if (a->status == NATS_NO_RESPONDERS)
		JetStreamFail(ev, psprintf("no JetStream stream takes subject \"%s\" (no responders)",
								   OutboxPrintable(subject, strlen(subject))), false);
	else if (a->status == NATS_MAX_PAYLOAD)
		JetStreamFail(ev, psprintf("the envelope of %zu bytes is larger than the server's max_payload",
								   strlen(ev->body)), true);
	else if (a->code != 0)
		JetStreamFail(ev, psprintf("JetStream refused the message (error %d): %s", (int) a->code,
								   OutboxRedact(a->text, strlen(a->text))), false);
	else
		JetStreamFail(ev, publish_error(a->status, a->text), false);
}
/* ---------------------------------------------------------------------
 * The kind's callbacks
 * ---------------------------------------------------------------------
 */

/*
 * startup: the kind's state in this process, empty: no connection, and no
 * memory context or exit handler until the process first connects
 * (JetStreamSetup), so that a relay that has no JetStream destination starts
 * nothing of libnats's.
 */
static void *
js_startup(void)
{
	return palloc0(sizeof(JsKindState));
}

/*
 * prepare: the event's own headers follow the rules for headers, and its
 * subject can be built; the body is the envelope, in UTF-8 (OutboxBodyToUtf8).
 */
static Size
js_prepare(void *state pg_attribute_unused(), OutboxEvent *ev)
{
	OutboxProblem p;
	char	   *error = NULL;
	char	   *subject;

	if (ev->headers != NULL && !OutboxHeadersCheck(ev->headers, true, &p))
	{
		JetStreamFail(ev, p.message, true);
		return 0;
	}
	subject = JetStreamEventSubject(ev, &error);
	if (subject == NULL)
	{
		JetStreamFail(ev, error, true);
		return 0;
	}
	pfree(subject);
	/* the NATS binding: structured mode only, in UTF-8 */
	return OutboxBodyToUtf8(ev, OutboxPrepareFormat(ev));
}

/*
 * enqueue: the event waits for its connection (the claim left no event
 * waiting for room: see js_room), at most its time limit, which starts
 * now; collect publishes it.
 */
static void
js_enqueue(void *state, OutboxEvent *ev)
{
	JsConn	   *c = JetStreamConnFor(state, ev);
	JsWaiting  *w = MemoryContextAllocZero(c->cxt, sizeof(JsWaiting));

	c->last_used = GetCurrentTimestamp();
	w->ev = ev;
	w->deadline = TimestampTzPlusMilliseconds(c->last_used, c->timeout_ms);
	dlist_push_tail(&c->waiting, &w->node);
	c->nwaiting++;
	c->live++;
}

/*
 * collect: records outcomes, queues what waits, and returns the events
 * whose outcome is known. Retires connections unused for
 * JS_IDLE_CLOSE_MS (a destination deleted, renamed or disabled), and frees
 * retired ones once their thread has ended. Interruptible.
 */
static List *
js_collect(void *state)
{
	JsKindState *ks = state;
	List	   *done = NIL;
	ListCell   *lc;
	TimestampTz now = GetCurrentTimestamp();

	foreach(lc, ks->conns)
	{
		JsConn	   *c = lfirst(lc);

		JetStreamCollectAcks(ks, c, &done);
		if (!c->retiring && c->live == 0 && c->outstanding == 0 &&
			TimestampDifferenceExceeds(c->last_used, now, JS_IDLE_CLOSE_MS))
			c->retiring = true;
		JetStreamServiceConn(c, &done);
		if (c->retiring && !JsConnThreadRuns(c) && c->outstanding == 0 && c->nwaiting == 0)
		{
			JetStreamFreeConn(c);
			ks->conns = foreach_delete_current(ks->conns, lc);
		}
	}
	CHECK_FOR_INTERRUPTS();
	return done;
}

/* pending: events taken whose outcome is not returned yet. */
static int
js_pending(void *state)
{
	JsKindState *ks = state;
	int			n = 0;
	ListCell   *lc;

	foreach(lc, ks->conns)
		n += ((JsConn *) lfirst(lc))->live;
	return n;
}

/* busy: events taken, or messages (abandoned ones too) not answered yet. */
static bool
js_busy(void *state)
{
	JsKindState *ks = state;
	ListCell   *lc;

	foreach(lc, ks->conns)
	{
		JsConn	   *c = lfirst(lc);

		if (c->live > 0 || c->outstanding > 0)
			return true;
	}
	return false;
}

/*
 * How many more events destination name can take: the cap of its live
 * connection (outbox.jetstream_max_pending when it has none yet), less
 * what its connections hold, retiring ones too: events waiting, and
 * messages whose PubAck is not collected (those of events abandoned too,
 * which still take a place in libnats). At most 0.
 */
static int
dest_room(JsKindState *ks, const char *name)
{
	int			cap = outbox_jetstream_max_pending;
	int			held = 0;
	ListCell   *lc;

	foreach(lc, ks->conns)
	{
		JsConn	   *c = lfirst(lc);

		if (strcmp(c->name, name) != 0)
			continue;
		if (!c->retiring)
			cap = c->cap;
		held += c->nwaiting + c->outstanding;
	}
	return Max(cap - held, 0);
}

/* room: what dest_room says of ev's destination. */
static int
js_room(void *state, const OutboxEvent *ev)
{
	return dest_room(state, ev->dest.name);
}

/* full: destinations without room (dest_room). */
static List *
js_full(void *state)
{
	JsKindState *ks = state;
	List	   *full = NIL;
	ListCell   *lc;

	foreach(lc, ks->conns)
	{
		JsConn	   *c = lfirst(lc);

		if (!c->retiring && dest_room(ks, c->name) == 0)
			full = lappend(full, c->name);
	}
	return full;
}

/*
 * timeout_ms: when the first waiting event's time limit ends, or when a
 * failed connection may be tried again; -1 otherwise (outcomes and the
 * threads set the latch).
 */
static long
js_timeout_ms(void *state)
{
	JsKindState *ks = state;
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz due = 0;
	ListCell   *lc;

	foreach(lc, ks->conns)
	{
		JsConn	   *c = lfirst(lc);
		JsWaiting  *w;

		if (c->nwaiting == 0)
			continue;
		/* the first taken: every one of the connection has its time limit */
		w = dlist_head_element(JsWaiting, node, &c->waiting);
		if (due == 0 || w->deadline < due)
			due = w->deadline;
		if (c->phase == JS_PHASE_BACKING_OFF && (due == 0 || c->retry_at < due))
			due = c->retry_at;
	}
	if (due == 0)
		return -1;
	if (due <= now)
		return 0;
	return (long) Min((due - now + 999) / 1000, (TimestampTz) PG_INT32_MAX);
}

/*
 * abandon: forgets every event taken. Waiting ones are dropped; queued
 * and published ones keep their place until their outcome comes, so that
 * the count of messages waiting for one stays right. Must not throw.
 */
static void
js_abandon(void *state)
{
	JsKindState *ks = state;
	ListCell   *lc;

	foreach(lc, ks->conns)
	{
		JsConn	   *c = lfirst(lc);
		dlist_mutable_iter iter;
		HASH_SEQ_STATUS seq;
		JsInFlight *f;

		dlist_foreach_modify(iter, &c->waiting)
		{
			dlist_delete(iter.cur);
			pfree(dlist_container(JsWaiting, node, iter.cur));
		}
		c->nwaiting = 0;
		hash_seq_init(&seq, c->in_flight);
		while ((f = hash_seq_search(&seq)) != NULL)
			f->ev = NULL;
		c->live = 0;
	}
}
/* ---------------------------------------------------------------------
 * The kind
 * ---------------------------------------------------------------------
 */

/* init: the outbox.jetstream_* settings. */
static void
js_define_settings(void)
{
	DefineCustomIntVariable("outbox.jetstream_timeout",
							"Sets the default time limit of a JetStream destination's connection attempt and of each PubAck.",
							"A destination's timeout_ms overrides it.",
							&outbox_jetstream_timeout,
							5000, 1, OUTBOX_MAX_TIMEOUT_MS,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.jetstream_max_pending",
							"Sets the maximum number of events a relay has published to one JetStream destination without their PubAck.",
							"A change applies to connections made after it.",
							&outbox_jetstream_max_pending,
							1024, 1, JS_MAX_PENDING_LIMIT,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);
}

/* The JetStream kind: sent after COMMIT, libnats's threads report PubAcks. */
const OutboxDestinationKind OutboxJetStreamKind = {
	.name = JETSTREAM_NAME,
	.description = JETSTREAM_DESCRIPTION,
	.target_column = JETSTREAM_TARGET_COLUMN,
	.own_columns = (const OutboxKindColumn[]) {JETSTREAM_OWN_COLUMNS},
	.formats = (const char *const[]) {OUTBOX_FORMAT_ENVELOPE, OUTBOX_FORMAT_CLOUDEVENTS, NULL},
	.send_point = OUTBOX_SEND_AFTER_COMMIT,
	.options_size = sizeof(JsDestOptions),
	.check_destination = JetStreamCheckDestination,
	.decode = JetStreamDecode,
	.init = js_define_settings,
	.startup = js_startup,
	.prepare = js_prepare,
	.enqueue = js_enqueue,
	.collect = js_collect,
	.pending = js_pending,
	.busy = js_busy,
	.full = js_full,
	.room = js_room,
	.timeout_ms = js_timeout_ms,
	.abandon = js_abandon,
};
