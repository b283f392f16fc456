/*-------------------------------------------------------------------------
 *
 * purge.c
 *	  The relay's purge: deletes events delivered longer ago than
 *	  outbox.retention and inbox rows processed longer ago than
 *	  outbox.inbox_retention, a batch per short transaction.
 *
 * Only relay number 0 of a database purges, as one step of its loop
 * (relay.c runs OutboxPurgeStep through OutboxRunStep, so a failing batch is
 * rolled back, logged and shown in outbox_relay_stats like any step). A
 * round deletes outbox.purge_batch_size rows per transaction, pausing
 * outbox.purge_delay between two, first from outbox and then from inbox;
 * when a table has no more due rows the round moves on, and after the last
 * one the next round starts outbox.purge_interval later. A reload that
 * changes a retention starts a round at once.
 *
 * Cost. Each batch finds its rows through an index on the purge key, so it
 * reads what it deletes plus an index probe or two: pending events are not
 * in that index, and a table with nothing to purge costs a few buffers.
 * Delivered events are indexed by (destination, delivered_at, id)
 * (outbox_delivered_idx, which NOTIFY consumers' catch-up reads as well),
 * so the outbox phase takes one destination after the other, each found
 * from the last with one probe of that index, then the events without a
 * destination; inbox rows are indexed by processed_at. Within a
 * destination, batches resume after the last row walked (keyset), so they
 * do not walk the dead index entries the previous batches left before
 * vacuum, nor the rows of fanned-out events kept for a slower destination.
 *
 * Time. Cut-offs are absolute: now minus the retention in microseconds,
 * computed in C, so the same rows go under any TimeZone and across clock
 * changes.
 *
 * src/purge.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "purge.h"
#include "pass.h"
#include "statements.h"

/*
 * One batch of delivered events of destination $5, oldest first, after
 * ($2, $3) in (delivered_at, id) order. The batch CTE walks
 * outbox_delivered_idx; the DELETE finds its rows by TID and checks the
 * cut-off again, so an event redelivered meanwhile (delivered_at now NULL)
 * stays. A row of a fanned-out event (origin_id set) goes only once every
 * row of its event was delivered before the cut-off (outbox_purge in
 * outbox--1.1--1.2.sql): a scalar subquery, one probe of
 * outbox_event_id_key for such a row only, never a join over the table.
 * Returns where the walk stopped, how many rows it walked and how many it
 * deleted: the keyset follows the walk, so rows kept for a slower
 * destination are passed over, not read again by every batch.
 * outbox_null_stmt does the same for events without a destination. The
 * ORDER BY names the destination too: "destination IS NULL" does not make
 * the index's order that of (delivered_at, id) to the planner, and without
 * it the walk would need a sort.
 */
#define OUTBOX_BATCH(dest_test) \
		"WITH batch AS MATERIALIZED (" \
		"  SELECT p.ctid, p.delivered_at, p.id, p.event_id, p.origin_id" \
		"    FROM %1$s.outbox p" \
		"   WHERE " dest_test " AND p.delivered_at < $1" \
		"     AND (p.delivered_at, p.id) > ($2, $3)" \
		"   ORDER BY p.destination, p.delivered_at, p.id" \
		"   LIMIT $4)," \
		" doomed AS (" \
		"  DELETE FROM %1$s.outbox o" \
		"   WHERE o.ctid = ANY (ARRAY(" \
		"           SELECT b.ctid FROM batch b" \
		"            WHERE b.origin_id IS NULL" \
		"               OR (SELECT 1 FROM %1$s.outbox s" \
		"                    WHERE s.event_id = b.event_id" \
		"                      AND (s.delivered_at IS NULL OR s.delivered_at >= $1)" \
		"                    LIMIT 1) IS NULL))" \
		"     AND o.delivered_at < $1" \
		"  RETURNING 1)" \
		" SELECT l.delivered_at, l.id," \
		"        (SELECT count(*) FROM batch)::int4," \
		"        (SELECT count(*) FROM doomed)::int4" \
		"   FROM (SELECT b.delivered_at, b.id FROM batch b" \
		"          ORDER BY b.delivered_at DESC, b.id DESC LIMIT 1) l"

static const Oid outbox_argtypes[] = {TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID, INT4OID, TEXTOID};
static OutboxStatement outbox_stmt = {
	.sql = OUTBOX_BATCH("p.destination = $5"),
	.nargs = 5,
	.argtypes = outbox_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN,
	.path = OUTBOX_PLAN_BY_TID
};
static OutboxStatement outbox_null_stmt = {
	.sql = OUTBOX_BATCH("p.destination IS NULL"),
	.nargs = 4,
	.argtypes = outbox_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN,
	.path = OUTBOX_PLAN_BY_TID
};

/*
 * The first destination that delivered events have, and the one after $1:
 * one probe of outbox_delivered_idx each. Two statements, not one with
 * "$1 IS NULL OR": a generic plan of that could not use the index.
 */
static OutboxStatement first_dest_stmt = {
	.sql =
		"SELECT min(p.destination) FROM %1$s.outbox p"
		" WHERE p.delivered_at IS NOT NULL",
	.cursor_options = CURSOR_OPT_GENERIC_PLAN,
	.path = OUTBOX_PLAN_KEYED
};
static const Oid next_dest_argtypes[] = {TEXTOID};
static OutboxStatement next_dest_stmt = {
	.sql =
		"SELECT min(p.destination) FROM %1$s.outbox p"
		" WHERE p.delivered_at IS NOT NULL AND p.destination > $1",
	.nargs = 1,
	.argtypes = next_dest_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN,
	.path = OUTBOX_PLAN_KEYED
};

/* One batch of inbox rows, oldest first, through inbox_processed_at_idx. */
static const Oid inbox_argtypes[] = {TIMESTAMPTZOID, INT4OID};
static OutboxStatement inbox_stmt = {
	.sql =
		"WITH doomed AS ("
		"  DELETE FROM %1$s.inbox i"
		"   WHERE i.ctid = ANY (ARRAY("
		"           SELECT q.ctid FROM %1$s.inbox q"
		"            WHERE q.processed_at < $1"
		"            ORDER BY q.processed_at"
		"            LIMIT $2))"
		"     AND i.processed_at < $1"
		"  RETURNING 1)"
		" SELECT (count(*))::int4 FROM doomed",
	.nargs = 2,
	.argtypes = inbox_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN,
	.path = OUTBOX_PLAN_BY_TID
};

typedef enum PurgePhase
{
	PHASE_OUTBOX,
	PHASE_INBOX,
	PHASE_DONE
} PurgePhase;

static TimestampTz next_purge = 0;	/* 0: at once */
static PurgePhase phase = PHASE_OUTBOX;
/* where the outbox phase is: a destination, or (dest NULL) those without */
static char *dest = NULL;		/* in TopMemoryContext */
static bool dest_next = true;	/* look up the destination after dest */
static TimestampTz after_at = DT_NOBEGIN;	/* keyset within the destination */
static int64 after_id = 0;
static bool batch_full = false; /* the last batch walked a whole batch */
static int	seen_retention = -1;
static int	seen_inbox_retention = -1;

/* The cut-off of a retention in seconds: now minus that, in absolute time. */
static TimestampTz
cutoff(int retention_s)
{
	return GetCurrentTimestamp() - (TimestampTz) retention_s * USECS_PER_SEC;
}

/* Starts a new round at the first table with a retention. */
static void
start_round(void)
{
	phase = outbox_retention > 0 ? PHASE_OUTBOX : PHASE_INBOX;
	if (dest != NULL)
		pfree(dest);
	dest = NULL;
	dest_next = true;
	after_at = DT_NOBEGIN;
	after_id = 0;
}

/* Moves the outbox phase to the destination after the current one. */
static void
next_destination(void)
{
	Datum		value = dest != NULL ? CStringGetTextDatum(dest) : (Datum) 0;
	bool		isnull;
	Datum		d;
	int			rc;

	rc = SPI_execute_plan(OutboxStatementPlan(dest != NULL ? &next_dest_stmt : &first_dest_stmt,
											  OutboxQueueSchema()),
						  &value, NULL, false, 1);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not find the next destination to purge: %s", SPI_result_code_string(rc));
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (dest != NULL)
		pfree(dest);
	dest = isnull ? NULL : MemoryContextStrdup(TopMemoryContext, TextDatumGetCString(d));
	dest_next = false;
	after_at = DT_NOBEGIN;
	after_id = 0;
}

/*
 * True when the purge has a batch to run now. Notices a reload that
 * changed a retention (a round starts at once). Called by relay number 0
 * in its loop, outside any transaction.
 */
bool
OutboxPurgeDue(void)
{
	if (outbox_retention != seen_retention || outbox_inbox_retention != seen_inbox_retention)
	{
		seen_retention = outbox_retention;
		seen_inbox_retention = outbox_inbox_retention;
		next_purge = 0;
		start_round();
	}
	if (outbox_retention == 0 && outbox_inbox_retention == 0)
		return false;
	return GetCurrentTimestamp() >= next_purge;
}

/*
 * Runs one batch of the current phase: deletes up to
 * outbox.purge_batch_size rows. A relay step (StepFn; arg unused): runs in
 * a transaction of its own with SPI connected, and may raise ERROR, which
 * rolls the batch back. Does nothing when the extension is absent.
 */
void
OutboxPurgeStep(void *arg pg_attribute_unused())
{
	SPIPlanPtr	plan;
	Datum		values[5];
	int			rc;
	int			deleted = 0;
	int			walked = 0;	/* rows the outbox batch read, kept ones too */
	bool		more = false;

	batch_full = false;
	if (phase == PHASE_DONE || !OutboxQueueOpen())
		return;

	if (phase == PHASE_OUTBOX)
	{
		bool		named;

		if (dest_next)
			next_destination();
		named = dest != NULL;
		values[0] = TimestampTzGetDatum(cutoff(outbox_retention));
		values[1] = TimestampTzGetDatum(after_at);
		values[2] = Int64GetDatum(after_id);
		values[3] = Int32GetDatum(outbox_purge_batch_size);
		values[4] = named ? CStringGetTextDatum(dest) : (Datum) 0;
		plan = OutboxStatementPlan(named ? &outbox_stmt : &outbox_null_stmt,
								   OutboxQueueSchema());
		rc = SPI_execute_plan(plan, values, NULL, false, 1);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "could not purge delivered events: %s", SPI_result_code_string(rc));
		if (SPI_processed == 1)
		{
			HeapTuple	tup = SPI_tuptable->vals[0];
			TupleDesc	desc = SPI_tuptable->tupdesc;
			bool		isnull;

			after_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 1, &isnull));
			after_id = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
			walked = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
			deleted = DatumGetInt32(SPI_getbinval(tup, desc, 4, &isnull));
		}
		/* this destination is done: the next one, if any, comes next */
		if (named && walked < outbox_purge_batch_size)
			dest_next = true;
		more = named;
	}
	else
	{
		bool		isnull;

		values[0] = TimestampTzGetDatum(cutoff(outbox_inbox_retention));
		values[1] = Int32GetDatum(outbox_purge_batch_size);
		plan = OutboxStatementPlan(&inbox_stmt, OutboxQueueSchema());
		rc = SPI_execute_plan(plan, values, NULL, false, 1);
		if (rc != SPI_OK_SELECT || SPI_processed != 1)
			elog(ERROR, "could not purge inbox rows: %s", SPI_result_code_string(rc));
		deleted = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
											  SPI_tuptable->tupdesc, 1, &isnull));
		walked = deleted;
	}
	batch_full = more || walked >= outbox_purge_batch_size;
	if (deleted > 0)
		elog(DEBUG1, "outbox relay purged %d %s", deleted,
			 phase == PHASE_OUTBOX ? "delivered events" : "inbox rows");
}

/*
 * Schedules what comes after a batch: the next batch of the same table
 * after outbox.purge_delay if it was full, else the next table, else the
 * next round after outbox.purge_interval. ok is false when the batch's
 * step failed: the round ends, and the next one starts after the interval.
 * Called by relay number 0 after running OutboxPurgeStep.
 */
void
OutboxPurgeDone(bool ok)
{
	TimestampTz now = GetCurrentTimestamp();

	if (ok && batch_full)
	{
		next_purge = TimestampTzPlusMilliseconds(now, outbox_purge_delay);
		return;
	}
	if (ok && phase == PHASE_OUTBOX && outbox_inbox_retention > 0)
	{
		phase = PHASE_INBOX;
		next_purge = TimestampTzPlusMilliseconds(now, outbox_purge_delay);
		return;
	}
	start_round();
	next_purge = TimestampTzPlusMilliseconds(now, outbox_purge_interval);
}

/* Milliseconds until the next batch is due (LONG_MAX: purge is off). */
long
OutboxPurgeWaitMs(void)
{
	long		secs;
	int			usecs;
	TimestampTz now;

	if (outbox_retention == 0 && outbox_inbox_retention == 0)
		return LONG_MAX;
	now = GetCurrentTimestamp();
	if (next_purge <= now)
		return 0;
	TimestampDifference(now, next_purge, &secs, &usecs);
	return secs * 1000L + (usecs + 999) / 1000;
}
