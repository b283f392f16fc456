/*-------------------------------------------------------------------------
 *
 * trace_context.c
 *	  The W3C Trace Context of the transaction that emits an event: taken
 *	  when the event is written, carried by every kind.
 *
 * An event carries its trace context as two of its headers, traceparent
 * and tracestate (W3C Trace Context, Level 1, sections 3.2 and 3.3): given
 * by the writer in the event's headers, or, when it gives neither, taken
 * from the settings outbox.traceparent and outbox.tracestate, which an
 * application sets for its transaction (SET LOCAL), so that events written
 * by triggers and procedures carry the caller's trace. Kinds then send
 * them as they send every header (a webhook's HTTP headers, a JetStream
 * message's headers), and the CloudEvents formats as the attributes of the
 * Distributed Tracing extension.
 *
 * Tracing must never fail a business transaction: a value that is not a
 * W3C trace context, from the headers or the settings, is dropped with a
 * WARNING to the writer, and the event is written without it. A tracestate without a valid traceparent is
 * dropped with it, as the W3C spec says (3.3: "if the vendor failed to
 * parse traceparent, it MUST NOT attempt to parse tracestate"). Header
 * names are matched without case, as HTTP's are.
 *
 * src/trace_context.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "event.h"
#include "guc.h"
#include "trace_context.h"

/* W3C Trace Context 3.3.1: at most 32 list-members, each value up to 256 */
#define TRACESTATE_MAX_MEMBERS 32
#define TRACESTATE_MAX_VALUE 256
#define TRACESTATE_MAX_KEY 256
/* 3.3.1.5: "SHOULD propagate at least 512 characters"; more is dropped */
#define TRACESTATE_MAX_BYTES 512

static bool
lower_hex(const char *s, int n, bool *all_zero)
{
	*all_zero = true;
	for (int i = 0; i < n; i++)
	{
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
		if (s[i] != '0')
			*all_zero = false;
	}
	return true;
}

/*
 * Whether s (len bytes) is a traceparent (3.2.2): version, trace-id,
 * parent-id and flags in lower-case hex, "-" between them; version ff, an
 * all-zero trace-id or parent-id are invalid. A version above 00 may be
 * followed by more fields after a "-" (3.2.4.2, forward compatibility);
 * version 00 is exactly 55 bytes.
 */
bool
OutboxTraceparentValid(const char *s, size_t len)
{
	bool		zero;

	if (len < 55 || s[2] != '-' || s[35] != '-' || s[52] != '-')
		return false;
	if (!lower_hex(s, 2, &zero) || strncmp(s, "ff", 2) == 0)
		return false;
	if (!lower_hex(s + 3, 32, &zero) || zero)
		return false;
	if (!lower_hex(s + 36, 16, &zero) || zero)
		return false;
	if (!lower_hex(s + 53, 2, &zero))
		return false;
	if (strncmp(s, "00", 2) == 0)
		return len == 55;
	return len == 55 || s[55] == '-';
}

/* a tracestate key (3.3.1.3.1): simple-key, or tenant-id@system-id */
static bool
tracestate_key_valid(const char *s, size_t len)
{
	const char *at = memchr(s, '@', len);

	if (len == 0 || len > TRACESTATE_MAX_KEY)
		return false;
	if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
		return false;
	for (size_t i = 0; i < len; i++)
	{
		char		c = s[i];

		if (&s[i] == at)
			continue;
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
			  c == '*' || c == '/'))
			return false;
	}
	/* a system-id of 1 to 14 characters, starting with a letter */
	if (at != NULL)
	{
		size_t		sys = len - (at - s) - 1;

		if (sys == 0 || sys > 14 || !(at[1] >= 'a' && at[1] <= 'z') || at == s)
			return false;
	}
	return true;
}

/* a tracestate value (3.3.1.3.2): 1 to 256 of 0x20-0x7e but , and =, not ending in a space */
static bool
tracestate_value_valid(const char *s, size_t len)
{
	if (len == 0 || len > TRACESTATE_MAX_VALUE || s[len - 1] == ' ')
		return false;
	for (size_t i = 0; i < len; i++)
		if (s[i] < 0x20 || s[i] > 0x7e || s[i] == ',' || s[i] == '=')
			return false;
	return true;
}

/*
 * Whether s (len bytes) is a tracestate (3.3.1): at most 512 bytes (what
 * every vendor must propagate), list-members key=value separated by
 * commas with optional spaces or tabs around them, at most 32; empty
 * members are allowed. Empty as a whole is not a value worth carrying.
 */
bool
OutboxTracestateValid(const char *s, size_t len)
{
	int			members = 0;
	size_t		i = 0;

	if (len == 0 || len > TRACESTATE_MAX_BYTES)
		return false;
	while (i <= len)
	{
		size_t		end = i;
		size_t		a;
		size_t		b;
		const char *eq;

		while (end < len && s[end] != ',')
			end++;
		a = i;
		b = end;
		while (a < b && (s[a] == ' ' || s[a] == '\t'))
			a++;
		while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t'))
			b--;
		if (b > a)
		{
			eq = memchr(s + a, '=', b - a);
			if (eq == NULL || ++members > TRACESTATE_MAX_MEMBERS ||
				!tracestate_key_valid(s + a, eq - (s + a)) ||
				!tracestate_value_valid(eq + 1, (s + b) - (eq + 1)))
				return false;
		}
		i = end + 1;
	}
	return members > 0;
}

/* the value of header name (any case) of headers, or NULL; *key: its own name */
static JsonbValue *
find_header(Jsonb *headers, const char *name, char **key)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *found = NULL;

	*key = NULL;
	if (headers == NULL || !JB_ROOT_IS_OBJECT(headers))
		return NULL;
	it = JsonbIteratorInit(&headers->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY && found == NULL && v.val.string.len == (int) strlen(name) &&
			pg_strncasecmp(v.val.string.val, name, v.val.string.len) == 0)
			found = pnstrdup(v.val.string.val, v.val.string.len);
	}
	if (found == NULL)
		return NULL;
	*key = found;
	return getKeyJsonValueFromContainer(&headers->root, found, strlen(found), NULL);
}

/*
 * The WARNING for a trace context dropped: what is wrong with it (its
 * place, never its value).
 */
static void
warn_dropped(const char *what, bool tracestate)
{
	ereport(WARNING,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("%s: the event is written without it", what),
			 tracestate ?
			 errhint("A tracestate is 1 to 32 comma-separated key=value members, at most 512 bytes (W3C Trace Context).") :
			 errhint("A traceparent is \"00-\" and 32, 16 and 2 lower-case hex digits separated by \"-\" (W3C Trace Context).")));
}

/* headers (or NULL) with key removed, or keys[0..n) */
static Jsonb *
without(Jsonb *headers, char *const *keys, int n)
{
	JsonbParseState *state = NULL;
	JsonbIterator *it = JsonbIteratorInit(&headers->root);
	JsonbValue	v;
	JsonbIteratorToken tok;
	JsonbValue *res = NULL;
	bool		skip = false;

	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
		{
			skip = false;
			for (int i = 0; i < n; i++)
				if (keys[i] != NULL && v.val.string.len == (int) strlen(keys[i]) &&
					memcmp(v.val.string.val, keys[i], v.val.string.len) == 0)
					skip = true;
			if (skip)
				continue;
		}
		if (tok == WJB_VALUE && skip)
			continue;
		res = pushJsonbValue(&state, tok, tok < WJB_BEGIN_ARRAY ? &v : NULL);
	}
	return JsonbValueToJsonb(res);
}

/* appends name: value to the object being built in *state */
static void
push_header(JsonbParseState **state, const char *name, const char *value)
{
	JsonbValue	k;
	JsonbValue	v;

	k.type = jbvString;
	k.val.string.val = (char *) name;
	k.val.string.len = strlen(name);
	v.type = jbvString;
	v.val.string.val = (char *) value;
	v.val.string.len = strlen(value);
	(void) pushJsonbValue(state, WJB_KEY, &k);
	(void) pushJsonbValue(state, WJB_VALUE, &v);
}

/*
 * headers (or NULL: a new object) with traceparent added, and tracestate
 * unless it is NULL: one new object
 */
static Jsonb *
with_trace(Jsonb *headers, const char *traceparent, const char *tracestate)
{
	JsonbParseState *state = NULL;
	JsonbValue *res;

	if (headers != NULL)
	{
		JsonbIterator *it = JsonbIteratorInit(&headers->root);
		JsonbValue	e;
		JsonbIteratorToken tok;

		while ((tok = JsonbIteratorNext(&it, &e, true)) != WJB_END_OBJECT)
			(void) pushJsonbValue(&state, tok, tok < WJB_BEGIN_ARRAY ? &e : NULL);
	}
	else
		(void) pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	push_header(&state, "traceparent", traceparent);
	if (tracestate != NULL)
		push_header(&state, "tracestate", tracestate);
	res = pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	return JsonbValueToJsonb(res);
}

/*
 * The headers an event is written with, its trace context settled (see
 * the file's header): headers as given (NULL: none) when they hold a valid
 * traceparent, or hold neither header and the settings hold none; else a
 * new object, invalid trace headers dropped (WARNING), or the settings'
 * added while the headers have room for them (OUTBOX_MAX_HEADERS; else a
 * WARNING, 54000).
 * For the BEFORE INSERT trigger on outbox, in the writer's transaction.
 */
Jsonb *
OutboxTraceContextSettle(Jsonb *headers)
{
	char	   *parent_key;
	char	   *state_key;
	JsonbValue *parent;
	JsonbValue *state;

	/* not an object: the header rules refuse it, with their error */
	if (headers != NULL && !JB_ROOT_IS_OBJECT(headers))
		return headers;
	parent = find_header(headers, "traceparent", &parent_key);
	state = find_header(headers, "tracestate", &state_key);
	if (parent != NULL || state != NULL)
	{
		char	   *drop[2] = {NULL, NULL};

		/* the writer's own: kept if valid, never mixed with the settings' */
		if (parent == NULL || parent->type != jbvString ||
			!OutboxTraceparentValid(parent->val.string.val, parent->val.string.len))
		{
			warn_dropped(parent == NULL ? "event header tracestate has no traceparent" :
						 "event header traceparent is not a W3C trace context", false);
			drop[0] = parent_key;
			drop[1] = state_key;
		}
		else if (state != NULL &&
				 (state->type != jbvString ||
				  !OutboxTracestateValid(state->val.string.val, state->val.string.len)))
		{
			warn_dropped("event header tracestate is not a W3C trace context", true);
			drop[1] = state_key;
		}
		return drop[0] == NULL && drop[1] == NULL ? headers : without(headers, drop, 2);
	}
	if (outbox_traceparent == NULL || outbox_traceparent[0] == '\0')
		return headers;
	if (!OutboxTraceparentValid(outbox_traceparent, strlen(outbox_traceparent)))
	{
		warn_dropped("outbox.traceparent is not a W3C trace context", false);
		return headers;
	}
	/* room for both: tracing never makes an event break a header limit */
	if (headers != NULL && JB_ROOT_IS_OBJECT(headers) &&
		(JB_ROOT_COUNT(headers) + 2 > OUTBOX_MAX_HEADERS ||
		 VARSIZE(headers) + TRACESTATE_MAX_BYTES + 128 > OUTBOX_MAX_HEADERS_BYTES))
	{
		ereport(WARNING,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("the event's headers leave no room for the trace context of outbox.traceparent: the event is written without it"),
				 errdetail("An event carries at most %d headers and %d bytes of them; the trace context takes 2 headers and up to %d bytes.",
						   OUTBOX_MAX_HEADERS, OUTBOX_MAX_HEADERS_BYTES, TRACESTATE_MAX_BYTES + 128)));
		return headers;
	}
	if (outbox_tracestate != NULL && outbox_tracestate[0] != '\0' &&
		!OutboxTracestateValid(outbox_tracestate, strlen(outbox_tracestate)))
	{
		warn_dropped("outbox.tracestate is not a W3C trace context", true);
		return with_trace(headers, outbox_traceparent, NULL);
	}
	return with_trace(headers, outbox_traceparent,
					  outbox_tracestate != NULL && outbox_tracestate[0] != '\0' ?
					  outbox_tracestate : NULL);
}

/*
 * The trace context an event carries (its headers, as the claim filtered
 * them for its destination), for the CloudEvents Distributed Tracing
 * extension: *traceparent and *tracestate palloc'd, or NULL. Any process,
 * no error.
 */
void
OutboxTraceContextOf(Jsonb *headers, char **traceparent, char **tracestate)
{
	char	   *key;
	JsonbValue *v;

	*traceparent = *tracestate = NULL;
	v = find_header(headers, "traceparent", &key);
	if (v == NULL || v->type != jbvString ||
		!OutboxTraceparentValid(v->val.string.val, v->val.string.len))
		return;
	*traceparent = pnstrdup(v->val.string.val, v->val.string.len);
	v = find_header(headers, "tracestate", &key);
	if (v != NULL && v->type == jbvString &&
		OutboxTracestateValid(v->val.string.val, v->val.string.len))
		*tracestate = pnstrdup(v->val.string.val, v->val.string.len);
}
