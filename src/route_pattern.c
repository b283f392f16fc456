/*-------------------------------------------------------------------------
 *
 * route_pattern.c
 *	  Whether an event type matches a destination's event_types pattern.
 *
 * A pattern is an event type in which '*' stands for any run of
 * characters, the empty one included; every other character stands for
 * itself ("order.*", "*.paid", "*"). Until 1.1 routing turned the pattern
 * into a LIKE pattern (_outbox_like_pattern: four replace() calls) and
 * matched with LIKE. 1.1 did that once per event type of a claim; 1.2
 * routes each row by its own fields (a filter reads them), and those
 * calls cost about 1 us per event and destination tested, a third of the
 * claim's time per event with one destination. This matches the pattern
 * as it is, with the same result as that LIKE: LIKE compares characters
 * exactly whatever the collation (and raises an error for a
 * nondeterministic one, which outbox's columns never have), as this does.
 *
 * src/route_pattern.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"

#include "routing.h"

PG_FUNCTION_INFO_V1(_outbox_type_matches);

/*
 * Whether s (slen bytes) matches pattern p (plen bytes). The classic
 * greedy walk: on a mismatch after a '*', the '*' takes one character
 * more of s and the walk goes on from there; at most slen times plen
 * steps, both at most OUTBOX_MAX_TYPE_BYTES when written through the
 * checks. Literals are compared a whole character of the server's
 * encoding at a time, and the '*' takes whole characters, so a multibyte
 * literal never matches the tail of one character and the head of the
 * next (a UTF-8 sequence cannot, some other encodings' can), as LIKE's
 * own matcher for them does. Used by _outbox_type_matches and the
 * claim's router (router.c), in any backend; raises nothing.
 */
bool
OutboxTypeMatches(const char *s, int slen, const char *p, int plen)
{
	int			si = 0,
				pi = 0;
	int			star_p = -1,
				star_s = 0;

	while (si < slen)
	{
		if (pi < plen && p[pi] == '*')
		{
			star_p = pi++;
			star_s = si;
			continue;
		}
		if (pi < plen)
		{
			int			len = pg_mblen(p + pi);

			if (len <= plen - pi && len <= slen - si && memcmp(p + pi, s + si, len) == 0)
			{
				pi += len;
				si += len;
				continue;
			}
		}
		if (star_p < 0)
			return false;
		pi = star_p + 1;
		star_s = Min(star_s + pg_mblen(s + star_s), slen);
		si = star_s;
	}
	while (pi < plen && p[pi] == '*')
		pi++;
	return pi == plen;
}

/*
 * _outbox_type_matches(event_type text, pattern text) RETURNS boolean,
 * IMMUTABLE STRICT: whether the event type matches the pattern (see the
 * top of this file). Called by _outbox_takes, so for each event and
 * destination that a routing view tests, in any session that reads one;
 * raises no error.
 */
Datum
_outbox_type_matches(PG_FUNCTION_ARGS)
{
	text	   *type = PG_GETARG_TEXT_PP(0);
	text	   *pattern = PG_GETARG_TEXT_PP(1);

	PG_RETURN_BOOL(OutboxTypeMatches(VARDATA_ANY(type), VARSIZE_ANY_EXHDR(type),
								VARDATA_ANY(pattern), VARSIZE_ANY_EXHDR(pattern)));
}
