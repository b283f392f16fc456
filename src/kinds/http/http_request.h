/*-------------------------------------------------------------------------
 *
 * http_request.h
 *	  What the webhook kind's files know of a request: a destination's
 *	  options and queue, one request as the kind runs it, and what
 *	  requests keep between them in a process (http_request.c).
 *
 * src/kinds/http/http_request.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_HTTP_REQUEST_H
#define OUTBOX_HTTP_REQUEST_H

#include <curl/curl.h>
#include <sys/stat.h>

#include "lib/ilist.h"
#include "utils/resowner.h"

#include "destination.h"
#include "format.h"
#include "http_targets.h"

/* bytes of a response body kept for last_error */
#define RESPONSE_SNIPPET_LEN 256
/* a response body longer than this is not read to its end */
#define RESPONSE_MAX_BYTES (64 * 1024)
/* easy handles kept for reuse at most: the largest connection limit */
#define OUTBOX_HTTP_MAX_IDLE_EASY 1000

/*
 * A webhook destination's own columns, decoded by the kind
 * (OutboxDestination.options of an event routed to a webhook).
 */
typedef struct HttpDestOptions
{
	char	   *url;
	int			timeout_ms;		/* -1: outbox.http_timeout */
	Jsonb	   *headers;		/* or NULL */
	bool		retry_client_errors;	/* retry 4xx answers like 5xx */
	const OutboxFormat *format; /* the destination's (format.c) */
	const char *ce_source;		/* CloudEvents formats: the source */
	char	   *ca_file;		/* CA bundle for https, or NULL: libcurl's */
	int			events_per_request; /* above 1: every request is a batch */
} HttpDestOptions;

/* the most events_per_request allowed */
#define HTTP_MAX_EVENTS_PER_REQUEST 1000
/*
 * A batch takes no event that would bring its body past this (the default
 * request body limit of nginx, 1 MiB); an event larger alone goes alone.
 */
#define HTTP_BATCH_MAX_BYTES (1024 * 1024)

/* The options of ev's destination, a webhook. */
#define HTTP_OPTIONS(ev) ((const HttpDestOptions *) (ev)->dest.options)

typedef struct HttpDest HttpDest;

/*
 * One request, from its first event's enqueue to its release. It is queued
 * with one event; when it starts, a destination with events_per_request
 * above 1 moves queued events of the same options into it (a batch).
 */
typedef struct HttpRequest
{
	dlist_node	node;			/* in its destination's queue, then in running_list */
	OutboxEvent **events;		/* what it sends, in order; the first one's
								 * destination options apply */
	int			nevents;		/* 0 once their outcome was reported */
	OutboxEvent *one;			/* events' storage while it has one */
	HttpDest   *dest;
	CURL	   *easy;
	struct curl_slist *headers;
	long		status;			/* from the status line, once headers are in */
	bool		check_address;	/* outbox.http_allowed_targets decides by address */
	bool		blocked;		/* a connection was refused by it */
	bool		headers_done;
	TimestampTz reported_at;	/* outcome handed back while the body came */
	TimestampTz started_at;		/* when the request was handed to libcurl */
	TimestampTz wait_deadline;	/* while queued: when it must have started,
								 * or go back not sent (OutboxHttpExpireQueued) */
	long		timeout_ms;		/* its time limit (outbox.http_timeout, or the
								 * destination's timeout_ms) */
	TimestampTz deadline;		/* when it runs out, the time the relay was
								 * away added (http_collect.c) */
	size_t		body_bytes;
	size_t		response_len;
	char		response[RESPONSE_SNIPPET_LEN];
	char		errbuf[CURL_ERROR_SIZE];
} HttpRequest;

/* The requests of one destination, by name. */
struct HttpDest
{
	char	   *name;
	dlist_head	queue;			/* HttpRequest waiting to start */
	int			queued;
	int			running;		/* handles attached to the multi handle */
	int			unreported;		/* enqueued, outcome not reported yet */
	TimestampTz last_active;	/* when an event was last handed over, or
								 * its outcome reported */
	double		avg_ms;			/* moving average of its requests' time to an outcome */
	int			per_request;	/* events_per_request of its last event enqueued */

	/* what target_allowed last found for this destination's URL */
	char	   *target_url;		/* NULL: nothing yet */
	uint64		target_generation;	/* of outbox.http_allowed_targets */
	bool		target_parsed;
	OutboxTargetVerdict target_verdict;

	/* a copy of its ca_file, which the relay reads itself (http_request.c) */
	char	   *ca_path;		/* the file copied, or NULL: no copy */
	char	   *ca_data;		/* malloc'd by OutboxReadFile */
	size_t		ca_len;
	struct stat ca_stat;		/* the file's status when it was read */
	TimestampTz ca_read_at;
	TimestampTz ca_checked_at;	/* when its status was last compared */
};

/*
 * What requests keep between them in a process, part of the kind's state:
 * the easy handles of finished requests, reset, for the next ones (a
 * handle costs a large zeroed allocation and its setup, once per request
 * otherwise; connections stay in the multi handle's pool either way), and
 * the resource owner that signing uses outside a transaction.
 */
typedef struct HttpRequestCache
{
	ResourceOwner owner;		/* NULL until a request is built without one */
	int			nidle;
	CURL	   *idle[OUTBOX_HTTP_MAX_IDLE_EASY];
} HttpRequestCache;

/* http_request.c */
extern bool OutboxHttpPrepare(HttpRequestCache *cache, HttpRequest *req,
							  long default_timeout_ms, bool fresh_connect);
extern void OutboxHttpParkEasy(HttpRequestCache *cache, CURL *easy, int keep);
extern void OutboxHttpDropIdleEasy(HttpRequestCache *cache);

/* http_outcome.c */
extern void OutboxHttpOutcome(HttpRequest *req, CURLcode result);
extern void OutboxHttpShareOutcome(HttpRequest *req);

#endif							/* OUTBOX_HTTP_REQUEST_H */
