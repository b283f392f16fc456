/*-------------------------------------------------------------------------
 *
 * jetstream_conn.c
 *	  A JetStream destination's connection as the relay drives it: made
 *	  for a destination's options, its phase, its thread started, stopped
 *	  and joined, serviced on every collect, the stream's duplicate window
 *	  checked, and every connection closed when the process exits.
 *
 * Connections are kept across claims; libnats reconnects after a broker
 * restart (messages published meanwhile wait in its reconnect buffer and
 * time out like any other). A destination whose row changes gets a new
 * connection; the old one, and one unused for five minutes, is closed
 * when nothing it published waits for an answer.
 *
 * Everything here runs on the relay's own thread (the relay worker, or a
 * backend running outbox_relay() or outbox_jetstream_check()); what runs
 * on the connection's thread is in jetstream_thread.c.
 *
 * src/kinds/jetstream/jetstream_conn.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include <openssl/crypto.h>

#include "lib/stringinfo.h"
#include "storage/ipc.h"
#include "utils/memutils.h"

#include "destination.h"

#include "jetstream_int.h"

/* a failed connection is tried again after this much, doubling, at most */
#define JS_RECONNECT_MIN_MS 1000
#define JS_RECONNECT_MAX_MS 30000

/* how long a process that exits waits for its connections to close */
#define JS_EXIT_WAIT_MS 500

/*
 * The state js_atexit reads. An atexit handler gets no argument, so this is
 * the one place the kind's state is reached other than through its
 * callbacks' state argument or OutboxKindState: set by JetStreamSetup when
 * it registers the handler, and never changed after.
 */
static JsKindState *exit_state = NULL;

#ifdef USE_ASSERT_CHECKING
/* Whether a connection may go from phase from to phase to (set_phase). */
static bool
phase_change_allowed(JsPhase from, JsPhase to)
{
	switch (to)
	{
		case JS_PHASE_CONNECTING:
			return from == JS_PHASE_IDLE || from == JS_PHASE_BACKING_OFF;
		case JS_PHASE_READY:
			return from == JS_PHASE_CONNECTING;
		case JS_PHASE_STOPPING:
			return from == JS_PHASE_READY;
		case JS_PHASE_IDLE:
			return from == JS_PHASE_CONNECTING || from == JS_PHASE_READY ||
				from == JS_PHASE_STOPPING;
		case JS_PHASE_BACKING_OFF:
			return from == JS_PHASE_IDLE || from == JS_PHASE_BACKING_OFF ||
				from == JS_PHASE_CONNECTING;
	}
	return false;
}
#endif

/*
 * Sets c's phase (JsPhase): the only way to change a connection's phase.
 * Its transitions, and where each is made:
 *
 *	 IDLE, BACKING_OFF -> CONNECTING
 *		its thread started (JetStreamStartConnect), when events wait and,
 *		after a failure, retry_at has passed;
 *	 IDLE, BACKING_OFF -> BACKING_OFF
 *		the same, but the thread could not start: retry_at is 0, so the
 *		next attempt comes at once;
 *	 CONNECTING -> READY
 *		its thread reported the connection made and the stream read
 *		(follow_thread, JetStreamStopOnceReady);
 *	 READY -> STOPPING
 *		its thread asked to close and end (stop_thread): nothing is
 *		outstanding and libnats closed the connection for good, or c is
 *		retiring and nothing waits; or outbox_jetstream_check() has read
 *		the stream;
 *	 CONNECTING -> BACKING_OFF
 *		its thread ended after a failed attempt, and was joined
 *		(JetStreamJoin);
 *	 CONNECTING, READY, STOPPING -> IDLE
 *		its thread ended otherwise (asked to stop, or at the process's
 *		exit), and was joined (JetStreamJoin).
 *
 * What is not a phase: retiring, which says that c takes no new event,
 * whatever its phase (a retiring connection still connects and publishes
 * the events it holds, and is freed once it has no thread and holds
 * nothing); and what the thread sets under mu (report, closed,
 * finished): the thread cannot change the relay's phase, whose work
 * (publishing, failing events) the relay does without the lock, so the
 * relay reads those flags and makes the transition they call for.
 */
static void
set_phase(JsConn *c, JsPhase phase)
{
	Assert(phase_change_allowed(c->phase, phase));
	c->phase = phase;
}

static char *
nullable(const char *s)
{
	return s != NULL ? pstrdup(s) : NULL;
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

/* Creates the connection of a destination, not yet connecting. */
JsConn *
JetStreamNewConn(JsKindState *ks, const char *name, const JsDestOptions *o, const char *fp,
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
	c->cap = outbox_jetstream_max_pending;
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
	/* phase and report zeroed: JS_PHASE_IDLE, JS_REPORT_NONE */
	MemoryContextSwitchTo(old);
	return c;
}

/* The live connection of ev's destination; a new one if its options changed. */
JsConn *
JetStreamConnFor(JsKindState *ks, OutboxEvent *ev)
{
	const JsDestOptions *o = JS_OPTIONS(ev);
	int			timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : outbox_jetstream_timeout;
	char	   *fp;
	ListCell   *lc;
	JsConn	   *c;
	MemoryContext old;

	JetStreamSetup(ks);
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
	c = JetStreamNewConn(ks, ev->dest.name, o, fp, timeout_ms);
	pfree(fp);
	old = MemoryContextSwitchTo(ks->cxt);
	ks->conns = lappend(ks->conns, c);
	MemoryContextSwitchTo(old);
	return c;
}

/*
 * Starts c's thread (JetStreamThreadStart), its shared fields reset for a
 * new attempt. A thread that cannot start counts as a failed attempt,
 * which may be tried again at once.
 */
void
JetStreamStartConnect(JsConn *c)
{
	Assert(!JsConnThreadRuns(c) && c->outstanding == 0);
	if (c->cap != outbox_jetstream_max_pending)
	{
		/* outbox.jetstream_max_pending changed: applies to the new connection */
		c->cap = outbox_jetstream_max_pending;
		pfree(c->acks);
		c->acks = MemoryContextAllocZero(c->cxt, sizeof(JsAck) * c->cap);
	}
	pthread_mutex_lock(&c->mu);
	c->report = JS_REPORT_NONE;
	c->stop = false;
	c->finished = false;
	c->closed = false;
	c->error[0] = '\0';
	c->lib_error[0] = '\0';
	c->ack_head = 0;
	c->nacks = 0;
	pthread_mutex_unlock(&c->mu);
	if (!JetStreamThreadStart(c))
	{
		c->retry_at = 0;
		set_phase(c, JS_PHASE_BACKING_OFF);
		return;
	}
	set_phase(c, JS_PHASE_CONNECTING);
}

/* Asks c's thread to close the connection and end. */
void
JetStreamRequestStop(JsConn *c)
{
	pthread_mutex_lock(&c->mu);
	c->stop = true;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->mu);
}

/* Asks c's thread, connected, to close the connection and end. */
static void
stop_thread(JsConn *c)
{
	JetStreamRequestStop(c);
	set_phase(c, JS_PHASE_STOPPING);
}

/*
 * Joins c's thread, which has ended (finished): c is BACKING_OFF after a
 * failed attempt, IDLE otherwise.
 */
void
JetStreamJoin(JsConn *c)
{
	JsReport	report;

	Assert(JsConnThreadRuns(c));
	pthread_join(c->thread, NULL);
	pthread_mutex_lock(&c->mu);
	report = c->report;
	pthread_mutex_unlock(&c->mu);
	set_phase(c, report == JS_REPORT_FAILED ? JS_PHASE_BACKING_OFF : JS_PHASE_IDLE);
}

/*
 * For outbox_jetstream_check(), whose connection only reads the stream:
 * once c's thread reports it connected (the stream read), asks it to stop.
 * Returns whether the thread has ended.
 */
bool
JetStreamStopOnceReady(JsConn *c)
{
	JsReport	report;
	bool		finished;

	pthread_mutex_lock(&c->mu);
	report = c->report;
	finished = c->finished;
	pthread_mutex_unlock(&c->mu);
	if (report == JS_REPORT_READY && c->phase == JS_PHASE_CONNECTING)
	{
		set_phase(c, JS_PHASE_READY);
		stop_thread(c);
	}
	return finished;
}

/*
 * Frees connection c, whose thread has ended and been joined, and which
 * has nothing outstanding; zeroes its password and token first.
 */
void
JetStreamFreeConn(JsConn *c)
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
		JetStreamFail(w->ev, pstrdup(why), false);
		*done = lappend(*done, w->ev);
		pfree(w);
	}
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
	text = JetStreamWindowProblem(c, duplicates_ns, max_age_ns, &window_ms, &span);
	if (text == NULL)
		return;
	ereport(WARNING,
			(errmsg("outbox destination \"%s\": %s", c->name, text),
			 errhint("Raise the stream's duplicate_window to %s or more, or lower outbox.max_attempts or outbox.backoff_max.",
					 JetStreamDurationText(span))));
	OutboxHealthDestinationWarning(c->name, text);
}

/*
 * Joined after a failed attempt (c BACKING_OFF): records why, for the
 * events that come before the next attempt, and when that may be; fails
 * the waiting events with the reason.
 */
static void
record_failure(JsConn *c, TimestampTz now, List **done)
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

/*
 * Makes the transition c's thread calls for: joins it when it ended (after
 * a failed attempt, whose reason fails the waiting events, or when asked
 * to stop); takes a new connection as READY, and logs it.
 */
static void
follow_thread(JsConn *c, JsReport report, bool finished, TimestampTz now, List **done)
{
	if (JsConnThreadRuns(c) && finished)
	{
		JetStreamJoin(c);
		if (c->phase == JS_PHASE_BACKING_OFF)
			record_failure(c, now, done);
	}
	else if (c->phase == JS_PHASE_CONNECTING && report == JS_REPORT_READY)
	{
		set_phase(c, JS_PHASE_READY);
		c->failures = 0;
		ereport(LOG,
				(errmsg("outbox relay connected to NATS at %s for destination \"%s\"",
						c->servers_text, c->name)));
	}
}

/*
 * c READY: checks its stream's window; after libnats closed the
 * connection for good, takes back what waits for a PubAck; stops the
 * thread when c is closed or retiring and nothing is outstanding (nor
 * waiting, when retiring); otherwise queues the waiting events.
 */
static void
serve_ready(JsConn *c, bool closed, List **done)
{
	check_window(c);
	if (closed)
		JetStreamTakeBack(c, done);
	if (c->outstanding == 0 && (closed || (c->retiring && c->nwaiting == 0)))
		stop_thread(c);
	else if (!closed)
		JetStreamPublishWaiting(c, done);
}

/*
 * Fails c's waiting events whose time limit is over: it runs from when
 * the event was taken, whatever it waits for (a connection, or room).
 */
static void
fail_late(JsConn *c, List **done)
{
	bool		connected = c->phase == JS_PHASE_READY || c->phase == JS_PHASE_STOPPING;
	char	   *why = !connected
		? psprintf("not connected to NATS at %s within %d ms",
				   c->servers_text, c->timeout_ms)
		: psprintf("not published to NATS at %s within %d ms: %d messages of the destination were waiting for their PubAck (outbox.jetstream_max_pending)",
				   c->servers_text, c->timeout_ms, c->outstanding);

	fail_waiting(c, false, why, done);
	pfree(why);
}

/*
 * Moves connection c along: first the transition its thread calls for
 * (follow_thread), then the work of its phase: with no thread, starts an
 * attempt when events wait (or, before retry_at, fails them with the
 * last failure's reason); READY, serve_ready; STOPPING, only the check of
 * the stream's window (a reconnection may have read it again); and in
 * every phase, fails the waiting events whose time limit is over.
 */
void
JetStreamServiceConn(JsConn *c, List **done)
{
	JsReport	report;
	bool		finished;
	bool		closed;
	TimestampTz now = GetCurrentTimestamp();

	pthread_mutex_lock(&c->mu);
	report = c->report;
	finished = c->finished;
	closed = c->closed;
	pthread_mutex_unlock(&c->mu);

	follow_thread(c, report, finished, now, done);
	switch (c->phase)
	{
		case JS_PHASE_IDLE:
		case JS_PHASE_BACKING_OFF:
			if (c->nwaiting == 0)
				break;
			if (c->phase == JS_PHASE_BACKING_OFF && now < c->retry_at)
				fail_waiting(c, true, c->last_failure, done);
			else
				JetStreamStartConnect(c);
			break;
		case JS_PHASE_CONNECTING:
			/* the thread reports, then sets the latch */
			break;
		case JS_PHASE_READY:
			serve_ready(c, closed, done);
			break;
		case JS_PHASE_STOPPING:
			check_window(c);
			break;
	}
	if (c->nwaiting > 0)
		fail_late(c, done);
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

		if (JsConnThreadRuns(c))
			JetStreamRequestStop(c);
	}
	for (;;)
	{
		running = 0;
		foreach(lc, all)
		{
			JsConn	   *c = lfirst(lc);
			bool		finished;

			if (!JsConnThreadRuns(c))
				continue;
			pthread_mutex_lock(&c->mu);
			finished = c->finished;
			pthread_mutex_unlock(&c->mu);
			if (finished)
				JetStreamJoin(c);
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
				(errmsg_plural("%d JetStream connection did not close within %d ms of exit",
							   "%d JetStream connections did not close within %d ms of exit",
							   running, running, JS_EXIT_WAIT_MS),
				 errdetail("The process exits without the libraries' exit handlers, which would free what those connections use.")));
	}
}

/*
 * An atexit handler, registered after OpenSSL's and libnats's (JetStreamSetup),
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
void
JetStreamSetup(JsKindState *ks)
{
	if (ks->cxt != NULL)
		return;
	ks->cxt = AllocSetContextCreate(TopMemoryContext, "outbox jetstream",
									ALLOCSET_DEFAULT_SIZES);
	(void) OPENSSL_init_crypto(0, NULL);
	JetStreamLibraryOpen();
	exit_state = ks;
	if (atexit(js_atexit) != 0)
		elog(ERROR, "could not register an exit handler for JetStream connections");
	before_shmem_exit(js_at_exit, PointerGetDatum(ks));
}
