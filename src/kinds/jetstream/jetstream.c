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
 * Connections are kept across claims; libnats reconnects after a broker
 * restart (messages published meanwhile wait in its reconnect buffer and
 * time out like any other). A destination whose row changes gets a new
 * connection; the old one, and one unused for five minutes, is closed
 * when nothing it published waits for an answer.
 *
 * Runs in the relay worker, or in a backend running outbox_relay().
 *
 * src/kinds/jetstream/jetstream.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <nats/nats.h>
#include <openssl/crypto.h>

#include "catalog/pg_authid.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "lib/ilist.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"
#include "utils/wait_event.h"

#include "destination.h"
#include "envelope.h"
#include "headers.h"
#include "log_limit.h"

#include "jetstream_int.h"

/* outbox.jetstream_max_pending: its largest value */
#define JS_MAX_PENDING_LIMIT 4096
/* a failed connection is tried again after this much, doubling, at most */
#define JS_RECONNECT_MIN_MS 1000
#define JS_RECONNECT_MAX_MS 30000

/* outbox.jetstream_timeout (ms) and outbox.jetstream_max_pending */
static int	js_timeout = 5000;
static int	js_max_pending = 1024;

/* ---------------------------------------------------------------------
 * Connections, shared with the threads
 * ---------------------------------------------------------------------
 */

/* connections unused this long are closed (a destination deleted, renamed) */
#define JS_IDLE_CLOSE_MS (5 * 60 * 1000)

/* how long a process that exits waits for its connections to close */
#define JS_EXIT_WAIT_MS 500

/*
 * The state js_atexit reads. An atexit handler gets no argument, so this is
 * the one place the kind's state is reached other than through its
 * callbacks' state argument or OutboxKindState: set by JetStreamSetup when
 * it registers the handler, and never changed after.
 */
static JsKindState *exit_state = NULL;

/*
 * Starts c's thread (JetStreamThreadStart), its shared fields reset for a
 * new attempt. A thread that cannot start counts as a failed attempt,
 * which may be tried again at once.
 */
static void
start_connect(JsConn *c)
{
	Assert(!c->thread_started && c->outstanding == 0);
	if (c->cap != js_max_pending)
	{
		/* outbox.jetstream_max_pending changed: applies to the new connection */
		c->cap = js_max_pending;
		pfree(c->acks);
		c->acks = MemoryContextAllocZero(c->cxt, sizeof(JsAck) * c->cap);
	}
	pthread_mutex_lock(&c->mu);
	c->state = JS_CONNECTING;
	c->stop = false;
	c->finished = false;
	c->closed = false;
	c->error[0] = '\0';
	c->lib_error[0] = '\0';
	c->ack_head = 0;
	c->nacks = 0;
	pthread_mutex_unlock(&c->mu);
	c->ready_seen = false;
	if (!JetStreamThreadStart(c))
	{
		c->retry_at = 0;
		return;
	}
	c->thread_started = true;
}

/* Asks c's thread to close the connection and end. */
static void
request_stop(JsConn *c)
{
	pthread_mutex_lock(&c->mu);
	c->stop = true;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->mu);
}

/*
 * Frees connection c, whose thread has ended and been joined, and which
 * has nothing outstanding; zeroes its password and token first.
 */
static void
free_conn(JsConn *c)
{
	/* the secrets are not left in freed memory */
	if (c->password != NULL)
		explicit_bzero(c->password, strlen(c->password));
	if (c->token != NULL)
		explicit_bzero(c->token, strlen(c->token));
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cond);
	MemoryContextDelete(c->cxt);
}

/*
 * The URLs of a nats_servers value, for messages: without anything a URL
 * can carry before an @ (the rules refuse it; this is a second guard).
 */
static char *
servers_for_messages(char **list, int n)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < n; i++)
	{
		const char *u = list[i];
		const char *at = strrchr(u, '@');
		const char *scheme = strstr(u, "://");

		if (i > 0)
			appendStringInfoString(&buf, ", ");
		if (scheme != NULL)
			appendBinaryStringInfo(&buf, u, scheme + 3 - u);
		appendStringInfoString(&buf, at != NULL ? at + 1 : (scheme != NULL ? scheme + 3 : u));
	}
	return buf.data;
}

static char *
nullable(const char *s)
{
	return s != NULL ? pstrdup(s) : NULL;
}

/*
 * The options of a destination as one string, to see a change: each
 * optional value with a mark of whether it is set, so that NULL and ''
 * differ.
 */
static char *
fingerprint(const JsDestOptions *o, int timeout_ms)
{
	const char *opt[] = {o->user, o->password, o->token, o->creds_file, o->ca_file};
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf, "%s\n%s\n%s\n%d", o->servers, o->subject, o->stream, timeout_ms);
	for (int i = 0; i < (int) lengthof(opt); i++)
		appendStringInfo(&buf, "\n%c%s", opt[i] ? '+' : '-', opt[i] ? opt[i] : "");
	return buf.data;
}

/*
 * At the exit of a process that used JetStream (a relay, or a session that
 * ran outbox_relay() or outbox_jetstream_check()), a before_shmem_exit
 * callback: asks every connection's thread to close and end, and waits up
 * to JS_EXIT_WAIT_MS for them (natsConnection_Close joins the
 * connection's own reading and flushing threads). Without it the process
 * runs its exit handlers (OpenSSL's frees its state) while those threads
 * still use it. A thread that does not end in time (a connection attempt
 * waits on an unresponsive or slow server) is left, with a LOG line, so
 * that a relay stops within a second whatever the broker does; then the
 * process skips those handlers (js_atexit), as PostgreSQL's own quick exit
 * does, once its own exit callbacks have run.
 *
 * Not nats_Close: libnats's final cleanup frees OpenSSL's list of
 * compression methods (libnats 3.4, nats.c), which OpenSSL's own exit
 * handler then frees again. Without it libnats's idle threads keep their
 * hold on the library, which then skips that cleanup at exit.
 */
static void
js_at_exit(int code, Datum arg)
{
	JsKindState *ks = (JsKindState *) DatumGetPointer(arg);
	List	   *all = list_copy(ks->conns);
	TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), JS_EXIT_WAIT_MS);
	int			running;
	long		left_ms;
	ListCell   *lc;

	all = list_concat(all, ks->checked);
	foreach(lc, all)
	{
		JsConn	   *c = lfirst(lc);

		if (c->thread_started)
			request_stop(c);
	}
	for (;;)
	{
		running = 0;
		foreach(lc, all)
		{
			JsConn	   *c = lfirst(lc);
			bool		finished;

			if (!c->thread_started)
				continue;
			pthread_mutex_lock(&c->mu);
			finished = c->finished;
			pthread_mutex_unlock(&c->mu);
			if (finished)
			{
				pthread_join(c->thread, NULL);
				c->thread_started = false;
			}
			else
				running++;
		}
		left_ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), until);
		if (running == 0 || left_ms <= 0)
			break;
		pg_usleep(5000L);
	}
	ks->exit_code = code;
	if (running > 0)
	{
		ks->threads_left = true;
		ereport(LOG,
				(errmsg("outbox: %d JetStream connection(s) did not close within %d ms of exit",
						running, JS_EXIT_WAIT_MS),
				 errdetail("The process exits without the libraries' exit handlers, which would free what those connections use.")));
	}
}

/*
 * An atexit handler, registered after OpenSSL's and libnats's (js_setup),
 * so run before them: when a connection's thread is still running, ends
 * the process at once with its exit code (_exit), every PostgreSQL exit
 * callback done, and the libraries' handlers not run.
 */
static void
js_atexit(void)
{
	if (exit_state != NULL && exit_state->threads_left)
		_exit(exit_state->exit_code);
}

/*
 * The memory context of JetStream's connections (ks->cxt), made when the
 * process first connects; first, the exit callbacks. OpenSSL and libnats
 * register their atexit handlers when they are first initialized: that is
 * done here, so that js_atexit, registered after them, runs before them.
 */
static void
js_setup(JsKindState *ks)
{
	if (ks->cxt != NULL)
		return;
	ks->cxt = AllocSetContextCreate(TopMemoryContext, "outbox jetstream",
									ALLOCSET_DEFAULT_SIZES);
	(void) OPENSSL_init_crypto(0, NULL);
	(void) nats_Open(-1);
	exit_state = ks;
	if (atexit(js_atexit) != 0)
		elog(ERROR, "could not register an exit handler for JetStream connections");
	before_shmem_exit(js_at_exit, PointerGetDatum(ks));
}

/* Creates the connection of a destination, not yet connecting. */
static JsConn *
new_conn(JsKindState *ks, const char *name, const JsDestOptions *o, const char *fp,
		 int timeout_ms)
{
	MemoryContext cxt = AllocSetContextCreate(ks->cxt, "outbox jetstream connection",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	JsConn	   *c = palloc0(sizeof(JsConn));
	HASHCTL		info;
	int			total;

	c->cxt = cxt;
	c->name = pstrdup(name);
	c->fingerprint = pstrdup(fp);
	dlist_init(&c->waiting);
	c->cap = js_max_pending;
	c->timeout_ms = timeout_ms;
	c->acks = palloc0(sizeof(JsAck) * c->cap);
	c->stream = pstrdup(o->stream);
	c->server_list = JetStreamSplitServers(o->servers, &c->nservers, &total);
	c->servers_text = servers_for_messages(c->server_list, c->nservers);
	c->secure = o->ca_file != NULL;
	for (int i = 0; i < c->nservers; i++)
		c->secure |= pg_strncasecmp(c->server_list[i], "tls://", 6) == 0;
	c->user = nullable(o->user);
	c->password = nullable(o->password);
	c->token = nullable(o->token);
	c->creds_file = nullable(o->creds_file);
	c->ca_file = nullable(o->ca_file);
	c->last_used = GetCurrentTimestamp();
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(natsMsg *);
	info.entrysize = sizeof(JsInFlight);
	info.hcxt = cxt;
	c->in_flight = hash_create("outbox jetstream in flight", 64, &info,
							   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cond, NULL);
	c->state = JS_IDLE;
	MemoryContextSwitchTo(old);
	return c;
}

/* The live connection of ev's destination; a new one if its options changed. */
static JsConn *
conn_for(JsKindState *ks, OutboxEvent *ev)
{
	const JsDestOptions *o = JS_OPTIONS(ev);
	int			timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : js_timeout;
	char	   *fp;
	ListCell   *lc;
	JsConn	   *c;
	MemoryContext old;

	js_setup(ks);
	fp = fingerprint(o, timeout_ms);
	foreach(lc, ks->conns)
	{
		c = lfirst(lc);
		if (c->retiring || strcmp(c->name, ev->dest.name) != 0)
			continue;
		if (strcmp(c->fingerprint, fp) == 0)
		{
			pfree(fp);
			return c;
		}
		c->retiring = true;
	}
	c = new_conn(ks, ev->dest.name, o, fp, timeout_ms);
	pfree(fp);
	old = MemoryContextSwitchTo(ks->cxt);
	ks->conns = lappend(ks->conns, c);
	MemoryContextSwitchTo(old);
	return c;
}

/* ---------------------------------------------------------------------
 * The kind's callbacks
 * ---------------------------------------------------------------------
 */

/* Sets ev's outcome to a failure with error (palloc'd). */
static void
fail(OutboxEvent *ev, char *error, bool permanent)
{
	ev->ok = false;
	ev->permanent = permanent;
	ev->error = error;
}

/*
 * enqueue: the event waits for its connection (the claim left no event
 * waiting for room: see js_room), at most its time limit, which starts
 * now; collect publishes it.
 */
static void
js_enqueue(void *state, OutboxEvent *ev)
{
	JsConn	   *c = conn_for(state, ev);
	JsWaiting  *w = MemoryContextAllocZero(c->cxt, sizeof(JsWaiting));

	c->last_used = GetCurrentTimestamp();
	w->ev = ev;
	w->deadline = TimestampTzPlusMilliseconds(c->last_used, c->timeout_ms);
	dlist_push_tail(&c->waiting, &w->node);
	c->nwaiting++;
	c->live++;
}

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
 * The message for ev: its envelope as the body, its metadata and headers
 * as NATS headers. Returns NULL with the outcome set on failure.
 */
static natsMsg *
build_message(OutboxEvent *ev, const char *subject)
{
	natsMsg    *m = NULL;
	natsStatus	s;
	OutboxHeader *headers;
	int			nheaders = OutboxMergeHeaders(JS_OPTIONS(ev)->headers, ev->headers, &headers);
	char	   *attempt = psprintf("%d", ev->attempts + 1);

	s = natsMsg_Create(&m, subject, NULL, ev->body, (int) strlen(ev->body));
	if (s == NATS_OK)
		s = natsMsgHeader_Set(m, "Content-Type", "application/json");
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
		fail(ev, psprintf("cannot build the NATS message: %s", natsStatus_GetText(s)), false);
		return NULL;
	}
	return m;
}

/* The text of a failed publish's status, for last_error. */
static char *
publish_error(natsStatus s, const char *text)
{
	return psprintf("cannot publish to JetStream: %s",
					OutboxRedact(text && text[0] ? text : natsStatus_GetText(s),
								 strlen(text && text[0] ? text : natsStatus_GetText(s))));
}

/*
 * Queues c's waiting events for its thread while there is room: each
 * message is built here, noted in the start log, and entered in the
 * in-flight hash before the thread can publish it (its PubAck can come at
 * once). Events whose message cannot be built go to *done.
 */
static void
publish_waiting(JsConn *c, List **done)
{
	List	   *batch = NIL;
	ListCell   *lc;
	JsPublish  *head = NULL;
	JsPublish  *tail = NULL;
	TimestampTz now = GetCurrentTimestamp();

	/* those whose time limit is over are failed by the caller, unpublished */
	while (!dlist_is_empty(&c->waiting) && c->outstanding + list_length(batch) < c->cap &&
		   dlist_head_element(JsWaiting, node, &c->waiting)->deadline > now)
	{
		JsWaiting  *w = dlist_container(JsWaiting, node, dlist_pop_head_node(&c->waiting));

		c->nwaiting--;
		batch = lappend(batch, w);
	}
	if (batch == NIL)
		return;
	foreach(lc, batch)
		OutboxStartLogNote(((JsWaiting *) lfirst(lc))->ev);
	OutboxStartLogFlush();

	foreach(lc, batch)
	{
		JsWaiting  *w = lfirst(lc);
		OutboxEvent *ev = w->ev;
		char	   *error = NULL;
		char	   *subject = JetStreamEventSubject(ev, &error);
		natsMsg    *m;
		JsPublish  *p;
		JsInFlight *f;
		bool		found;

		if (subject == NULL)
		{
			fail(ev, error, true);
			c->live--;
			*done = lappend(*done, ev);
			continue;
		}
		m = build_message(ev, subject);
		p = m != NULL ? malloc(sizeof(JsPublish)) : NULL;
		if (p == NULL)
		{
			if (m != NULL)
			{
				natsMsg_Destroy(m);
				fail(ev, pstrdup("out of memory"), false);
			}
			pfree(subject);
			c->live--;
			*done = lappend(*done, ev);
			continue;
		}
		p->next = NULL;
		p->msg = m;
		/* at least 1 ms: libnats sets no limit at all for 0 */
		p->max_wait = Max((w->deadline - now + 999) / 1000, 1);
		strlcpy(p->msg_id, ev->event_id, sizeof(p->msg_id));
		f = hash_search(c->in_flight, &m, HASH_ENTER, &found);
		f->ev = ev;
		f->subject = MemoryContextStrdup(c->cxt, subject);
		c->outstanding++;
		pfree(subject);
		if (tail != NULL)
			tail->next = p;
		else
			head = p;
		tail = p;
	}
	list_free_deep(batch);
	if (head == NULL)
		return;
	pthread_mutex_lock(&c->mu);
	if (c->queue_tail != NULL)
		c->queue_tail->next = head;
	else
		c->queue = head;
	c->queue_tail = tail;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->mu);
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
static void
ack_outcome(JsKindState *ks, OutboxEvent *ev, const JsAck *a, const char *subject,
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
		fail(ev, psprintf("the PubAck came from stream \"%s\", not from the destination's stream \"%s\": not retried, as each retry could store another copy there",
						  OutboxPrintable(a->text, strlen(a->text)), c->stream), true);
	else if (a->not_puback)
		fail(ev, psprintf("an answer that is no PubAck of stream \"%s\" came for subject \"%s\" (%s): something else answers it",
						  c->stream, OutboxPrintable(subject, strlen(subject)), not_puback_text(a)), false);
	else if (a->unreadable)
	{
		const char *words = lib_words(a->text);

		fail(ev, psprintf("an answer that is not JSON came for subject \"%s\" (%s): something else answers it",
						  OutboxPrintable(subject, strlen(subject)), OutboxRedact(words, strlen(words))), false);
	}
	else if (a->status == NATS_TIMEOUT)
		fail(ev, psprintf("no PubAck from JetStream within %d ms (the message may be stored: the retry carries the same Nats-Msg-Id)",
						  c->timeout_ms), false);
	else if (a->status == NATS_NO_RESPONDERS)
		fail(ev, psprintf("no JetStream stream takes subject \"%s\" (no responders)",
						  OutboxPrintable(subject, strlen(subject))), false);
	else if (a->status == NATS_MAX_PAYLOAD)
		fail(ev, psprintf("the envelope of %zu bytes is larger than the server's max_payload",
						  strlen(ev->body)), true);
	else if (a->code != 0)
		fail(ev, psprintf("JetStream refused the message (error %d): %s", (int) a->code,
						  OutboxRedact(a->text, strlen(a->text))), false);
	else
		fail(ev, publish_error(a->status, a->text), false);
}

/* Forgets in-flight entry f of c (found by key), its outcome collected. */
static void
forget_in_flight(JsConn *c, JsInFlight *f)
{
	natsMsg    *key = f->msg;

	c->outstanding--;
	pfree(f->subject);
	hash_search(c->in_flight, &key, HASH_REMOVE, NULL);
}

/* Collects the outcomes c's threads recorded; events with one go to *done. */
static void
collect_acks(JsKindState *ks, JsConn *c, List **done)
{
	JsAck	   *copy;
	int			n;

	pthread_mutex_lock(&c->mu);
	n = c->nacks;
	if (n == 0)
	{
		pthread_mutex_unlock(&c->mu);
		return;
	}
	copy = palloc(sizeof(JsAck) * n);
	for (int i = 0; i < n; i++)
		copy[i] = c->acks[(c->ack_head + i) % c->cap];
	c->ack_head = (c->ack_head + n) % c->cap;
	c->nacks = 0;
	pthread_mutex_unlock(&c->mu);

	for (int i = 0; i < n; i++)
	{
		JsInFlight *f = hash_search(c->in_flight, &copy[i].msg, HASH_FIND, NULL);

		if (f != NULL)
		{
			if (f->ev != NULL)
			{
				ack_outcome(ks, f->ev, &copy[i], f->subject, c);
				c->live--;
				*done = lappend(*done, f->ev);
			}
			forget_in_flight(c, f);
		}
		natsMsg_Destroy(copy[i].msg);
	}
	pfree(copy);
}

/*
 * Takes back from libnats the messages of c's closed connection that wait
 * for a PubAck, which will not come, and fails their events. (The ones
 * still queued for the thread fail when it publishes them.)
 */
static void
take_back_pending(JsConn *c, List **done)
{
	natsMsgList pending;
	jsCtx	   *js;

	/* the thread keeps the context until the relay asks it to stop */
	pthread_mutex_lock(&c->mu);
	js = c->js;
	pthread_mutex_unlock(&c->mu);
	if (js == NULL || js_PublishAsyncGetPendingList(&pending, js) != NATS_OK)
		return;
	for (int i = 0; i < pending.Count; i++)
	{
		natsMsg    *key = pending.Msgs[i];
		JsInFlight *f = hash_search(c->in_flight, &key, HASH_FIND, NULL);

		if (f == NULL)
			continue;
		if (f->ev != NULL)
		{
			fail(f->ev, psprintf("the connection to NATS at %s was closed before the PubAck came (the message may be stored: the retry carries the same Nats-Msg-Id)",
								 c->servers_text), false);
			c->live--;
			*done = lappend(*done, f->ev);
		}
		forget_in_flight(c, f);
	}
	natsMsgList_Destroy(&pending);
}

/* Fails the waiting events of c: those past their deadline, or all. */
static void
fail_waiting(JsConn *c, bool all, const char *why, List **done)
{
	dlist_mutable_iter iter;
	TimestampTz now = GetCurrentTimestamp();

	dlist_foreach_modify(iter, &c->waiting)
	{
		JsWaiting  *w = dlist_container(JsWaiting, node, iter.cur);

		if (!all && w->deadline > now)
			continue;
		dlist_delete(&w->node);
		c->nwaiting--;
		c->live--;
		fail(w->ev, pstrdup(why), false);
		*done = lappend(*done, w->ev);
		pfree(w);
	}
}

/* Human units for a duration in ms: "2 min", "90 s", "1.5 h". */
static char *
duration_text(double ms)
{
	if (ms >= 2 * 3600 * 1000.0)
		return psprintf("%.1f h", ms / 3600000.0);
	if (ms >= 120 * 1000.0)
		return psprintf("%.0f min", ms / 60000.0);
	return psprintf("%.0f s", ms / 1000.0);
}

/*
 * What is wrong with c's stream's deduplication, palloc'd, or NULL: the
 * window (duplicates_ns, or max_age_ns when shorter: a message gone is an
 * id forgotten) is shorter than the retry span. Sets *window_ms and
 * *span_ms.
 */
static char *
window_problem(const JsConn *c, int64 duplicates_ns, int64 max_age_ns,
			   double *window_ms, double *span_ms)
{
	*window_ms = duplicates_ns / 1000000.0;
	if (max_age_ns > 0 && max_age_ns < duplicates_ns)
		*window_ms = max_age_ns / 1000000.0;
	*span_ms = OutboxRetrySpanMs(c->timeout_ms);
	if (*span_ms <= *window_ms)
		return NULL;
	return psprintf("stream \"%s\" deduplicates for %s, but a resend can come up to %s after the first attempt: past the window, consumers must deduplicate by event_id",
					c->stream, duration_text(*window_ms), duration_text(*span_ms));
}

/*
 * After a connection, and after a reconnection: compares the stream's duplicate window (and its
 * max_age, past which a stored message and its id are gone) with the
 * retry span, and warns in the log and in the destination's last_error
 * when a resend can come later than the window.
 */
static void
check_window(JsConn *c)
{
	double		window_ms;
	double		span;
	char	   *text;
	int64		duplicates_ns;
	int64		max_age_ns;

	pthread_mutex_lock(&c->mu);
	if (!c->window_read)
	{
		pthread_mutex_unlock(&c->mu);
		return;
	}
	c->window_read = false;
	duplicates_ns = c->duplicates_ns;
	max_age_ns = c->max_age_ns;
	pthread_mutex_unlock(&c->mu);
	text = window_problem(c, duplicates_ns, max_age_ns, &window_ms, &span);
	if (text == NULL)
		return;
	ereport(WARNING,
			(errmsg("outbox destination \"%s\": %s", c->name, text),
			 errhint("Raise the stream's duplicate_window to %s or more, or lower outbox.max_attempts or outbox.backoff_max.",
					 duration_text(span))));
	OutboxHealthDestinationWarning(c->name, text);
}

/*
 * Moves connection c along: joins its thread when it ended (after a
 * failed attempt, whose reason fails the waiting events, or when asked to
 * stop); reports a new connection and checks its stream's window; after
 * libnats closed the connection for good, takes back what waits for a
 * PubAck; stops the thread when c is retired or closed and nothing is
 * outstanding; starts an attempt when events wait and no thread runs;
 * queues the waiting events while connected; fails those that waited
 * their time limit for a connection.
 */
static void
service_conn(JsConn *c, List **done)
{
	JsState		state;
	bool		finished;
	bool		closed;
	TimestampTz now = GetCurrentTimestamp();

	pthread_mutex_lock(&c->mu);
	state = c->state;
	finished = c->finished;
	closed = c->closed;
	pthread_mutex_unlock(&c->mu);

	if (c->thread_started && finished)
	{
		pthread_join(c->thread, NULL);
		c->thread_started = false;
		c->stopping = false;
		if (state == JS_FAILED)
		{
			char		error[JS_TEXT_BYTES];
			char		lib_error[JS_TEXT_BYTES];

			pthread_mutex_lock(&c->mu);
			memcpy(error, c->error, sizeof(error));
			memcpy(lib_error, c->lib_error, sizeof(lib_error));
			pthread_mutex_unlock(&c->mu);
			if (c->last_failure != NULL)
				pfree(c->last_failure);
			/* libnats's words may quote a URL with its credentials */
			c->last_failure = MemoryContextStrdup(c->cxt,
												  psprintf("NATS at %s, stream \"%s\": %s%s", c->servers_text, c->stream,
														   error, OutboxRedact(lib_error, strlen(lib_error))));
			c->failures++;
			c->retry_at = TimestampTzPlusMilliseconds(now,
													  Min(JS_RECONNECT_MIN_MS << Min(c->failures - 1, 8),
														  JS_RECONNECT_MAX_MS));
			fail_waiting(c, true, c->last_failure, done);
		}
		else
		{
			pthread_mutex_lock(&c->mu);
			c->state = state = JS_IDLE;
			pthread_mutex_unlock(&c->mu);
		}
	}

	if (state == JS_READY && !c->ready_seen)
	{
		c->ready_seen = true;
		c->failures = 0;
		ereport(LOG,
				(errmsg("outbox relay connected to NATS at %s for destination \"%s\"",
						c->servers_text, c->name)));
	}
	if (state == JS_READY)
		check_window(c);
	if (state == JS_READY && closed && !c->stopping)
		take_back_pending(c, done);
	if (c->thread_started && !c->stopping && state == JS_READY && c->outstanding == 0 &&
		(closed || (c->retiring && c->nwaiting == 0)))
	{
		request_stop(c);
		c->stopping = true;
	}

	if (c->retiring && c->nwaiting == 0)
		return;
	if (!c->thread_started && c->nwaiting > 0)
	{
		if (state == JS_FAILED && now < c->retry_at)
			fail_waiting(c, true, c->last_failure, done);
		else
			start_connect(c);
	}
	else if (state == JS_READY && !closed && !c->stopping)
		publish_waiting(c, done);

	/* a time limit runs from when the event was taken, whatever it waits for */
	if (c->nwaiting > 0)
	{
		char	   *why = state != JS_READY
			? psprintf("not connected to NATS at %s within %d ms",
					   c->servers_text, c->timeout_ms)
			: psprintf("not published to NATS at %s within %d ms: %d messages of the destination were waiting for their PubAck (outbox.jetstream_max_pending)",
					   c->servers_text, c->timeout_ms, c->outstanding);

		fail_waiting(c, false, why, done);
		pfree(why);
	}
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

		collect_acks(ks, c, &done);
		if (!c->retiring && c->live == 0 && c->outstanding == 0 &&
			TimestampDifferenceExceeds(c->last_used, now, JS_IDLE_CLOSE_MS))
			c->retiring = true;
		service_conn(c, &done);
		if (c->retiring && !c->thread_started && c->outstanding == 0 && c->nwaiting == 0)
		{
			free_conn(c);
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
	int			cap = js_max_pending;
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
		JsState		state;

		if (c->nwaiting == 0)
			continue;
		pthread_mutex_lock(&c->mu);
		state = c->state;
		pthread_mutex_unlock(&c->mu);
		{
			/* the first taken: every one of the connection has its time limit */
			JsWaiting  *w = dlist_head_element(JsWaiting, node, &c->waiting);

			if (due == 0 || w->deadline < due)
				due = w->deadline;
		}
		if (state == JS_FAILED && !c->thread_started && (due == 0 || c->retry_at < due))
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
		fail(ev, p.message, true);
		return 0;
	}
	subject = JetStreamEventSubject(ev, &error);
	if (subject == NULL)
	{
		fail(ev, error, true);
		return 0;
	}
	pfree(subject);
	return OutboxBodyToUtf8(ev, OutboxPrepareEnvelope(ev, true));
}

/* ---------------------------------------------------------------------
 * outbox_jetstream_check()
 * ---------------------------------------------------------------------
 */

/* An interval of ms milliseconds. */
static Datum
ms_interval(double ms)
{
	Interval   *iv = palloc0(sizeof(Interval));

	iv->time = (TimeOffset) (ms * 1000.0);
	return IntervalPGetDatum(iv);
}

/*
 * The stored row of destination name, read from the table whose row type
 * is the argument's (outbox_destinations, by the function's signature)
 * with the caller's privileges, into *row (its tuple and descriptor in the
 * current memory context). 42704, as for a missing destination, if there
 * is none.
 */
static void
stored_destination(Oid rowtype, const char *name, OutboxDestinationRow *row)
{
	Oid			relid = get_typ_typrelid(rowtype);
	MemoryContext caller = CurrentMemoryContext;
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1];
	char	   *sql;
	int			rc;

	if (!OidIsValid(relid))
		elog(ERROR, "the argument is not a row of outbox_destinations");
	sql = psprintf("SELECT * FROM %s.%s d WHERE d.name OPERATOR(pg_catalog.=) $1",
				   quote_identifier(get_namespace_name(get_rel_namespace(relid))),
				   quote_identifier(get_rel_name(relid)));
	args[0] = CStringGetTextDatum(name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	rc = SPI_execute_with_args(sql, 1, argtypes, args, NULL, true, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read destination \"%s\": %s", name, SPI_result_code_string(rc));
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("destination \"%s\" does not exist", name)));
	{
		MemoryContext spi = MemoryContextSwitchTo(caller);

		row->desc = CreateTupleDescCopy(SPI_tuptable->tupdesc);
		row->tuple = heap_copytuple(SPI_tuptable->vals[0]);
		MemoryContextSwitchTo(spi);
	}
	SPI_finish();
	row->old_tuple = NULL;
	row->cache = NULL;
}

PG_FUNCTION_INFO_V1(_outbox_jetstream_check);

/*
 * _outbox_jetstream_check(d outbox_destinations, OUT stream text,
 *     OUT duplicate_window interval, OUT max_age interval,
 *     OUT retry_span interval, OUT exactly_once boolean, OUT problem text)
 *
 * Connects to JetStream destination d.name as a relay would (on a thread of
 * its own, this backend waiting on its latch, interruptible) and reads its
 * stream: the duplicate window, max_age (NULL: none), the longest span of
 * the retry schedule at the current settings, whether every resend falls
 * within the window, and the problem if not, or why the connection or the
 * stream failed (then the figures are NULL). Only d's name is used: the
 * destination is read again from outbox_destinations, as its trigger
 * checked it (who may name a file, which servers), since a row value
 * made by the caller would pass none of those rules. For
 * outbox_jetstream_check(); runs in any backend, in a transaction. Errors:
 * 22004 for a NULL name, 42704 for a destination that does not exist,
 * 22023 for one of another kind.
 */
Datum
_outbox_jetstream_check(PG_FUNCTION_ARGS)
{
	HeapTupleHeader h = PG_GETARG_HEAPTUPLEHEADER(0);
	TupleDesc	arg_desc = lookup_rowtype_tupdesc(HeapTupleHeaderGetTypeId(h),
												  HeapTupleHeaderGetTypMod(h));
	HeapTupleData arg_tuple;
	OutboxDestinationRow row;
	OutboxDestination dest;
	const JsDestOptions *o;
	TupleDesc	result_desc;
	Datum		values[6];
	bool		nulls[6] = {false, false, false, false, false, false};
	char	   *name;
	char	   *kind;
	JsKindState *ks = OutboxKindState(&OutboxJetStreamKind);
	JsConn	   *c;
	JsState		state;
	int			timeout_ms;

	if (get_call_result_type(fcinfo, NULL, &result_desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	arg_tuple.t_len = HeapTupleHeaderGetDatumLength(h);
	ItemPointerSetInvalid(&arg_tuple.t_self);
	arg_tuple.t_tableOid = InvalidOid;
	arg_tuple.t_data = h;
	row.desc = arg_desc;
	row.tuple = &arg_tuple;
	row.old_tuple = NULL;
	row.cache = NULL;
	name = OutboxDestinationText(&row, "name");
	ReleaseTupleDesc(arg_desc);
	if (name == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("destination must not be null")));
	stored_destination(HeapTupleHeaderGetTypeId(h), name, &row);
	kind = OutboxDestinationText(&row, "kind");
	if (kind == NULL || strcmp(kind, OutboxJetStreamKind.name) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("destination \"%s\" is not a JetStream destination", name)));
	memset(&dest, 0, sizeof(dest));
	(void) JetStreamDecode(&row, &dest);
	o = dest.options;
	timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : js_timeout;
	js_setup(ks);
	c = new_conn(ks, name, o, "", timeout_ms);
	{
		MemoryContext old = MemoryContextSwitchTo(ks->cxt);

		ks->checked = lappend(ks->checked, c);
		MemoryContextSwitchTo(old);
	}
	start_connect(c);
	PG_TRY();
	{
		for (;;)
		{
			bool		finished;

			pthread_mutex_lock(&c->mu);
			state = c->state;
			finished = c->finished;
			pthread_mutex_unlock(&c->mu);
			if (state == JS_READY && !c->stopping)
			{
				request_stop(c);
				c->stopping = true;
			}
			if (finished)
				break;
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 100, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_CATCH();
	{
		/* its thread may still run: leave it to end, the memory to the process */
		request_stop(c);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (c->thread_started)
		pthread_join(c->thread, NULL);
	c->thread_started = false;
	values[0] = CStringGetTextDatum(c->stream);
	if (state == JS_FAILED || !c->stopping)
	{
		char	   *lib = c->lib_error;

		for (int i = 1; i < 5; i++)
			nulls[i] = true;
		values[5] = CStringGetTextDatum(psprintf("NATS at %s, stream \"%s\": %s%s", c->servers_text,
												 c->stream, c->error, OutboxRedact(lib, strlen(lib))));
	}
	else
	{
		double		window_ms;
		double		span_ms;
		char	   *problem = window_problem(c, c->duplicates_ns, c->max_age_ns, &window_ms, &span_ms);

		values[1] = ms_interval(c->duplicates_ns / 1000000.0);
		values[2] = ms_interval(c->max_age_ns / 1000000.0);
		nulls[2] = c->max_age_ns <= 0;
		values[3] = ms_interval(span_ms);
		values[4] = BoolGetDatum(problem == NULL);
		values[5] = problem ? CStringGetTextDatum(problem) : (Datum) 0;
		nulls[5] = problem == NULL;
	}
	ks->checked = list_delete_ptr(ks->checked, c);
	free_conn(c);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(result_desc), values, nulls)));
}

/* init: the outbox.jetstream_* settings. */
static void
js_define_settings(void)
{
	DefineCustomIntVariable("outbox.jetstream_timeout",
							"Sets the default time limit of a JetStream destination's connection attempt and of each PubAck.",
							"A destination's timeout_ms overrides it.",
							&js_timeout,
							5000, 1, OUTBOX_MAX_TIMEOUT_MS,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.jetstream_max_pending",
							"Sets the maximum number of events a relay has published to one JetStream destination without their PubAck.",
							"A change applies to connections made after it.",
							&js_max_pending,
							1024, 1, JS_MAX_PENDING_LIMIT,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);
}

/*
 * startup: the kind's state in this process, empty: no connection, and no
 * memory context or exit handler until the process first connects
 * (js_setup), so that a relay that has no JetStream destination starts
 * nothing of libnats's.
 */
static void *
js_startup(void)
{
	return palloc0(sizeof(JsKindState));
}

/* The JetStream kind: sent after COMMIT, libnats's threads report PubAcks. */
const OutboxDestinationKind OutboxJetStreamKind = {
	.name = "jetstream",
	.description = "a JetStream stream",
	.target_column = "nats_servers",
	.own_columns = (const OutboxKindColumn[]) {
		{"nats_subject", NULL},
		{"nats_stream", NULL},
		{"nats_user", NULL},
		{"nats_password", NULL},
		{"nats_token", NULL},
		{"nats_creds_file", NULL},
		{"nats_ca_file", NULL},
		{NULL}
	},
	.formats = (const char *const[]) {OUTBOX_FORMAT_ENVELOPE, NULL},
	.send_point = OUTBOX_SEND_AFTER_COMMIT,
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
