/*-------------------------------------------------------------------------
 *
 * route_pattern.c
 *	  Whether an event type matches a destination's event_types pattern,
 *	  and routing by type alone from destinations read once per statement.
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

#include "executor/spi.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "compat.h"
#include "statements.h"

PG_FUNCTION_INFO_V1(_outbox_type_matches);
PG_FUNCTION_INFO_V1(_outbox_route_by_type);

/*
 * Whether s (slen bytes) matches pattern p (plen bytes). The classic
 * greedy walk: on a mismatch after a '*', the '*' takes one character
 * more of s and the walk goes on from there; at most slen times plen
 * steps, both at most OUTBOX_MAX_TYPE_BYTES when written through the
 * checks. Literals are compared a whole character of the server's
 * encoding at a time, and the '*' takes whole characters, so a multibyte
 * literal never matches the tail of one character and the head of the
 * next (a UTF-8 sequence cannot, some other encodings' can), as LIKE's
 * own matcher for them does.
 */
static bool
type_matches(const char *s, int slen, const char *p, int plen)
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
 * top of this file). Called by _outbox_takes, so for each event a claim
 * routes and each destination it tests, in the relay's claim and in any
 * session that reads the routing views; raises no error.
 */
Datum
_outbox_type_matches(PG_FUNCTION_ARGS)
{
	text	   *type = PG_GETARG_TEXT_PP(0);
	text	   *pattern = PG_GETARG_TEXT_PP(1);

	PG_RETURN_BOOL(type_matches(VARDATA_ANY(type), VARSIZE_ANY_EXHDR(type),
								VARDATA_ANY(pattern), VARSIZE_ANY_EXHDR(pattern)));
}

/*
 * The destinations as one statement sees them, read at its first call of
 * _outbox_route_by_type and kept for the rest of it in the call's
 * FmgrInfo (a claim's rows mostly share a few types).
 */
typedef struct RouteDest
{
	int64		id;
	const char *pattern;
	int			plen;
	Datum		row;			/* the outbox_destinations row */
} RouteDest;

typedef struct RouteCache
{
	/* the snapshot read with: a call site outlives a statement in PL/pgSQL */
	CommandId	curcid;
	TransactionId xmin;
	TransactionId xmax;
	uint64		completions;
	MemoryContext mcxt;			/* holds all of it */
	int			ndests;
	RouteDest  *dests;			/* in name order */
	text	   *last_type;		/* the type last asked, and its answer */
	int			last_match;		/* index in dests, or -1 for none */
} RouteCache;

static OutboxStatement destinations_stmt = {
	.sql = "SELECT d, d.id, d.event_types FROM %1$s.outbox_destinations d ORDER BY d.name",
	.nargs = 0,
	.argtypes = NULL,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN
};

/* Reads the destinations with the active snapshot, into a child of parent. */
static RouteCache *
load_destinations(Oid nspoid, MemoryContext parent)
{
	MemoryContext mcxt = AllocSetContextCreate(parent, "outbox routes", ALLOCSET_SMALL_SIZES);
	RouteCache *cache = MemoryContextAllocZero(mcxt, sizeof(RouteCache));
	int			rc;

	cache->mcxt = mcxt;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* read_only: the caller's snapshot, as the rest of its statement */
	rc = SPI_execute_plan(OutboxStatementPlan(&destinations_stmt, nspoid), NULL, NULL, true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read the destinations: %s", SPI_result_code_string(rc));
	cache->ndests = (int) SPI_processed;
	cache->dests = MemoryContextAllocZero(mcxt, sizeof(RouteDest) * Max(cache->ndests, 1));
	for (int i = 0; i < cache->ndests; i++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		RouteDest  *d = &cache->dests[i];
		bool		isnull;
		MemoryContext old;

		old = MemoryContextSwitchTo(mcxt);
		/* a copy with a full header, as composite values are passed */
		d->row = PointerGetDatum(DatumGetHeapTupleHeaderCopy(SPI_getbinval(tuple, desc, 1, &isnull)));
		d->id = DatumGetInt64(SPI_getbinval(tuple, desc, 2, &isnull));
		d->pattern = TextDatumGetCString(SPI_getbinval(tuple, desc, 3, &isnull));
		d->plen = strlen(d->pattern);
		MemoryContextSwitchTo(old);
	}
	SPI_finish();
	cache->last_match = -1;
	return cache;
}

/* Whether cache was read with a snapshot that sees what snap sees. */
static bool
same_snapshot(const RouteCache *cache, Snapshot snap)
{
	return cache->curcid == snap->curcid && cache->xmin == snap->xmin &&
		cache->xmax == snap->xmax && cache->completions == snap->snapXactCompletionCount;
}

/*
 * _outbox_route_by_type(event_type text, destination_id bigint) RETURNS
 * outbox_destinations, STABLE: where routing sends a row when no
 * destination has a filter (routing by its type alone, 1.1's rule): the
 * destination destination_id names, for a row of a fanned-out event, or
 * else the first by name whose pattern matches event_type, enabled or not;
 * NULL if there is none. _outbox_route calls it only then, and with at
 * most 32 destinations: it reads them all, once per statement (with that
 * statement's snapshot, SPI read-only; again if the same call is evaluated
 * under another snapshot, as a PL/pgSQL expression is in a transaction),
 * and answers each row from memory, keeping the last type's answer, as
 * 1.1's claim did from a Memoize node keyed on the type; each row
 * routed in SQL instead cost about 1.9 us in a claim of 1,000. Runs in
 * the relay's claim and in any session reading _outbox_pending; raises
 * ERROR only if the destinations cannot be read.
 */
Datum
_outbox_route_by_type(PG_FUNCTION_ARGS)
{
	RouteCache *cache = (RouteCache *) fcinfo->flinfo->fn_extra;
	Snapshot	snap = GetActiveSnapshot();
	text	   *type;
	int			match = -1;

	if (cache == NULL || !same_snapshot(cache, snap))
	{
		if (cache != NULL)
			MemoryContextDelete(cache->mcxt);
		cache = load_destinations(get_func_namespace(fcinfo->flinfo->fn_oid),
								  fcinfo->flinfo->fn_mcxt);
		cache->curcid = snap->curcid;
		cache->xmin = snap->xmin;
		cache->xmax = snap->xmax;
		cache->completions = snap->snapXactCompletionCount;
		fcinfo->flinfo->fn_extra = cache;
	}
	if (!PG_ARGISNULL(1))
	{
		int64		id = PG_GETARG_INT64(1);

		for (int i = 0; i < cache->ndests; i++)
			if (cache->dests[i].id == id)
				PG_RETURN_DATUM(cache->dests[i].row);
		PG_RETURN_NULL();
	}
	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	type = PG_GETARG_TEXT_PP(0);
	if (cache->last_type != NULL &&
		VARSIZE_ANY_EXHDR(type) == VARSIZE_ANY_EXHDR(cache->last_type) &&
		memcmp(VARDATA_ANY(type), VARDATA_ANY(cache->last_type), VARSIZE_ANY_EXHDR(type)) == 0)
		match = cache->last_match;
	else
	{
		for (int i = 0; i < cache->ndests && match < 0; i++)
			if (type_matches(VARDATA_ANY(type), VARSIZE_ANY_EXHDR(type),
							 cache->dests[i].pattern, cache->dests[i].plen))
				match = i;
		if (cache->last_type != NULL)
			pfree(cache->last_type);
		cache->last_type = (text *) MemoryContextAlloc(cache->mcxt, VARSIZE_ANY(type));
		memcpy(cache->last_type, type, VARSIZE_ANY(type));
		cache->last_match = match;
	}
	if (match < 0)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(cache->dests[match].row);
}
