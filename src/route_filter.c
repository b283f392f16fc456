/*-------------------------------------------------------------------------
 *
 * route_filter.c
 *	  The rules of a destination's filter: a jsonpath predicate that
 *	  routing (_outbox_routes() in SQL) evaluates on each event.
 *
 * Routing calls jsonb_path_match(document, filter, '{}', silent => true):
 * silent turns most errors of evaluating a path on one event (a string
 * compared with a number, a missing key in strict mode, a division by
 * zero) into "not taken". The rest would fail the statement that routes,
 * the relay's claim of every event and outbox_status with it, and some of
 * them an event's writer could cause with its payload. So the
 * destinations' validation trigger refuses, when the filter is written:
 *   - a path that is not a predicate (a comparison, &&, ||, !, exists,
 *     like_regex, starts with, is unknown) or a boolean: its result is
 *     not one boolean, and jsonb_path_match takes nothing with silent;
 *   - a variable ($"tenant"): "could not find jsonpath variable" is raised
 *     even when silent (PostgreSQL's getJsonPathVariable);
 *   - the datetime methods: comparing a value with a time zone to one
 *     without raises "cannot convert value ... without time zone usage"
 *     even when silent (checkTimezoneIsUsedForCast), and a writer chooses
 *     which one its payload holds;
 *   - the any-level accessor .**: its recursion goes as deep as the
 *     writer's payload, and the stack depth limit is an error too.
 *
 * src/route_filter.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/fmgrprotos.h"

#include "route_filter.h"

/* whether the path's root item is one whose value is a single boolean */
static bool
is_predicate(JsonPath *filter)
{
	JsonPathItem v;

	jspInit(&v, filter);
	switch (v.type)
	{
		case jpiAnd:
		case jpiOr:
		case jpiNot:
		case jpiIsUnknown:
		case jpiEqual:
		case jpiNotEqual:
		case jpiLess:
		case jpiGreater:
		case jpiLessOrEqual:
		case jpiGreaterOrEqual:
		case jpiExists:
		case jpiStartsWith:
		case jpiLikeRegex:
			return true;
		case jpiBool:
			/* true or false alone, with no accessor after it */
			return !jspHasNext(&v);
		default:
			return false;
	}
}

/* what a filter may not use, found in its text */
typedef enum FilterUse
{
	USES_NOTHING_REFUSED,
	USES_VARIABLE,
	USES_DATETIME,
	USES_ANY_LEVEL
} FilterUse;

/* the methods that make datetime values: PostgreSQL 15's, and 17's */
static const char *const datetime_methods[] = {
	"datetime", "date", "time", "time_tz", "timestamp", "timestamp_tz", NULL
};

/*
 * The first thing filter uses that routing cannot evaluate on every event
 * without the risk of an error that silent does not turn into "not taken"
 * (see the banner), read from its canonical text (jsonpath_out). There a
 * variable is $"name", the root a $ without a quote after it, a key always
 * ."quoted", a method .name( and the any-level accessor .**; a string
 * literal is in double quotes with its quotes and backslashes escaped,
 * and is skipped.
 */
static FilterUse
filter_uses(JsonPath *filter)
{
	char	   *text = DatumGetCString(DirectFunctionCall1(jsonpath_out,
														   PointerGetDatum(filter)));
	bool		in_string = false;

	for (const char *c = text; *c != '\0'; c++)
	{
		if (in_string)
		{
			if (*c == '\\' && c[1] != '\0')
				c++;
			else if (*c == '"')
				in_string = false;
		}
		else if (*c == '"')
			in_string = true;
		else if (*c == '$' && c[1] == '"')
			return USES_VARIABLE;
		else if (*c == '.' && c[1] == '*' && c[2] == '*')
			return USES_ANY_LEVEL;
		else if (*c == '.')
		{
			size_t		len = strspn(c + 1, "abcdefghijklmnopqrstuvwxyz_");

			if (len > 0 && c[1 + len] == '(')
				for (const char *const *m = datetime_methods; *m != NULL; m++)
					if (strlen(*m) == len && strncmp(c + 1, *m, len) == 0)
						return USES_DATETIME;
		}
	}
	return USES_NOTHING_REFUSED;
}

/*
 * Checks filter (a jsonpath, detoasted) as a destination's filter: at most
 * OUTBOX_MAX_FILTER_BYTES (54000), a predicate or a boolean (23514), without
 * variables (23514). Returns true, or false with *p filled (the message
 * never shows the filter). Called by the destinations' validation trigger,
 * in the transaction that writes the row. Raises nothing itself.
 */
bool
OutboxFilterCheck(JsonPath *filter, OutboxProblem *p)
{
	if (VARSIZE(filter) > OUTBOX_MAX_FILTER_BYTES)
		return OutboxProblemSet(p, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
								psprintf("destination filter is larger than %d bytes",
										 OUTBOX_MAX_FILTER_BYTES),
								NULL);
	if (!is_predicate(filter))
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination filter must be a predicate"),
								pstrdup("A filter is a comparison, a test such as exists(...), like_regex or starts with, or such tests joined by &&, || and !; for example: $.payload.customer_id == \"c42\"."));
	switch (filter_uses(filter))
	{
		case USES_VARIABLE:
			return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
									pstrdup("destination filter must not name variables"),
									pstrdup("Routing passes no variables: write the value in the filter."));
		case USES_DATETIME:
			return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
									pstrdup("destination filter must not use datetime methods"),
									pstrdup("Comparing a date with a time zone to one without raises an error that would stop every claim; compare the text (ISO 8601 in one zone sorts by time)."));
		case USES_ANY_LEVEL:
			return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
									pstrdup("destination filter must not use .**"),
									pstrdup("Its cost and depth follow each event's payload: write the path to the value."));
		case USES_NOTHING_REFUSED:
			break;
	}
	return true;
}
