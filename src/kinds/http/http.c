/*-------------------------------------------------------------------------
 *
 * http.c
 *	  The webhook kind of destination: its settings, its rules for a
 *	  destination row, and the transport that runs its requests with
 *	  libcurl's multi interface (one request is http_request.c's).
 *
 * The relay hands events over after the claim commits (enqueue) and
 * collects their outcomes as they come (collect); no database transaction
 * is open meanwhile. libcurl is driven by its socket interface: the
 * sockets it asks to watch go into the relay's one wait (wait.c), which
 * hands the ready ones back (socket_ready), so an answer wakes the relay
 * at once; its timer comes back as the kind's timeout_ms. On Linux they
 * go there as one epoll instance of the kind's own, which the socket
 * callback keeps up to date with one epoll_ctl per change: libcurl
 * changes what it watches for every request (a kept-alive connection is
 * watched only while a request uses it), and the relay's WaitEventSet,
 * which cannot remove a socket, would have to be built again each time
 * (about 8 % of the relay's CPU under load, measured).
 *
 * Each destination has a queue. Requests are started from the queues in
 * turn, at most outbox.http_max_connections at once; while another
 * destination is busy, a destination gets at most half of them, and one
 * whose requests take over four times as long as the quickest's an eighth,
 * so that a slow endpoint cannot hold the connections a fast one needs.
 * The multi handle lives as long as the process: connections are kept
 * alive, except those opened under an older outbox.http_allowed_targets.
 *
 * Each request has one time limit (outbox.http_timeout or the destination's
 * timeout_ms) for name resolution, connection and the whole transfer. It
 * measures the endpoint, not the relay: the kind keeps it instead of
 * libcurl (which checks its limit before reading a socket), reads what is
 * on the sockets before it ends a request for it, and does not count the
 * time the relay was away from its wait (a step held up by a lock, for
 * one), when nothing was read or sent. A 2xx is reported as delivered as
 * soon as the headers are in, even if the body is slow or endless; the
 * body is read on for BODY_GRACE_MS, then the transfer is cut.
 *
 * libcurl's own memory (handles, header lists, the copied body) is freed
 * when each transfer ends, and the multi handle by an on_proc_exit
 * callback. Runs in the relay worker, or in a backend running
 * outbox_relay().
 *
 * src/kinds/http/http.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <curl/curl.h>
#include <poll.h>
#ifdef HAVE_SYS_EPOLL_H
#include <sys/epoll.h>
#endif

#include "lib/ilist.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/formatting.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "cloudevents.h"
#include "compat.h"
#include "destination.h"
#include "envelope.h"
#include "headers.h"
#include "http_request.h"
#include "http_targets.h"

/*
 * Time the relay spends away from its wait (in a step) longer than this is
 * added to the time limits of the requests running meanwhile.
 */
#define AWAY_MS 100

/* the largest outbox.http_max_connections allowed */
#define HTTP_MAX_CONNECTIONS_LIMIT OUTBOX_HTTP_MAX_IDLE_EASY
/* the rest of a 2xx body is read this long, for keep-alive, then cut */
#define BODY_GRACE_MS 1000

/* outbox.http_timeout (ms) and outbox.http_max_connections */
static int	http_timeout = 5000;
static int	http_max_connections = 16;

/*
 * A connection or a name lookup uses one socket, so twice the connection
 * limit leaves room for lookups in progress.
 */
#define MAX_SOCKETS (2 * HTTP_MAX_CONNECTIONS_LIMIT + 16)

/*
 * The kind's state in this process, made by its startup callback, in place
 * of file-level variables: every callback gets it as its state argument,
 * libcurl's multi callbacks as their userdata, the exit callback as its
 * argument. libcurl and the memory of requests are set up with the first
 * event (http_init): until then multi is NULL.
 */
typedef struct HttpState
{
	CURLM	   *multi;
	uint64		multi_generation;	/* of outbox.http_allowed_targets, at
									 * multi's creation */
	MemoryContext cxt;			/* requests and destinations */
	MemoryContext prepare_cxt;	/* reset after each request is built */
	List	   *dests;			/* of HttpDest, in cxt */
	int			next_dest;		/* round-robin position */
	dlist_head	running_list;	/* HttpRequest attached to multi */
	int			running;		/* handles attached, all destinations */
	/* when the kind last ran (collect, socket_ready, timeout_ms before a wait) */
	TimestampTz serviced_at;

	/*
	 * The sockets libcurl asks to be watched, and for what (its socket
	 * callback keeps this up to date), for the relay's wait (wait.c); and
	 * when libcurl wants to be called without socket activity (its timer
	 * callback).
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

/* ready sockets handed to libcurl per socket_ready, at most */
#define MAX_READY 64

/*
 * Registers socket s in epoll_fd for events (0: removes it); had: what it
 * was registered for. Returns false on failure (errno set). Without epoll,
 * true.
 */
static bool
epoll_update(HttpState *st, curl_socket_t s, uint32 had, uint32 events)
{
#ifdef HAVE_SYS_EPOLL_H
	struct epoll_event ev;

	if (st->epoll_fd < 0)
		return true;
	ev.events = ((events & WL_SOCKET_READABLE) ? EPOLLIN : 0) |
		((events & WL_SOCKET_WRITEABLE) ? EPOLLOUT : 0);
	ev.data.fd = s;
	if (events == 0)
		/* libcurl may have closed it already, which removed it */
		return epoll_ctl(st->epoll_fd, EPOLL_CTL_DEL, s, &ev) == 0 ||
			errno == EBADF || errno == ENOENT;
	return epoll_ctl(st->epoll_fd, had == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, s, &ev) == 0;
#else
	return true;
#endif
}

/*
 * libcurl socket callback: notes what libcurl wants of socket s
 * (CURL_POLL_IN, _OUT, _INOUT, or _REMOVE when it is done with it), and
 * updates epoll_fd. Must not throw or allocate; returning -1 fails the
 * transfers (a full table, which the connection limit rules out, or an
 * epoll_ctl that failed: out of kernel memory).
 */
static int
socket_changed(CURL *easy pg_attribute_unused(), curl_socket_t s, int what,
			   void *userp, void *socketp pg_attribute_unused())
{
	HttpState  *st = (HttpState *) userp;
	uint32		events = 0;
	int			i;

	if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
		events |= WL_SOCKET_READABLE;
	if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
		events |= WL_SOCKET_WRITEABLE;
	for (i = 0; i < st->nsockets; i++)
		if (st->sockets[i].fd == s)
			break;
	if (what == CURL_POLL_REMOVE)
	{
		if (i < st->nsockets)
		{
			bool		ok = epoll_update(st, s, st->sockets[i].events, 0);

			st->sockets[i] = st->sockets[--st->nsockets];
			st->sockets_generation++;
			return ok ? 0 : -1;
		}
		return 0;
	}
	if (i == st->nsockets)
	{
		if (st->nsockets == MAX_SOCKETS)
			return -1;
		st->sockets[st->nsockets].fd = s;
		st->sockets[st->nsockets].events = 0;
		st->nsockets++;
	}
	if (st->sockets[i].events != events)
	{
		uint32		had = st->sockets[i].events;

		st->sockets[i].events = events;
		st->sockets_generation++;
		if (!epoll_update(st, s, had, events))
			return -1;
	}
	return 0;
}

/*
 * libcurl timer callback: libcurl wants curl_multi_socket_action with
 * CURL_SOCKET_TIMEOUT in timeout_ms (0: as soon as possible; -1: no timer).
 * Only notes when; collect makes the call. Must not throw.
 */
static int
timer_changed(CURLM *m pg_attribute_unused(), long timeout_ms, void *userp)
{
	HttpState  *st = (HttpState *) userp;

	st->curl_due = timeout_ms < 0 ? 0 :
		TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	return 0;
}

/* A new multi handle, its callbacks set; FATAL if out of memory. */
static CURLM *
new_multi(HttpState *st)
{
	CURLM	   *m = curl_multi_init();

	if (m == NULL ||
		curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, socket_changed) != CURLM_OK ||
		curl_multi_setopt(m, CURLMOPT_SOCKETDATA, st) != CURLM_OK ||
		curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, timer_changed) != CURLM_OK ||
		curl_multi_setopt(m, CURLMOPT_TIMERDATA, st) != CURLM_OK)
		ereport(FATAL,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("could not create a libcurl multi handle")));
	st->nsockets = 0;
	st->sockets_generation++;
	st->curl_due = 0;
	st->multi_generation = OutboxTargetsGeneration();
#ifdef HAVE_SYS_EPOLL_H
	/* a new set: the old multi handle's sockets may still be in the old one */
	if (st->epoll_fd >= 0)
		close(st->epoll_fd);
	/* without one (out of descriptors), the sockets go into the wait as they are */
	st->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	st->epoll_socket[0].fd = st->epoll_fd;
	st->epoll_socket[0].events = WL_SOCKET_READABLE;
	/* the relay's wait takes in the new descriptor, even if its number is the old one's */
	st->epoll_generation = ++st->sockets_generation;
#endif
	return m;
}

/*
 * startup: the kind's state in this process, empty (see HttpState): a
 * process that sends no webhook sets up neither libcurl nor the memory of
 * requests.
 */
static void *
http_startup(void)
{
	HttpState  *st = palloc0(sizeof(HttpState));

	dlist_init(&st->running_list);
	st->sockets_generation = 1;
	st->epoll_fd = -1;
	return st;
}

/* on_proc_exit callback: frees libcurl's handles; arg is the state. */
static void
http_at_exit(int code pg_attribute_unused(), Datum arg)
{
	HttpState  *st = (HttpState *) DatumGetPointer(arg);

	OutboxHttpDropIdleEasy(&st->cache);
	if (st->multi != NULL)
		curl_multi_cleanup(st->multi);
	st->multi = NULL;
	if (st->epoll_fd >= 0)
		close(st->epoll_fd);
	st->epoll_fd = -1;
	curl_global_cleanup();
}

/* Initialises libcurl and the transport's memory once per process. */
static void
http_init(HttpState *st)
{
	if (st->multi != NULL)
		return;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not initialize libcurl")));
	st->cxt = AllocSetContextCreate(TopMemoryContext, "outbox http",
									ALLOCSET_DEFAULT_SIZES);
	st->prepare_cxt = AllocSetContextCreate(st->cxt, "outbox http request",
											ALLOCSET_DEFAULT_SIZES);
	st->multi = new_multi(st);
	on_proc_exit(http_at_exit, PointerGetDatum(st));
}

/* The queue of the destination called name, created on first use. */
static HttpDest *
find_dest(HttpState *st, const char *name)
{
	ListCell   *lc;
	HttpDest   *d;
	MemoryContext old;

	foreach(lc, st->dests)
	{
		d = lfirst(lc);
		if (strcmp(d->name, name) == 0)
			return d;
	}
	old = MemoryContextSwitchTo(st->cxt);
	d = palloc0(sizeof(HttpDest));
	d->name = pstrdup(name);
	dlist_init(&d->queue);
	st->dests = lappend(st->dests, d);
	MemoryContextSwitchTo(old);
	return d;
}

/*
 * Hands the outcome of the request's events back: appended to *done, the
 * request forgets them. The time it took goes into its destination's
 * moving average.
 */
static void
report(HttpRequest *req, List **done)
{
	HttpDest   *d = req->dest;
	TimestampTz now = GetCurrentTimestamp();

	for (int i = 0; i < req->nevents; i++)
		*done = lappend(*done, req->events[i]);
	d->unreported -= req->nevents;
	req->nevents = 0;
	d->last_active = now;
	if (req->started_at != 0)
	{
		double		ms = (double) (now - req->started_at) / 1000.0;

		d->avg_ms = d->avg_ms == 0 ? ms : 0.8 * d->avg_ms + 0.2 * ms;
	}
}

/* Detaches and frees a request, its libcurl handle and header list. */
static void
release_request(HttpState *st, HttpRequest *req)
{
	if (req->easy != NULL)
	{
		curl_multi_remove_handle(st->multi, req->easy);
		OutboxHttpParkEasy(&st->cache, req->easy, http_max_connections);
		dlist_delete(&req->node);
		req->dest->running--;
		st->running--;
	}
	if (req->headers != NULL)
		curl_slist_free_all(req->headers);
	if (req->events != &req->one)
		pfree(req->events);
	pfree(req);
}

/*
 * enqueue: queues an event with its body built. The event must stay valid
 * until collect hands it back with its outcome; the request itself lives
 * in the transport's own memory.
 */
static void
http_enqueue(void *state, OutboxEvent *ev)
{
	HttpState  *st = (HttpState *) state;
	HttpRequest *req;

	http_init(st);
	req = MemoryContextAllocZero(st->cxt, sizeof(HttpRequest));
	req->one = ev;
	req->events = &req->one;
	req->nevents = 1;
	req->dest = find_dest(st, ev->dest.name);
	dlist_push_tail(&req->dest->queue, &req->node);
	req->dest->queued++;
	req->dest->unreported++;
	req->dest->per_request = HTTP_OPTIONS(ev)->events_per_request;
	req->dest->last_active = GetCurrentTimestamp();
}

/*
 * Whether event ev can go in the batch whose first event is first: it has
 * no headers of its own (they are sent as HTTP headers, so such an event
 * goes alone), and its destination row was the same when each was claimed
 * (a row changed between two claims puts the events of each in requests
 * of their own).
 */
static bool
same_request(const OutboxEvent *first, const OutboxEvent *ev)
{
	const HttpDestOptions *a = HTTP_OPTIONS(first);
	const HttpDestOptions *b = HTTP_OPTIONS(ev);

	if (ev->headers != NULL || strcmp(a->url, b->url) != 0 ||
		a->timeout_ms != b->timeout_ms || a->retry_client_errors != b->retry_client_errors ||
		a->format != b->format || a->events_per_request != b->events_per_request ||
		(a->ce_source == NULL) != (b->ce_source == NULL) ||
		(a->ce_source != NULL && strcmp(a->ce_source, b->ce_source) != 0) ||
		(a->ca_file == NULL) != (b->ca_file == NULL) ||
		(a->ca_file != NULL && strcmp(a->ca_file, b->ca_file) != 0) ||
		(a->headers == NULL) != (b->headers == NULL) ||
		(a->headers != NULL && (VARSIZE(a->headers) != VARSIZE(b->headers) ||
								memcmp(a->headers, b->headers, VARSIZE(a->headers)) != 0)) ||
		first->dest.nsecrets != ev->dest.nsecrets)
		return false;
	for (int i = 0; i < first->dest.nsecrets; i++)
		if (strcmp(first->dest.secrets[i], ev->dest.secrets[i]) != 0)
			return false;
	return true;
}

/*
 * Makes req, just taken from d's queue, a batch: moves into it the events
 * queued behind it that can share its request (same_request), in queue
 * order, up to its destination's events_per_request and while the body
 * stays within HTTP_BATCH_MAX_BYTES. An event with headers of its own
 * goes alone. An ordered destination has at most one event of a key in
 * flight (the claim holds the others), so a batch has at most one of each.
 */
static void
gather_batch(HttpState *st, HttpRequest *req, HttpDest *d)
{
	OutboxEvent *first = req->events[0];
	int			max = HTTP_OPTIONS(first)->events_per_request;
	size_t		bytes = strlen(first->body) + 2;
	dlist_mutable_iter iter;

	if (max <= 1 || first->headers != NULL || d->queued == 0)
		return;
	req->events = MemoryContextAlloc(st->cxt, sizeof(OutboxEvent *) * Min(max, d->queued + 1));
	req->events[0] = first;
	dlist_foreach_modify(iter, &d->queue)
	{
		HttpRequest *next = dlist_container(HttpRequest, node, iter.cur);
		OutboxEvent *ev = next->events[0];
		size_t		len;

		if (req->nevents >= max)
			break;
		if (!same_request(first, ev))
			continue;
		len = strlen(ev->body) + 1;
		if (bytes + len > HTTP_BATCH_MAX_BYTES)
			break;
		bytes += len;
		req->events[req->nevents++] = ev;
		dlist_delete(&next->node);
		d->queued--;
		pfree(next);
	}
}

/*
 * Whether destination d counts as busy for sharing connections: it has
 * events in the transport, or had one handed over or reported within
 * SHARE_WINDOW_MS. Its next events may still be on their way from the
 * table (the claim that brings them comes after the outcomes that make
 * room for them are recorded), and the connections they need must not be
 * taken meanwhile by a slow destination for the length of its requests.
 * The window starts at the last outcome too: a destination whose first
 * events waited longer than the window for a connection would otherwise
 * count as idle between its last outcome and its next claim.
 */
#define SHARE_WINDOW_MS 1000

static bool
dest_busy(HttpDest *d, TimestampTz now)
{
	return d->unreported > 0 ||
		!TimestampDifferenceExceeds(d->last_active, now, SHARE_WINDOW_MS);
}

/*
 * The connections destination d may use now, of limit. Alone, all of them.
 * While another destination is busy (see dest_busy), half; and an eighth
 * if d's requests take over SLOW_FACTOR times as long as the quickest busy
 * destination's: a slow endpoint holds each connection for the length of
 * its requests, and a fast one needs nearly all of them to keep its rate.
 */
#define SLOW_FACTOR 4.0

static int
dest_share(HttpState *st, HttpDest *d, int limit, TimestampTz now)
{
	int			busy = 0;
	double		quickest = 0;
	ListCell   *lc;

	foreach(lc, st->dests)
	{
		HttpDest   *o = lfirst(lc);

		if (o == d || !dest_busy(o, now))
			continue;
		busy++;
		if (o->avg_ms > 0 && (quickest == 0 || o->avg_ms < quickest))
			quickest = o->avg_ms;
	}
	if (busy == 0)
		return limit;
	if (quickest > 0 && d->avg_ms > SLOW_FACTOR * quickest)
		return Max(limit / 8, 1);
	return Max(limit / 2, 1);
}

/*
 * Starts waiting requests, visiting the destinations in turn: at most
 * outbox.http_max_connections at once, each destination within its share
 * (dest_share). A request that cannot be prepared is reported at once.
 */
static void
start_requests(HttpState *st, List **done)
{
	int			limit = http_max_connections;
	bool		progress = true;
	TimestampTz now = GetCurrentTimestamp();

	while (progress && st->running < limit)
	{
		int			ndests = list_length(st->dests);

		progress = false;
		for (int k = 0; k < ndests && st->running < limit; k++)
		{
			HttpDest   *d = list_nth(st->dests, (st->next_dest + k) % ndests);
			int			share = dest_share(st, d, limit, now);
			HttpRequest *req;
			MemoryContext old;
			bool		prepared;

			if (d->queued == 0 || d->running >= share)
				continue;
			req = dlist_container(HttpRequest, node, dlist_pop_head_node(&d->queue));
			d->queued--;
			progress = true;
			gather_batch(st, req, d);

			old = MemoryContextSwitchTo(st->prepare_cxt);
			prepared = OutboxHttpPrepare(&st->cache, req, http_timeout,
										 st->multi_generation != OutboxTargetsGeneration());
			MemoryContextSwitchTo(old);
			if (req->events[0]->error != NULL)
				req->events[0]->error = pstrdup(req->events[0]->error);
			MemoryContextReset(st->prepare_cxt);
			if (prepared && curl_multi_add_handle(st->multi, req->easy) == CURLM_OK)
			{
				for (int i = 0; i < req->nevents; i++)
					OutboxStartLogNote(req->events[i]);
				req->started_at = now;
				req->deadline = TimestampTzPlusMilliseconds(now, req->timeout_ms);
				dlist_push_tail(&st->running_list, &req->node);
				d->running++;
				st->running++;
				continue;
			}
			if (prepared)
				req->events[0]->error = "could not queue the HTTP request";
			OutboxHttpShareOutcome(req);
			if (req->easy != NULL)
			{
				OutboxHttpParkEasy(&st->cache, req->easy, http_max_connections);
				req->easy = NULL;
			}
			report(req, done);
			release_request(st, req);
		}
		st->next_dest = ndests > 0 ? (st->next_dest + 1) % ndests : 0;
	}
	/* on file before libcurl sends them (run_timers, socket_action) */
	OutboxStartLogFlush();
}

/*
 * Hands every transfer that ended to its event, then frees its request;
 * returns how many ended.
 */
static int
read_done(HttpState *st, List **done)
{
	CURLMsg    *msg;
	int			left;
	int			ended = 0;

	while ((msg = curl_multi_info_read(st->multi, &left)) != NULL)
	{
		HttpRequest *req;

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &req);
		if (req->nevents > 0)
		{
			OutboxHttpOutcome(req, msg->data.result);
			report(req, done);
		}
		release_request(st, req);
		ended++;
	}
	return ended;
}

/* Runs libcurl's timers if they are due: new requests connect and send. */
static void
run_timers(HttpState *st)
{
	int			still;
	CURLMcode	mc;

	if (st->curl_due == 0 || GetCurrentTimestamp() < st->curl_due)
		return;
	st->curl_due = 0;
	mc = curl_multi_socket_action(st->multi, CURL_SOCKET_TIMEOUT, 0, &still);
	if (mc != CURLM_OK)
		elog(ERROR, "HTTP transfers failed: %s", curl_multi_strerror(mc));
}

/*
 * Reports each running request whose 2xx status line and headers are in:
 * its transfer goes on for BODY_GRACE_MS, holding its connection but not
 * the event, so that a normal answer keeps the connection alive; then it
 * is cut.
 */
static void
report_early(HttpState *st, List **done)
{
	dlist_mutable_iter iter;
	TimestampTz now = GetCurrentTimestamp();

	dlist_foreach_modify(iter, &st->running_list)
	{
		HttpRequest *req = dlist_container(HttpRequest, node, iter.cur);

		if (req->nevents > 0 && req->headers_done &&
			req->status >= 200 && req->status < 300)
		{
			OutboxHttpOutcome(req, CURLE_OK);
			report(req, done);
			req->reported_at = now;
		}
		else if (req->nevents == 0 &&
				 TimestampDifferenceExceeds(req->reported_at, now, BODY_GRACE_MS))
			release_request(st, req);
	}
}

static void socket_action(HttpState *st, curl_socket_t fd, int mask);

#ifdef HAVE_SYS_EPOLL_H
/*
 * Hands libcurl each socket of epoll_fd that is ready now; more than
 * MAX_READY: the rest are ready again at the next look.
 */
static void
epoll_dispatch(HttpState *st)
{
	struct epoll_event ready[MAX_READY];
	int			n = epoll_wait(st->epoll_fd, ready, MAX_READY, 0);

	for (int i = 0; i < n; i++)
		socket_action(st, ready[i].data.fd,
					  ((ready[i].events & (EPOLLIN | EPOLLHUP)) ? CURL_CSELECT_IN : 0) |
					  ((ready[i].events & EPOLLOUT) ? CURL_CSELECT_OUT : 0) |
					  ((ready[i].events & EPOLLERR) ? CURL_CSELECT_ERR : 0));
}
#endif

/*
 * Hands libcurl every socket that is ready now, without waiting: what the
 * endpoints sent is read before a request is ended for its time limit.
 */
static void
read_ready_sockets(HttpState *st)
{
#ifdef HAVE_SYS_EPOLL_H
	if (st->epoll_fd >= 0)
	{
		epoll_dispatch(st);
		return;
	}
#endif
	{
		struct pollfd fds[MAX_SOCKETS];
		int			n = st->nsockets;

		for (int i = 0; i < n; i++)
		{
			fds[i].fd = st->sockets[i].fd;
			fds[i].events = ((st->sockets[i].events & WL_SOCKET_READABLE) ? POLLIN : 0) |
				((st->sockets[i].events & WL_SOCKET_WRITEABLE) ? POLLOUT : 0);
			fds[i].revents = 0;
		}
		if (poll(fds, n, 0) <= 0)
			return;
		for (int i = 0; i < n; i++)
			if (fds[i].revents != 0)
				socket_action(st, fds[i].fd,
							  ((fds[i].revents & (POLLIN | POLLHUP)) ? CURL_CSELECT_IN : 0) |
							  ((fds[i].revents & POLLOUT) ? CURL_CSELECT_OUT : 0) |
							  ((fds[i].revents & POLLERR) ? CURL_CSELECT_ERR : 0));
	}
}

/*
 * Ends the requests past their time limit that have no outcome yet, each
 * with a timeout, once what is on the sockets has been read (an answer
 * that came in time is an outcome, however late the relay looks).
 */
static void
expire_requests(HttpState *st, List **done)
{
	TimestampTz now = GetCurrentTimestamp();
	dlist_mutable_iter iter;
	bool		due = false;

	dlist_foreach_modify(iter, &st->running_list)
	{
		HttpRequest *req = dlist_container(HttpRequest, node, iter.cur);

		due |= req->nevents > 0 && now >= req->deadline;
	}
	if (!due)
		return;
	read_ready_sockets(st);
	(void) read_done(st, done);
	report_early(st, done);
	dlist_foreach_modify(iter, &st->running_list)
	{
		HttpRequest *req = dlist_container(HttpRequest, node, iter.cur);

		if (req->nevents == 0 || now < req->deadline)
			continue;
		snprintf(req->errbuf, sizeof(req->errbuf),
				 "timed out after %ld ms with %zu bytes of the answer received",
				 req->timeout_ms, req->body_bytes);
		OutboxHttpOutcome(req, CURLE_OPERATION_TIMEDOUT);
		report(req, done);
		release_request(st, req);
	}
}

/*
 * collect: starts waiting requests, runs libcurl's timers when due, and
 * returns the events whose outcome is now known. A 2xx is reported once
 * its headers are in; its transfer goes on for BODY_GRACE_MS, holding its
 * connection but not the event, so that a normal answer keeps the
 * connection alive, then it is cut. Interruptible.
 */
static List *
http_collect(void *state)
{
	HttpState  *st = (HttpState *) state;
	List	   *done = NIL;

	if (st->multi == NULL)
		return NIL;
	/* outbox.http_allowed_targets changed: drop the old connections when idle */
	if (st->running == 0 && st->multi_generation != OutboxTargetsGeneration())
	{
		curl_multi_cleanup(st->multi);
		OutboxHttpDropIdleEasy(&st->cache);
		st->multi = new_multi(st);
	}
	curl_multi_setopt(st->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long) http_max_connections);
	curl_multi_setopt(st->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long) http_max_connections);
	curl_multi_setopt(st->multi, CURLMOPT_MAXCONNECTS, (long) http_max_connections);

	/*
	 * Transfers that the last socket activity ended, and those whose 2xx
	 * body outlived its grace, free their connections first; then waiting
	 * requests take them and start at once (their timer is due then), and
	 * as long as requests end meanwhile (a fast endpoint answers before the
	 * next is started), more start: no connection stays unused until the
	 * next wait.
	 */
	(void) read_done(st, &done);
	report_early(st, &done);
	do
	{
		start_requests(st, &done);
		run_timers(st);
	} while (read_done(st, &done) > 0);
	report_early(st, &done);
	expire_requests(st, &done);
	st->serviced_at = GetCurrentTimestamp();
	CHECK_FOR_INTERRUPTS();
	return done;
}

/* libcurl reads or writes socket fd, as mask (CURL_CSELECT_*) says. */
static void
socket_action(HttpState *st, curl_socket_t fd, int mask)
{
	int			still;
	CURLMcode	mc = curl_multi_socket_action(st->multi, fd, mask, &still);

	if (mc != CURLM_OK)
		elog(ERROR, "HTTP transfers failed: %s", curl_multi_strerror(mc));
}

/*
 * socket_ready: libcurl reads or writes socket fd, as events say; for
 * epoll_fd, each of its sockets that is ready.
 */
static void
http_socket_ready(void *state, pgsocket fd, uint32 events)
{
	HttpState  *st = (HttpState *) state;

	if (st->multi == NULL)
		return;
#ifdef HAVE_SYS_EPOLL_H
	if (fd == st->epoll_fd)
	{
		epoll_dispatch(st);
		st->serviced_at = GetCurrentTimestamp();
		return;
	}
#endif
	socket_action(st, fd, ((events & WL_SOCKET_READABLE) ? CURL_CSELECT_IN : 0) |
				  ((events & WL_SOCKET_WRITEABLE) ? CURL_CSELECT_OUT : 0));
	st->serviced_at = GetCurrentTimestamp();
}

/*
 * sockets: what the relay waits on: epoll_fd, whose sockets are libcurl's
 * (the list changes only with the multi handle); or, without it, what
 * libcurl asked to be watched (see socket_changed).
 */
static uint64
http_sockets(void *state, const OutboxWaitSocket **socks, int *n)
{
	HttpState  *st = (HttpState *) state;

	if (st->epoll_fd >= 0)
	{
		*socks = st->epoll_socket;
		*n = 1;
		return st->epoll_generation;
	}
	*socks = st->sockets;
	*n = st->nsockets;
	return st->sockets_generation;
}

/* ms from now to t, at least 0 */
static long
ms_until(TimestampTz t, TimestampTz now)
{
	return t <= now ? 0 : (long) ((t - now + 999) / 1000);
}

/*
 * Called before each wait: the time since the kind last ran was spent
 * away from the sockets (in a step), and past AWAY_MS is added to the time
 * limits of the requests running: nothing was read or sent for them then.
 */
static void
note_away(HttpState *st, TimestampTz now)
{
	dlist_iter iter;
	int64		away = st->serviced_at == 0 ? 0 : now - st->serviced_at;

	st->serviced_at = now;
	if (away <= AWAY_MS * INT64CONST(1000))
		return;
	dlist_foreach(iter, &st->running_list)
	{
		HttpRequest *req = dlist_container(HttpRequest, node, iter.cur);

		if (req->nevents > 0)
			req->deadline += away;
	}
}

/*
 * timeout_ms: the first of libcurl's timer, the time limits of the
 * requests, the end of a 2xx body's grace, and, while requests wait for
 * their destination's share, the moment a busy destination stops counting
 * as busy (SHARE_WINDOW_MS), which can raise that share. Asked before each
 * wait (wait.c), which also marks the end of a time away (note_away).
 */
static long
http_timeout_ms(void *state)
{
	HttpState  *st = (HttpState *) state;
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz first = st->curl_due;
	dlist_iter iter;
	ListCell   *lc;
	bool		waiting = false;

	if (st->multi == NULL)
		return -1;
	note_away(st, now);
	dlist_foreach(iter, &st->running_list)
	{
		HttpRequest *req = dlist_container(HttpRequest, node, iter.cur);

		if (req->nevents > 0 && (first == 0 || req->deadline < first))
			first = req->deadline;
		if (req->nevents == 0)
		{
			TimestampTz t = TimestampTzPlusMilliseconds(req->reported_at, BODY_GRACE_MS);

			if (first == 0 || t < first)
				first = t;
		}
	}
	foreach(lc, st->dests)
		waiting |= ((HttpDest *) lfirst(lc))->queued > 0;
	foreach(lc, st->dests)
	{
		HttpDest   *d = lfirst(lc);
		TimestampTz t = TimestampTzPlusMilliseconds(d->last_active, SHARE_WINDOW_MS);

		if (waiting && d->unreported == 0 && t > now && (first == 0 || t < first))
			first = t;
	}
	return first == 0 ? -1 : ms_until(first, now);
}

/* pending: events handed over whose outcome is not reported yet. */
static int
http_pending(void *state)
{
	HttpState  *st = (HttpState *) state;
	int			n = 0;
	ListCell   *lc;

	foreach(lc, st->dests)
		n += ((HttpDest *) lfirst(lc))->unreported;
	return n;
}

/*
 * busy: events whose outcome is not reported, or transfers still attached
 * (the rest of a 2xx body), which only collect ends.
 */
static bool
http_busy(void *state)
{
	HttpState  *st = (HttpState *) state;

	return st->running > 0 || http_pending(state) > 0;
}

/*
 * full: the destinations that hold outbox.http_max_connections requests'
 * worth of events or more in the transport (times events_per_request):
 * the relay claims none of theirs for now, so that
 * a slow destination's backlog stays in the table, where other
 * destinations' events can overtake it.
 */
static List *
http_full(void *state)
{
	HttpState  *st = (HttpState *) state;
	List	   *full = NIL;
	ListCell   *lc;

	foreach(lc, st->dests)
	{
		HttpDest   *d = lfirst(lc);

		if (d->unreported >= http_max_connections * Max(d->per_request, 1))
			full = lappend(full, d->name);
	}
	return full;
}

/*
 * prepare: an event's own headers must follow the rules for headers an
 * event may carry (checked here, where they are first read); the body is
 * the envelope, or the event as a CloudEvent (cloudevents.c), in UTF-8
 * whatever the database's encoding (OutboxBodyToUtf8: JSON on the wire).
 */
static Size
http_prepare(void *state pg_attribute_unused(), OutboxEvent *ev)
{
	OutboxProblem p;
	Size		cost;

	if (ev->headers != NULL && !OutboxHeadersCheck(ev->headers, true, &p))
	{
		ev->permanent = true;
		ev->error = p.message;
		return 0;
	}
	if (HTTP_OPTIONS(ev)->format != HTTP_FORMAT_ENVELOPE)
		cost = OutboxPrepareCloudEvent(ev, HTTP_OPTIONS(ev)->ce_source,
									   HTTP_OPTIONS(ev)->format == HTTP_FORMAT_CLOUDEVENTS_BINARY);
	else
		cost = OutboxPrepareEnvelope(ev, true);
	return OutboxBodyToUtf8(ev, cost);
}

/*
 * Checks a destination URL: at most 8192 bytes, no space or control
 * character, and, as libcurl parses it (curl_url), an http or https URL
 * with a host and a port between 1 and 65535. Returns true, or false with
 * *p (23514, or 54000 for the length). The message never quotes the URL,
 * which may hold credentials. Calls no PostgreSQL function between
 * libcurl's allocation and its release.
 */
static bool
url_check(const char *url, OutboxProblem *p)
{
	size_t		len = strlen(url);
	CURLU	   *u;
	CURLUcode	rc;
	char	   *scheme = NULL;
	char	   *host = NULL;
	char	   *port = NULL;
	const char *why = NULL;

	if (len > 8192)
		return OutboxProblemSet(p, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
						   pstrdup("destination url is longer than 8192 bytes"), NULL);
	for (size_t i = 0; i < len; i++)
		if ((unsigned char) url[i] <= 0x20 || (unsigned char) url[i] == 0x7f)
			return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
							   pstrdup("destination url is not valid"),
							   pstrdup("A URL has no spaces or control characters."));
	if (pg_strncasecmp(url, "http://", 7) != 0 && pg_strncasecmp(url, "https://", 8) != 0)
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
						   pstrdup("destination url is not valid"),
						   pstrdup("Only http and https URLs are allowed."));

	u = curl_url();
	if (u == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	rc = curl_url_set(u, CURLUPART_URL, url, 0);
	if (rc == CURLUE_BAD_PORT_NUMBER)
		why = "The port must be a number between 1 and 65535.";
	else if (rc != CURLUE_OK)
		why = "libcurl cannot parse it as a URL.";
	else if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
			 (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0))
		why = "Only http and https URLs are allowed.";
	else if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || host[0] == '\0')
		why = "The URL must name a host.";
	else if (curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK ||
			 atoi(port) < 1 || atoi(port) > 65535)
		why = "The port must be a number between 1 and 65535.";
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(u);
	if (why != NULL)
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
						   pstrdup("destination url is not valid"), pstrdup(why));
	return true;
}

/*
 * check_destination: a webhook has a valid url (url_check), and a valid
 * cloudevents_source (OutboxCloudEventSourceCheck) and ca_file
 * (OutboxDestinationFileCheck: the relay reads it) if it has them;
 * events_per_request is 1 to HTTP_MAX_EVENTS_PER_REQUEST, and 1 in the
 * CloudEvents binary mode, which carries one event per request (the
 * CloudEvents HTTP binding: batches are a structured-mode format).
 */
static bool
http_check_destination(const OutboxDestinationRow *row, OutboxProblem *p)
{
	char	   *source = OutboxDestinationText(row, "cloudevents_source");
	char	   *format = OutboxDestinationText(row, "format");
	bool		isnull;
	Datum		per_request = OutboxDestinationColumn(row, "events_per_request", &isnull);

	if (!url_check(OutboxDestinationText(row, "url"), p))
		return false;
	if (source != NULL && !OutboxCloudEventSourceCheck(source, p))
		return false;
	if (!isnull && (DatumGetInt32(per_request) < 1 ||
					DatumGetInt32(per_request) > HTTP_MAX_EVENTS_PER_REQUEST))
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination events_per_request is out of range"),
								psprintf("A webhook takes 1 to %d events per request.",
										 HTTP_MAX_EVENTS_PER_REQUEST));
	if (!isnull && DatumGetInt32(per_request) > 1 && format != NULL &&
		strcmp(format, OUTBOX_FORMAT_CLOUDEVENTS_BINARY) == 0)
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination events_per_request must be 1 in the cloudevents-binary format"),
								pstrdup("The binary mode carries one event per request; batches use the cloudevents format (application/cloudevents-batch+json)."));
	return OutboxDestinationFileCheck(row, "ca_file", p);
}

/*
 * decode: url, timeout_ms, headers, retry_client_errors, ca_file,
 * events_per_request, the format and a CloudEvents format's source into an HttpDestOptions
 * (timeout_ms and headers are read by webhooks only,
 * though every kind may have them: see check_shared_columns).
 */
static Size
http_decode(const OutboxDestinationRow *row, OutboxDestination *dest)
{
	HttpDestOptions *o = palloc0(sizeof(HttpDestOptions));
	bool		isnull;
	Datum		d;
	Size		bytes = sizeof(HttpDestOptions);

	o->url = OutboxDestinationText(row, "url");
	bytes += o->url ? strlen(o->url) + 1 : 0;
	bytes += OutboxDestinationSharedOptions(row, &o->timeout_ms, &o->headers);
	d = OutboxDestinationColumn(row, "retry_client_errors", &isnull);
	o->retry_client_errors = !isnull && DatumGetBool(d);
	o->ca_file = OutboxDestinationText(row, "ca_file");
	bytes += o->ca_file ? strlen(o->ca_file) + 1 : 0;
	d = OutboxDestinationColumn(row, "events_per_request", &isnull);
	o->events_per_request = isnull ? 1 : DatumGetInt32(d);
	o->format = strcmp(dest->format, OUTBOX_FORMAT_CLOUDEVENTS) == 0 ? HTTP_FORMAT_CLOUDEVENTS :
		strcmp(dest->format, OUTBOX_FORMAT_CLOUDEVENTS_BINARY) == 0 ? HTTP_FORMAT_CLOUDEVENTS_BINARY :
		HTTP_FORMAT_ENVELOPE;
	if (o->format != HTTP_FORMAT_ENVELOPE)
	{
		o->ce_source = OutboxCloudEventSource(OutboxDestinationText(row, "cloudevents_source"));
		bytes += strlen(o->ce_source) + 1;
	}
	dest->options = o;
	return bytes;
}

/*
 * abandon: frees every request, waiting or running (their transfers are
 * cut and their connections closed), and forgets their events. Must not
 * throw: called while an error is being handled.
 */
static void
http_abandon(void *state)
{
	HttpState  *st = (HttpState *) state;
	dlist_mutable_iter iter;
	ListCell   *lc;

	dlist_foreach_modify(iter, &st->running_list)
		release_request(st, dlist_container(HttpRequest, node, iter.cur));
	foreach(lc, st->dests)
	{
		HttpDest   *d = lfirst(lc);

		dlist_foreach_modify(iter, &d->queue)
		{
			HttpRequest *req = dlist_container(HttpRequest, node, iter.cur);

			dlist_delete(&req->node);
			release_request(st, req);
		}
		d->queued = 0;
		d->unreported = 0;
	}
}

/* init: the outbox.http_* settings. */
static void
http_define_settings(void)
{
	DefineCustomIntVariable("outbox.http_timeout",
							"Sets the default time limit of one webhook request, name resolution and connection included.",
							NULL,
							&http_timeout,
							5000, 1, OUTBOX_MAX_TIMEOUT_MS,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.http_max_connections",
							"Sets the maximum number of webhook requests a relay has in flight at once.",
							"Connections are kept alive between passes. Set it to 1 to deliver one request after another.",
							&http_max_connections,
							16, 1, HTTP_MAX_CONNECTIONS_LIMIT,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomStringVariable("outbox.http_allowed_targets",
							   "Sets the hosts, address ranges and ports that webhook requests may connect to.",
							   "A comma-separated list: * (anything), host names (*.example.com for a domain), IPv4 or IPv6 addresses or CIDR ranges ([] around IPv6 with a port), each with an optional :port or :port-port. Empty allows nothing. Addresses are checked on every connection, after name resolution.",
							   &outbox_http_allowed_targets,
							   "*",
							   PGC_SIGHUP,
							   GUC_LIST_INPUT | GUC_SUPERUSER_ONLY,
							   OutboxTargetsCheckHook, OutboxTargetsAssignHook, NULL);
}

/* The webhook kind: sent after COMMIT, libcurl's sockets in the relay's wait. */
const OutboxDestinationKind OutboxHttpKind = {
	.name = "http",
	.description = "a webhook",
	.target_column = "url",
	.own_columns = (const OutboxKindColumn[]) {
		{"retry_client_errors", "f"},
		{"cloudevents_source", NULL},
		{"ca_file", NULL},
		{"events_per_request", "1"},
		{NULL}
	},
	.formats = (const char *const[]) {
		OUTBOX_FORMAT_ENVELOPE, OUTBOX_FORMAT_CLOUDEVENTS, OUTBOX_FORMAT_CLOUDEVENTS_BINARY, NULL
	},
	.send_point = OUTBOX_SEND_AFTER_COMMIT,
	.signs = true,
	.check_destination = http_check_destination,
	.decode = http_decode,
	.init = http_define_settings,
	.startup = http_startup,
	.prepare = http_prepare,
	.enqueue = http_enqueue,
	.collect = http_collect,
	.pending = http_pending,
	.busy = http_busy,
	.full = http_full,
	.sockets = http_sockets,
	.timeout_ms = http_timeout_ms,
	.socket_ready = http_socket_ready,
	.abandon = http_abandon,
};
