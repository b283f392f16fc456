/*-------------------------------------------------------------------------
 *
 * http_collect.c
 *	  The outcomes of the webhook kind's requests: collect, which moves
 *	  the transfers along and hands back the events whose outcome is
 *	  known, and timeout_ms, with the time limits the kind keeps itself.
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
 * src/kinds/http/http_collect.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <curl/curl.h>

#include "lib/ilist.h"
#include "miscadmin.h"
#include "utils/timestamp.h"

#include "destination.h"
#include "http_int.h"
#include "http_request.h"
#include "http_targets.h"

/*
 * Time the relay spends away from its wait (in a step) longer than this is
 * added to the time limits of the requests running meanwhile.
 */
#define AWAY_MS 100

/* the rest of a 2xx body is read this long, for keep-alive, then cut */
#define BODY_GRACE_MS 1000

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
			OutboxHttpReport(req, done);
		}
		OutboxHttpReleaseRequest(st, req);
		ended++;
	}
	return ended;
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
			OutboxHttpReport(req, done);
			req->reported_at = now;
		}
		else if (req->nevents == 0 &&
				 TimestampDifferenceExceeds(req->reported_at, now, BODY_GRACE_MS))
			OutboxHttpReleaseRequest(st, req);
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
	OutboxHttpReadReadySockets(st);
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
		OutboxHttpReport(req, done);
		OutboxHttpReleaseRequest(st, req);
	}
}

/*
 * collect: starts waiting requests, runs libcurl's timers when due, and
 * returns the events whose outcome is now known. A 2xx is reported once
 * its headers are in; its transfer goes on for BODY_GRACE_MS, holding its
 * connection but not the event, so that a normal answer keeps the
 * connection alive, then it is cut. Interruptible.
 */
List *
OutboxHttpCollect(void *state)
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
		st->multi = OutboxHttpNewMulti(st);
	}
	curl_multi_setopt(st->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS,
					  (long) outbox_http_max_connections);
	curl_multi_setopt(st->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
					  (long) outbox_http_max_connections);
	curl_multi_setopt(st->multi, CURLMOPT_MAXCONNECTS, (long) outbox_http_max_connections);

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
		OutboxHttpStartRequests(st, &done);
		OutboxHttpRunTimers(st);
	} while (read_done(st, &done) > 0);
	report_early(st, &done);
	expire_requests(st, &done);
	OutboxHttpExpireQueued(st, &done);
	st->serviced_at = GetCurrentTimestamp();
	CHECK_FOR_INTERRUPTS();
	return done;
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
	(void) OutboxHttpQueuedDeadline(st, away);
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
 * as busy (OutboxHttpShareChangesAt), which can raise that share. Asked
 * before each wait (wait.c), which also marks the end of a time away
 * (note_away).
 */
long
OutboxHttpTimeoutMs(void *state)
{
	HttpState  *st = (HttpState *) state;
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz first = st->curl_due;
	TimestampTz share;
	TimestampTz queued;
	dlist_iter iter;

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
	queued = OutboxHttpQueuedDeadline(st, 0);
	if (queued != 0 && (first == 0 || queued < first))
		first = queued;
	share = OutboxHttpShareChangesAt(st, now);
	if (share != 0 && (first == 0 || share < first))
		first = share;
	return first == 0 ? -1 : ms_until(first, now);
}
