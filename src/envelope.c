/*-------------------------------------------------------------------------
 *
 * envelope.c
 *	  The JSON envelope the relay sends for an event, to every kind that
 *	  sends it.
 *
 * {"id": <event_id>, "type": ..., "aggregate_type": ..., "aggregate_id": ...,
 *  "created_at": <ISO 8601 in UTC, with Z>, "attempt": <n>, "payload": <the payload>}
 *
 * Built in C, in a fixed key order, once per attempt. _outbox_envelope()
 * exposes the same builder to SQL, so that the exact bytes sent (and their
 * size against NOTIFY's limit) can be computed and tested.
 *
 * Without its payload (with_payload false), the same keys but "payload":
 * a kind that must send less (a reference, for a consumer that reads the
 * event from the database) sends that. A consumer tells it from the full
 * envelope by the missing "payload" key.
 *
 * src/envelope.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/json.h"
#include "mb/pg_wchar.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "envelope.h"
#include "size_limits.h"

PG_FUNCTION_INFO_V1(_outbox_envelope);

/*
 * The most bytes the full envelope of claimed event ev (its payload still
 * there) can take (OutboxEnvelopeBound), measured once and kept in the
 * event: the claim measures it to see whether the event fits the relay's
 * memory budget, and OutboxPrepareEnvelope checks it against the limit.
 * In the claim's transaction.
 */
Size
OutboxEventEnvelopeBound(OutboxEvent *ev)
{
	OutboxEventSizes sizes;

	if (ev->envelope_bound == 0)
	{
		sizes.event_type = strlen(ev->event_type);
		sizes.aggregate_type = ev->aggregate_type ? strlen(ev->aggregate_type) : 0;
		sizes.aggregate_id = ev->aggregate_id ? strlen(ev->aggregate_id) : 0;
		sizes.payload = VARSIZE(ev->payload) - VARHDRSZ;
		sizes.headers = 0;
		ev->envelope_bound = OutboxEnvelopeBound(&sizes, PointerGetDatum(ev->payload));
	}
	return ev->envelope_bound;
}

/*
 * Builds a claimed event's body as the envelope (with its payload or not), once its
 * size is known to be within OUTBOX_MAX_ENVELOPE_BYTES (OutboxEnvelopeCheck:
 * an event over it gets a permanent error and no body), and lets the
 * payload go. Returns the bytes the body costs: twice its length, as the
 * kind copies it (libcurl's COPYPOSTFIELDS, or the NOTIFY queue). For a
 * kind's prepare callback: in the claim's transaction and memory context.
 */
Size
OutboxPrepareEnvelope(OutboxEvent *ev, bool with_payload)
{
	OutboxProblem p;

	if (!OutboxEnvelopeCheck(OutboxEventEnvelopeBound(ev), &p))
	{
		ev->permanent = true;
		ev->error = p.message;
		return 0;
	}
	ev->body = OutboxBuildEnvelope(ev, ev->attempts + 1, with_payload);
	pfree(ev->payload);
	ev->payload = NULL;
	return 2 * strlen(ev->body);
}

/*
 * Converts a prepared event's body to UTF-8 for a kind whose wire format
 * requires it (JSON exchanged between systems: RFC 8259, section 8.1),
 * from the database's encoding; a SQL_ASCII database's bytes have no known
 * encoding and stay as they are. Returns the bytes the body then costs
 * (twice its length, as OutboxPrepareEnvelope counts it), cost when there
 * is no body. For a kind's prepare callback: in the claim's transaction
 * (a conversion function is looked up in the catalog).
 */
Size
OutboxBodyToUtf8(OutboxEvent *ev, Size cost)
{
	int			encoding = GetDatabaseEncoding();
	char	   *utf8;

	if (ev->body == NULL || encoding == PG_UTF8 || encoding == PG_SQL_ASCII)
		return cost;
	utf8 = pg_server_to_any(ev->body, strlen(ev->body), PG_UTF8);
	if (utf8 == ev->body)
		return cost;
	cost = cost - 2 * strlen(ev->body) + 2 * strlen(utf8);
	pfree(ev->body);
	ev->body = utf8;
	return cost;
}

static void
append_string_or_null(StringInfo buf, const char *key, const char *value)
{
	appendStringInfo(buf, ", \"%s\": ", key);
	if (value == NULL)
		appendStringInfoString(buf, "null");
	else
		escape_json(buf, value);
}

/*
 * Appends t in UTC with the suffix Z (RFC 3339: "2026-11-29T10:15:00.123456Z",
 * trailing zeros of the fraction left out), whatever the server's or the
 * session's TimeZone and DateStyle. A timestamptz holds UTC, so its value
 * encoded as a timestamp without time zone is the UTC wall-clock time;
 * infinity stays as it is, without Z.
 */
void
OutboxAppendUtcTime(StringInfo buf, TimestampTz t)
{
	char		ts[MAXDATELEN + 1];

	JsonEncodeDateTime(ts, TimestampGetDatum((Timestamp) t), TIMESTAMPOID, NULL);
	appendStringInfo(buf, "%s%s", ts, TIMESTAMP_NOT_FINITE(t) ? "" : "Z");
}

/*
 * Returns the envelope of one attempt of ev, palloc'd in the current
 * memory context, from the event's columns (event_id, event_type, the
 * aggregate fields, which may be NULL, created_at, and with_payload the
 * payload); attempt counts from 1. Runs in any backend or the relay,
 * inside a transaction.
 *
 * created_at is written in UTC with the suffix Z (OutboxAppendUtcTime), so
 * that consumers read the same text for the same instant from any server.
 */
char *
OutboxBuildEnvelope(const OutboxEvent *ev, int attempt, bool with_payload)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"id\": \"%s\"", ev->event_id);
	append_string_or_null(&buf, "type", ev->event_type);
	append_string_or_null(&buf, "aggregate_type", ev->aggregate_type);
	append_string_or_null(&buf, "aggregate_id", ev->aggregate_id);
	appendStringInfoString(&buf, ", \"created_at\": \"");
	OutboxAppendUtcTime(&buf, ev->created_at);
	appendStringInfo(&buf, "\", \"attempt\": %d", attempt);
	if (with_payload)
	{
		appendStringInfoString(&buf, ", \"payload\": ");
		JsonbToCString(&buf, &ev->payload->root, VARSIZE(ev->payload));
	}
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

/*
 * _outbox_envelope(event_id uuid, event_type text, aggregate_type text,
 *					aggregate_id text, created_at timestamptz, attempt int,
 *					payload jsonb) RETURNS text
 *
 * SQL-callable, internal: the envelope the relay would send for these
 * values. Not strict: NULL aggregate fields become JSON null; NULL in any
 * other argument gives NULL.
 */
Datum
_outbox_envelope(PG_FUNCTION_ARGS)
{
	OutboxEvent ev;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(4) ||
		PG_ARGISNULL(5) || PG_ARGISNULL(6))
		PG_RETURN_NULL();

	memset(&ev, 0, sizeof(ev));
	ev.event_id = DatumGetCString(DirectFunctionCall1(uuid_out, PG_GETARG_DATUM(0)));
	ev.event_type = text_to_cstring(PG_GETARG_TEXT_PP(1));
	ev.aggregate_type = PG_ARGISNULL(2) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(2));
	ev.aggregate_id = PG_ARGISNULL(3) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(3));
	ev.created_at = PG_GETARG_TIMESTAMPTZ(4);
	ev.payload = PG_GETARG_JSONB_P(6);
	PG_RETURN_TEXT_P(cstring_to_text(OutboxBuildEnvelope(&ev, PG_GETARG_INT32(5), true)));
}
