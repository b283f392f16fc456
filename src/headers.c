/*-------------------------------------------------------------------------
 *
 * headers.c
 *	  The rules for HTTP headers that events and destinations carry, in one
 *	  place: the check constraints on outbox.headers and
 *	  outbox_destinations.headers call _outbox_valid_headers(), and the
 *	  webhook transport checks each header again with the same functions
 *	  before it sends it (a row may predate the constraint).
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

#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

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
 * _outbox_valid_headers(headers jsonb) RETURNS boolean
 *
 * SQL-callable, IMMUTABLE; the check constraint of both headers columns:
 * true for NULL, or for an object whose every key is a valid name and
 * every value other than JSON null a valid value (see above), as the 1.0
 * constraint's regular expressions had it. Raises no error of its own.
 */
Datum
_outbox_valid_headers(PG_FUNCTION_ARGS)
{
	Jsonb	   *headers;
	OutboxHeader *list;
	int			n;

	if (PG_ARGISNULL(0))
		PG_RETURN_BOOL(true);
	headers = PG_GETARG_JSONB_P(0);
	if (!JB_ROOT_IS_OBJECT(headers))
		PG_RETURN_BOOL(false);
	n = OutboxHeaderList(headers, &list);
	for (int i = 0; i < n; i++)
	{
		if (!OutboxHeaderNameValid(list[i].name, strlen(list[i].name)) ||
			(list[i].value != NULL &&
			 !OutboxHeaderValueValid(list[i].value, strlen(list[i].value))))
			PG_RETURN_BOOL(false);
	}
	PG_RETURN_BOOL(true);
}
