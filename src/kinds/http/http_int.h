/*-------------------------------------------------------------------------
 *
 * http_int.h
 *	  What the files of the webhook kind share: its state in a process
 *	  (HttpState), the limits it is built with, and what one of its files
 *	  offers the others. Only files of src/kinds/http/ include it.
 *
 * src/kinds/http/http_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_HTTP_INT_H
#define OUTBOX_HTTP_INT_H

#include <curl/curl.h>

#include "datatype/timestamp.h"
#include "lib/ilist.h"
#include "nodes/pg_list.h"
#include "utils/hsearch.h"
#include "utils/palloc.h"

#include "destination.h"
#include "http_request.h"

/* the largest outbox.http_max_connections allowed */
#define HTTP_MAX_CONNECTIONS_LIMIT OUTBOX_HTTP_MAX_IDLE_EASY

/*
 * The sockets libcurl may ask to be watched at once, at most. A connection
 * or a name lookup uses one socket, so twice the connection limit leaves
 * room for lookups in progress.
 */
#define MAX_SOCKETS (2 * HTTP_MAX_CONNECTIONS_LIMIT + 16)

/*
 * The kind's state in this process, made by its startup callback (http.c),
 * in place of file-level variables: every callback gets it as its state
 * argument, libcurl's multi callbacks as their userdata (http_sockets.c),
 * the on_proc_exit callback as its argument. libcurl and the memory of
 * requests are set up with the first event (http_init): until then multi
 * is NULL.
 */
typedef struct HttpState
{
	CURLM	   *multi;
	uint64		multi_generation;	/* of outbox.http_allowed_targets, at
									 * multi's creation */
	MemoryContext cxt;			/* requests and destinations */
	MemoryContext prepare_cxt;	/* reset after each request is built */

	/* the queues, and the requests running (http.c) */
	List	   *dests;			/* of HttpDest, in cxt */
	HTAB	   *dests_by_name;	/* name -> HttpDest *, in cxt */
	int			next_dest;		/* round-robin position */

	/*
	 * What the destinations' shares of the connections depend on, over all
	 * of them (http.c, dest_share): found once, not once per destination.
	 */
	struct
	{
		uint64		generation; /* of the destinations' activity, when found */
		TimestampTz at;			/* the time busy is judged at */
		int			busy;		/* destinations busy then */
		HttpDest   *quickest;	/* the busy one with the least avg_ms > 0 */
		double		quickest_ms;	/* its avg_ms, 0: none */
		double		second_ms;	/* the least avg_ms > 0 of the others, 0: none */
	}			share;
	dlist_head	running_list;	/* HttpRequest attached to multi */
	int			running;		/* handles attached, all destinations */
	/* when the kind last ran (collect, socket_ready, timeout_ms before a wait) */
	TimestampTz serviced_at;

	/*
	 * The sockets libcurl asks to be watched, and for what (its socket
	 * callback keeps this up to date), for the relay's wait (wait.c); and
	 * when libcurl wants to be called without socket activity (its timer
	 * callback). http_sockets.c.
	 */
	OutboxWaitSocket sockets[MAX_SOCKETS];
	int			nsockets;
	uint64		sockets_generation;
	TimestampTz curl_due;		/* 0: no timer */

	/*
	 * The epoll instance that holds the sockets of sockets[] (Linux), or -1:
	 * then sockets[] itself goes into the relay's wait. Created with the
	 * multi handle; the relay waits on it as one readable socket.
	 */
	int			epoll_fd;
	OutboxWaitSocket epoll_socket[1];
	uint64		epoll_generation;	/* a value sockets_generation had */

	/* easy handles kept for reuse, and the resource owner for signing */
	HttpRequestCache cache;
} HttpState;

/* outbox.http_max_connections (http.c) */
extern int	outbox_http_max_connections;

/* http.c: the queues */
extern void OutboxHttpStartRequests(HttpState *st, List **done);
extern void OutboxHttpReport(HttpRequest *req, List **done);
extern void OutboxHttpReleaseRequest(HttpState *st, HttpRequest *req);
extern TimestampTz OutboxHttpShareChangesAt(HttpState *st, TimestampTz now);
extern void OutboxHttpExpireQueued(HttpState *st, List **done);
extern TimestampTz OutboxHttpQueuedDeadline(HttpState *st, int64 away);

/* http_sockets.c: libcurl's sockets and timer in the relay's wait */
extern CURLM *OutboxHttpNewMulti(HttpState *st);
extern void OutboxHttpRunTimers(HttpState *st);
extern void OutboxHttpReadReadySockets(HttpState *st);
extern uint64 OutboxHttpSockets(void *state, const OutboxWaitSocket **socks, int *n);
extern void OutboxHttpSocketReady(void *state, pgsocket fd, uint32 events);

/* http_collect.c: the outcomes of running requests, and their time limits */
extern List *OutboxHttpCollect(void *state);
extern long OutboxHttpTimeoutMs(void *state);

/* http_rules.c: a destination row's rules and decoding, an event's body */
extern bool OutboxHttpCheckDestination(const OutboxDestinationRow *row, OutboxProblem *p);
extern Size OutboxHttpDecode(const OutboxDestinationRow *row, OutboxDestination *dest);
extern Size OutboxHttpPrepareEvent(void *state, OutboxEvent *ev);

#endif							/* OUTBOX_HTTP_INT_H */
