/*-------------------------------------------------------------------------
 *
 * deliver_http.c
 *	  Delivery of events to webhooks with libcurl's multi interface.
 *
 * The relay hands events to this transport (OutboxHttpEnqueue) and collects
 * their outcomes as they come (OutboxHttpRun); no database transaction is
 * open meanwhile. Each destination has a queue. Requests are started from
 * the queues in turn, at most outbox.http_max_connections at once; while
 * another destination is busy, a destination gets at most half of them,
 * and one whose requests take over four times as long as the quickest's an
 * eighth, so that a slow endpoint cannot hold the connections a fast one
 * needs. The multi
 * handle lives as long as the process: connections are kept alive.
 *
 * Each request has one time limit (outbox.http_timeout or the destination's
 * timeout_ms) for name resolution, connection and the whole transfer. Only
 * http and https are allowed and redirects are not followed. The outcome is
 * decided by the status line (see http_outcome): a 2xx is reported as
 * delivered as soon as the headers are in, even if the body is slow or
 * endless; at most RESPONSE_SNIPPET_LEN bytes of a body are kept for
 * last_error, and a transfer whose body passes RESPONSE_MAX_BYTES is cut.
 *
 * No PostgreSQL function that can throw is called from a libcurl callback:
 * they only copy into fixed buffers inside the request, and errors are
 * turned into text after libcurl returns. libcurl's own memory (handles,
 * header lists, the copied body) is freed when each transfer ends, and the
 * multi handle by an on_proc_exit callback.
 *
 * Headers follow the Standard Webhooks specification: webhook-id (the
 * event_id, stable across retries), webhook-timestamp (Unix seconds of this
 * attempt) and, when the destination has a secret, webhook-signature
 * (signature.c). Then come the destination's headers and the event's own,
 * merged here: where both name a header, the destination's wins, and an
 * event never sends a name that events may not carry (headers.c).
 *
 * Where requests may go: outbox.http_allowed_targets (targets.c), checked
 * on the URL's host before a request starts and on the address of every
 * connection libcurl opens (open_socket); connections opened under an
 * older list are not reused.
 *
 * What is kept of an answer: the status, and for last_error only (never
 * the log) the first RESPONSE_SNIPPET_LEN bytes of the body with
 * credentials masked (redact); libcurl's error text is masked too, as it
 * can quote the URL's user:password.
 *
 * Runs in the relay worker, or in a backend running outbox_relay().
 *
 * src/deliver_http.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/socket.h>
#include <time.h>

#include <curl/curl.h>

#include "lib/ilist.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/pmsignal.h"
#include "utils/formatting.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "deliver_http.h"
#include "guc.h"
#include "headers.h"
#include "signature.h"
#include "targets.h"

/* bytes of a response body kept for last_error */
#define RESPONSE_SNIPPET_LEN 256
/* a response body longer than this is not read to its end */
#define RESPONSE_MAX_BYTES (64 * 1024)
/* the rest of a 2xx body is read this long, for keep-alive, then cut */
#define BODY_GRACE_MS 1000

typedef struct HttpDest HttpDest;

typedef struct HttpRequest
{
	dlist_node	node;			/* in its destination's queue, then in running_list */
	OutboxEvent *event;			/* NULL once its outcome was reported */
	HttpDest   *dest;
	CURL	   *easy;
	struct curl_slist *headers;
	long		status;			/* from the status line, once headers are in */
	bool		check_address;	/* outbox.http_allowed_targets decides by address */
	bool		blocked;		/* a connection was refused by it */
	bool		headers_done;
	TimestampTz reported_at;	/* outcome handed back while the body came */
	TimestampTz started_at;		/* when the request was handed to libcurl */
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

	/* what target_allowed last found for this destination's URL */
	char	   *target_url;		/* NULL: nothing yet */
	uint64		target_generation;	/* of outbox.http_allowed_targets */
	bool		target_parsed;
	OutboxTargetVerdict target_verdict;
};

static CURLM *multi = NULL;
static MemoryContext http_cxt = NULL;	/* requests and destinations */
static MemoryContext prepare_cxt = NULL;	/* reset after each request is built */
static ResourceOwner http_owner = NULL; /* for signing outside a transaction */
static List *dests = NIL;		/* of HttpDest, in http_cxt */
static dlist_head running_list = DLIST_STATIC_INIT(running_list);
static int	running = 0;		/* handles attached, all destinations */
static int	next_dest = 0;		/* round-robin position */
static uint64 multi_generation = 0; /* of outbox.http_allowed_targets, at multi's creation */

/*
 * Easy handles of finished requests, reset, for the next ones: a handle
 * costs a large zeroed allocation and its setup, once per request
 * otherwise. Connections stay in the multi handle's pool either way.
 */
static CURL *idle_easy[OUTBOX_HTTP_MAX_CONNECTIONS_LIMIT];
static int	nidle_easy = 0;

/* An easy handle with default options, or NULL if out of memory. */
static CURL *
take_easy(void)
{
	if (nidle_easy > 0)
		return idle_easy[--nidle_easy];
	return curl_easy_init();
}

/*
 * Keeps a handle detached from the multi handle for reuse, up to
 * outbox.http_max_connections of them, or frees it.
 */
static void
park_easy(CURL *easy)
{
	if (nidle_easy < outbox_http_max_connections)
	{
		curl_easy_reset(easy);
		idle_easy[nidle_easy++] = easy;
	}
	else
		curl_easy_cleanup(easy);
}

/* Frees the kept handles. */
static void
drop_idle_easy(void)
{
	while (nidle_easy > 0)
		curl_easy_cleanup(idle_easy[--nidle_easy]);
}

static void
http_at_exit(int code pg_attribute_unused(), Datum arg pg_attribute_unused())
{
	drop_idle_easy();
	if (multi != NULL)
		curl_multi_cleanup(multi);
	multi = NULL;
	curl_global_cleanup();
}

/* Initialises libcurl and the transport's memory once per process. */
static void
http_init(void)
{
	if (multi != NULL)
		return;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not initialize libcurl")));
	multi = curl_multi_init();
	if (multi == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("could not create a libcurl multi handle")));
	multi_generation = OutboxTargetsGeneration();
	http_cxt = AllocSetContextCreate(TopMemoryContext, "outbox http",
									 ALLOCSET_DEFAULT_SIZES);
	prepare_cxt = AllocSetContextCreate(http_cxt, "outbox http request",
										ALLOCSET_DEFAULT_SIZES);
	on_proc_exit(http_at_exit, (Datum) 0);
}

/*
 * libcurl header callback: notes the status of the final response (a 1xx
 * is followed by another status line) and when its headers end. Must not
 * throw or allocate.
 */
static size_t
collect_header(char *buffer, size_t size, size_t nitems, void *userdata)
{
	HttpRequest *req = (HttpRequest *) userdata;
	size_t		len = size * nitems;

	if (len >= 5 && strncmp(buffer, "HTTP/", 5) == 0)
	{
		req->headers_done = false;
		req->status = 0;
	}
	else if (len <= 2 && (buffer[0] == '\r' || buffer[0] == '\n'))
	{
		long		status = 0;

		curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &status);
		if (status >= 200)
		{
			req->status = status;
			req->headers_done = true;
		}
	}
	return len;
}

/*
 * libcurl write callback: keeps the start of the response body for the
 * error text, discards the rest, and stops a body that passes
 * RESPONSE_MAX_BYTES (returning less than given aborts the transfer). Must
 * not throw or allocate.
 */
static size_t
collect_response(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	HttpRequest *req = (HttpRequest *) userdata;
	size_t		len = size * nmemb;
	size_t		room = RESPONSE_SNIPPET_LEN - req->response_len;

	if (room > 0)
	{
		memcpy(req->response + req->response_len, ptr, Min(len, room));
		req->response_len += Min(len, room);
	}
	req->body_bytes += len;
	return req->body_bytes > RESPONSE_MAX_BYTES ? 0 : len;
}

/*
 * libcurl open-socket callback: with an address-checked target, refuses a
 * connection whose address and port outbox.http_allowed_targets does not
 * allow (the request then fails, and http_outcome says why). Must not
 * throw or allocate.
 */
static curl_socket_t
open_socket(void *clientp, curlsocktype purpose pg_attribute_unused(),
			struct curl_sockaddr *address)
{
	HttpRequest *req = (HttpRequest *) clientp;

	if (req->check_address && !OutboxTargetAddressAllowed(&address->addr))
	{
		req->blocked = true;
		return CURL_SOCKET_BAD;
	}
	return socket(address->family, address->socktype, address->protocol);
}

/* One header offered for a request, in merge_headers. */
typedef struct MergeItem
{
	OutboxHeader *header;
	char	   *lower;			/* name in lower case: HTTP names are not case-sensitive */
	int			pos;			/* offer order: the destination's come first */
	bool		keep;
} MergeItem;

static int
merge_item_cmp(const void *a, const void *b)
{
	const MergeItem *x = *(MergeItem *const *) a;
	const MergeItem *y = *(MergeItem *const *) b;
	int			c = strcmp(x->lower, y->lower);

	return c != 0 ? c : (x->pos > y->pos) - (x->pos < y->pos);
}

/*
 * The headers to send with ev, in *out: the destination's, then the event's
 * own whose name the destination does not use (compared without case);
 * headers whose value is JSON null are left out. Returns how many. Sorting
 * keeps this O(n log n) in the number of headers, which a writer controls.
 */
static int
merge_headers(OutboxEvent *ev, OutboxHeader **out)
{
	OutboxHeader *lists[2] = {NULL, NULL};
	int			counts[2] = {0, 0};
	Jsonb	   *sources[2] = {ev->dest.headers, ev->headers};
	MergeItem  *items;
	MergeItem **sorted;
	OutboxHeader *merged;
	int			n = 0;
	int			nmerged = 0;

	for (int s = 0; s < 2; s++)
		if (sources[s] != NULL && JB_ROOT_IS_OBJECT(sources[s]))
			counts[s] = OutboxHeaderList(sources[s], &lists[s]);
	items = palloc(sizeof(MergeItem) * Max(counts[0] + counts[1], 1));
	for (int s = 0; s < 2; s++)
		for (int i = 0; i < counts[s]; i++)
		{
			CHECK_FOR_INTERRUPTS();
			if (lists[s][i].value == NULL)
				continue;
			/* an event never sends what events may not carry (checked at claim) */
			if (s == 1 && !OutboxEventHeaderAllowed(lists[s][i].name))
				continue;
			items[n].header = &lists[s][i];
			items[n].lower = asc_tolower(lists[s][i].name, strlen(lists[s][i].name));
			items[n].pos = n;
			items[n].keep = false;
			n++;
		}
	sorted = palloc(sizeof(MergeItem *) * Max(n, 1));
	for (int i = 0; i < n; i++)
		sorted[i] = &items[i];
	qsort(sorted, n, sizeof(MergeItem *), merge_item_cmp);
	for (int i = 0; i < n; i++)
		sorted[i]->keep = i == 0 || strcmp(sorted[i]->lower, sorted[i - 1]->lower) != 0;

	merged = palloc(sizeof(OutboxHeader) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (items[i].keep)
			merged[nmerged++] = *items[i].header;
	}
	*out = merged;
	return nmerged;
}

/* Adds a header line to the request; false when libcurl is out of memory. */
static bool
append_header(HttpRequest *req, const char *line)
{
	struct curl_slist *l = curl_slist_append(req->headers, line);

	if (l == NULL)
		return false;
	req->headers = l;
	return true;
}

/* Keeps printable ASCII only, so the text is valid in any server encoding. */
static char *
printable(const char *s, size_t len)
{
	char	   *out = palloc(len + 1);

	for (size_t i = 0; i < len; i++)
		out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : ' ';
	out[len] = '\0';
	return out;
}

/*
 * Words after which a line of an answer or error text is masked: a header
 * or field that holds a credential, echoed back by the endpoint. Lower
 * case; matched without case.
 */
static const char *const credential_words[] = {
	"authorization", "cookie", "token", "secret", "password", "passwd",
	"api-key", "apikey", "api_key", "bearer ", "basic ", "whsec_",
	"credential", "session", "signature"
};

/*
 * Returns text s[0..len) as printable ASCII (palloc'd) with credentials
 * masked: after any of credential_words, the rest of that line becomes
 * "[redacted]", and the user:password of a URL ("scheme://user:pw@host")
 * too. Linear in len; called after libcurl returns, never in a callback.
 */
static char *
redact(const char *s, size_t len)
{
	char	   *text = printable(s, len);
	char	   *lower = asc_tolower(text, len);
	StringInfoData out;
	size_t		i = 0;

	initStringInfo(&out);
	while (i < len)
	{
		bool		masked = false;

		if (strncmp(lower + i, "://", 3) == 0)
		{
			size_t		j = i + 3;

			while (j < len && strchr("/@ \t\r\n?#\"'", s[j]) == NULL)
				j++;
			if (j < len && s[j] == '@')
			{
				appendStringInfoString(&out, "://[redacted]@");
				i = j + 1;
				continue;
			}
		}
		for (size_t w = 0; w < lengthof(credential_words) && !masked; w++)
		{
			size_t		wl = strlen(credential_words[w]);

			if (strncmp(lower + i, credential_words[w], wl) == 0)
			{
				appendBinaryStringInfo(&out, text + i, wl);
				appendStringInfoString(&out, "[redacted]");
				i += wl;
				/* to the end of the line, as the endpoint wrote it */
				while (i < len && s[i] != '\n' && s[i] != '\r')
					i++;
				masked = true;
			}
		}
		if (!masked)
			appendStringInfoChar(&out, text[i++]);
	}
	return out.data;
}

/*
 * What outbox.http_allowed_targets says about url, before any connection:
 * sets req->check_address when each connection's address must be checked.
 * Returns false (with the event's error set) when nothing could allow the
 * target.
 */
static bool
target_allowed(HttpRequest *req, const char *url)
{
	HttpDest   *d = req->dest;

	/* a destination's URL rarely changes: parse it once per URL and list */
	if (d->target_url == NULL || strcmp(d->target_url, url) != 0 ||
		d->target_generation != OutboxTargetsGeneration())
	{
		CURLU	   *u = curl_url();
		char	   *host = NULL;
		char	   *port = NULL;

		d->target_parsed = u != NULL &&
			curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
			curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
			curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK;
		d->target_verdict = d->target_parsed ?
			OutboxTargetByName(host, atoi(port)) : OUTBOX_TARGET_REFUSED;
		curl_free(host);
		curl_free(port);
		curl_url_cleanup(u);
		if (d->target_url != NULL)
			pfree(d->target_url);
		d->target_url = MemoryContextStrdup(http_cxt, url);
		d->target_generation = OutboxTargetsGeneration();
	}
	if (!d->target_parsed)
	{
		req->event->error = pstrdup("the destination's url cannot be parsed");
		return false;
	}
	if (d->target_verdict == OUTBOX_TARGET_REFUSED)
	{
		req->event->error = pstrdup("the destination's host and port are not allowed by outbox.http_allowed_targets");
		return false;
	}
	req->check_address = d->target_verdict == OUTBOX_TARGET_CHECK_ADDRESS;
	return true;
}

/*
 * Builds the easy handle of one request. On a problem that retrying cannot
 * solve (an invalid header, a bad secret) the event fails permanently and
 * false is returned; the caller does not send it.
 */
static bool
prepare_request(HttpRequest *req)
{
	OutboxEvent *ev = req->event;
	char		timestamp[32];
	long		timeout = ev->dest.timeout_ms >= 0 ? ev->dest.timeout_ms : outbox_http_timeout;
	OutboxHeader *headers;
	int			nheaders;
	bool		ok;

	snprintf(timestamp, sizeof(timestamp), "%lld", (long long) time(NULL));

	nheaders = merge_headers(ev, &headers);
	for (int i = 0; i < nheaders; i++)
	{
		if (!OutboxHeaderNameValid(headers[i].name, strlen(headers[i].name)) ||
			!OutboxHeaderValueValid(headers[i].value, strlen(headers[i].value)))
		{
			/* the name only: the value may be a credential */
			ev->permanent = true;
			ev->error = psprintf("invalid HTTP header \"%s\"",
								 printable(headers[i].name, strlen(headers[i].name)));
			return false;
		}
	}

	ok = append_header(req, "content-type: application/json") &&
		append_header(req, "Expect:") &&
		append_header(req, psprintf("webhook-id: %s", ev->event_id)) &&
		append_header(req, psprintf("webhook-timestamp: %s", timestamp));
	if (ok && ev->dest.secret != NULL)
	{
		char	   *sig = OutboxSignature(ev->dest.secret, ev->event_id, timestamp,
										  ev->body, strlen(ev->body));

		if (sig == NULL)
		{
			ev->permanent = true;
			ev->error = pstrdup("the destination's secret cannot be used to sign (see the rules for secrets)");
			return false;
		}
		ok = append_header(req, psprintf("webhook-signature: %s", sig));
	}
	for (int i = 0; ok && i < nheaders; i++)
	{
		const char *value = headers[i].value;

		if (OutboxHeaderReserved(headers[i].name))
			continue;
		/* libcurl drops "name:" with no value; "name;" sends it empty */
		if (value[strspn(value, " \t")] == '\0')
			ok = append_header(req, psprintf("%s;", headers[i].name));
		else
			ok = append_header(req, psprintf("%s: %s", headers[i].name, value));
	}

	if (ok && !target_allowed(req, ev->dest.url))
		return false;
	if (ok)
		req->easy = take_easy();
	ok = ok && req->easy != NULL &&
		curl_easy_setopt(req->easy, CURLOPT_URL, ev->dest.url) == CURLE_OK &&
#if LIBCURL_VERSION_NUM >= 0x075500
		curl_easy_setopt(req->easy, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK &&
#else
		curl_easy_setopt(req->easy, CURLOPT_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS)) == CURLE_OK &&
#endif
		curl_easy_setopt(req->easy, CURLOPT_FOLLOWLOCATION, 0L) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
#if LIBCURL_VERSION_NUM >= 0x075700
		/* do not wait for a stuck name lookup when the handle goes away */
		curl_easy_setopt(req->easy, CURLOPT_QUICK_EXIT, 1L) == CURLE_OK &&
#endif
		curl_easy_setopt(req->easy, CURLOPT_TIMEOUT_MS, timeout) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_CONNECTTIMEOUT_MS, timeout) == CURLE_OK &&
		/* libcurl keeps its own copy: the transfer may outlive the event */
		curl_easy_setopt(req->easy, CURLOPT_POSTFIELDSIZE, (long) strlen(ev->body)) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_COPYPOSTFIELDS, ev->body) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_HTTPHEADER, req->headers) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_USERAGENT, "outbox/" OUTBOX_VERSION) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_HEADERFUNCTION, collect_header) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_HEADERDATA, req) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_WRITEFUNCTION, collect_response) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_WRITEDATA, req) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_ERRORBUFFER, req->errbuf) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_PRIVATE, req) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_OPENSOCKETFUNCTION, open_socket) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_OPENSOCKETDATA, req) == CURLE_OK &&
		/* a connection kept from before the list changed is not reused */
		curl_easy_setopt(req->easy, CURLOPT_FRESH_CONNECT,
						 (long) (multi_generation != OutboxTargetsGeneration())) == CURLE_OK;
	if (!ok)
	{
		ev->error = pstrdup("could not set up the HTTP request (out of memory?)");
		return false;
	}
	return true;
}

/*
 * prepare_request with a resource owner in place: the worker builds
 * requests between transactions, where there is none, and PostgreSQL's
 * HMAC (with OpenSSL) registers its context with the current one.
 */
static bool
prepare_with_owner(HttpRequest *req)
{
	ResourceOwner saved = CurrentResourceOwner;
	bool		prepared;

	if (saved == NULL)
	{
		if (http_owner == NULL)
			http_owner = ResourceOwnerCreate(NULL, "outbox http");
		CurrentResourceOwner = http_owner;
	}
	PG_TRY();
	{
		prepared = prepare_request(req);
	}
	PG_FINALLY();
	{
		CurrentResourceOwner = saved;
	}
	PG_END_TRY();
	return prepared;
}

/*
 * Whether an HTTP status is worth retrying. 5xx and the 4xx that say "not
 * now" (408 Request Timeout, 409 Conflict, 425 Too Early, 429 Too Many
 * Requests) are; any other 4xx says the request itself is wrong, and the
 * same request will fail again, unless the destination asks otherwise.
 * 3xx: redirects are not followed, and the endpoint may be moved back.
 */
static bool
status_retryable(long status, const OutboxDestination *dest)
{
	if (status >= 400 && status < 500)
		return status == 408 || status == 409 || status == 425 || status == 429 ||
			dest->retry_client_errors;
	return true;
}

/*
 * Records the outcome of a request in its event: delivered for a 2xx
 * status line, whatever happened to the body after it; otherwise the status
 * (with the start of the body) or the transfer error, whether it is worth
 * retrying, and the endpoint's Retry-After for 429 and 503.
 */
static void
http_outcome(HttpRequest *req, CURLcode result)
{
	OutboxEvent *ev = req->event;
	long		status = req->status;

	if (req->headers_done && status >= 200 && status < 300)
	{
		ev->ok = true;
		return;
	}
	if (!req->headers_done)
	{
		if (req->blocked)
			ev->error = pstrdup("HTTP request failed: the address connected to is not allowed by outbox.http_allowed_targets");
		else
			ev->error = psprintf("HTTP request failed: %s",
								 req->errbuf[0] ? redact(req->errbuf, strlen(req->errbuf))
								 : curl_easy_strerror(result));
		return;
	}
	ev->error = psprintf("HTTP status %ld%s", status,
						 (status >= 300 && status < 400) ? " (redirects are not followed)" : "");
	if (req->response_len > 0)
		ev->response = redact(req->response, req->response_len);
	ev->permanent = !status_retryable(status, &ev->dest);
	if (status == 429 || status == 503)
	{
		curl_off_t	retry_after = 0;

		/* libcurl reads both forms, seconds and an HTTP date (RFC 9110 10.2.3) */
		if (curl_easy_getinfo(req->easy, CURLINFO_RETRY_AFTER, &retry_after) == CURLE_OK &&
			retry_after > 0)
			ev->retry_after_ms = (int64) retry_after * 1000;
	}
}

/* The queue of the destination called name, created on first use. */
static HttpDest *
find_dest(const char *name)
{
	ListCell   *lc;
	HttpDest   *d;
	MemoryContext old;

	foreach(lc, dests)
	{
		d = lfirst(lc);
		if (strcmp(d->name, name) == 0)
			return d;
	}
	old = MemoryContextSwitchTo(http_cxt);
	d = palloc0(sizeof(HttpDest));
	d->name = pstrdup(name);
	dlist_init(&d->queue);
	dests = lappend(dests, d);
	MemoryContextSwitchTo(old);
	return d;
}

/*
 * Hands the event's outcome back: appended to *done, the request forgets it.
 * The time it took goes into its destination's moving average.
 */
static void
report(HttpRequest *req, List **done)
{
	HttpDest   *d = req->dest;
	TimestampTz now = GetCurrentTimestamp();

	*done = lappend(*done, req->event);
	req->event = NULL;
	d->unreported--;
	d->last_active = now;
	if (req->started_at != 0)
	{
		double		ms = (double) (now - req->started_at) / 1000.0;

		d->avg_ms = d->avg_ms == 0 ? ms : 0.8 * d->avg_ms + 0.2 * ms;
	}
}

/* Detaches and frees a request, its libcurl handle and header list. */
static void
release_request(HttpRequest *req)
{
	if (req->easy != NULL)
	{
		curl_multi_remove_handle(multi, req->easy);
		park_easy(req->easy);
		dlist_delete(&req->node);
		req->dest->running--;
		running--;
	}
	if (req->headers != NULL)
		curl_slist_free_all(req->headers);
	pfree(req);
}

/*
 * Queues an event with an HTTP destination and its body built. The event
 * must stay valid until OutboxHttpRun hands it back with its outcome; the
 * request itself lives in the transport's own memory.
 */
void
OutboxHttpEnqueue(OutboxEvent *ev)
{
	HttpRequest *req;

	http_init();
	req = MemoryContextAllocZero(http_cxt, sizeof(HttpRequest));
	req->event = ev;
	req->dest = find_dest(ev->dest.name);
	dlist_push_tail(&req->dest->queue, &req->node);
	req->dest->queued++;
	req->dest->unreported++;
	req->dest->last_active = GetCurrentTimestamp();
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
dest_share(HttpDest *d, int limit, TimestampTz now)
{
	int			busy = 0;
	double		quickest = 0;
	ListCell   *lc;

	foreach(lc, dests)
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
start_requests(List **done)
{
	int			limit = outbox_http_max_connections;
	bool		progress = true;
	TimestampTz now = GetCurrentTimestamp();

	while (progress && running < limit)
	{
		int			ndests = list_length(dests);

		progress = false;
		for (int k = 0; k < ndests && running < limit; k++)
		{
			HttpDest   *d = list_nth(dests, (next_dest + k) % ndests);
			int			share = dest_share(d, limit, now);
			HttpRequest *req;
			MemoryContext old;
			bool		prepared;

			if (d->queued == 0 || d->running >= share)
				continue;
			req = dlist_container(HttpRequest, node, dlist_pop_head_node(&d->queue));
			d->queued--;
			progress = true;

			old = MemoryContextSwitchTo(prepare_cxt);
			prepared = prepare_with_owner(req);
			MemoryContextSwitchTo(old);
			if (req->event->error != NULL)
				req->event->error = pstrdup(req->event->error);
			MemoryContextReset(prepare_cxt);
			if (prepared && curl_multi_add_handle(multi, req->easy) == CURLM_OK)
			{
				req->started_at = now;
				dlist_push_tail(&running_list, &req->node);
				d->running++;
				running++;
				continue;
			}
			if (prepared)
				req->event->error = "could not queue the HTTP request";
			if (req->easy != NULL)
			{
				park_easy(req->easy);
				req->easy = NULL;
			}
			report(req, done);
			release_request(req);
		}
		next_dest = ndests > 0 ? (next_dest + 1) % ndests : 0;
	}
}

/*
 * Runs the transport: starts waiting requests, waits up to wait_ms for
 * network activity (0: not at all), moves the transfers along, and returns
 * the events whose outcome is now known (a List palloc'd in the current
 * memory context, NIL if none). A 2xx is reported once its headers are in;
 * its transfer goes on, holding its connection but not the event.
 * Interruptible (CHECK_FOR_INTERRUPTS); in a worker, exits if the
 * postmaster died. No transaction is needed.
 */
List *
OutboxHttpRun(long wait_ms)
{
	List	   *done = NIL;
	int			still;
	CURLMcode	mc;
	CURLMsg    *msg;
	int			left;
	dlist_mutable_iter iter;
	TimestampTz now;

	if (multi == NULL)
		return NIL;
	/* outbox.http_allowed_targets changed: drop the old connections when idle */
	if (running == 0 && multi_generation != OutboxTargetsGeneration())
	{
		curl_multi_cleanup(multi);
		drop_idle_easy();
		multi = curl_multi_init();
		if (multi == NULL)
			ereport(FATAL,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("could not create a libcurl multi handle")));
		multi_generation = OutboxTargetsGeneration();
	}
	curl_multi_setopt(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long) outbox_http_max_connections);
	curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long) outbox_http_max_connections);
	curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, (long) outbox_http_max_connections);

	start_requests(&done);
	if (running == 0)
		return done;
	/* send what was just started before waiting for answers */
	mc = curl_multi_perform(multi, &still);
	if (mc == CURLM_OK && wait_ms > 0)
	{
		curl_multi_poll(multi, NULL, 0, (int) wait_ms, NULL);
		mc = curl_multi_perform(multi, &still);
	}
	while ((msg = curl_multi_info_read(multi, &left)) != NULL)
	{
		HttpRequest *req;

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &req);
		if (req->event != NULL)
		{
			http_outcome(req, msg->data.result);
			report(req, &done);
		}
		release_request(req);
	}
	if (mc != CURLM_OK)
		elog(ERROR, "HTTP transfers failed: %s", curl_multi_strerror(mc));

	/*
	 * A 2xx is delivered once its headers are in, whatever the body does;
	 * the body is read on for BODY_GRACE_MS, so that a normal answer keeps
	 * its connection alive, then the transfer is cut.
	 */
	now = GetCurrentTimestamp();
	dlist_foreach_modify(iter, &running_list)
	{
		HttpRequest *req = dlist_container(HttpRequest, node, iter.cur);

		if (req->event != NULL && req->headers_done &&
			req->status >= 200 && req->status < 300)
		{
			http_outcome(req, CURLE_OK);
			report(req, &done);
			req->reported_at = now;
		}
		else if (req->event == NULL &&
				 TimestampDifferenceExceeds(req->reported_at, now, BODY_GRACE_MS))
			release_request(req);
	}
	CHECK_FOR_INTERRUPTS();
	/* a worker would otherwise outlive the postmaster while transfers last */
	if (OutboxInBackgroundWorker() && !PostmasterIsAlive())
		proc_exit(1);
	return done;
}

/*
 * Whether the transport has work: events whose outcome is not reported, or
 * transfers still attached (the rest of a 2xx body), which only
 * OutboxHttpRun moves along and ends.
 */
bool
OutboxHttpBusy(void)
{
	return running > 0 || OutboxHttpPending() > 0;
}

/* Events handed to the transport whose outcome is not reported yet. */
int
OutboxHttpPending(void)
{
	int			n = 0;
	ListCell   *lc;

	foreach(lc, dests)
		n += ((HttpDest *) lfirst(lc))->unreported;
	return n;
}

/* Events of destination name handed over whose outcome is not reported. */
int
OutboxHttpQueued(const char *name)
{
	ListCell   *lc;

	foreach(lc, dests)
	{
		HttpDest   *d = lfirst(lc);

		if (strcmp(d->name, name) == 0)
			return d->unreported;
	}
	return 0;
}

/*
 * The names of the destinations that hold outbox.http_max_connections
 * events or more in the transport: the relay claims none of theirs for
 * now, so that a slow destination's backlog stays in the table, where
 * other destinations' events can overtake it.
 */
List *
OutboxHttpFull(void)
{
	List	   *full = NIL;
	ListCell   *lc;

	foreach(lc, dests)
	{
		HttpDest   *d = lfirst(lc);

		if (d->unreported >= outbox_http_max_connections)
			full = lappend(full, d->name);
	}
	return full;
}

/*
 * Sends n events and returns once every outcome is in their events: the
 * synchronous form, for outbox_relay(), which runs in the caller's
 * transaction. Interruptible. Events already handed over for the worker's
 * loop are not waited for (a backend never has any).
 */
void
OutboxDeliverHttp(OutboxEvent **events, int n)
{
	int			pending = n;

	for (int i = 0; i < n; i++)
		OutboxHttpEnqueue(events[i]);
	while (pending > 0)
		pending -= list_length(OutboxHttpRun(100));
	/* the rest of 2xx bodies: within BODY_GRACE_MS */
	while (OutboxHttpBusy())
		(void) OutboxHttpRun(100);
}
