/*-------------------------------------------------------------------------
 *
 * headers.c
 *	  The rules for HTTP headers that events and destinations carry, in one
 *	  place: the triggers on outbox and outbox_destinations check them
 *	  (validate.c), and the webhook kind checks each header again with the
 *	  same functions before it sends it (a row may predate the rules, or
 *	  have been written with the triggers off).
 *
 * Who may set what. A destination's headers are an admin's: any valid
 * header but those the relay sets itself (OutboxHeaderReserved), which are
 * skipped. An event's headers are a writer's, who must not be able to set
 * or replace a credential or steer the request: an event may carry only
 * the names OutboxEventHeaderAllowed accepts, and a destination's header
 * of the same name wins.
 *
 * Which of an event's headers reach an endpoint: those the header rules
 * allow, and, if the destination's event_headers is not NULL, only those
 * it names (OutboxForwardedEventHeaders, applied by the claim for every
 * kind); its own headers are not filtered.
 *
 * A headers value is a JSON object whose keys are header names and whose
 * values are taken as jsonb_each_text() would: strings as they are, other
 * scalars and nested values as their JSON text, and JSON null meaning "no
 * such header".
 *
 * src/headers.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/formatting.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "event.h"
#include "headers.h"

PG_FUNCTION_INFO_V1(_outbox_valid_headers);

/*
 * True if name[0..len) is a field name: an RFC 9110 token (section 5.6.2),
 * ASCII letters, digits and !#$%&'*+-.^_`|~, at least one character.
 */
bool
OutboxHeaderNameValid(const char *name, size_t len)
{
	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || (c != '\0' && strchr("!#$%&'*+-.^_`|~", c))))
			return false;
	}
	return true;
}

/*
 * True if value[0..len) has no control character other than tab (RFC 9110
 * section 5.5: CR, LF and NUL are never allowed; the others are refused
 * too, as libcurl would pass them on).
 */
bool
OutboxHeaderValueValid(const char *value, size_t len)
{
	for (size_t i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) value[i];

		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return false;
	}
	return true;
}

/*
 * Header names the relay sets itself, or that shape the HTTP message rather
 * than describe the event (framing, connection, host). A destination's
 * header of such a name is not sent; an event may not carry one.
 */
bool
OutboxHeaderReserved(const char *name)
{
	static const char *const reserved[] = {
		"content-type", "content-length", "content-encoding", "transfer-encoding",
		"host", "expect", "connection", "keep-alive", "te", "trailer", "upgrade",
		"webhook-id", "webhook-timestamp", "webhook-signature"
	};

	for (size_t i = 0; i < lengthof(reserved); i++)
		if (pg_strcasecmp(name, reserved[i]) == 0)
			return true;
	return false;
}

/*
 * Fragments that make an x- name off limits to events: credentials
 * (auth, token, key, ...), routing and proxies (host, forward, proxy,
 * override, ...), and the webhook's own headers. Compared without case,
 * anywhere in the name. docs/security.md ("What an event may carry")
 * lists them: keep both in step.
 */
static const char *const event_header_denied[] = {
	"auth", "token", "secret", "passw", "cookie", "session", "key",
	"credential", "signature", "jwt", "csrf", "xsrf",
	"forward", "host", "proxy", "override", "original", "rewrite",
	"real-ip", "client-ip", "method", "webhook"
};

/*
 * Whether an event (a writer) may carry header name: the W3C Trace Context
 * and Baggage headers (traceparent, tracestate, baggage), and names that
 * start with "x-" and contain none of event_header_denied. Everything else
 * (authorization, proxy-authorization, cookie, host, forwarded, via, ...,
 * and any standard header) is an admin's, set on the destination.
 */
bool
OutboxEventHeaderAllowed(const char *name)
{
	size_t		len = strlen(name);
	char		lower[OUTBOX_MAX_HEADER_NAME_BYTES + 1];

	if (len > OUTBOX_MAX_HEADER_NAME_BYTES)
		return false;
	for (size_t i = 0; i <= len; i++)
		lower[i] = pg_ascii_tolower((unsigned char) name[i]);
	if (strcmp(lower, "traceparent") == 0 || strcmp(lower, "tracestate") == 0 ||
		strcmp(lower, "baggage") == 0)
		return true;
	if (strncmp(lower, "x-", 2) != 0 || len == 2)
		return false;
	for (size_t i = 0; i < lengthof(event_header_denied); i++)
		if (strstr(lower, event_header_denied[i]) != NULL)
			return false;
	return true;
}

/* The text of a jsonb value, as jsonb_each_text() gives it; NULL for null. */
static char *
value_text(JsonbValue *v)
{
	switch (v->type)
	{
		case jbvNull:
			return NULL;
		case jbvString:
			return pnstrdup(v->val.string.val, v->val.string.len);
		case jbvBool:
			return pstrdup(v->val.boolean ? "true" : "false");
		case jbvNumeric:
			return DatumGetCString(DirectFunctionCall1(numeric_out,
													   NumericGetDatum(v->val.numeric)));
		case jbvBinary:
			{
				StringInfoData buf;

				initStringInfo(&buf);
				(void) JsonbToCString(&buf, v->val.binary.data, v->val.binary.len);
				return buf.data;
			}
		default:
			elog(ERROR, "unexpected jsonb value type %d", (int) v->type);
	}
	return NULL;				/* keep compiler quiet */
}

/*
 * Puts the headers of a headers object into *list (palloc'd in the current
 * memory context), in the object's order, and returns how many there are;
 * a header whose value is JSON null has value NULL. headers must be an
 * object. Linear in its size, and interruptible: a writer controls this
 * input.
 */
int
OutboxHeaderList(Jsonb *headers, OutboxHeader **list)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	int			n = 0;
	OutboxHeader *out;
	char	   *name = NULL;

	Assert(JB_ROOT_IS_OBJECT(headers));
	out = palloc(sizeof(OutboxHeader) * Max(JB_ROOT_COUNT(headers), 1));
	it = JsonbIteratorInit(&headers->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		CHECK_FOR_INTERRUPTS();
		if (tok == WJB_KEY)
			name = pnstrdup(v.val.string.val, v.val.string.len);
		else if (tok == WJB_VALUE)
		{
			out[n].name = name;
			out[n].value = value_text(&v);
			n++;
		}
	}
	*list = out;
	return n;
}

/*
 * Fills *p with an error to raise later (SQLSTATE, message, detail; the
 * strings palloc'd by the caller) and returns false, so that a check can
 * say "return OutboxProblemSet(...)". Raises nothing itself.
 */
bool
OutboxProblemSet(OutboxProblem *p, int sqlstate, char *message, char *detail)
{
	p->sqlstate = sqlstate;
	p->message = message;
	p->detail = detail;
	return false;
}

/*
 * Checks a headers object (detoasted) against every rule: a JSON object of
 * at most OUTBOX_MAX_HEADERS_BYTES and OUTBOX_MAX_HEADERS entries, names
 * that are tokens of at most OUTBOX_MAX_HEADER_NAME_BYTES, values of at most
 * OUTBOX_MAX_HEADER_VALUE_BYTES without control characters, and, for an
 * event's headers (event true), only names that events may carry. Returns
 * true, or false with *p filled: 54000 for a limit, 22023 for a value that
 * is not an object, 23514 for a rule. The message names a header only when
 * its name is valid (and so printable), never a value. The sizes are
 * checked before anything is walked: the work is linear in a bounded size.
 */
bool
OutboxHeadersCheck(Jsonb *headers, bool event, OutboxProblem *p)
{
	const char *what = event ? "event" : "destination";
	OutboxHeader *list;
	int			n;

	if (!JB_ROOT_IS_OBJECT(headers) || JB_ROOT_IS_SCALAR(headers))
		return OutboxProblemSet(p, ERRCODE_INVALID_PARAMETER_VALUE,
					   psprintf("%s headers must be a JSON object", what), NULL);
	if (VARSIZE(headers) > OUTBOX_MAX_HEADERS_BYTES)
		return OutboxProblemSet(p, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
					   psprintf("%s headers are larger than %d bytes", what,
								OUTBOX_MAX_HEADERS_BYTES), NULL);
	if (JB_ROOT_COUNT(headers) > OUTBOX_MAX_HEADERS)
		return OutboxProblemSet(p, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
					   psprintf("%s headers have more than %d entries", what,
								OUTBOX_MAX_HEADERS), NULL);
	n = OutboxHeaderList(headers, &list);
	for (int i = 0; i < n; i++)
	{
		size_t		namelen = strlen(list[i].name);

		if (namelen > OUTBOX_MAX_HEADER_NAME_BYTES)
			return OutboxProblemSet(p, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
						   psprintf("%s header name is longer than %d bytes", what,
									OUTBOX_MAX_HEADER_NAME_BYTES), NULL);
		if (!OutboxHeaderNameValid(list[i].name, namelen))
			return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
						   psprintf("%s header name is not a valid HTTP field name", what),
						   pstrdup("Header names are RFC 9110 tokens: ASCII letters, digits and !#$%&'*+-.^_`|~."));
		if (event && !OutboxEventHeaderAllowed(list[i].name))
			return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
						   psprintf("event header \"%s\" is not allowed", list[i].name),
						   pstrdup("An event may carry traceparent, tracestate, baggage, and x- headers whose names contain no credential or routing word; other headers belong to the destination."));
		if (list[i].value == NULL)
			continue;
		if (strlen(list[i].value) > OUTBOX_MAX_HEADER_VALUE_BYTES)
			return OutboxProblemSet(p, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
						   psprintf("value of %s header \"%s\" is longer than %d bytes",
									what, list[i].name, OUTBOX_MAX_HEADER_VALUE_BYTES), NULL);
		if (!OutboxHeaderValueValid(list[i].value, strlen(list[i].value)))
			return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
						   psprintf("value of %s header \"%s\" has a control character",
									what, list[i].name),
						   pstrdup("Header values may contain no control character other than tab."));
	}
	return true;
}

/*
 * Whether s[0..len) is an entry of a destination's event_headers: a header
 * name (an RFC 9110 token) or a prefix pattern, a token ending in "-"
 * followed by "*" (x-envoy-*), at least one character before the "-". A
 * "*" anywhere else is refused, although tokens may hold one: it would
 * read as a wildcard.
 */
static bool
event_headers_entry_valid(const char *s, size_t len)
{
	size_t		name_len = len;

	if (len >= 3 && s[len - 1] == '*' && s[len - 2] == '-')
		name_len = len - 1;
	if (memchr(s, '*', name_len) != NULL)
		return false;
	return OutboxHeaderNameValid(s, name_len);
}

/*
 * Checks a destination's event_headers (a text[], detoasted): one
 * dimension or none, no NULL, at most OUTBOX_MAX_EVENT_HEADER_ENTRIES
 * entries of at most OUTBOX_MAX_HEADER_NAME_BYTES, each a header name or a
 * prefix pattern ending in "-*" (event_headers_entry_valid). Returns true,
 * or false with *p: 22023 for the array's shape or a NULL, 54000 for a
 * limit, 23514 for an entry, named by its position. Raises nothing itself
 * (but out of memory); for the validation trigger, in any backend.
 */
bool
OutboxEventHeadersListCheck(ArrayType *list, OutboxProblem *p)
{
	static const char *const detail =
		"Each entry is a header name (x-tenant) or a prefix ending in -* (x-envoy-*), compared without case; NULL forwards every event header, an empty array none.";
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	if (ARR_NDIM(list) > 1)
		return OutboxProblemSet(p, ERRCODE_INVALID_PARAMETER_VALUE,
								pstrdup("destination event_headers must be a one-dimensional array"),
								NULL);
	if (ArrayGetNItems(ARR_NDIM(list), ARR_DIMS(list)) > OUTBOX_MAX_EVENT_HEADER_ENTRIES)
		return OutboxProblemSet(p, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
								psprintf("destination event_headers has more than %d entries",
										 OUTBOX_MAX_EVENT_HEADER_ENTRIES), NULL);
	deconstruct_array(list, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	for (int i = 0; i < n; i++)
	{
		text	   *t;

		if (nulls[i])
			return OutboxProblemSet(p, ERRCODE_INVALID_PARAMETER_VALUE,
									psprintf("destination event_headers entry %d is null", i + 1),
									pstrdup(detail));
		t = DatumGetTextPP(elems[i]);
		if (VARSIZE_ANY_EXHDR(t) > OUTBOX_MAX_HEADER_NAME_BYTES)
			return OutboxProblemSet(p, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
									psprintf("destination event_headers entry %d is longer than %d bytes",
											 i + 1, OUTBOX_MAX_HEADER_NAME_BYTES), NULL);
		if (!event_headers_entry_valid(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t)))
			return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
									psprintf("destination event_headers entry %d is not a header name or a prefix ending in -*",
											 i + 1),
									pstrdup(detail));
	}
	return true;
}

/*
 * Whether header name is one that patterns (n entries of a destination's
 * event_headers, in lower case) forward: equal to a name, or starting with
 * a pattern's prefix (the pattern without its "*"), without case. Raises
 * nothing; any context.
 */
bool
OutboxEventHeaderForwarded(const char *name, char *const *patterns, int n)
{
	for (int i = 0; i < n; i++)
	{
		size_t		len = strlen(patterns[i]);

		if (len > 0 && patterns[i][len - 1] == '*')
		{
			if (pg_strncasecmp(name, patterns[i], len - 1) == 0)
				return true;
		}
		else if (pg_strcasecmp(name, patterns[i]) == 0)
			return true;
	}
	return false;
}

/*
 * The headers of an event (headers, a JSON object) that a destination
 * whose event_headers are patterns (n entries, lower case) forwards
 * (OutboxEventHeaderForwarded), as a new object in the current memory
 * context, in the same order; NULL when none is. Linear in the headers'
 * size times n (at most OUTBOX_MAX_EVENT_HEADER_ENTRIES); interruptible.
 * For the claim, in its transaction.
 */
Jsonb *
OutboxForwardedEventHeaders(Jsonb *headers, char *const *patterns, int n)
{
	JsonbParseState *state = NULL;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbValue *res;
	JsonbIteratorToken tok;
	JsonbValue	key;
	bool		keep = false;
	int			kept = 0;

	if (!JB_ROOT_IS_OBJECT(headers) || JB_ROOT_IS_SCALAR(headers))
		return headers;			/* not headers: left to the header rules */
	(void) pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	it = JsonbIteratorInit(&headers->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		CHECK_FOR_INTERRUPTS();
		if (tok == WJB_KEY)
		{
			char	   *name = pnstrdup(v.val.string.val, v.val.string.len);

			keep = OutboxEventHeaderForwarded(name, patterns, n);
			pfree(name);
			key = v;
		}
		else if (tok == WJB_VALUE && keep)
		{
			(void) pushJsonbValue(&state, WJB_KEY, &key);
			(void) pushJsonbValue(&state, WJB_VALUE, &v);
			kept++;
		}
	}
	res = pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	return kept > 0 ? JsonbValueToJsonb(res) : NULL;
}

/* Raises ERROR for a problem found by one of the checks. */
void
OutboxRaiseProblem(const OutboxProblem *p)
{
	ereport(ERROR,
			(errcode(p->sqlstate),
			 errmsg_internal("%s", p->message),
			 p->detail ? errdetail_internal("%s", p->detail) : 0));
}

/*
 * _outbox_valid_headers(headers jsonb) RETURNS boolean
 *
 * SQL-callable, IMMUTABLE, internal: true for NULL or for headers that a
 * destination may have (OutboxHeadersCheck with event false: the limits,
 * valid names and values). 1.0's check constraints called it; from 1.1 the
 * triggers of validate.c apply the rules, with clear errors. Raises no
 * error of its own (a JSON value other than an object is false).
 */
Datum
_outbox_valid_headers(PG_FUNCTION_ARGS)
{
	Jsonb	   *headers;
	OutboxProblem p;

	if (PG_ARGISNULL(0))
		PG_RETURN_BOOL(true);
	headers = PG_GETARG_JSONB_P(0);
	PG_RETURN_BOOL(OutboxHeadersCheck(headers, false, &p));
}

/* One header offered for a message, in OutboxMergeHeaders. */
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
 * The headers to send with an event, in *out (palloc'd): the destination's
 * (dest, or NULL), then the event's own (event, or NULL) whose name the
 * destination does not use, compared without case as HTTP and NATS header
 * names are; headers whose value is JSON null are left out, and so are the
 * event's that OutboxEventHeaderAllowed refuses. Returns how many. Sorting
 * keeps this O(n log n) in the number of headers, which a writer controls.
 * Interruptible; runs in the relay, any transaction state.
 */
int
OutboxMergeHeaders(Jsonb *dest, Jsonb *event, OutboxHeader **out)
{
	OutboxHeader *lists[2] = {NULL, NULL};
	int			counts[2] = {0, 0};
	Jsonb	   *sources[2] = {dest, event};
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
