/*-------------------------------------------------------------------------
 *
 * cloudevents.c
 *	  An event as a CloudEvent 1.0 (https://cloudevents.io), for
 *	  destinations whose format is cloudevents (structured content mode) or
 *	  cloudevents-binary (binary content mode, under the kind's protocol
 *	  binding: format.h).
 *
 * The mapping, fixed:
 *	 specversion      "1.0"
 *	 id               the event_id (unique for any source)
 *	 source           the destination's cloudevents_source, or
 *	                  "/outbox/<database>" (the name percent-encoded)
 *	 type             the event_type
 *	 time             created_at, RFC 3339 in UTC with Z (OutboxAppendUtcTime)
 *	 subject          "<aggregate_type>/<aggregate_id>", or the aggregate_id
 *	                  alone without a type; absent without an aggregate_id
 *	 partitionkey     the same value (the Partitioning extension), so that
 *	                  routers keep an aggregate's events together
 *	 traceparent,     the event's trace context (the Distributed Tracing
 *	 tracestate       extension), from its traceparent and tracestate
 *	                  headers as its destination forwards them; absent
 *	                  without (trace_context.c)
 *	 datacontenttype  "application/json"
 *	 data             the payload
 *
 * Structured mode sends the JSON object with those members (data as
 * JSON), Content-Type application/cloudevents+json. Binary mode sends the
 * payload as the body, Content-Type application/json, and the other
 * attributes as headers named by the binding's prefix (HTTP: ce-<name>),
 * each value percent-encoded where the binding requires it (HTTP, section
 * 3.1.3.2: every byte outside printable ASCII U+0021..U+007E, and space,
 * double quote and percent, as %XX of its UTF-8).
 *
 * src/cloudevents.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/dbcommands.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "cloudevents.h"
#include "envelope.h"
#include "size_limits.h"
#include "trace_context.h"

/* the HTTP protocol binding's binary mode (section 3.1.3) */
const OutboxCloudEventBinding OutboxCloudEventsBindingHTTP = {"ce-", true};

/* the structured object's member names and fixed values, with room to spare */
#define CE_FIXED_BYTES 256

/*
 * text in UTF-8, the encoding the CloudEvents HTTP binding percent-encodes
 * (RFC 3986 too): converted from the database's encoding, which needs a
 * transaction (an encoding's conversion function is looked up in the
 * catalog); a SQL_ASCII database's bytes have no known encoding and are
 * taken as they are.
 */
static const char *
to_utf8(const char *text)
{
	if (GetDatabaseEncoding() == PG_SQL_ASCII)
		return text;
	return pg_server_to_any(text, strlen(text), PG_UTF8);
}

static List *cloudevent_headers(const OutboxEvent *ev, const char *source,
								 const OutboxCloudEventBinding *binding);

/*
 * An event's CloudEvents subject and partitionkey: "<aggregate_type>/
 * <aggregate_id>", the aggregate_id alone without a type, or NULL without
 * an aggregate_id; in the server's encoding (not a copy). Also the message
 * key of a kind whose protocol binding maps partitionkey to one (Kafka's).
 * Raises no error but out of memory; any process.
 */
char *
OutboxCloudEventPartitionKey(const OutboxEvent *ev)
{
	if (ev->aggregate_id == NULL)
		return NULL;
	if (ev->aggregate_type == NULL)
		return ev->aggregate_id;
	return psprintf("%s/%s", ev->aggregate_type, ev->aggregate_id);
}

/*
 * The default source of this database's destinations, "/outbox/<name>",
 * the name's bytes other than RFC 3986's unreserved characters
 * percent-encoded (a URI-reference, as the specification requires).
 * Computed once per process; needs a transaction the first time.
 */
static const char *
default_source(void)
{
	static char *source = NULL;

	if (source == NULL)
	{
		char	   *db = get_database_name(MyDatabaseId);
		const char *name = db != NULL ? to_utf8(db) : NULL;
		StringInfoData buf;

		initStringInfo(&buf);
		appendStringInfoString(&buf, "/outbox/");
		for (const unsigned char *c = (const unsigned char *) (name ? name : ""); *c; c++)
		{
			if ((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
				(*c >= '0' && *c <= '9') || (*c != '\0' && strchr("-._~", *c) != NULL))
				appendStringInfoChar(&buf, (char) *c);
			else
				appendStringInfo(&buf, "%%%02X", *c);
		}
		source = MemoryContextStrdup(TopMemoryContext, buf.data);
		pfree(buf.data);
	}
	return source;
}

/*
 * Checks a cloudevents_source: a URI-reference of printable ASCII (no
 * space), 1 to OUTBOX_MAX_TYPE_BYTES bytes. Returns true, or false with *p
 * (23514, or 54000 for the length). The full syntax of a URI-reference is
 * left to receivers; what is refused here would never be one.
 */
bool
OutboxCloudEventSourceCheck(const char *source, OutboxProblem *p)
{
	size_t		len = strlen(source);

	if (len > OUTBOX_MAX_TYPE_BYTES)
		return OutboxProblemSet(p, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
								psprintf("destination cloudevents_source is longer than %d bytes",
										 OUTBOX_MAX_TYPE_BYTES), NULL);
	if (len == 0)
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination cloudevents_source must not be empty"), NULL);
	for (size_t i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) source[i];

		/* RFC 3986: never in a URI-reference, or a % not followed by two hex digits */
		if (c <= 0x20 || c >= 0x7f || strchr("\"<>\\^`{|}", c) != NULL ||
			(c == '%' && !(isxdigit((unsigned char) source[i + 1]) &&
						   isxdigit((unsigned char) source[i + 2]))))
			return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
									pstrdup("destination cloudevents_source is not valid"),
									pstrdup("A source is a URI-reference (RFC 3986): printable ASCII without spaces or \"<>\\^`{|}; encode other characters as %XX."));
	}
	return true;
}

/* The source a destination's events carry: its own, or the default. */
const char *
OutboxCloudEventSource(const char *column)
{
	return column != NULL ? column : default_source();
}

static void
append_member(StringInfo buf, const char *name, const char *value)
{
	appendStringInfo(buf, ", \"%s\": ", name);
	escape_json(buf, value);
}

/*
 * Builds what is sent for a claimed event in a CloudEvents format: the
 * structured JSON object (binary NULL), or in binary mode the payload
 * alone and the attributes as header lines under the binding binary
 * (ev->extra_headers); within the envelope's limits (OutboxEnvelopeCheck,
 * on the envelope's bound plus what a CloudEvent adds: the source, the
 * aggregate a second time, escaped at worst six bytes to one, and the
 * longer member names), then lets the payload go. Returns the bytes the
 * body costs (twice its length: the kind copies it). Through
 * OutboxPrepareFormat, for a kind's prepare: in the claim's transaction
 * and memory context.
 */
Size
OutboxPrepareCloudEvent(OutboxEvent *ev, const char *source, const OutboxCloudEventBinding *binary)
{
	OutboxProblem p;
	StringInfoData buf;
	char	   *key = OutboxCloudEventPartitionKey(ev);

	char	   *traceparent;
	char	   *tracestate;
	Size		extra;

	OutboxTraceContextOf(ev->headers, &traceparent, &tracestate);
	extra = strlen(source) + CE_FIXED_BYTES + (key != NULL ? 6 * strlen(key) : 0) +
		(traceparent != NULL ? strlen(traceparent) + 32 : 0) +
		(tracestate != NULL ? strlen(tracestate) + 32 : 0);

	if (!OutboxEnvelopeCheck(OutboxEventEnvelopeBound(ev) + extra, &p))
	{
		ev->permanent = true;
		ev->error = p.message;
		return 0;
	}
	initStringInfo(&buf);
	if (binary)
		JsonbToCString(&buf, &ev->payload->root, VARSIZE(ev->payload));
	else
	{
		appendStringInfo(&buf, "{\"specversion\": \"1.0\", \"id\": \"%s\"", ev->event_id);
		append_member(&buf, "source", source);
		append_member(&buf, "type", ev->event_type);
		if (!TIMESTAMP_NOT_FINITE(ev->created_at))
		{
			appendStringInfoString(&buf, ", \"time\": \"");
			OutboxAppendUtcTime(&buf, ev->created_at);
			appendStringInfoChar(&buf, '"');
		}
		if (key != NULL)
		{
			append_member(&buf, "subject", key);
			append_member(&buf, "partitionkey", key);
		}
		/* the Distributed Tracing extension's attributes */
		if (traceparent != NULL)
			append_member(&buf, "traceparent", traceparent);
		if (tracestate != NULL)
			append_member(&buf, "tracestate", tracestate);
		appendStringInfoString(&buf, ", \"datacontenttype\": \"application/json\", \"data\": ");
		JsonbToCString(&buf, &ev->payload->root, VARSIZE(ev->payload));
		appendStringInfoChar(&buf, '}');
	}
	ev->body = buf.data;
	pfree(ev->payload);
	ev->payload = NULL;
	if (binary)
	{
		ListCell   *lc;
		Size		bytes = 0;

		/* now, in the claim's transaction: the relay sends them without one */
		ev->extra_headers = cloudevent_headers(ev, source, binary);
		foreach(lc, ev->extra_headers)
			bytes += strlen(lfirst(lc)) + 1;
		return 2 * (buf.len + bytes);
	}
	return 2 * buf.len;
}

/*
 * appends "<prefix><name>: <value>" to lines, the value's UTF-8 bytes
 * whatever the database's encoding, percent-encoded if the binding says so
 * (the HTTP binding's rule)
 */
static List *
header_line(List *lines, const OutboxCloudEventBinding *b, const char *name, const char *text)
{
	StringInfoData buf;
	const char *value = to_utf8(text);

	initStringInfo(&buf);
	appendStringInfo(&buf, "%s%s: ", b->prefix, name);
	for (const unsigned char *c = (const unsigned char *) value; *c; c++)
	{
		if (b->percent_encode && (*c <= 0x20 || *c >= 0x7f || *c == '"' || *c == '%'))
			appendStringInfo(&buf, "%%%02X", *c);
		else
			appendStringInfoChar(&buf, (char) *c);
	}
	return lappend(lines, buf.data);
}

/*
 * The header lines of an event in binary mode under binding b (see the
 * file's header), "name: value", a List of palloc'd strings in the current
 * memory context. In a transaction (to_utf8): OutboxPrepareCloudEvent
 * builds them in the claim's, and the kind sends them (ev->extra_headers).
 */
static List *
cloudevent_headers(const OutboxEvent *ev, const char *source, const OutboxCloudEventBinding *b)
{
	List	   *lines = NIL;
	char	   *key = OutboxCloudEventPartitionKey(ev);
	char	   *traceparent;
	char	   *tracestate;

	lines = header_line(lines, b, "specversion", "1.0");
	lines = header_line(lines, b, "id", ev->event_id);
	lines = header_line(lines, b, "source", source);
	lines = header_line(lines, b, "type", ev->event_type);
	if (!TIMESTAMP_NOT_FINITE(ev->created_at))
	{
		StringInfoData t;

		initStringInfo(&t);
		OutboxAppendUtcTime(&t, ev->created_at);
		lines = header_line(lines, b, "time", t.data);
	}
	if (key != NULL)
	{
		lines = header_line(lines, b, "subject", key);
		lines = header_line(lines, b, "partitionkey", key);
	}
	OutboxTraceContextOf(ev->headers, &traceparent, &tracestate);
	if (traceparent != NULL)
		lines = header_line(lines, b, "traceparent", traceparent);
	if (tracestate != NULL)
		lines = header_line(lines, b, "tracestate", tracestate);
	return lines;
}
