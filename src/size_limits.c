/*-------------------------------------------------------------------------
 *
 * size_limits.c
 *	  The size limits of an event and of what is sent for it: checked on
 *	  the stored sizes when the relay claims an event (before anything is
 *	  read), on the envelope's bound before a body is built, and exposed
 *	  to SQL for the tests (_outbox_payload_text_bytes).
 *
 * The limits themselves are in event.h. Nothing here depends on a kind or
 * a format: the envelope, the CloudEvents formats and the triggers all
 * measure against these.
 *
 * Runs in any backend or the relay, inside a transaction.
 *
 * src/size_limits.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "size_limits.h"

/* The envelope without its strings and payload: id, keys, time, attempt. */
#define ENVELOPE_FIXED_BYTES 256

/*
 * Checks the stored sizes of an event's columns against the limits of
 * event.h, without reading them. Returns true, or false with *p (54000).
 * O(1): the relay calls it before it detoasts anything.
 */
bool
OutboxEventSizesCheck(const OutboxEventSizes *s, OutboxProblem *p)
{
	if (s->event_type > OUTBOX_MAX_TYPE_BYTES)
		return OutboxProblemSet(p, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
						   psprintf("event type is longer than %d bytes", OUTBOX_MAX_TYPE_BYTES),
						   psprintf("It has %zu bytes.", (size_t) s->event_type));
	if (s->aggregate_type > OUTBOX_MAX_AGGREGATE_BYTES)
		return OutboxProblemSet(p, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
						   psprintf("aggregate type is longer than %d bytes", OUTBOX_MAX_AGGREGATE_BYTES),
						   psprintf("It has %zu bytes.", (size_t) s->aggregate_type));
	if (s->aggregate_id > OUTBOX_MAX_AGGREGATE_BYTES)
		return OutboxProblemSet(p, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
						   psprintf("aggregate id is longer than %d bytes", OUTBOX_MAX_AGGREGATE_BYTES),
						   psprintf("It has %zu bytes.", (size_t) s->aggregate_id));
	if (s->payload > OUTBOX_MAX_PAYLOAD_BYTES)
		return OutboxProblemSet(p, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
						   pstrdup("event payload is too large"),
						   psprintf("The payload takes %zu bytes; the limit is %d bytes.",
									(size_t) s->payload, OUTBOX_MAX_PAYLOAD_BYTES));
	if (s->headers > OUTBOX_MAX_HEADERS_BYTES)
		return OutboxProblemSet(p, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
						   psprintf("event headers are larger than %d bytes", OUTBOX_MAX_HEADERS_BYTES),
						   NULL);
	return true;
}

/* The length of string s[0..len) as escape_json() writes it, quotes included. */
static Size
escaped_length(const char *s, int len)
{
	Size		n = 2;

	for (int i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if ((i & 0xfffff) == 0xfffff)
			CHECK_FOR_INTERRUPTS();
		if (c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' ||
			c == '\r' || c == '\t')
			n += 2;
		else if (c < ' ')
			n += 6;
		else
			n += 1;
	}
	return n;
}

/* The length of a scalar as JsonbToCString prints it. */
static Size
scalar_length(const JsonbValue *v)
{
	switch (v->type)
	{
		case jbvString:
			return escaped_length(v->val.string.val, v->val.string.len);
		case jbvNumeric:
			{
				char	   *text = DatumGetCString(DirectFunctionCall1(numeric_out,
																	   NumericGetDatum(v->val.numeric)));
				Size		n = strlen(text);

				pfree(text);
				return n;
			}
		case jbvBool:
			return v->val.boolean ? 4 : 5;
		default:
			return 4;			/* null */
	}
}

/*
 * The exact length of the JSON text of payload as JsonbToCString writes it
 * (which is also the length of payload::text): the walk follows that
 * function's rules for separators (", " and ": "), brackets and raw scalars,
 * and measures each string as escaped and each number as printed, so no
 * shortcut from the stored size can be fooled (a number of a few stored
 * bytes, 1e131071, prints as 131,072 digits). The walk stops as soon as the
 * length passes stop_after, and returns what it had then. Linear in the
 * payload, and interruptible every 1024 tokens. Any process, in a
 * transaction (numeric_out allocates).
 */
static Size
payload_text_length(Jsonb *payload, Size stop_after)
{
	JsonbIterator *it = JsonbIteratorInit(&payload->root);
	JsonbValue	v;
	JsonbIteratorToken tok;
	Size		total = 0;
	bool		first = true;
	bool		raw_scalar = false;
	uint32		tokens = 0;

	while ((tok = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
	{
		if ((++tokens & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
		switch (tok)
		{
			case WJB_BEGIN_ARRAY:
				total += first ? 0 : 2;
				if (v.val.array.rawScalar)
					raw_scalar = true;
				else
					total += 1;
				first = true;
				break;
			case WJB_BEGIN_OBJECT:
				total += (first ? 0 : 2) + 1;
				first = true;
				break;
			case WJB_KEY:
				/* the key, ": ", and its value (a VALUE or a BEGIN) with no ", " */
				total += (first ? 0 : 2) + scalar_length(&v) + 2;
				first = true;
				break;
			case WJB_VALUE:
				total += scalar_length(&v);
				first = false;
				break;
			case WJB_ELEM:
				total += (first ? 0 : 2) + scalar_length(&v);
				first = false;
				break;
			case WJB_END_ARRAY:
				total += raw_scalar ? 0 : 1;
				first = false;
				break;
			case WJB_END_OBJECT:
				total += 1;
				first = false;
				break;
			default:
				elog(ERROR, "unexpected jsonb iterator token %d", (int) tok);
		}
		if (total > stop_after)
			break;
	}
	return total;
}

/*
 * An upper bound of the length of the envelope (envelope.c) of an event
 * with these column sizes and this payload (jsonb): the envelope's own
 * keys, id, time and attempt (ENVELOPE_FIXED_BYTES), its strings at 6
 * bytes per byte (the most escaping makes of one), and the payload's text
 * exactly (payload_text_length, which stops once past the limit).
 * Any process, in a transaction.
 */
Size
OutboxEnvelopeBound(const OutboxEventSizes *s, Datum payload)
{
	Size		total = ENVELOPE_FIXED_BYTES +
		6 * (s->event_type + s->aggregate_type + s->aggregate_id) + 6;

	if (total > OUTBOX_MAX_ENVELOPE_BYTES)
		return total;
	return total + payload_text_length(DatumGetJsonbP(payload),
										   OUTBOX_MAX_ENVELOPE_BYTES - total);
}

/*
 * _outbox_payload_text_bytes(payload jsonb) RETURNS bigint
 *
 * SQL-callable, internal: the length payload_text_length measures for
 * payload, the part of an event's envelope the write-time limit reads, for
 * tests to compare with octet_length(payload::text). Strict.
 */
PG_FUNCTION_INFO_V1(_outbox_payload_text_bytes);

Datum
_outbox_payload_text_bytes(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64((int64) payload_text_length(PG_GETARG_JSONB_P(0), SIZE_MAX));
}

/*
 * Checks that an envelope of at most bound bytes (OutboxEnvelopeBound)
 * stays within OUTBOX_MAX_ENVELOPE_BYTES. Returns true, or false with *p
 * (54000).
 */
bool
OutboxEnvelopeCheck(Size bound, OutboxProblem *p)
{
	if (bound <= OUTBOX_MAX_ENVELOPE_BYTES)
		return true;
	return OutboxProblemSet(p, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
					   psprintf("event envelope would be larger than %d bytes",
								OUTBOX_MAX_ENVELOPE_BYTES),
					   pstrdup("The JSON text sent for the event, its escaped strings and printed numbers included, must fit the limit."));
}
