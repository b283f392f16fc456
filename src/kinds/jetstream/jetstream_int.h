/*-------------------------------------------------------------------------
 *
 * jetstream_int.h
 *	  What the files of the JetStream kind share: a destination's options,
 *	  a connection (JsConn) and the records it keeps, and the functions
 *	  the files call in one another.
 *
 * The kind is one family of files, as pgvector's hnsw*.c:
 *
 *   jetstream.c          the kind's table and settings, the callbacks the
 *                        relay calls, an event's message and its outcome
 *   jetstream_conn.c     a connection as the relay drives it: made, its
 *                        phase, its thread started, stopped and joined,
 *                        serviced, closed when the process exits
 *   jetstream_publish.c  the relay's side of publishing: waiting events
 *                        queued for the thread, outcomes collected
 *   jetstream_thread.c   what runs on a thread other than the process's
 *                        own, and the contract it keeps
 *   jetstream_rules.c    the rules: a destination row, a subject, a creds
 *                        file, a stream's duplicate window
 *   jetstream_check.c    outbox_jetstream_check()
 *
 * As every kind's files, they include of the worker's headers only
 * destination.h and those it allows (its banner says which).
 *
 * src/kinds/jetstream/jetstream_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_JETSTREAM_INT_H
#define OUTBOX_JETSTREAM_INT_H

#include <pthread.h>

#include <nats/nats.h>

#include "lib/ilist.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "destination.h"
#include "log_limit.h"

/* servers of one destination, at most */
#define JS_MAX_SERVERS 16
/* error text kept from libnats, in the threads' fixed buffers */
#define JS_TEXT_BYTES 256

extern const OutboxDestinationKind OutboxJetStreamKind;

/* outbox.jetstream_timeout (ms) and outbox.jetstream_max_pending */
extern int	outbox_jetstream_timeout;
extern int	outbox_jetstream_max_pending;

/* A JetStream destination's own columns (OutboxDestination.options). */
typedef struct JsDestOptions
{
	char	   *servers;		/* nats_servers: comma-separated URLs */
	char	   *subject;		/* nats_subject: a subject or a template */
	char	   *stream;			/* nats_stream */
	char	   *user;			/* nats_user, with nats_password */
	char	   *password;
	char	   *token;			/* nats_token */
	char	   *creds_file;		/* nats_creds_file */
	char	   *ca_file;		/* nats_ca_file */
	int			timeout_ms;		/* timeout_ms, or -1: outbox.jetstream_timeout */
	Jsonb	   *headers;		/* headers (the destination's), or NULL */
} JsDestOptions;

#define JS_OPTIONS(ev) ((const JsDestOptions *) (ev)->dest.options)

/*
 * A connection's phase, as the relay drives it (JsConn.phase, relay thread
 * only): set_phase, in jetstream_conn.c, is the only way to change it and
 * lists the transitions.
 */
typedef enum JsPhase
{
	JS_PHASE_IDLE,				/* no thread: new, or its last thread stopped */
	JS_PHASE_CONNECTING,		/* its thread runs, and has not reported READY */
	JS_PHASE_READY,				/* connected, stream checked: its thread publishes */
	JS_PHASE_STOPPING,			/* its thread was asked to close and end */
	JS_PHASE_BACKING_OFF		/* no thread: the last attempt failed, the
								 * next waits for retry_at */
} JsPhase;

/*
 * What a connection's thread reports of its attempt (JsConn.report,
 * shared, under mu): READY or FAILED once it knows; NONE from the start of
 * an attempt until then. The relay turns it into a phase.
 */
typedef enum JsReport
{
	JS_REPORT_NONE,
	JS_REPORT_READY,			/* connected, stream checked: publishing */
	JS_REPORT_FAILED			/* the attempt failed: error, lib_error say why */
} JsReport;

/* An outcome, as the PubAck handler or the publishing thread records it. */
typedef struct JsAck
{
	natsMsg    *msg;			/* the message published */
	natsStatus	status;			/* NATS_OK: a PubAck */
	jsErrCode	code;			/* JetStream's error code, or 0 */
	bool		duplicate;		/* a PubAck: the stream had the message already */
	bool		not_puback;		/* a JSON answer, but no PubAck of the stream:
								 * the stream it names (or none) in text */
	uint64		sequence;		/* and the sequence it has, or 0 */
	bool		unreadable;		/* an answer that is not JSON: libnats's
								 * parser's words, which quote it, in text */
	bool		other_stream;	/* a PubAck of another stream, named in text */
	char		text[JS_TEXT_BYTES];	/* libnats's or the stream's error */
} JsAck;

/* A message for the connection's thread to publish; malloc'd. */
typedef struct JsPublish
{
	struct JsPublish *next;
	natsMsg    *msg;
	int64		max_wait;		/* ms for its PubAck: what its time limit has left */
	char		msg_id[40];		/* the event_id: a uuid's text */
} JsPublish;

/*
 * An event waiting to be published. Its time limit runs from when the
 * kind took it, right after its claim: connecting, waiting for room and
 * the PubAck all come out of it.
 */
typedef struct JsWaiting
{
	dlist_node	node;
	OutboxEvent *ev;
	TimestampTz deadline;		/* its time limit ends: fails then */
} JsWaiting;

/* A published message whose outcome is not collected. */
typedef struct JsInFlight
{
	natsMsg    *msg;			/* the key */
	OutboxEvent *ev;			/* NULL: abandoned */
	char	   *subject;
} JsInFlight;

/*
 * A destination's connection. Its thread (conn_main) connects, then
 * publishes what the relay queues, and at the end closes and frees
 * libnats's objects; so the relay never calls libnats's connection
 * functions, which wait on the connection's lock while libnats reconnects.
 * The relay frees the struct only after joining the thread with nothing
 * published left unanswered: no libnats callback has it as closure then
 * (the PubAck handler is the only one that does).
 */
typedef struct JsConn
{
	/* relay thread only */
	char	   *name;			/* the destination */
	char	   *fingerprint;	/* its options as one string: a change reconnects */
	MemoryContext cxt;
	JsPhase		phase;			/* changed by set_phase only */
	bool		retiring;		/* superseded or unused: closes when idle */
	dlist_head	waiting;
	int			nwaiting;
	HTAB	   *in_flight;		/* natsMsg * -> JsInFlight */
	int			outstanding;	/* queued or published, outcome not collected */
	int			live;			/* events taken and not returned */
	int			timeout_ms;
	int			failures;		/* connection attempts failed in a row */
	TimestampTz retry_at;		/* no new attempt before */
	TimestampTz last_used;		/* the last event taken */
	pthread_t	thread;			/* while JsConnThreadRuns */
	char	   *servers_text;	/* for messages: the URLs, no credentials */
	char	   *last_failure;	/* text of the last failed connection */

	/* set before a thread starts, read-only while it runs */
	int			cap;			/* at most this many outstanding */
	char	   *stream;
	char	  **server_list;
	int			nservers;
	bool		secure;			/* tls:// or a CA file */
	char	   *user;
	char	   *password;
	char	   *token;
	char	   *creds_file;
	char	   *ca_file;

	/* shared with the threads, under mu */
	pthread_mutex_t mu;
	pthread_cond_t cond;		/* the queue has messages, or stop is set */
	JsReport	report;			/* of the thread's attempt */
	bool		stop;			/* close the connection and end */
	bool		finished;		/* the thread ended: the relay joins it */
	bool		closed;			/* libnats closed the connection for good */
	char		error[JS_TEXT_BYTES];	/* why the attempt failed */
	char		lib_error[JS_TEXT_BYTES];	/* and libnats's words, if any */
	int64		duplicates_ns;
	int64		max_age_ns;
	bool		window_read;	/* read (again): the relay checks it */
	jsCtx	   *js;				/* while READY, until the relay asks to stop */
	JsPublish  *queue;			/* to publish, in order */
	JsPublish  *queue_tail;
	JsAck	   *acks;			/* a ring of cap entries */
	int			ack_head;
	int			nacks;
} JsConn;

/*
 * The kind's state in a process (OutboxDestinationKind.startup), in
 * TopMemoryContext: what the relay's callbacks and outbox_jetstream_check()
 * keep between calls. Relay thread only.
 */
typedef struct JsKindState
{
	MemoryContext cxt;			/* of the connections; NULL until the first */
	List	   *conns;			/* the relay's JsConn, in cxt */
	List	   *checked;		/* outbox_jetstream_check()'s JsConn, in cxt,
								 * while their threads may run */
	OutboxLogLimit duplicate_log;	/* duplicate PubAcks logged */
	bool		threads_left;	/* a thread outlived the exit's wait: exit
								 * without the libraries' atexit handlers */
	int			exit_code;		/* the process's, for that exit */
} JsKindState;

/* Whether c has a thread, started and not joined yet. */
static inline bool
JsConnThreadRuns(const JsConn *c)
{
	return c->phase == JS_PHASE_CONNECTING || c->phase == JS_PHASE_READY ||
		c->phase == JS_PHASE_STOPPING;
}

/* jetstream.c */
extern void JetStreamFail(OutboxEvent *ev, char *error, bool permanent);
extern natsMsg *JetStreamBuildMessage(OutboxEvent *ev, const char *subject);
extern void JetStreamAckOutcome(JsKindState *ks, OutboxEvent *ev, const JsAck *a,
								const char *subject, const JsConn *c);

/* jetstream_conn.c */
extern void JetStreamSetup(JsKindState *ks);
extern JsConn *JetStreamNewConn(JsKindState *ks, const char *name, const JsDestOptions *o,
								const char *fp, int timeout_ms);
extern JsConn *JetStreamConnFor(JsKindState *ks, OutboxEvent *ev);
extern void JetStreamStartConnect(JsConn *c);
extern void JetStreamRequestStop(JsConn *c);
extern bool JetStreamStopOnceReady(JsConn *c);
extern void JetStreamJoin(JsConn *c);
extern void JetStreamFreeConn(JsConn *c);
extern void JetStreamServiceConn(JsConn *c, List **done);

/* jetstream_publish.c */
extern void JetStreamPublishWaiting(JsConn *c, List **done);
extern void JetStreamCollectAcks(JsKindState *ks, JsConn *c, List **done);
extern void JetStreamTakeBack(JsConn *c, List **done);

/* jetstream_thread.c */
extern bool JetStreamThreadStart(JsConn *c);
extern void JetStreamLibraryOpen(void);

/* jetstream_rules.c */
extern char *JetStreamEventSubject(const OutboxEvent *ev, char **error);
extern char **JetStreamSplitServers(const char *servers, int *n, int *total);
extern bool JetStreamHoldsNatsPrefix(const char *s);
extern bool JetStreamCheckDestination(const OutboxDestinationRow *row, OutboxProblem *p);
extern Size JetStreamDecode(const OutboxDestinationRow *row, OutboxDestination *dest);
extern bool JetStreamCredsBlock(const char *text, size_t len, int which, const char **value,
								size_t *vlen);
extern char *JetStreamDurationText(double ms);
extern char *JetStreamWindowProblem(const JsConn *c, int64 duplicates_ns, int64 max_age_ns,
									double *window_ms, double *span_ms);

#endif							/* OUTBOX_JETSTREAM_INT_H */
