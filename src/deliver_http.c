/*-------------------------------------------------------------------------
 *
 * deliver_http.c
 *	  Delivery of events to webhooks with libcurl's multi interface.
 *
 * All the HTTP requests of a pass are in flight together, at most
 * outbox.http_max_connections at a time; the multi handle lives as long as
 * the process, so its connection cache keeps connections alive from one pass
 * to the next. Each request has one time limit (outbox.http_timeout or the
 * destination's timeout_ms) that covers name resolution, connection and the
 * whole transfer. Only http and https are allowed and redirects are not
 * followed: a 3xx answer is a failure. Success is a 2xx status.
 *
 * The wait for libcurl is cut in slices of at most WAIT_SLICE_MS with
 * CHECK_FOR_INTERRUPTS() between them, so SIGTERM (or a cancel in a backend
 * running outbox_relay()) ends a pass promptly even if an endpoint hangs.
 *
 * No PostgreSQL function that can throw is called from a libcurl callback:
 * the response is copied into a fixed buffer inside the request, and errors
 * are turned into text after libcurl returns. libcurl's own memory (handles,
 * header lists) is freed on every path, by PG_FINALLY on errors and by an
 * on_proc_exit callback for the multi handle.
 *
 * Headers follow the Standard Webhooks specification: webhook-id (the
 * event_id, stable across retries), webhook-timestamp (Unix seconds of this
 * attempt) and, when the destination has a secret, webhook-signature
 * (signature.c). Then come the destination's headers and the event's own,
 * merged here: where both name a header, the destination's wins.
 *
 * src/deliver_http.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <time.h>

#include <curl/curl.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/pmsignal.h"
#include "utils/formatting.h"

#include "compat.h"
#include "deliver_http.h"
#include "guc.h"
#include "headers.h"
#include "signature.h"

#define WAIT_SLICE_MS 100
#define RESPONSE_SNIPPET_LEN 200

typedef struct HttpRequest
{
	OutboxEvent *event;
	CURL	   *easy;
	struct curl_slist *headers;
	char		errbuf[CURL_ERROR_SIZE];
	char		response[RESPONSE_SNIPPET_LEN];
	size_t		response_len;
} HttpRequest;

static CURLM *multi = NULL;

static void
http_at_exit(int code pg_attribute_unused(), Datum arg pg_attribute_unused())
{
	if (multi != NULL)
		curl_multi_cleanup(multi);
	multi = NULL;
	curl_global_cleanup();
}

/* Initialises libcurl once per process, on first use. */
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
	on_proc_exit(http_at_exit, (Datum) 0);
}

/*
 * libcurl write callback: keeps the start of the response body for the
 * error text and discards the rest. Must not throw or allocate.
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
	return len;
}

/* Header names the relay sets itself; the same names from users are ignored. */
static bool
reserved_header(const char *name)
{
	static const char *const reserved[] = {
		"content-type", "content-length", "host", "transfer-encoding",
		"expect", "webhook-id", "webhook-timestamp", "webhook-signature"
	};

	for (size_t i = 0; i < lengthof(reserved); i++)
		if (pg_strcasecmp(name, reserved[i]) == 0)
			return true;
	return false;
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
			if (lists[s][i].value == NULL)
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
			ev->error = pstrdup("the destination's secret has the whsec_ prefix but is not valid base64");
			return false;
		}
		ok = append_header(req, psprintf("webhook-signature: %s", sig));
	}
	for (int i = 0; ok && i < nheaders; i++)
	{
		const char *value = headers[i].value;

		if (reserved_header(headers[i].name))
			continue;
		/* libcurl drops "name:" with no value; "name;" sends it empty */
		if (value[strspn(value, " \t")] == '\0')
			ok = append_header(req, psprintf("%s;", headers[i].name));
		else
			ok = append_header(req, psprintf("%s: %s", headers[i].name, value));
	}

	if (ok)
		req->easy = curl_easy_init();
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
		curl_easy_setopt(req->easy, CURLOPT_POSTFIELDS, ev->body) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_POSTFIELDSIZE, (long) strlen(ev->body)) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_HTTPHEADER, req->headers) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_USERAGENT, "outbox/" OUTBOX_VERSION) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_WRITEFUNCTION, collect_response) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_WRITEDATA, req) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_ERRORBUFFER, req->errbuf) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_PRIVATE, req) == CURLE_OK;
	if (!ok)
	{
		ev->error = pstrdup("could not set up the HTTP request (out of memory?)");
		return false;
	}
	return true;
}

/* Records the outcome of a finished transfer in its event. */
static void
finish_request(HttpRequest *req, CURLcode result)
{
	OutboxEvent *ev = req->event;
	long		status = 0;

	if (result != CURLE_OK)
	{
		ev->error = psprintf("HTTP request failed: %s",
							 req->errbuf[0] ? printable(req->errbuf, strlen(req->errbuf))
							 : curl_easy_strerror(result));
		return;
	}
	curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &status);
	if (status >= 200 && status < 300)
	{
		ev->ok = true;
		return;
	}
	ev->error = psprintf("HTTP status %ld%s%s%s", status,
						 (status >= 300 && status < 400) ? " (redirects are not followed)" : "",
						 req->response_len > 0 ? ": " : "",
						 printable(req->response, req->response_len));
}

/* Detaches and frees a request's libcurl handle and header list. */
static void
release_request(HttpRequest *req)
{
	if (req->easy != NULL)
	{
		curl_multi_remove_handle(multi, req->easy);
		curl_easy_cleanup(req->easy);
		req->easy = NULL;
	}
	if (req->headers != NULL)
	{
		curl_slist_free_all(req->headers);
		req->headers = NULL;
	}
}

/*
 * Sends each event (all with an url) as an HTTP POST of its envelope and
 * records the outcome in the event: ok, or the error text. Returns when all
 * transfers are done, each bounded by its timeout. Runs inside a relay pass,
 * with a transaction open; may exit the process on SIGTERM.
 */
void
OutboxDeliverHttp(OutboxEvent **events, int n)
{
	HttpRequest *reqs = palloc0(sizeof(HttpRequest) * n);

	http_init();
	curl_multi_setopt(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long) outbox_http_max_connections);
	curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long) outbox_http_max_connections);
	curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, (long) outbox_http_max_connections);

	PG_TRY();
	{
		int			next = 0;	/* next event to start */
		int			in_flight = 0;

		for (;;)
		{
			CURLMcode	mc;
			CURLMsg    *msg;
			int			running;
			int			left;

			/*
			 * Start requests in claim order, no more than the limit at once:
			 * with a limit of 1 the endpoint sees the events in order.
			 */
			while (next < n && in_flight < outbox_http_max_connections)
			{
				HttpRequest *req = &reqs[next++];

				req->event = events[next - 1];
				if (!prepare_request(req))
					release_request(req);
				else if (curl_multi_add_handle(multi, req->easy) != CURLM_OK)
				{
					req->event->error = pstrdup("could not queue the HTTP request");
					release_request(req);
				}
				else
					in_flight++;
			}
			if (in_flight == 0)
				break;

			mc = curl_multi_perform(multi, &running);
			while ((msg = curl_multi_info_read(multi, &left)) != NULL)
			{
				HttpRequest *req;

				if (msg->msg != CURLMSG_DONE)
					continue;
				curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &req);
				finish_request(req, msg->data.result);
				release_request(req);
				in_flight--;
			}
			if (mc != CURLM_OK)
			{
				const char *err = curl_multi_strerror(mc);

				for (int i = 0; i < n; i++)
					if (!events[i]->ok && events[i]->error == NULL)
						events[i]->error = psprintf("HTTP transfer failed: %s", err);
				break;
			}
			if (running > 0)
				curl_multi_poll(multi, NULL, 0, WAIT_SLICE_MS, NULL);
			CHECK_FOR_INTERRUPTS();
			/* a worker would otherwise outlive the postmaster for a whole pass */
			if (OutboxInBackgroundWorker() && !PostmasterIsAlive())
				proc_exit(1);
		}
	}
	PG_FINALLY();
	{
		for (int i = 0; i < n; i++)
			release_request(&reqs[i]);
	}
	PG_END_TRY();
}
