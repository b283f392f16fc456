/*-------------------------------------------------------------------------
 *
 * http_outcome.c
 *	  What a webhook's answer means: the outcome of a request, recorded in
 *	  its first event and shared by the others of a batch.
 *
 * The status line decides (OutboxHttpOutcome): a 2xx is a delivery,
 * whatever happens to the body after it; another status, or a transfer
 * that failed, is an error, worth retrying or not (status_retryable),
 * with the start of the body masked (redact.c) for last_error. 410 Gone
 * disables the destination; 429, 502, 503 and 504 bring the endpoint's
 * Retry-After. Called in the relay's process after libcurl returns, no
 * transaction needed.
 *
 * src/kinds/http/http_outcome.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <curl/curl.h>

#include "common/int.h"
#include "common/pg_prng.h"

#include "destination.h"
#include "http_request.h"

/*
 * Gives every event of req the outcome of its first (a batch's outcome is
 * each of its events'), and one random share of their backoff, so that
 * after a failure they are due at once and go out in one request again
 * (outcome.c). The strings are copied into the current memory context.
 */
void
OutboxHttpShareOutcome(HttpRequest *req)
{
	OutboxEvent *first = req->events[0];

	if (req->nevents > 1)
	{
		first->jitter_set = true;
		first->jitter = pg_prng_double(&pg_global_prng_state);
	}

	for (int i = 1; i < req->nevents; i++)
	{
		OutboxEvent *ev = req->events[i];

		ev->ok = first->ok;
		ev->permanent = first->permanent;
		ev->error = first->error ? pstrdup(first->error) : NULL;
		ev->response = first->response ? pstrdup(first->response) : NULL;
		ev->retry_after_ms = first->retry_after_ms;
		ev->gone_target = first->gone_target ? pstrdup(first->gone_target) : NULL;
		ev->gone_answer = first->gone_answer;
		ev->jitter_set = first->jitter_set;
		ev->jitter = first->jitter;
	}
}

/*
 * Whether an HTTP status is worth retrying. 5xx and the 4xx that say "not
 * now" (408 Request Timeout, 409 Conflict, 425 Too Early, 429 Too Many
 * Requests) are; any other 4xx says the request itself is wrong, and the
 * same request will fail again, unless the destination asks otherwise.
 * 3xx: redirects are not followed, and the endpoint may be moved back.
 */
static bool
status_retryable(long status, const HttpDestOptions *dest)
{
	if (status >= 400 && status < 500)
		return status == 408 || status == 409 || status == 425 || status == 429 ||
			dest->retry_client_errors;
	return true;
}

/* the most of a redirect's Location that last_error keeps */
#define LOCATION_MAX_BYTES 512

/* OutboxHttpOutcome for the first event of req. */
static void
record_outcome(HttpRequest *req, CURLcode result)
{
	OutboxEvent *ev = req->events[0];
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
								 req->errbuf[0] ? OutboxRedact(req->errbuf, strlen(req->errbuf))
								 : curl_easy_strerror(result));
		return;
	}
	ev->error = psprintf("HTTP status %ld", status);
	if (status == 410)
	{
		/*
		 * 410 Gone: the Standard Webhooks specification says the sender
		 * should stop sending to the endpoint. The destination is disabled
		 * (outcome.c); the event stays pending for when it is enabled again.
		 */
		ev->gone_target = pstrdup(HTTP_OPTIONS(ev)->url);
		ev->gone_answer = "410 Gone";
		ev->error = pstrdup("HTTP status 410 (Gone: the destination is disabled until it is enabled again)");
	}
	else if (status >= 300 && status < 400)
	{
		char	   *location = NULL;

		/* where the endpoint moved to, for the operator to update the URL */
		if (curl_easy_getinfo(req->easy, CURLINFO_REDIRECT_URL, &location) == CURLE_OK &&
			location != NULL)
			ev->error = psprintf("%s (redirects are not followed; Location: %s)", ev->error,
								 OutboxRedact(location, Min(strlen(location), LOCATION_MAX_BYTES)));
		else
			ev->error = psprintf("%s (redirects are not followed)", ev->error);
	}
	if (req->response_len > 0)
		ev->response = OutboxRedact(req->response, req->response_len);
	ev->permanent = status != 410 && !status_retryable(status, HTTP_OPTIONS(ev));
	/*
	 * Retry-After: RFC 9110 10.2.3 names 503 (and 429, RFC 6585); 502 and
	 * 504 come from a gateway before the endpoint, which may send it too
	 */
	if (status == 429 || status == 502 || status == 503 || status == 504)
	{
		curl_off_t	retry_after = 0;

		/*
		 * libcurl reads both forms, seconds and an HTTP date (RFC 9110
		 * 10.2.3), into a 64-bit count of seconds: an endpoint's number of
		 * seconds can be as large as that, and in milliseconds overflow
		 * (18446744073709552 s became 384 ms). Capped at backoff_max later.
		 */
		if (curl_easy_getinfo(req->easy, CURLINFO_RETRY_AFTER, &retry_after) == CURLE_OK &&
			retry_after > 0 &&
			pg_mul_s64_overflow((int64) retry_after, 1000, &ev->retry_after_ms))
			ev->retry_after_ms = PG_INT64_MAX;
	}
}

/*
 * Records the outcome of a request in its events (OutboxHttpShareOutcome):
 * delivered for a 2xx status line, whatever happened to the body after
 * it; otherwise the status (with a redirect's Location, and the start of
 * the body, credentials masked: OutboxRedact) or the transfer error,
 * whether it is worth retrying, and the endpoint's Retry-After for 429,
 * 502, 503 and 504.
 */
void
OutboxHttpOutcome(HttpRequest *req, CURLcode result)
{
	record_outcome(req, result);
	OutboxHttpShareOutcome(req);
}
