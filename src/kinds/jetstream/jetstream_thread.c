/*-------------------------------------------------------------------------
 *
 * jetstream_thread.c
 *	  What of the JetStream kind runs on a thread other than the process's
 *	  own: each connection's thread (conn_main), which connects, publishes
 *	  the messages the relay queues and closes the connection; and the
 *	  callbacks libnats calls on its threads (the PubAck handler, the
 *	  reconnection and error handlers, the creds file's JWT and signature).
 *
 * The relay never calls libnats's connection functions, which wait on the
 * connection's lock while libnats reconnects (the lock is held across a
 * connection attempt): a connection's thread does, so a broker that does
 * not answer never holds the relay up, and SIGTERM ends it at once.
 *
 * The contract of every function in this file, which the rest of the kind
 * relies on:
 *
 *	 - it calls libnats, the C library, and of PostgreSQL only SetLatch
 *	   (safe from any thread of the process: it sets a flag and wakes the
 *	   process) and what destination.h says is safe on any thread
 *	   (OutboxReadFile, OutboxDeadlineIn); of the kind's other files, only
 *	   JetStreamCredsBlock, a rule that allocates nothing;
 *	 - it never pallocs, never raises or logs (no ereport, no elog), and
 *	   never checks for interrupts: it has no memory context and no error
 *	   handling of PostgreSQL's; it reports in fixed buffers
 *	   (JS_TEXT_BYTES) and records outcomes in the connection's fixed ring
 *	   (ring_push), which the relay turns into text in collect;
 *	 - it reads of JsConn what was set before its thread started
 *	   ("read-only while it runs") and touches the shared fields under mu
 *	   only ("shared, under mu"), never the relay's own;
 *	 - a connection's thread starts with every signal blocked
 *	   (JetStreamThreadStart), and the threads libnats starts from it (the
 *	   connection's reading, flushing and reconnecting threads, and its
 *	   reply subscription's, which calls the PubAck handler) inherit that
 *	   mask, so PostgreSQL's signal handlers do not run on them; so do
 *	   the library's own threads, which nats_Open starts
 *	   (JetStreamLibraryOpen).
 *
 * src/kinds/jetstream/jetstream_thread.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>
#include <time.h>

#include "miscadmin.h"
#include "storage/latch.h"

#include "destination.h"

#include "jetstream_int.h"

/* Copies src into dst[size], cut; for threads, which must not call PostgreSQL. */
static void
copy_text(char *dst, const char *src, size_t size)
{
	size_t		n = src ? strlen(src) : 0;

	if (n >= size)
		n = size - 1;
	if (n > 0)
		memcpy(dst, src, n);
	dst[n] = '\0';
}

/* Appends src to dst[size], cut. */
static void
append_text(char *dst, const char *src, size_t size)
{
	size_t		have = strlen(dst);

	copy_text(dst + have, src, size - have);
}

/*
 * Records an outcome in c's ring (c->mu held). The ring has room: every
 * message counted in c->outstanding (at most c->cap) gets one outcome,
 * from the PubAck handler (libnats answers a timeout itself, and drops an
 * answer to a message it already answered) or from the thread when the
 * publish failed.
 */
static JsAck *
ring_push(JsConn *c)
{
	JsAck	   *a;

	if (c->nacks >= c->cap)
		return NULL;
	a = &c->acks[(c->ack_head + c->nacks) % c->cap];
	c->nacks++;
	memset(a, 0, offsetof(JsAck, text) + 1);
	return a;
}

/*
 * libnats's PubAck handler, on the thread of the reply subscription: a
 * positive answer counts only if it names the destination's stream and a
 * sequence (or a duplicate): libnats takes any JSON answer without an
 * error for one. A PubAck that names another stream is told apart: that
 * stream stored the message, so a retry would store another copy there.
 * Records the outcome and wakes the relay. Calls nothing of PostgreSQL's
 * but SetLatch, which is safe from any thread of the process (it sets a
 * flag and wakes the process).
 */
static void
ack_handler(jsCtx *js pg_attribute_unused(), natsMsg *msg, jsPubAck *pa,
			jsPubAckErr *pae, void *closure)
{
	JsConn	   *c = closure;
	JsAck	   *a;

	pthread_mutex_lock(&c->mu);
	a = ring_push(c);
	if (a != NULL)
	{
		a->msg = msg;
		if (pa != NULL && pa->Stream != NULL && strcmp(pa->Stream, c->stream) == 0 &&
			(pa->Sequence > 0 || pa->Duplicate))
		{
			a->status = NATS_OK;
			a->duplicate = pa->Duplicate;
		}
		else if (pa != NULL && pa->Stream != NULL && pa->Stream[0] != '\0' &&
				 (pa->Sequence > 0 || pa->Duplicate))
		{
			a->status = NATS_ERR;
			a->other_stream = true;
			copy_text(a->text, pa->Stream, sizeof(a->text));
		}
		else if (pa != NULL)
		{
			a->status = NATS_ERR;
			a->not_puback = true;
			a->sequence = pa->Sequence;
			copy_text(a->text, pa->Stream, sizeof(a->text));
		}
		else
		{
			a->status = pae != NULL ? pae->Err : NATS_ERR;
			a->code = pae != NULL ? pae->ErrCode : 0;
			copy_text(a->text, pae != NULL ? pae->ErrText : NULL, sizeof(a->text));
			/*
			 * An answer libnats could not parse comes as a bare "Error";
			 * its parser's words, on this thread's error, quote the answer
			 * from where it failed (libnats 3.4: "incorrect JSON string:
			 * 'not json'").
			 */
			if (pae != NULL && pae->Err == NATS_ERR && pae->ErrCode == 0)
			{
				const char *why = nats_GetLastError(NULL);

				if (why != NULL && (strstr(why, "JSON") != NULL || strstr(why, "json") != NULL))
				{
					a->unreadable = true;
					copy_text(a->text, why, sizeof(a->text));
				}
			}
		}
	}
	pthread_mutex_unlock(&c->mu);
	SetLatch(MyLatch);
}

/* Reconnected: wakes the relay. Its closure is NULL: it may come late. */
static void
reconnected_handler(natsConnection *nc pg_attribute_unused(), void *closure pg_attribute_unused())
{
	SetLatch(MyLatch);
}

/*
 * libnats's asynchronous error callback (a slow consumer, a permission
 * violation): the PubAck or its timeout says what matters; set so that
 * libnats does not print to the server's stderr.
 */
static void
error_handler(natsConnection *nc pg_attribute_unused(), natsSubscription *sub pg_attribute_unused(),
			  natsStatus err pg_attribute_unused(), void *closure pg_attribute_unused())
{
}

/*
 * Reads c's creds file and finds both its blocks (the user JWT and the
 * nkey seed); copies block `which` into a malloc'd string (*out) unless
 * which is -1 (a check only). Returns false with error. For the
 * connection's thread and libnats's callbacks: calls nothing of
 * PostgreSQL's. The file is read again at every connection and
 * reconnection, as libnats would: a renewed file is taken up.
 */
static bool
creds_read(const JsConn *c, int which, char **out, char *error)
{
	struct timespec deadline = OutboxDeadlineIn(c->timeout_ms);
	char	   *text;
	size_t		len;
	const char *v[2];
	size_t		vl[2];
	bool		ok = true;

	if (out != NULL)
		*out = NULL;
	if (!OutboxReadFile(c->creds_file, "nats_creds_file", &deadline, &text, &len, NULL,
						error, JS_TEXT_BYTES))
		return false;
	for (int b = 0; b < 2 && ok; b++)
	{
		ok = JetStreamCredsBlock(text, len, b, &v[b], &vl[b]);
		if (!ok)
			snprintf(error, JS_TEXT_BYTES, "nats_creds_file has no %s",
					 b == 0 ? "user JWT" : "nkey seed");
	}
	if (ok && which >= 0 && (*out = strndup(v[which], vl[which])) == NULL)
	{
		snprintf(error, JS_TEXT_BYTES, "out of memory reading nats_creds_file");
		ok = false;
	}
	explicit_bzero(text, len);
	free(text);
	return ok;
}

/*
 * libnats's callback for the user JWT, on a connection or reconnection
 * (c's thread or libnats's reconnecting one): the first block of the creds
 * file. libnats frees what it returns.
 */
static natsStatus
creds_jwt(char **jwt, char **err_text, void *closure)
{
	char		error[JS_TEXT_BYTES];

	if (creds_read(closure, 0, jwt, error))
		return NATS_OK;
	*err_text = strdup(error);
	return NATS_ERR;
}

/*
 * libnats's callback to sign the server's nonce with the creds file's
 * seed, which is zeroed once used. libnats frees the signature.
 */
static natsStatus
creds_sign(char **err_text, unsigned char **sig, int *sig_len, const char *nonce, void *closure)
{
	char		error[JS_TEXT_BYTES];
	char	   *seed;
	natsStatus	s;

	if (!creds_read(closure, 1, &seed, error))
	{
		*err_text = strdup(error);
		return NATS_ERR;
	}
	s = nats_Sign(seed, nonce, sig, sig_len);
	explicit_bzero(seed, strlen(seed));
	free(seed);
	return s;
}

/*
 * Sets o's credentials from c's creds file (read and checked here once, so
 * that a bad file fails at once with its reason; the callbacks read it
 * again) and its
 * trusted CA certificates from c's CA file. libnats would read both files
 * itself, with no check of what they are: a FIFO, a device or a huge file
 * would hold or fill the relay. Returns false with error.
 */
static bool
set_file_options(JsConn *c, natsOptions *o, char *error)
{
	if (c->creds_file != NULL)
	{
		if (!creds_read(c, -1, NULL, error))
			return false;
		if (natsOptions_SetUserCredentialsCallbacks(o, creds_jwt, c, creds_sign, c) != NATS_OK)
		{
			copy_text(error, "libnats refused the credentials callbacks", JS_TEXT_BYTES);
			return false;
		}
	}
	if (c->ca_file != NULL)
	{
		struct timespec deadline = OutboxDeadlineIn(c->timeout_ms);
		char	   *pem;
		size_t		len;
		natsStatus	s;

		if (!OutboxReadFile(c->ca_file, "nats_ca_file", &deadline, &pem, &len, NULL,
							error, JS_TEXT_BYTES))
			return false;
		s = natsOptions_SetCATrustedCertificates(o, pem);
		free(pem);
		if (s != NATS_OK)
		{
			copy_text(error, "nats_ca_file holds no PEM certificate that can be loaded", JS_TEXT_BYTES);
			return false;
		}
	}
	return true;
}

/*
 * Reads c's stream's configuration (on c's thread): NATS_OK with its
 * duplicate window and max_age in c (and window_read set, for the relay
 * to check), or a failure with error set: the stream does not exist, or
 * it was created with no_ack (it stores without answering: the relay
 * could never know a message is stored).
 */
static natsStatus
read_stream(JsConn *c, jsCtx *js, char *error)
{
	jsStreamInfo *si = NULL;
	jsErrCode	jerr = 0;
	natsStatus	s = js_GetStreamInfo(&si, js, c->stream, NULL, &jerr);

	if (s != NATS_OK && jerr == JSStreamNotFoundErr)
		copy_text(error, "the stream does not exist", JS_TEXT_BYTES);
	else if (s != NATS_OK)
		copy_text(error, "cannot read the stream's configuration: ", JS_TEXT_BYTES);
	else if (si->Config->NoAck)
	{
		copy_text(error, "the stream is created with no_ack: it does not acknowledge what it stores",
				  JS_TEXT_BYTES);
		s = NATS_ERR;
	}
	else
	{
		pthread_mutex_lock(&c->mu);
		c->duplicates_ns = si->Config->Duplicates;
		c->max_age_ns = si->Config->MaxAge;
		c->window_read = true;
		pthread_mutex_unlock(&c->mu);
	}
	jsStreamInfo_Destroy(si);
	return s;
}

/*
 * The options of c's connection, in *op (NULL if none could be made;
 * the caller destroys them): the servers it names, never those a server
 * lists in its INFO (connect_urls), its time limit, its credentials and
 * its files. Returns the status; on failure error says why.
 */
static natsStatus
conn_options(JsConn *c, natsOptions **op, char *error)
{
	natsOptions *o = NULL;
	natsStatus	s;
	char		file_error[JS_TEXT_BYTES];

	s = natsOptions_Create(&o);
	if (s == NATS_OK)
		s = natsOptions_SetServers(o, (const char **) c->server_list, c->nservers);
	if (s == NATS_OK)
		s = natsOptions_SetName(o, "outbox relay");
	/* only the servers the destination names get its credentials and events */
	if (s == NATS_OK)
		s = natsOptions_SetIgnoreDiscoveredServers(o, true);
	if (s == NATS_OK)
		s = natsOptions_SetTimeout(o, c->timeout_ms);
	/* a server that stops reading must not hold the flusher forever */
	if (s == NATS_OK)
		s = natsOptions_SetWriteDeadline(o, c->timeout_ms);
	if (s == NATS_OK)
		s = natsOptions_SetMaxReconnect(o, -1);
	if (s == NATS_OK)
		s = natsOptions_SetReconnectWait(o, 500);
	if (s == NATS_OK)
		s = natsOptions_SetPingInterval(o, 5000);
	if (s == NATS_OK)
		s = natsOptions_SetReconnectedCB(o, reconnected_handler, NULL);
	if (s == NATS_OK)
		s = natsOptions_SetErrorHandler(o, error_handler, NULL);
	if (s == NATS_OK && c->user != NULL)
		s = natsOptions_SetUserInfo(o, c->user, c->password);
	if (s == NATS_OK && c->token != NULL)
		s = natsOptions_SetToken(o, c->token);
	/* libnats takes tls:// for nats:// unless told: never send credentials in clear */
	if (s == NATS_OK && c->secure)
		s = natsOptions_SetSecure(o, true);
	if (s != NATS_OK)
		copy_text(error, "the connection options are not valid: ", JS_TEXT_BYTES);
	else if (!set_file_options(c, o, file_error))
	{
		s = NATS_ERR;
		snprintf(error, JS_TEXT_BYTES, "the connection options are not valid: %s", file_error);
	}
	*op = o;
	return s;
}

/*
 * The JetStream context of c's connection nc, in *jsp, whose PubAck
 * handler records outcomes in c's ring. Returns the status; on failure
 * error says why.
 */
static natsStatus
open_jetstream(JsConn *c, natsConnection *nc, jsCtx **jsp, char *error)
{
	jsOptions	jo;
	natsStatus	s = jsOptions_Init(&jo);

	jo.Wait = c->timeout_ms;
	jo.PublishAsync.AckHandler = ack_handler;
	jo.PublishAsync.AckHandlerClosure = c;
	jo.PublishAsync.MaxPending = c->cap;
	if (s == NATS_OK)
		s = natsConnection_JetStream(jsp, nc, &jo);
	if (s != NATS_OK)
		copy_text(error, "cannot use JetStream: ", JS_TEXT_BYTES);
	return s;
}

/*
 * Completes error, which ends with a space, with libnats's words on this
 * thread's last error for status s: in lib_error, which the relay masks
 * for credentials; or, for a refusal of the credentials, the server's
 * words in error itself, which the masking would cut.
 */
static void
add_lib_words(natsStatus s, char *error, char *lib_error)
{
	const char *text = nats_GetLastError(NULL);

	if (text == NULL || text[0] == '\0')
		text = natsStatus_GetText(s);
	/* libnats puts where it failed first: "(conn.c:1905): " */
	if (text[0] == '(' && strstr(text, "): ") != NULL)
		text = strstr(text, "): ") + 3;
	/* the server's words, which the masking of credentials would cut */
	if (s == NATS_CONNECTION_AUTH_FAILED || strstr(text, "Authorization Violation") != NULL)
		append_text(error, "the server refused the credentials (Authorization Violation)",
					JS_TEXT_BYTES);
	else
		copy_text(lib_error, text, JS_TEXT_BYTES);
}

/*
 * Connects c (on its thread): its options (conn_options), a JetStream
 * context, and the stream's configuration. Returns the status; on failure
 * error and lib_error say why, and nothing is left open.
 */
static natsStatus
conn_connect(JsConn *c, natsConnection **ncp, jsCtx **jsp, char *error, char *lib_error)
{
	natsOptions *o = NULL;
	natsConnection *nc = NULL;
	jsCtx	   *js = NULL;
	natsStatus	s;

	s = conn_options(c, &o, error);
	if (s == NATS_OK)
	{
		s = natsConnection_Connect(&nc, o);
		if (s != NATS_OK)
			copy_text(error, "cannot connect: ", JS_TEXT_BYTES);
	}
	if (s == NATS_OK)
		s = open_jetstream(c, nc, &js, error);
	if (s == NATS_OK)
		s = read_stream(c, js, error);
	if (s != NATS_OK && error[strlen(error) - 1] == ' ')
		add_lib_words(s, error, lib_error);
	if (s != NATS_OK)
	{
		jsCtx_Destroy(js);
		if (nc != NULL)
		{
			natsConnection_Close(nc);
			natsConnection_Destroy(nc);
		}
		js = NULL;
		nc = NULL;
	}
	natsOptions_Destroy(o);
	*ncp = nc;
	*jsp = js;
	return s;
}

/*
 * Reports the outcome s of c's connection attempt to the relay: READY,
 * with the JetStream context js, or FAILED, with why.
 */
static void
report_attempt(JsConn *c, natsStatus s, jsCtx *js, const char *error, const char *lib_error)
{
	pthread_mutex_lock(&c->mu);
	if (s == NATS_OK)
	{
		c->report = JS_REPORT_READY;
		c->js = js;
	}
	else
	{
		c->report = JS_REPORT_FAILED;
		copy_text(c->error, error, sizeof(c->error));
		copy_text(c->lib_error, lib_error, sizeof(c->lib_error));
	}
	pthread_mutex_unlock(&c->mu);
	SetLatch(MyLatch);
}

/*
 * Takes what the relay queued for c's thread, in order, waiting up to a
 * second for it; sets *stop when the relay asked the thread to end.
 */
static JsPublish *
take_queue(JsConn *c, bool *stop)
{
	JsPublish  *batch;

	pthread_mutex_lock(&c->mu);
	if (c->queue == NULL && !c->stop)
	{
		struct timespec until;

		/* wake at least every second to see whether libnats gave up */
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 1;
		pthread_cond_timedwait(&c->cond, &c->mu, &until);
	}
	batch = c->queue;
	c->queue = c->queue_tail = NULL;
	*stop = c->stop;
	pthread_mutex_unlock(&c->mu);
	return batch;
}

/*
 * Publishes the messages of batch, and frees it: each with its own time
 * limit, the event_id as Nats-Msg-Id and the stream as
 * Nats-Expected-Stream. A message libnats refuses gets its outcome here,
 * in c's ring; the relay destroys it with the outcome.
 */
static void
publish_batch(JsConn *c, jsCtx *js, JsPublish *batch)
{
	while (batch != NULL)
	{
		JsPublish  *p = batch;
		natsMsg    *key = p->msg;
		jsPubOptions po;
		natsStatus	s;

		batch = p->next;
		jsPubOptions_Init(&po);
		po.MsgId = p->msg_id;
		po.ExpectStream = c->stream;
		po.MaxWait = p->max_wait;
		s = js_PublishMsgAsync(js, &p->msg, &po);
		if (s != NATS_OK)
		{
			const char *text = nats_GetLastError(NULL);
			JsAck	   *a;

			pthread_mutex_lock(&c->mu);
			a = ring_push(c);
			if (a != NULL)
			{
				a->msg = key;
				a->status = s;
				copy_text(a->text, text, sizeof(a->text));
			}
			pthread_mutex_unlock(&c->mu);
			/* the relay destroys it with the outcome */
			p->msg = NULL;
			SetLatch(MyLatch);
		}
		free(p);
	}
}

/*
 * Between batches: after a reconnection (the stream may have changed
 * meanwhile), reads the stream's configuration again, for the relay to
 * check; once libnats closed the connection for good, tells the relay.
 */
static void
watch_connection(JsConn *c, natsConnection *nc, jsCtx *js, natsStatistics *stats,
				 uint64_t *seen_reconnects)
{
	uint64_t	reconnects = 0;

	/* reconnected (the stream may have changed meanwhile): read it again */
	if (stats != NULL && natsConnection_GetStats(nc, stats) == NATS_OK &&
		natsStatistics_GetCounts(stats, NULL, NULL, NULL, NULL, &reconnects) == NATS_OK &&
		reconnects != *seen_reconnects &&
		natsConnection_Status(nc) == NATS_CONN_STATUS_CONNECTED)
	{
		char		ignored[JS_TEXT_BYTES] = "";

		*seen_reconnects = reconnects;
		(void) read_stream(c, js, ignored);
	}
	if (natsConnection_Status(nc) == NATS_CONN_STATUS_CLOSED)
	{
		pthread_mutex_lock(&c->mu);
		c->closed = true;
		pthread_mutex_unlock(&c->mu);
		SetLatch(MyLatch);
	}
}

/*
 * The end of c's thread: takes the JetStream context back from the relay,
 * closes the connection and frees libnats's objects, then tells the relay
 * it can join the thread.
 */
static void
conn_end(JsConn *c, natsConnection *nc, jsCtx *js, natsStatistics *stats)
{
	pthread_mutex_lock(&c->mu);
	c->js = NULL;
	pthread_mutex_unlock(&c->mu);
	if (nc != NULL)
		natsConnection_Close(nc);
	jsCtx_Destroy(js);
	natsConnection_Destroy(nc);
	natsStatistics_Destroy(stats);
	pthread_mutex_lock(&c->mu);
	c->finished = true;
	pthread_mutex_unlock(&c->mu);
	SetLatch(MyLatch);
}

/*
 * The connection's thread: connects, then publishes what the relay queues
 * until the relay sets stop; then closes the connection. Calls libnats
 * only, and SetLatch; started with every signal blocked, which libnats's
 * threads, started from here, inherit.
 */
static void *
conn_main(void *arg)
{
	JsConn	   *c = arg;
	natsConnection *nc;
	jsCtx	   *js;
	char		error[JS_TEXT_BYTES] = "";
	char		lib_error[JS_TEXT_BYTES] = "";
	natsStatus	s = conn_connect(c, &nc, &js, error, lib_error);
	natsStatistics *stats = NULL;
	uint64_t	seen_reconnects = 0;

	if (s == NATS_OK && natsStatistics_Create(&stats) != NATS_OK)
		stats = NULL;
	report_attempt(c, s, js, error, lib_error);
	while (s == NATS_OK)
	{
		bool		stop;

		publish_batch(c, js, take_queue(c, &stop));
		watch_connection(c, nc, js, stats, &seen_reconnects);
		if (stop)
			break;
	}
	conn_end(c, nc, js, stats);
	return NULL;
}

/*
 * Initializes libnats, from the relay, once per process: nats_Open starts
 * the library's own threads (its timers, asynchronous callbacks and
 * garbage collection; the reconnected and error handlers run on one), so
 * signals are blocked around it as around pthread_create below: a signal
 * for the relay (SIGTERM, SIGUSR1, a timeout's SIGALRM) must be handled
 * by the relay's thread, never by a thread that must not call into
 * PostgreSQL.
 */
void
JetStreamLibraryOpen(void)
{
	sigset_t	all;
	sigset_t	old;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	(void) nats_Open(-1);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/*
 * Starts c's thread, from the relay (c->thread). Signals are blocked
 * around pthread_create only (no ERROR can come in between), so that the
 * thread and libnats's threads it starts inherit a full mask. If it
 * cannot start, records that as a failed attempt (the thread's state and
 * error, finished) and returns false.
 */
bool
JetStreamThreadStart(JsConn *c)
{
	sigset_t	all;
	sigset_t	old;
	int			rc;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&c->thread, NULL, conn_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc == 0)
		return true;
	pthread_mutex_lock(&c->mu);
	c->report = JS_REPORT_FAILED;
	c->finished = true;
	copy_text(c->error, "cannot start a thread to connect", sizeof(c->error));
	pthread_mutex_unlock(&c->mu);
	return false;
}
