/*-------------------------------------------------------------------------
 *
 * rabbitmq_int.h
 *	  What the files of the RabbitMQ kind share: a destination's options,
 *	  a connection (RmqConn) with the messages it waits on, and the
 *	  functions the files call in one another.
 *
 *   rabbitmq.c        the kind's table and options, the rules of a row
 *                     and of an event, the message, the callbacks
 *   rabbitmq_conn.c   a connection as the relay drives it: its frames
 *                     read (confirms, returns, closes), messages
 *                     published, time limits, closed
 *   rabbitmq_thread.c a connection being made, on a thread of its own
 *
 * Once made, a connection is the relay's alone: its socket is in the
 * relay's one wait (wait.c), and its frames are read without waiting.
 *
 * src/kinds/rabbitmq/rabbitmq_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_RABBITMQ_INT_H
#define OUTBOX_RABBITMQ_INT_H

/* rabbitmq-c 0.12 moved its headers and deprecated the old names */
#if defined(__has_include)
#if __has_include(<rabbitmq-c/amqp.h>)
#define RMQ_NEW_HEADERS
#endif
#endif
#ifdef RMQ_NEW_HEADERS
#include <rabbitmq-c/amqp.h>
#include <rabbitmq-c/ssl_socket.h>
#include <rabbitmq-c/tcp_socket.h>
#else
#include <amqp.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#endif

#include <pthread.h>

#include "lib/ilist.h"
#include "utils/timestamp.h"

#include "destination.h"

/* URLs of one destination, at most */
#define RMQ_MAX_URLS 16
/* an AMQP short string (exchange, routing key, virtual host): 255 bytes */
#define RMQ_SHORTSTR_MAX 255
/*
 * A message's body, at most, by default: RabbitMQ 4.0's max_message_size
 * (16 MiB; 3.10's is 128 MiB), past which the broker closes the channel,
 * failing every message waiting on it. Most: 3.10's.
 */
#define RMQ_DEFAULT_MAX_MESSAGE_BYTES (16 * 1024 * 1024)
#define RMQ_MAX_MESSAGE_BYTES_LIMIT (128 * 1024 * 1024)
/* unconfirmed publishes per destination: default and most */
#define RMQ_DEFAULT_MAX_UNCONFIRMED 1024
#define RMQ_MAX_UNCONFIRMED_LIMIT 4096
/* time limit of a connection's setup and of each confirm, by default (ms) */
#define RMQ_DEFAULT_TIMEOUT_MS 5000
/* the heartbeat the relay asks for, in seconds (the broker may lower it) */
#define RMQ_HEARTBEAT_S 30
/* the largest frame the relay asks for: RabbitMQ's default */
#define RMQ_FRAME_MAX 131072
/* what a connection attempt reports, at most */
#define RMQ_ERROR_BYTES 2048

/* A RabbitMQ destination's options (OutboxDestination.options). */
typedef struct RmqDestOptions
{
	char	   *urls;			/* comma-separated amqp:// URLs */
	char	   *vhost;
	char	   *user;
	char	   *password;
	char	   *ca_file;		/* tls_ca_file: amqps:// servers' CAs, or NULL */
	char	   *exchange;		/* "" the default exchange */
	char	   *routing_key;	/* a key or a template; NULL: the event type */
	int			max_unconfirmed;
	int64		max_message_bytes;
	int			timeout_ms;
	Jsonb	   *headers;		/* the destination's own, or NULL */
	/* set by prepare for the event: the routing key built */
	char	   *key;
} RmqDestOptions;

#define RMQ_OPTIONS(ev) ((RmqDestOptions *) (ev)->dest.options)

/* An event taken and not yet published. */
typedef struct RmqWaiting
{
	dlist_node	node;
	OutboxEvent *ev;
	TimestampTz deadline;		/* its time limit ends: fails then */
	Size		size;			/* its frames, at most (RabbitmqMessageBytes) */
} RmqWaiting;

/*
 * A message published and not confirmed, in the order of its delivery tag
 * (the channel counts publishes from 1). ev is NULL once its event was
 * given up (its time limit, abandon): its tag still takes a place.
 */
typedef struct RmqUnconfirmed
{
	dlist_node	node;
	uint64		tag;
	OutboxEvent *ev;
	char		message_id[40]; /* the event_id, kept if ev is given up */
	TimestampTz deadline;		/* published + the time limit */
	bool		returned;		/* basic.return came for it: unroutable */
	char	   *return_text;	/* and the broker's words */
} RmqUnconfirmed;

/*
 * A connection being made, on a thread of its own (rabbitmq_thread.c):
 * malloc'd, with its strings after it.
 */
typedef struct RmqConnect
{
	/* set before the thread starts, read-only while it runs */
	pthread_t	thread;
	int			nurls;
	char	   *urls[RMQ_MAX_URLS];
	char	   *hosts[RMQ_MAX_URLS];
	int			ports[RMQ_MAX_URLS];
	bool		tls[RMQ_MAX_URLS];	/* amqps:// */
	char	   *vhost;
	char	   *user;
	char	   *password;
	char	   *ca_file;		/* or NULL: the system's CAs */
	char	   *exchange;
	char		connection_name[RMQ_SHORTSTR_MAX + 1];
	int			timeout_ms;
	/* the thread's own until finished */
	char		error[RMQ_ERROR_BYTES];
	/* shared, under mu */
	pthread_mutex_t mu;
	bool		finished;		/* the thread is done: conn, or error */
	bool		abandoned;		/* the relay gave up: the thread frees it */
	amqp_connection_state_t conn;
} RmqConnect;

typedef enum RmqPhase
{
	RMQ_IDLE,					/* not connected: connects when events wait */
	RMQ_CONNECTING,				/* a thread makes the connection (connect) */
	RMQ_READY,					/* connected, channel in confirm mode */
	RMQ_BACKING_OFF				/* the last attempt failed: not before retry_at */
} RmqPhase;

/* A destination's connection, kept across claims. */
typedef struct RmqConn
{
	struct RmqKindState *ks;	/* whose sockets' generation it moves */
	char	   *name;			/* the destination */
	char	   *fingerprint;	/* its options as one string: a change reconnects */
	MemoryContext cxt;
	RmqPhase	phase;
	bool		retiring;		/* superseded or unused: closed once idle */
	amqp_connection_state_t amqp;	/* while READY */
	RmqConnect *connect;		/* while CONNECTING */
	pgsocket	fd;
	bool		blocked;		/* connection.blocked: publish nothing */
	bool		want_write;		/* the socket's buffer had no room: polled */
	bool		more;			/* frames may be left to read: read at once */
	uint64		next_tag;		/* the next publish's delivery tag */
	/* a basic.return being read: its content header and body follow */
	bool		in_return;
	char	   *return_text;
	uint64		return_body_left;
	dlist_head	waiting;
	int			nwaiting;
	dlist_head	unconfirmed;
	int			nunconfirmed;	/* abandoned ones too */
	int			live;			/* events taken, outcome not returned */
	int			failures;		/* connection attempts failed in a row */
	TimestampTz retry_at;
	TimestampTz last_used;
	TimestampTz last_io;		/* the last call into rabbitmq-c (heartbeats) */
	int			heartbeat_ms;	/* the heartbeat agreed with the broker; 0: none */
	char	   *last_failure;	/* why the last attempt failed */
	/*
	 * The broker's max_message_size, as its 406 closing the channel for a
	 * larger message gave it (0: not known): kept across reconnects, for
	 * as long as this connection's options stand.
	 */
	int64		broker_max_size;
	char	   *broker_max_words;	/* the broker's words then */
	bool		size_check;		/* waiting events may be over it: look once */
	/* the options, copied */
	char	  **urls;
	int			nurls;
	char	   *vhost;
	char	   *user;
	char	   *password;
	char	   *ca_file;
	char	   *exchange;
	int			cap;
	int			timeout_ms;
} RmqConn;

/* The kind's state in a process, in TopMemoryContext. */
typedef struct RmqKindState
{
	MemoryContext cxt;			/* of the connections; NULL until the first */
	List	   *conns;
	uint64		generation;		/* changes whenever the sockets do */
	OutboxWaitSocket *socks;	/* what sockets returns, nsocks of them at most */
	int			nsocks;
} RmqKindState;

/* rabbitmq.c */
extern void RabbitmqFail(OutboxEvent *ev, char *error, bool permanent);
extern char **RabbitmqSplitUrls(const char *urls, int *n, const char **why);
extern int	RabbitmqPublish(RmqConn *c, OutboxEvent *ev, char **problem);
extern Size RabbitmqMessageBytes(OutboxEvent *ev);

/* rabbitmq_thread.c */
extern RmqConnect *RabbitmqConnectStart(const RmqConn *c, const char **error);
extern bool RabbitmqConnectDone(RmqConnect *a, amqp_connection_state_t *conn, char **error);
extern void RabbitmqConnectAbandon(RmqConnect *a);

/* rabbitmq_conn.c */
extern RmqConn *RabbitmqConnFor(RmqKindState *ks, OutboxEvent *ev);
extern void RabbitmqService(RmqConn *c, List **done);
extern void RabbitmqReadFrames(RmqConn *c, List **done);
extern void RabbitmqClose(RmqConn *c, const char *why, List **done);
extern void RabbitmqFreeConn(RmqConn *c);

#endif							/* OUTBOX_RABBITMQ_INT_H */
