/*-------------------------------------------------------------------------
 *
 * http_rules.c
 *	  The webhook kind's rules: for a destination row (check_destination),
 *	  the reading of one (decode), and for an event (prepare: the headers
 *	  it carries, and the body sent).
 *
 * check_destination runs in the BEFORE trigger on outbox_destinations, in
 * any backend; decode and prepare in the claim's transaction, in the relay
 * or a backend running outbox_relay(). None keeps anything between calls.
 * A message about a destination never quotes its url, which may hold
 * credentials.
 *
 * src/kinds/http/http_rules.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <curl/curl.h>

#include "cloudevents.h"
#include "destination.h"
#include "envelope.h"
#include "headers.h"
#include "http_int.h"
#include "http_request.h"

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
 * ca_file (OutboxDestinationFileCheck: the relay reads it) if it has one;
 * events_per_request is 1 to HTTP_MAX_EVENTS_PER_REQUEST, and 1 in the
 * CloudEvents binary mode, which carries one event per request (the
 * CloudEvents HTTP binding: batches are a structured-mode format).
 */
bool
OutboxHttpCheckDestination(const OutboxDestinationRow *row, OutboxProblem *p)
{
	char	   *format = OutboxDestinationText(row, "format");
	bool		isnull;
	Datum		per_request = OutboxDestinationColumn(row, "events_per_request", &isnull);

	if (!url_check(OutboxDestinationText(row, "url"), p))
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
	return OutboxDestinationFileCheck(row, "ca_file", "url", p);
}

/*
 * decode: url, timeout_ms, headers, retry_client_errors, ca_file,
 * events_per_request, the format and a CloudEvents format's source into an HttpDestOptions
 * (timeout_ms and headers are read by webhooks only,
 * though every kind may have them: see check_shared_columns).
 */
Size
OutboxHttpDecode(const OutboxDestinationRow *row, OutboxDestination *dest)
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
	/* the claim's, for comparing destinations when requests are batched */
	o->format = dest->fmt;
	o->ce_source = dest->ce_source;
	dest->options = o;
	return bytes;
}

/*
 * prepare: an event's own headers must follow the rules for headers an
 * event may carry (checked here, where they are first read); the body is
 * the envelope, or the event as a CloudEvent (cloudevents.c), in UTF-8
 * whatever the database's encoding (OutboxBodyToUtf8: JSON on the wire).
 */
Size
OutboxHttpPrepareEvent(void *state pg_attribute_unused(), OutboxEvent *ev)
{
	OutboxProblem p;
	Size		cost;

	if (ev->headers != NULL && !OutboxHeadersCheck(ev->headers, true, &p))
	{
		ev->permanent = true;
		ev->error = p.message;
		return 0;
	}
	cost = OutboxPrepareFormat(ev);
	return OutboxBodyToUtf8(ev, cost);
}
