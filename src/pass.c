/*-------------------------------------------------------------------------
 *
 * pass.c
 *	  The extension's tables for a pass: found in the catalog and locked
 *	  against DROP EXTENSION; and what the statements over them share:
 *	  arrays of ids and TIDs as parameters, the destination a delivery
 *	  records, the check that a mark changed every row it was given.
 *
 * A pass is what the relay worker or a backend calling outbox_relay() does
 * in one transaction with the outbox tables: a claim (claim.c, queue.c),
 * the outcomes of events in flight (outcome.c), a release of the journal
 * (journal.c), a purge (purge.c). Each opens the tables here first, and
 * builds its statements' parameters with the helpers here, so that none of
 * those modules reaches into another for them.
 *
 * Statements name the tables with the extension's schema, looked up from
 * the catalog, and are kept prepared by statements.c, each with its access
 * path pinned (OutboxPlanPath). They name tables and views only, never a
 * function or operator outside pg_catalog, and run with search_path =
 * pg_catalog, pg_temp (the worker pins it; outbox_relay() has it as a SET
 * clause): whoever may create objects in the extension's schema (the owner
 * of public, say) can add a function overload that makes a call by name
 * ambiguous, but cannot add a relation under a name that is taken, and
 * pg_catalog comes before anything else for types, functions and
 * operators.
 *
 * src/pass.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "destination.h"
#include "pass.h"
#include "version.h"

/* The extension as the current pass found it (OutboxQueueOpen). */
static Oid	ext_oid = InvalidOid;
static Oid	ext_nspoid = InvalidOid;

/*
 * Makes the outbox tables ready for a pass: returns false, doing nothing,
 * when the extension is not installed in this database, another session
 * holds it for DROP EXTENSION, or its SQL objects are of another version
 * than this library (logged once per version seen). Otherwise the
 * extension is locked against a concurrent DROP until the end of the
 * transaction, so the pass never meets half-dropped tables. Caller has a
 * transaction open, in the relay worker or an outbox_relay() backend;
 * never waits for a lock.
 */
bool
OutboxQueueOpen(void)
{
	static char *mismatch_logged = NULL;
	Oid			extoid;
	Oid			nspoid;
	Oid			again;
	char	   *version;

	if (!OutboxFindExtension(&extoid, &nspoid, &version))
	{
		ext_oid = InvalidOid;	/* what was claimed from it is gone with it */
		return false;
	}
	if (!ConditionalLockDatabaseObject(ExtensionRelationId, extoid, 0,
									   AccessShareLock))
		return false;
	/* the lock processed invalidations: make sure it is still the same */
	if (!OutboxFindExtension(&again, &nspoid, &version) || again != extoid)
		return false;

	if (strcmp(version, OUTBOX_VERSION) != 0)
	{
		if (mismatch_logged == NULL || strcmp(mismatch_logged, version) != 0)
		{
			OutboxReportVersionMismatch(WARNING, true, version);
			if (mismatch_logged != NULL)
				pfree(mismatch_logged);
			mismatch_logged = MemoryContextStrdup(TopMemoryContext, version);
		}
		return false;
	}
	ext_oid = extoid;
	ext_nspoid = nspoid;
	return true;
}

/*
 * The extension's OID, as the last OutboxQueueOpen() found it: InvalidOid
 * before any did, or once one found the extension gone. A relay compares
 * it with the one its events in flight were claimed from.
 */
Oid
OutboxQueueExtension(void)
{
	return ext_oid;
}

/*
 * The extension's schema, as the last OutboxQueueOpen() found it: what
 * every statement of a pass is prepared for (OutboxStatementPlan). Valid
 * in the transaction of an OutboxQueueOpen() that returned true.
 */
Oid
OutboxQueueSchema(void)
{
	return ext_nspoid;
}

/*
 * The three arrays (text[], text[], timestamptz[]) of OUTBOX_DELIVERED_DESTINATION
 * for n delivered events, into values[0..2]: each one's destination name,
 * kind and created_at as claimed; names_only: the names alone, values[1]
 * and values[2] left as they are. Caller is in SPI with a transaction open.
 */
void
OutboxDeliveryDestinations(OutboxEvent **events, int n, Datum *values, bool names_only)
{
	Datum	   *dests = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *kinds;
	Datum	   *created;

	for (int i = 0; i < n; i++)
		dests[i] = CStringGetTextDatum(events[i]->dest.name);
	values[0] = PointerGetDatum(construct_array(dests, n, TEXTOID, -1, false, TYPALIGN_INT));
	if (names_only)
		return;
	kinds = palloc(sizeof(Datum) * Max(n, 1));
	created = palloc(sizeof(Datum) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		kinds[i] = CStringGetTextDatum(events[i]->dest.kind->name);
		created[i] = TimestampTzGetDatum(events[i]->dest.created_at);
	}
	values[1] = PointerGetDatum(construct_array(kinds, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[2] = PointerGetDatum(construct_array(created, n, TIMESTAMPTZOID, 8, FLOAT8PASSBYVAL,
												TYPALIGN_DOUBLE));
}

/*
 * n int8 values as an int8[] Datum, in the current memory context (n may
 * be 0: an empty array). Any process; ERROR only when out of memory.
 */
Datum
OutboxInt8Array(const int64 *values, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		d[i] = Int64GetDatum(values[i]);
	return PointerGetDatum(construct_array(d, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/*
 * The claimed row versions of n events, as a tid[] Datum for the mark and
 * outcome statements, in the current memory context. ERROR only when out
 * of memory.
 */
Datum
OutboxTidArray(OutboxEvent **events, int n)
{
	Datum	   *tids = palloc(sizeof(Datum) * n);

	for (int i = 0; i < n; i++)
		tids[i] = PointerGetDatum(&events[i]->tid);
	return PointerGetDatum(construct_array(tids, n, TIDOID, sizeof(ItemPointerData),
										   false, TYPALIGN_SHORT));
}

/*
 * Warns when a mark statement (the last SPI statement) changed fewer rows
 * than the n it was given: the rows are locked by the pass, so this should
 * not happen, and an unmarked event would be delivered again. delivered:
 * they were to be marked delivered, else as failed attempts. Returns
 * whether all were. Caller is in SPI with a transaction open; raises
 * WARNING, never ERROR.
 */
bool
OutboxCheckMarked(int n, bool delivered)
{
	if (SPI_processed == (uint64) n)
		return true;
	if (delivered)
		ereport(WARNING,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("marked %llu of %d events delivered",
						(unsigned long long) SPI_processed, n),
				 errdetail("The others stay pending and will be delivered again.")));
	else
		ereport(WARNING,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("recorded the failed attempt of %llu of %d events",
						(unsigned long long) SPI_processed, n),
				 errdetail("The others stay pending and will be delivered again.")));
	return false;
}
