/*-------------------------------------------------------------------------
 *
 * journal.c
 *	  The journal of events in flight (outbox_in_flight): written with each
 *	  claim that puts events in flight, deleted once their outcomes are
 *	  recorded, and released for relays that are gone.
 *
 * The in-flight set in shared memory keeps other relays away from an event
 * in flight; a crash restart empties it. What must survive the crash is
 * the count of the attempt it cut off, and that is this journal: one row
 * per claim, with the ids and the attempt counts as claimed. A release
 * counts the attempt of each event still at that count, and the event is
 * due again at once.
 *
 * Every function runs with a transaction open, SPI connected and
 * OutboxQueueOpen() done, in the relay worker.
 *
 * src/journal.c
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

#include "event.h"
#include "guc.h"
#include "journal.h"
#include "pass.h"
#include "statements.h"
#include "shmem.h"

/*
 * The journal row of a claim's events in flight, in the claim's transaction:
 * their ids and attempt counts, under the relay's run and the claim's
 * number in it. One row per claim, whatever its size, and never updated:
 * deleted by journal_done_stmt once every outcome is recorded, or by
 * release_stmt if the relay is gone. Rows are found by (run, claim), not
 * by TID, which VACUUM FULL or CLUSTER would change: the table's primary
 * key, which is also its replica identity for publications. The end of a
 * claim's rows walks that key whatever the statistics say: the table holds
 * a row per claim in flight, and the dead ones until vacuumed, which a
 * busy relay makes faster than autovacuum removes them.
 */
static const Oid journal_argtypes[] = {INT8OID, INT8OID, INT4OID, INT8ARRAYOID, INT4ARRAYOID};
static OutboxStatement journal_stmt = {
	.sql =
		"INSERT INTO %1$s.outbox_in_flight (run, claim, relay, ids, attempts)"
		" VALUES ($1, $2, $3, $4, $5)",
	.nargs = 5,
	.argtypes = journal_argtypes
};

/* Deletes the journal rows of claims $1 of run $2: their outcomes are in. */
static const Oid journal_done_argtypes[] = {INT8ARRAYOID, INT8OID};
static OutboxStatement journal_done_stmt = {
	.sql =
		"DELETE FROM %1$s.outbox_in_flight j"
		" WHERE j.run = $2 AND j.claim = ANY ($1)",
	.nargs = 2,
	.argtypes = journal_done_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN,
	.path = OUTBOX_PLAN_KEYED
};

/*
 * Releases the journal rows of relays that are gone: those of every run
 * not in $1 (the running relays'), and those of claims $2 of this relay's
 * run $3 (claims whose outcomes did not all change their rows). Each event
 * still at the attempt count its row gives has its cut-off attempt
 * counted, once however many rows name it (one cancelled meanwhile too,
 * with nothing else of it changed); an event of a gone relay only if it
 * was started: its run has no start log (not among
 * runs $4), or the log has it at that count (ids $5, attempts $6).
 *
 * An attempt its relay's end cut off is also counted in cut_off_attempts,
 * in a row (any outcome sets it back to 0), unless the relay was asked to
 * stop (its run among $10, from its start log): a shutdown is not an
 * event's doing, and its attempts are counted without blame (an event at
 * outbox.max_attempts is still sent alone next, as below, never
 * dead-lettered for it). At 2, or once the attempts
 * reach outbox.max_attempts ($7), the event is sent alone next time (the
 * relay's suspects, see relay.c); one that was sent alone and cut off
 * again is the one that ends its relay, and is dead-lettered. So an event
 * ends its relay at most three times in a row, and its neighbours are
 * dead-lettered for it only if they were cut off alone too.
 *
 * With $8 and $9 not NULL, only the row of run $8 and claim $9 among
 * those (see OutboxReleaseJournal). Returns a row per event counted: its
 * event_id, whether it is now dead and whether it is to be sent alone.
 */
static const Oid release_argtypes[] = {INT8ARRAYOID, INT8ARRAYOID, INT8OID, INT8ARRAYOID,
INT8ARRAYOID, INT4ARRAYOID, INT4OID, INT8OID, INT8OID, INT8ARRAYOID};
static OutboxStatement release_stmt = {
	.sql =
		"WITH gone AS ("
		"  DELETE FROM %1$s.outbox_in_flight j"
		"   WHERE (j.run <> ALL ($1) OR (j.run = $3 AND j.claim = ANY ($2)))"
		"     AND ($8 IS NULL OR (j.run = $8 AND j.claim = $9))"
		"  RETURNING j.run, j.ids, j.attempts),"
		" started AS ("
		"  SELECT DISTINCT ON (f.id, f.attempts) f.id, f.attempts, gone.run <> $3 AS ended,"
		"         gone.run = ANY ($10) AS stopped"
		"    FROM gone, unnest(gone.ids, gone.attempts) AS f(id, attempts)"
		"   WHERE gone.run = $3 OR gone.run <> ALL ($4)"
		"      OR (f.id, f.attempts) IN (SELECT s.id, s.attempts"
		"                                  FROM unnest($5::bigint[], $6::int[]) AS s(id, attempts))"
		"   ORDER BY f.id, f.attempts, ended),"
		" counted AS ("
		"  UPDATE %1$s.outbox o SET attempts = o.attempts + 1,"
		"         cut_off_attempts = CASE WHEN NOT u.ended THEN o.cut_off_attempts"
		"                                 WHEN u.stopped AND o.attempts + 1 >= $7"
		"                                 THEN greatest(o.cut_off_attempts, " CppAsString2(OUTBOX_ALONE_AFTER) ")"
		"                                 WHEN u.stopped THEN o.cut_off_attempts"
		"                                 WHEN o.attempts + 1 >= $7"
		"                                 THEN greatest(o.cut_off_attempts + 1, " CppAsString2(OUTBOX_ALONE_AFTER) ")"
		"                                 ELSE o.cut_off_attempts + 1 END,"
		"         dead_at = CASE WHEN u.ended AND NOT u.stopped"
		"                         AND o.cut_off_attempts >= " CppAsString2(OUTBOX_ALONE_AFTER) " THEN now() END,"
		"         last_error = CASE"
		"           WHEN NOT u.ended THEN o.last_error"
		"           WHEN u.stopped THEN 'attempt cut off: its relay was stopped while it was in flight'"
		"           WHEN o.cut_off_attempts >= " CppAsString2(OUTBOX_ALONE_AFTER) " THEN format("
		"             'its relay ended while it was in flight, sent alone (cut off %%s times in a row):"
		" dead-lettered, as it may end the relay', o.cut_off_attempts + 1)"
		"           ELSE format('attempt cut off: its relay ended while it was in flight"
		" (%%s in a row)', o.cut_off_attempts + 1) END"
		"    FROM started u"
		"   WHERE o.id = u.id AND o.attempts = u.attempts"
		"     AND o.delivered_at IS NULL AND o.dead_at IS NULL"
		"  RETURNING o.event_id::text, o.dead_at IS NOT NULL AS dead,"
		"            o.dead_at IS NULL AND o.cut_off_attempts >= " CppAsString2(OUTBOX_ALONE_AFTER) " AS alone),"
		/* cancelled (or delivered) meanwhile: the attempt still counts */
		" settled AS ("
		"  UPDATE %1$s.outbox o SET attempts = o.attempts + 1"
		"    FROM started u"
		"   WHERE o.id = u.id AND o.attempts = u.attempts"
		"     AND (o.delivered_at IS NOT NULL OR o.dead_at IS NOT NULL)"
		"  RETURNING o.event_id::text, false AS dead, false AS alone)"
		" SELECT event_id, dead, alone FROM counted"
		" UNION ALL SELECT event_id, dead, alone FROM settled",
	.nargs = 10,
	.argtypes = release_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN
};

/*
 * Writes the journal row of n claimed (locked) events about to be
 * sent by the relay of run run, number relay, as its claim number claim
 * (see journal_stmt), in the claim's transaction. Same context and errors
 * as OutboxMarkDelivered.
 */
void
OutboxJournal(OutboxEvent **events, int n, int64 run, int64 claim, int relay)
{
	int64	   *ids = palloc(sizeof(int64) * Max(n, 1));
	Datum	   *attempts = palloc(sizeof(Datum) * Max(n, 1));
	Datum		values[5];
	int			rc;

	for (int i = 0; i < n; i++)
	{
		ids[i] = events[i]->id;
		attempts[i] = Int32GetDatum(events[i]->attempts);
	}
	values[0] = Int64GetDatum(run);
	values[1] = Int64GetDatum(claim);
	values[2] = Int32GetDatum(relay);
	values[3] = OutboxInt8Array(ids, n);
	values[4] = PointerGetDatum(construct_array(attempts, n, INT4OID, 4, true, TYPALIGN_INT));
	rc = SPI_execute_plan(OutboxStatementPlan(&journal_stmt, OutboxQueueSchema()), values, NULL, false, 0);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "could not write the journal of events in flight: %s",
			 SPI_result_code_string(rc));
}

/*
 * Deletes the journal rows of the n claims in claims of the relay of run
 * run: every outcome of those claims is recorded. Caller has a transaction
 * open and SPI connected; ERROR if SPI fails.
 */
void
OutboxJournalDone(const int64 *claims, int n, int64 run)
{
	Datum		values[2];
	int			rc;

	if (n == 0)
		return;
	values[0] = OutboxInt8Array(claims, n);
	values[1] = Int64GetDatum(run);
	rc = SPI_execute_plan(OutboxStatementPlan(&journal_done_stmt, OutboxQueueSchema()), values, NULL, false, 0);
	if (rc != SPI_OK_DELETE)
		elog(ERROR, "could not delete from the journal of events in flight: %s",
			 SPI_result_code_string(rc));
}

/*
 * Releases journal rows (see release_stmt): those of every run not among
 * the nlive in live, and those of the nown claims in own of this relay's
 * run, or with only not NULL, the one row among those that it names;
 * logs, the start logs of the runs that are gone (OutboxStartLogRead).
 * Called by a relay with OutboxLockJournal held. Logs a WARNING for each
 * event it dead-lettered. Sets *counted to the cut-off attempts it
 * counted and *alone to the events now to be sent alone.
 */
void
OutboxReleaseJournal(const int64 *live, int nlive, const int64 *own, int nown,
					 const OutboxStartLogs *logs, const OutboxJournalKey *only,
					 uint64 *counted, uint64 *alone)
{
	Datum		values[10];
	char		nulls[10] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', 'n', 'n', ' '};
	Datum	   *attempts = palloc(sizeof(Datum) * Max(logs->n, 1));
	int			rc;

	for (int i = 0; i < logs->n; i++)
		attempts[i] = Int32GetDatum(logs->attempts[i]);
	values[0] = OutboxInt8Array(live, nlive);
	values[1] = OutboxInt8Array(own, nown);
	values[2] = Int64GetDatum(OutboxRelayRun());
	values[3] = OutboxInt8Array(logs->runs, logs->nruns);
	values[4] = OutboxInt8Array(logs->ids, logs->n);
	values[5] = PointerGetDatum(construct_array(attempts, logs->n, INT4OID, 4, true, TYPALIGN_INT));
	values[6] = Int32GetDatum(outbox_max_attempts);
	values[9] = OutboxInt8Array(logs->stopped, logs->nstopped);
	if (only != NULL)
	{
		values[7] = Int64GetDatum(only->run);
		values[8] = Int64GetDatum(only->claim);
		nulls[7] = nulls[8] = ' ';
	}
	rc = SPI_execute_plan(OutboxStatementPlan(&release_stmt, OutboxQueueSchema()), values, nulls, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not release the journal of events in flight: %s",
			 SPI_result_code_string(rc));
	*counted = SPI_processed;
	*alone = 0;
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		HeapTuple	tup = SPI_tuptable->vals[r];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;

		if (DatumGetBool(SPI_getbinval(tup, desc, 3, &isnull)))
			(*alone)++;
		if (DatumGetBool(SPI_getbinval(tup, desc, 2, &isnull)))
			ereport(WARNING,
					(errmsg("event %s was dead-lettered: its relay ended while it was in flight, sent alone",
							SPI_getvalue(tup, desc, 1)),
					 errdetail("Its attempts were cut off by its relay's end several times in a row, the last one with no other event in flight: it may be what ends the relay."),
					 errhint("outbox_redeliver_dead() sends it again, alone.")));
	}
}

/* The rows a release would take (release_stmt), and a row by its key. */
static const Oid keys_argtypes[] = {INT8ARRAYOID, INT8ARRAYOID, INT8OID};
static OutboxStatement keys_stmt = {
	.sql =
		"SELECT j.run, j.claim FROM %1$s.outbox_in_flight j"
		" WHERE j.run <> ALL ($1) OR (j.run = $3 AND j.claim = ANY ($2))"
		" ORDER BY j.run, j.claim",
	.nargs = 3,
	.argtypes = keys_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN
};
static const Oid drop_argtypes[] = {INT8OID, INT8OID};
static OutboxStatement drop_stmt = {
	.sql = "DELETE FROM %1$s.outbox_in_flight j WHERE j.run = $1 AND j.claim = $2",
	.nargs = 2,
	.argtypes = drop_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN
};

/*
 * The keys of the journal rows a release would take (see
 * OutboxReleaseJournal), in *keys (palloc'd in the current memory
 * context); returns how many. Same context as OutboxReleaseJournal.
 */
int
OutboxJournalKeys(const int64 *live, int nlive, const int64 *own, int nown,
				  OutboxJournalKey **keys)
{
	MemoryContext cxt = CurrentMemoryContext;	/* SPI returns in its own */
	Datum		values[3];
	int			rc;

	values[0] = OutboxInt8Array(live, nlive);
	values[1] = OutboxInt8Array(own, nown);
	values[2] = Int64GetDatum(OutboxRelayRun());
	rc = SPI_execute_plan(OutboxStatementPlan(&keys_stmt, OutboxQueueSchema()), values, NULL, true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read the journal of events in flight: %s", SPI_result_code_string(rc));
	*keys = MemoryContextAlloc(cxt, sizeof(OutboxJournalKey) * Max(SPI_processed, 1));
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;

		(*keys)[r].run = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull));
		(*keys)[r].claim = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2, &isnull));
	}
	return (int) SPI_processed;
}

/*
 * Deletes the journal row of key without counting any attempt: its
 * release keeps failing (see worker_release in relay.c). Caller has a
 * transaction open and SPI connected; ERROR if SPI fails.
 */
void
OutboxJournalDrop(const OutboxJournalKey *key)
{
	Datum		values[2];
	int			rc;

	values[0] = Int64GetDatum(key->run);
	values[1] = Int64GetDatum(key->claim);
	rc = SPI_execute_plan(OutboxStatementPlan(&drop_stmt, OutboxQueueSchema()), values, NULL, false, 0);
	if (rc != SPI_OK_DELETE)
		elog(ERROR, "could not delete from the journal of events in flight: %s",
			 SPI_result_code_string(rc));
}

/*
 * Takes the lock that makes releases of the journal one at a time, until
 * the end of the transaction: a lock on the extension (objsubid 1, which
 * nothing else uses), so that a relay that starts meanwhile, whose own
 * release waits for it, claims only after this release committed. Caller
 * has done OutboxQueueOpen().
 */
void
OutboxLockJournal(void)
{
	LockDatabaseObject(ExtensionRelationId, OutboxQueueExtension(), 1, ExclusiveLock);
}
