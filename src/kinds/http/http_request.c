/*-------------------------------------------------------------------------
 *
 * http_request.c
 *	  One webhook request: its headers and signature, its libcurl handle
 *	  and callbacks (what its answer means: http_outcome.c).
 *
 * Headers follow the Standard Webhooks specification: webhook-id (the
 * event_id, stable across retries), webhook-timestamp (Unix seconds of this
 * attempt) and, when the destination has a secret, webhook-signature
 * (signature.c). Then come the destination's headers and the event's own,
 * merged here: where both name a header, the destination's wins, and an
 * event never sends a name that events may not carry (headers.c).
 *
 * Only http and https are allowed and redirects are not followed. At most
 * RESPONSE_SNIPPET_LEN bytes of a body are kept for last_error, and a
 * transfer whose body passes RESPONSE_MAX_BYTES is cut.
 *
 * Where requests may go: outbox.http_allowed_targets (http_targets.c),
 * checked on the URL's host before a request starts and on the address of
 * every connection libcurl opens (open_socket).
 *
 * A destination's ca_file is read by the relay (files.c: a regular file of
 * at most 1 MB, never waiting for a writer, within the request's time
 * limit), not by libcurl, and handed over as CURLOPT_CAINFO_BLOB; the copy
 * is kept per destination (ca_file_blob).
 *
 * No PostgreSQL function that can throw is called from a libcurl callback:
 * they only copy into fixed buffers inside the request, and errors are
 * turned into text after libcurl returns.
 *
 * src/kinds/http/http_request.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/socket.h>
#include <time.h>

#include "common/cryptohash.h"
#include "common/sha2.h"
#include "miscadmin.h"
#include "utils/formatting.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "cloudevents.h"
#include "destination.h"
#include "headers.h"
#include "http_request.h"
#include "signature.h"

/*
 * An easy handle with default options, a kept one if there is one (see
 * HttpRequestCache), or NULL if out of memory.
 */
static CURL *
take_easy(HttpRequestCache *cache)
{
	if (cache->nidle > 0)
		return cache->idle[--cache->nidle];
	return curl_easy_init();
}

/*
 * Keeps a handle detached from the multi handle for reuse in cache, up to
 * keep of them (the connection limit), or frees it.
 */
void
OutboxHttpParkEasy(HttpRequestCache *cache, CURL *easy, int keep)
{
	if (cache->nidle < Min(keep, OUTBOX_HTTP_MAX_IDLE_EASY))
	{
		curl_easy_reset(easy);
		cache->idle[cache->nidle++] = easy;
	}
	else
		curl_easy_cleanup(easy);
}

/* Frees the handles kept in cache. */
void
OutboxHttpDropIdleEasy(HttpRequestCache *cache)
{
	while (cache->nidle > 0)
		curl_easy_cleanup(cache->idle[--cache->nidle]);
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
		d->target_url = MemoryContextStrdup(GetMemoryChunkContext(d), url);
		d->target_generation = OutboxTargetsGeneration();
	}
	if (!d->target_parsed)
	{
		req->events[0]->error = pstrdup("the destination's url cannot be parsed");
		return false;
	}
	if (d->target_verdict == OUTBOX_TARGET_REFUSED)
	{
		req->events[0]->error = pstrdup("the destination's host and port are not allowed by outbox.http_allowed_targets");
		return false;
	}
	req->check_address = d->target_verdict == OUTBOX_TARGET_CHECK_ADDRESS;
	return true;
}

/*
 * Whether req's destination sends batches: every request a JSON array,
 * however many events it has.
 */
static bool
is_batch(const HttpRequest *req)
{
	return HTTP_OPTIONS(req->events[0])->events_per_request > 1;
}

/*
 * The body of req: its event's, or for a batch its format's batch of its
 * events (OutboxBatchBody), in the order of the request.
 */
static char *
request_body(const HttpRequest *req)
{
	if (!is_batch(req))
		return req->events[0]->body;
	return OutboxBatchBody(req->events, req->nevents);
}

/*
 * The webhook-id of req: its event's event_id when it carries one event, as
 * the Standard Webhooks specification has it (the id of the message, the
 * same on every attempt). A batch of several is one message made of
 * events: its id is a UUID (version 8, RFC 9562: its bits are the
 * sender's) from the SHA-256 of its events' ids in order, so that the same
 * batch sent again has the same id. A receiver dedupes events by each
 * one's id in the body.
 */
static char *
request_id(const HttpRequest *req)
{
	pg_cryptohash_ctx *ctx;
	uint8		hash[PG_SHA256_DIGEST_LENGTH];
	bool		ok;

	if (req->nevents == 1)
		return req->events[0]->event_id;
	ctx = pg_cryptohash_create(PG_SHA256);
	ok = ctx != NULL && pg_cryptohash_init(ctx) == 0;
	for (int i = 0; ok && i < req->nevents; i++)
		ok = pg_cryptohash_update(ctx, (const uint8 *) req->events[i]->event_id,
								  strlen(req->events[i]->event_id) + 1) == 0;
	ok = ok && pg_cryptohash_final(ctx, hash, sizeof(hash)) == 0;
	pg_cryptohash_free(ctx);
	if (!ok)
		return NULL;
	hash[6] = (hash[6] & 0x0f) | 0x80;	/* version 8 */
	hash[8] = (hash[8] & 0x3f) | 0x80;	/* the RFC 9562 variant */
	return psprintf("%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
					hash[0], hash[1], hash[2], hash[3], hash[4], hash[5], hash[6], hash[7],
					hash[8], hash[9], hash[10], hash[11], hash[12], hash[13], hash[14], hash[15]);
}

/*
 * The header lines of req: the Standard Webhooks headers (signed when the
 * destination has a secret, timestamp: this attempt's), then the merged
 * headers of the destination and the event (a batch's events have the
 * same: same_request). On a problem that retrying cannot solve (an invalid header,
 * a secret that cannot sign) the event fails permanently and false is
 * returned; false without an error: out of memory.
 */
static bool
build_header_list(HttpRequest *req, const char *timestamp, const char *body)
{
	OutboxEvent *ev = req->events[0];
	char	   *id = request_id(req);
	OutboxHeader *headers;
	int			nheaders = OutboxMergeHeaders(HTTP_OPTIONS(ev)->headers, ev->headers,
											  &headers);
	bool		ok;

	for (int i = 0; i < nheaders; i++)
	{
		if (!OutboxHeaderNameValid(headers[i].name, strlen(headers[i].name)) ||
			!OutboxHeaderValueValid(headers[i].value, strlen(headers[i].value)))
		{
			/* the name only: the value may be a credential */
			ev->permanent = true;
			ev->error = psprintf("invalid HTTP header \"%s\"",
								 OutboxPrintable(headers[i].name, strlen(headers[i].name)));
			return false;
		}
	}

	if (id == NULL)
		return false;
	/* the format's media type, of one event or of a batch */
	ok = append_header(req, psprintf("content-type: %s", is_batch(req) ?
									 HTTP_OPTIONS(ev)->format->batch_content_type :
									 HTTP_OPTIONS(ev)->format->content_type)) &&
		append_header(req, "Expect:") &&
		append_header(req, psprintf("webhook-id: %s", id)) &&
		append_header(req, psprintf("webhook-timestamp: %s", timestamp));
	if (ok && ev->dest.nsecrets > 0)
	{
		char	   *sig = OutboxSignatures(ev->dest.secrets, ev->dest.nsecrets, id,
										   timestamp, body, strlen(body));

		if (sig == NULL)
		{
			ev->permanent = true;
			ev->error = pstrdup("the destination's secret cannot be used to sign (see the rules for secrets)");
			return false;
		}
		ok = append_header(req, psprintf("webhook-signature: %s", sig));
	}
	/* the ce-* lines of the CloudEvents binary mode, built with the body */
	if (ok)
	{
		ListCell   *lc;

		foreach(lc, ev->extra_headers)
		{
			ok = append_header(req, lfirst(lc));
			if (!ok)
				break;
		}
	}
	for (int i = 0; ok && i < nheaders; i++)
	{
		const char *value = headers[i].value;

		if (OutboxHeaderReserved(headers[i].name))
			continue;
		/* the CloudEvents attributes are the event's own, in either mode */
		if (HTTP_OPTIONS(ev)->format->cloudevents &&
			pg_strncasecmp(headers[i].name, OutboxCloudEventsBindingHTTP.prefix,
						   strlen(OutboxCloudEventsBindingHTTP.prefix)) == 0)
			continue;
		/* libcurl drops "name:" with no value; "name;" sends it empty */
		if (value[strspn(value, " \t")] == '\0')
			ok = append_header(req, psprintf("%s;", headers[i].name));
		else
			ok = append_header(req, psprintf("%s: %s", headers[i].name, value));
	}
	return ok;
}

/*
 * A destination's copy of its ca_file is used while the file's status
 * (device, inode, size, modification and change times) stays the same,
 * looked at no more often than every CA_FILE_CHECK_MS, and read again
 * after CA_FILE_MAX_AGE_MS in any case (a change within one tick of a
 * coarse file system clock keeps the times).
 */
#define CA_FILE_CHECK_MS 1000
#define CA_FILE_MAX_AGE_MS 60000

/* Drops d's copy of its ca_file. */
static void
forget_ca_file(HttpDest *d)
{
	free(d->ca_data);
	d->ca_data = NULL;
	d->ca_len = 0;
	if (d->ca_path != NULL)
		pfree(d->ca_path);
	d->ca_path = NULL;
}

/* Whether two stat results are of the same file, unchanged. */
static bool
same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino &&
		a->st_size == b->st_size &&
		a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
		a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/*
 * The contents of the ca_file path of req's destination, in *blob, from
 * the destination's copy: read again (OutboxReadFile, within timeout_ms)
 * when there is none, when the destination names another file, when the
 * file's status differs from the copy's, or when the copy is older than
 * CA_FILE_MAX_AGE_MS. Returns false, the copy dropped and the first
 * event's error saying why (a retryable failure), when the file cannot be
 * read or is not a regular file of at most OUTBOX_FILE_MAX_BYTES.
 */
static bool
ca_file_blob(HttpRequest *req, const char *path, long timeout_ms, struct curl_blob *blob)
{
	HttpDest   *d = req->dest;
	TimestampTz now = GetCurrentTimestamp();
	struct stat st;
	struct timespec deadline;
	char		error[256];
	char	   *data;
	size_t		len;

	bool		keep = d->ca_path != NULL && strcmp(d->ca_path, path) == 0 &&
		!TimestampDifferenceExceeds(d->ca_read_at, now, CA_FILE_MAX_AGE_MS);

	if (keep && TimestampDifferenceExceeds(d->ca_checked_at, now, CA_FILE_CHECK_MS))
	{
		d->ca_checked_at = now;
		keep = stat(path, &st) == 0 && same_file(&st, &d->ca_stat);
	}
	if (!keep)
	{
		forget_ca_file(d);
		deadline = OutboxDeadlineIn((int) timeout_ms);
		if (!OutboxReadFile(path, "ca_file", &deadline, &data, &len, &st, error, sizeof(error)))
		{
			req->events[0]->error = pstrdup(error);
			return false;
		}
		d->ca_data = data;
		d->ca_len = len;
		d->ca_stat = st;
		d->ca_path = MemoryContextStrdup(GetMemoryChunkContext(d), path);
		d->ca_read_at = d->ca_checked_at = now;
	}
	blob->data = d->ca_data;
	blob->len = d->ca_len;
	/* libcurl copies it: the copy here may be replaced while the transfer runs */
	blob->flags = CURL_BLOB_COPY;
	return true;
}

/*
 * Sets the CA certificates of req's easy handle to those of ca_file (path,
 * read by ca_file_blob), instead of the system's CA file and directory.
 * A libcurl that cannot take them from memory (before 7.77, or a TLS
 * backend without it, such as GnuTLS before libcurl 8) is given the path,
 * which ca_file_blob has just checked; it reads the file itself. Returns
 * false if libcurl is out of memory.
 */
static bool
set_ca_file(HttpRequest *req, const char *path, const struct curl_blob *blob)
{
	CURLcode	rc = CURLE_NOT_BUILT_IN;

#if LIBCURL_VERSION_NUM >= 0x074d00
	rc = curl_easy_setopt(req->easy, CURLOPT_CAINFO_BLOB, blob);
#endif
	if (rc == CURLE_OUT_OF_MEMORY)
		return false;
	if (rc != CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_CAINFO, path) != CURLE_OK)
		return false;
	return curl_easy_setopt(req->easy, CURLOPT_CAPATH, NULL) == CURLE_OK;
}

/* libcurl's connect limit: far past any request's own (OUTBOX_MAX_TIMEOUT_MS) */
#define CONNECT_BACKSTOP_MS (24L * 3600 * 1000)

/*
 * Sets the options of req's easy handle: URL, http and https only, no
 * redirects, no time limit of libcurl's (see below), the body
 * (copied: the transfer may outlive the event), the header list, the
 * callbacks, and the destination's CA certificates (ca, when it has a
 * ca_file). Returns false if libcurl is out of memory.
 */
static bool
setup_easy(HttpRequest *req, bool fresh_connect, const char *body,
		   const struct curl_blob *ca)
{
	OutboxEvent *ev = req->events[0];

	return req->easy != NULL &&
		curl_easy_setopt(req->easy, CURLOPT_URL, HTTP_OPTIONS(ev)->url) == CURLE_OK &&
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
		/*
		 * No time limit of libcurl's: it checks one before it reads a socket,
		 * so an answer that came in time, read late because the relay was
		 * held up, would be a timeout. The kind keeps the limit itself
		 * (http_collect.c, expire_requests); libcurl's connect limit,
		 * which defaults to 300 s, only backs it up.
		 */
		curl_easy_setopt(req->easy, CURLOPT_TIMEOUT_MS, 0L) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_BACKSTOP_MS) == CURLE_OK &&
		/* libcurl keeps its own copy: the transfer may outlive the event */
		curl_easy_setopt(req->easy, CURLOPT_POSTFIELDSIZE, (long) strlen(body)) == CURLE_OK &&
		curl_easy_setopt(req->easy, CURLOPT_COPYPOSTFIELDS, body) == CURLE_OK &&
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
		curl_easy_setopt(req->easy, CURLOPT_FRESH_CONNECT, (long) fresh_connect) == CURLE_OK &&
		/* a destination's CA bundle replaces the system's CA file and directory */
		(HTTP_OPTIONS(ev)->ca_file == NULL || set_ca_file(req, HTTP_OPTIONS(ev)->ca_file, ca));
}

/*
 * Builds the easy handle of one request. On a problem that retrying cannot
 * solve (an invalid header, a bad secret) the first event fails
 * permanently and false is returned; the caller does not send it. A
 * ca_file that cannot be used fails it too, to be retried.
 */
static bool
prepare_request(HttpRequestCache *cache, HttpRequest *req, long default_timeout_ms,
				bool fresh_connect)
{
	OutboxEvent *ev = req->events[0];
	char		timestamp[32];
	long		timeout = HTTP_OPTIONS(ev)->timeout_ms >= 0 ?
		HTTP_OPTIONS(ev)->timeout_ms : default_timeout_ms;
	char	   *body = request_body(req);
	struct curl_blob ca = {0};

	snprintf(timestamp, sizeof(timestamp), "%lld", (long long) time(NULL));
	if (!build_header_list(req, timestamp, body))
	{
		if (ev->error == NULL)
			ev->error = pstrdup("could not set up the HTTP request (out of memory?)");
		return false;
	}
	if (!target_allowed(req, HTTP_OPTIONS(ev)->url))
		return false;
	if (HTTP_OPTIONS(ev)->ca_file == NULL)
		forget_ca_file(req->dest);	/* taken out: up to 1 MB not kept for nothing */
	else if (!ca_file_blob(req, HTTP_OPTIONS(ev)->ca_file, timeout, &ca))
		return false;
	req->easy = take_easy(cache);
	req->timeout_ms = timeout;
	if (!setup_easy(req, fresh_connect, body, &ca))
	{
		ev->error = pstrdup("could not set up the HTTP request (out of memory?)");
		return false;
	}
	return true;
}

/*
 * Builds the easy handle of req (its headers, signature, body and libcurl
 * options; default_timeout_ms unless the destination has its own timeout;
 * fresh_connect: reuse no kept connection; an easy handle from cache)
 * with a resource owner in place (cache's, made on first use): the worker
 * builds requests between transactions, where there is none, and
 * PostgreSQL's HMAC and SHA-256 (with OpenSSL) register their contexts
 * with the current one. Returns false, with the first event's
 * error set (permanent when retrying cannot help; OutboxHttpShareOutcome
 * gives it to the others), when the request cannot be sent. Allocates in
 * the current memory context; no transaction needed.
 */
bool
OutboxHttpPrepare(HttpRequestCache *cache, HttpRequest *req, long default_timeout_ms,
				  bool fresh_connect)
{
	ResourceOwner saved = CurrentResourceOwner;
	bool		prepared;

	if (saved == NULL)
	{
		if (cache->owner == NULL)
			cache->owner = ResourceOwnerCreate(NULL, "outbox http");
		CurrentResourceOwner = cache->owner;
	}
	PG_TRY();
	{
		prepared = prepare_request(cache, req, default_timeout_ms, fresh_connect);
	}
	PG_FINALLY();
	{
		CurrentResourceOwner = saved;
	}
	PG_END_TRY();
	return prepared;
}
