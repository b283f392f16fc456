/*-------------------------------------------------------------------------
 *
 * http.c
 *	  The webhook kind of destination: its table, its settings, its state
 *	  in a process, and the queues in which its requests wait for a
 *	  connection, shared fairly among destinations.
 *
 * The relay hands events over after the claim commits (enqueue) and
 * collects their outcomes as they come (collect); no database transaction
 * is open meanwhile. The kind's other files: libcurl's sockets and timer in
 * the relay's wait (http_sockets.c), the outcomes and time limits of the
 * requests running (http_collect.c), the rules of a destination row and
 * of an event (http_rules.c), one request (http_request.c) and what its
 * answer means (http_outcome.c), and outbox.http_allowed_targets
 * (http_targets.c).
 *
 * Each destination has a queue. Requests are started from the queues in
 * turn, at most outbox.http_max_connections at once; while another
 * destination is busy, a destination gets at most half of them, and one
 * whose requests take over four times as long as the quickest's an eighth,
 * so that a slow endpoint cannot hold the connections a fast one needs.
 * The multi handle lives as long as the process: connections are kept
 * alive, except those opened under an older outbox.http_allowed_targets.
 *
 * What the kind keeps between calls is one HttpState (http_int.h), made
 * empty by its startup callback; libcurl and the memory of requests are
 * set up with the first event. libcurl's own memory (handles, header
 * lists, the copied body) is freed when each transfer ends, and the multi
 * handle by an on_proc_exit callback. Runs in the relay worker, or in a
 * backend running outbox_relay().
 *
 * src/kinds/http/http.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <curl/curl.h>
#include <math.h>
#include <unistd.h>

#include "common/hashfn.h"
#include "lib/ilist.h"
#include "storage/ipc.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "cloudevents.h"
#include "destination.h"
#include "http_int.h"
#include "http_request.h"
#include "http_targets.h"

/*
 * outbox.http_timeout (ms) and outbox.http_max_connections: file-level, not
 * in HttpState, as PostgreSQL wants of a setting's variable (it is defined
 * in every process that loads the library, and written there on SIGHUP,
 * state or no state); outbox.http_allowed_targets is http_targets.c's.
 */
static int	http_timeout = 5000;
int			outbox_http_max_connections = 16;

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

/* on_proc_exit callback: frees libcurl's handles; arg: the kind's state. */
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
	st->multi = OutboxHttpNewMulti(st);
	on_proc_exit(http_at_exit, PointerGetDatum(st));
}

/*
 * Bumped whenever a destination's activity changes (unreported,
 * last_active, avg_ms): the shares found (dest_share) are found again.
 */
static uint64 activity_generation = 1;

/* dests_by_name: a destination's name is its key (a pointer to it) */
static uint32
name_hash(const void *key, Size keysize pg_attribute_unused())
{
	const char *name = *(const char *const *) key;

	return hash_bytes((const unsigned char *) name, strlen(name));
}

static int
name_compare(const void *a, const void *b, Size keysize pg_attribute_unused())
{
	return strcmp(*(const char *const *) a, *(const char *const *) b);
}

typedef struct DestEntry
{
	const char *name;			/* key: the HttpDest's own name */
	HttpDest   *dest;
} DestEntry;

/* The queue of the destination called name, or NULL if it has none yet. */
static HttpDest *
lookup_dest(HttpState *st, const char *name)
{
	DestEntry  *e;

	if (st->dests_by_name == NULL)
		return NULL;
	e = hash_search(st->dests_by_name, &name, HASH_FIND, NULL);
	return e != NULL ? e->dest : NULL;
}

/* The queue of the destination called name, created on first use. */
static HttpDest *
find_dest(HttpState *st, const char *name)
{
	HttpDest   *d = lookup_dest(st, name);
	DestEntry  *e;
	MemoryContext old;

	if (d != NULL)
		return d;
	if (st->dests_by_name == NULL)
	{
		HASHCTL		ctl = {0};

		ctl.keysize = sizeof(const char *);
		ctl.entrysize = sizeof(DestEntry);
		ctl.hash = name_hash;
		ctl.match = name_compare;
		ctl.hcxt = st->cxt;
		st->dests_by_name = hash_create("outbox http destinations", 64, &ctl,
										HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
	}
	old = MemoryContextSwitchTo(st->cxt);
	d = palloc0(sizeof(HttpDest));
	d->name = pstrdup(name);
	dlist_init(&d->queue);
	st->dests = lappend(st->dests, d);
	MemoryContextSwitchTo(old);
	e = hash_search(st->dests_by_name, &d->name, HASH_ENTER, NULL);
	e->dest = d;
	return d;
}

/*
 * Hands the outcome of the request's events back: appended to *done, the
 * request forgets them. The time it took goes into its destination's
 * moving average.
 */
void
OutboxHttpReport(HttpRequest *req, List **done)
{
	HttpDest   *d = req->dest;
	TimestampTz now = GetCurrentTimestamp();

	for (int i = 0; i < req->nevents; i++)
		*done = lappend(*done, req->events[i]);
	d->unreported -= req->nevents;
	req->nevents = 0;
	d->last_active = now;
	activity_generation++;
	if (req->started_at != 0)
	{
		double		ms = (double) (now - req->started_at) / 1000.0;

		d->avg_ms = d->avg_ms == 0 ? ms : 0.8 * d->avg_ms + 0.2 * ms;
	}
}

/* Detaches and frees a request, its libcurl handle and header list. */
void
OutboxHttpReleaseRequest(HttpState *st, HttpRequest *req)
{
	if (req->easy != NULL)
	{
		curl_multi_remove_handle(st->multi, req->easy);
		OutboxHttpParkEasy(&st->cache, req->easy, outbox_http_max_connections);
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

static int	dest_share(HttpState *st, HttpDest *d, int limit, TimestampTz now);

/* ev's time limit, in ms: its destination's timeout_ms, or outbox.http_timeout */
static long
event_timeout_ms(const OutboxEvent *ev)
{
	return HTTP_OPTIONS(ev)->timeout_ms >= 0 ? HTTP_OPTIONS(ev)->timeout_ms : http_timeout;
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
	activity_generation++;
	req->wait_deadline = TimestampTzPlusMilliseconds(req->dest->last_active, event_timeout_ms(ev));
}

/*
 * Hands back, not sent, the queued requests that did not start within
 * their time limit (wait_deadline): a destination that slowed down after
 * the claim took its events (an endpoint that hangs now), or a share that
 * shrank. Their events go back to the table, due again after the backoff
 * without an attempt counted, rather than waiting in the relay's memory
 * for round after round of requests; so no event is in flight longer than
 * twice its time limit. Only heads are looked at: a queue is in the order
 * its events came (a later one with a shorter timeout_ms, the row changed
 * between two claims, goes back when it reaches the head).
 */
void
OutboxHttpExpireQueued(HttpState *st, List **done)
{
	TimestampTz now = GetCurrentTimestamp();
	ListCell   *lc;

	foreach(lc, st->dests)
	{
		HttpDest   *d = lfirst(lc);

		while (d->queued > 0)
		{
			HttpRequest *req = dlist_container(HttpRequest, node, dlist_head_node(&d->queue));
			OutboxEvent *ev = req->events[0];

			if (now < req->wait_deadline)
				break;
			dlist_pop_head_node(&d->queue);
			d->queued--;
			ev->ok = false;
			ev->not_sent = true;
			ev->error = psprintf("not sent: no connection was free for it within its time limit of %ld ms",
								 event_timeout_ms(ev));
			OutboxHttpReport(req, done);
			OutboxHttpReleaseRequest(st, req);
		}
	}
}

/*
 * The first wait_deadline of a queued request, 0 if none: collect must
 * run then (OutboxHttpTimeoutMs). With away (microseconds), first adds it
 * to every queued request's: the relay was in a step, not waiting.
 */
TimestampTz
OutboxHttpQueuedDeadline(HttpState *st, int64 away)
{
	TimestampTz first = 0;
	ListCell   *lc;

	foreach(lc, st->dests)
	{
		HttpDest   *d = lfirst(lc);
		dlist_iter	iter;

		dlist_foreach(iter, &d->queue)
		{
			HttpRequest *req = dlist_container(HttpRequest, node, iter.cur);

			req->wait_deadline += away;
			if (first == 0 || req->wait_deadline < first)
				first = req->wait_deadline;
			if (away == 0)
				break;			/* in order: the head is the first */
		}
	}
	return first;
}

/*
 * The wait a claim may put ahead of an event's request, in ms: its events
 * should start within it (http_room). A second, as for JetStream (an event
 * is in flight its time limit and a second, at most).
 */
#define ROOM_WAIT_MS 1000

/*
 * room (dest_room): how many more of ev's destination's events the kind can start
 * within ROOM_WAIT_MS: the connections it may use now (its share) times
 * its events per request, times the requests each can finish in that time
 * by the destination's average so far (at least one round). What it holds
 * already counts against it. A fast endpoint can take a whole claim; one
 * that answers in 300 ms gets three rounds' worth, and one that hangs a
 * round's worth, so its events wait in the table, not in the relay. A
 * destination not measured yet in this process has no limit (-1): an
 * outbox_relay() call in a new session (a pg_cron job) takes what it is
 * asked for, and what finds no connection within its time limit goes back
 * (OutboxHttpExpireQueued). In the claim's transaction, in the relay
 * worker or an outbox_relay() backend.
 */
static int
dest_room(HttpState *st, HttpDest *d, int per_request, TimestampTz now)
{
	double		rounds;
	double		room;

	if (d->avg_ms <= 0)
		return -1;
	rounds = Max(floor(ROOM_WAIT_MS / d->avg_ms), 1);
	room = rounds * dest_share(st, d, outbox_http_max_connections, now) *
		Max(per_request, 1) - d->unreported;
	return (int) Max(Min(room, (double) PG_INT32_MAX), 0);
}

static int
http_room(void *state, const OutboxEvent *ev)
{
	HttpState  *st = (HttpState *) state;
	HttpDest   *d = lookup_dest(st, ev->dest.name);

	return d != NULL ?
		dest_room(st, d, HTTP_OPTIONS(ev)->events_per_request, GetCurrentTimestamp()) : -1;
}

/* Whether two events' own headers (jsonb, or NULL) are the same. */
static bool
same_headers(const Jsonb *a, const Jsonb *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return VARSIZE(a) == VARSIZE(b) && memcmp(a, b, VARSIZE(a)) == 0;
}

/*
 * Whether event ev can go in the batch whose first event is first: its
 * own headers are the first's (they are sent as the request's HTTP
 * headers: events written in one transaction with its trace context, or
 * with none, share a request), and its destination row was the same when
 * each was claimed (a row changed between two claims puts the events of
 * each in requests of their own).
 */
static bool
same_request(const OutboxEvent *first, const OutboxEvent *ev)
{
	const HttpDestOptions *a = HTTP_OPTIONS(first);
	const HttpDestOptions *b = HTTP_OPTIONS(ev);

	if (!same_headers(first->headers, ev->headers) || strcmp(a->url, b->url) != 0 ||
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
 * stays within HTTP_BATCH_MAX_BYTES. Only events with the same headers of
 * their own share a request. An ordered destination has at most one event of a key in
 * flight (the claim holds the others), so a batch has at most one of each.
 */
static void
gather_batch(HttpState *st, HttpRequest *req, HttpDest *d)
{
	OutboxEvent *first = req->events[0];
	int			max = HTTP_OPTIONS(first)->events_per_request;
	size_t		bytes = strlen(first->body) + 2;
	dlist_mutable_iter iter;

	if (max <= 1 || d->queued == 0)
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

/*
 * The busy destinations and the two quickest of them (st->share), found
 * again when the destinations' activity changed or a millisecond passed
 * since: each destination's share reads them in O(1), where counting
 * the others for each made a claim over 1,000 webhooks cost a million
 * steps (0.48x of one webhook's drain).
 */
static void
find_shares(HttpState *st, TimestampTz now)
{
	ListCell   *lc;

	if (st->share.generation == activity_generation &&
		now >= st->share.at && now - st->share.at < 1000)
		return;
	st->share.generation = activity_generation;
	st->share.at = now;
	st->share.busy = 0;
	st->share.quickest = NULL;
	st->share.quickest_ms = 0;
	st->share.second_ms = 0;
	foreach(lc, st->dests)
	{
		HttpDest   *o = lfirst(lc);

		if (!dest_busy(o, now))
			continue;
		st->share.busy++;
		if (o->avg_ms <= 0)
			continue;
		if (st->share.quickest == NULL || o->avg_ms < st->share.quickest_ms)
		{
			st->share.second_ms = st->share.quickest_ms;
			st->share.quickest = o;
			st->share.quickest_ms = o->avg_ms;
		}
		else if (st->share.second_ms == 0 || o->avg_ms < st->share.second_ms)
			st->share.second_ms = o->avg_ms;
	}
}

static int
dest_share(HttpState *st, HttpDest *d, int limit, TimestampTz now)
{
	bool		self;
	int			busy;
	double		quickest;

	find_shares(st, now);
	/* the others: d itself counted out, as it was judged */
	self = dest_busy(d, st->share.at);
	busy = st->share.busy - (self ? 1 : 0);
	quickest = self && st->share.quickest == d ? st->share.second_ms : st->share.quickest_ms;
	if (busy == 0)
		return limit;
	if (quickest > 0 && d->avg_ms > SLOW_FACTOR * quickest)
		return Max(limit / 8, 1);
	return Max(limit / 2, 1);
}

/*
 * While requests wait for their destination's share, the first moment
 * after now at which a busy destination stops counting as busy
 * (SHARE_WINDOW_MS), which can raise that share; 0 if there is none.
 * For timeout_ms (http_collect.c).
 */
TimestampTz
OutboxHttpShareChangesAt(HttpState *st, TimestampTz now)
{
	TimestampTz first = 0;
	ListCell   *lc;
	bool		waiting = false;

	foreach(lc, st->dests)
		waiting |= ((HttpDest *) lfirst(lc))->queued > 0;
	foreach(lc, st->dests)
	{
		HttpDest   *d = lfirst(lc);
		TimestampTz t = TimestampTzPlusMilliseconds(d->last_active, SHARE_WINDOW_MS);

		if (waiting && d->unreported == 0 && t > now && (first == 0 || t < first))
			first = t;
	}
	return first;
}

/*
 * Starts waiting requests, visiting the destinations in turn: at most
 * outbox.http_max_connections at once, each destination within its share
 * (dest_share). A request that cannot be prepared is reported at once.
 */
void
OutboxHttpStartRequests(HttpState *st, List **done)
{
	int			limit = outbox_http_max_connections;
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
				OutboxHttpParkEasy(&st->cache, req->easy, outbox_http_max_connections);
				req->easy = NULL;
			}
			OutboxHttpReport(req, done);
			OutboxHttpReleaseRequest(st, req);
		}
		st->next_dest = ndests > 0 ? (st->next_dest + 1) % ndests : 0;
	}
	/* on file before libcurl sends them (run_timers, socket_action) */
	OutboxStartLogFlush();
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
 * Whether destination d holds outbox.http_max_connections requests' worth
 * of events or more in the transport (times events_per_request), or has
 * no room (dest_room).
 */
static bool
dest_full(HttpState *st, HttpDest *d, TimestampTz now)
{
	return d->unreported >= outbox_http_max_connections * Max(d->per_request, 1) ||
		dest_room(st, d, d->per_request, now) == 0;
}

/*
 * full: the destinations that are full (dest_full): the relay claims none
 * of theirs for now, so that a slow destination's backlog stays in the
 * table, where other destinations' events can overtake it.
 */
static List *
http_full(void *state)
{
	HttpState  *st = (HttpState *) state;
	List	   *full = NIL;
	TimestampTz now = GetCurrentTimestamp();
	ListCell   *lc;

	foreach(lc, st->dests)
	{
		HttpDest   *d = lfirst(lc);

		if (dest_full(st, d, now))
			full = lappend(full, d->name);
	}
	return full;
}

/*
 * saturated: the destinations that are not full hold, waiting, a round of
 * requests for every connection, each no more than its share lets it run
 * at once (queued events are requests of one event; they are merged into
 * requests of events_per_request as they start): a claim would only add
 * events that wait here, their time limits running, and that every later
 * claim walks past in the table, where they stay pending until their
 * outcome. A thousand webhooks, each full only at
 * outbox.http_max_connections requests of its own, held thousands (and
 * drained at half the rate of one). A full destination (an endpoint that
 * hangs) does not count, nor what a slow one cannot start for its share:
 * the others must not wait for them.
 */
static bool
http_saturated(void *state)
{
	HttpState  *st = (HttpState *) state;
	int			limit = outbox_http_max_connections;
	int			waiting = 0;
	TimestampTz now = GetCurrentTimestamp();
	ListCell   *lc;

	foreach(lc, st->dests)
	{
		HttpDest   *d = lfirst(lc);
		int			per_request = Max(d->per_request, 1);

		if (d->queued == 0 || dest_full(st, d, now))
			continue;
		waiting += Min((d->queued + per_request - 1) / per_request,
					   dest_share(st, d, limit, now));
		if (waiting >= limit)
			return true;
	}
	return false;
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
		OutboxHttpReleaseRequest(st, dlist_container(HttpRequest, node, iter.cur));
	foreach(lc, st->dests)
	{
		HttpDest   *d = lfirst(lc);

		dlist_foreach_modify(iter, &d->queue)
		{
			HttpRequest *req = dlist_container(HttpRequest, node, iter.cur);

			dlist_delete(&req->node);
			OutboxHttpReleaseRequest(st, req);
		}
		d->queued = 0;
		d->unreported = 0;
	}
	activity_generation++;
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
							&outbox_http_max_connections,
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
extern const OutboxDestinationKind OutboxHttpKind;	/* src/kinds/registry.c */

const OutboxDestinationKind OutboxHttpKind = {
	.name = "http",
	.description = "a webhook",
	.target_column = "url",
	.own_columns = (const OutboxKindColumn[]) {
		{"retry_client_errors", "f"},
		{"ca_file", NULL},
		{"events_per_request", "1"},
		{NULL}
	},
	.formats = (const char *const[]) {
		OUTBOX_FORMAT_ENVELOPE, OUTBOX_FORMAT_CLOUDEVENTS, OUTBOX_FORMAT_CLOUDEVENTS_BINARY, NULL
	},
	/* the CloudEvents HTTP protocol binding's ce-* headers */
	.binding = &OutboxCloudEventsBindingHTTP,
	.send_point = OUTBOX_SEND_AFTER_COMMIT,
	.options_size = sizeof(HttpDestOptions),
	.signs = true,
	.check_destination = OutboxHttpCheckDestination,
	.decode = OutboxHttpDecode,
	.init = http_define_settings,
	.startup = http_startup,
	.prepare = OutboxHttpPrepareEvent,
	.enqueue = http_enqueue,
	.collect = OutboxHttpCollect,
	.pending = http_pending,
	.room = http_room,
	.busy = http_busy,
	.full = http_full,
	.saturated = http_saturated,
	.sockets = OutboxHttpSockets,
	.timeout_ms = OutboxHttpTimeoutMs,
	.socket_ready = OutboxHttpSocketReady,
	.abandon = http_abandon,
};
