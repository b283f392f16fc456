/*-------------------------------------------------------------------------
 *
 * ordering.c
 *	  Ordered destinations: holding the events a claim meets that are not
 *	  the head of their key, releasing those held for an event once it is
 *	  delivered, and the SHARE lock on outbox_destinations that keeps
 *	  routing fixed until a claim's COMMIT.
 *
 * Holds are a shortcut, never what ordering rests on (those made as an
 * event is written, for an earlier one of its transaction, are
 * emit_hold.c's; the rest of this banner is about a claim's): the view
 * _outbox_pending gives each event the one before it on its key
 * (blocked_by, through outbox_key_idx), the claim tests every event it
 * meets again, and a held event is due again on its own if a release is
 * missed. They keep claims walking the heads of keys instead of every
 * key's backlog. The routing lock keeps routing as a claim read it until
 * the claim commits: a relay's claim holds events for long only under it,
 * and parks the events that no destination takes (queue.c) for long only
 * under it.
 *
 * Every function here runs with a transaction open, SPI connected and
 * OutboxQueueOpen() done, in the relay worker or in a backend calling
 * outbox_relay(), and never waits for a lock.
 *
 * src/ordering.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/lsyscache.h"

#include "ordering.h"
#include "pass.h"
#include "sorted_ids.h"
#include "statements.h"

/*
 * Ordered destinations. An event that is not the head of its key (the
 * view's blocked_by: the event before it, see outbox_key_idx) is held by
 * the claim that meets it: held_by names that event, and it is not due
 * again before that one's delivery releases it (release_stmt), or, should
 * a release be missed, after it has waited as long again (HOLD_MIN to
 * HOLD_MAX), so that claims walk heads rather than backlogs. Holding is
 * only a shortcut: the next claim tests an event again. It is held that
 * long ("sure") only while the event it waits for cannot be done
 * meanwhile: that event is one of this claim's ($3: locked by it, and not
 * delivered at its COMMIT; $5 allowing), or, read under a SHARE lock on
 * its row ($4 allowing), it is still undelivered, and not cancelled or
 * skipped. A delivery
 * of it holds a lock that conflicts: either it committed first (then it
 * is done, and the event is not held: the caller claims again) or it
 * comes after this transaction, finds the event held, and releases it.
 * The lock skips rows that others have locked (whose waits could form a
 * cycle with this one); an event whose wait is not sure, but whose
 * blocker this statement's snapshot sees undelivered, is held for
 * HOLD_SHORT only, so that a claim neither loops on it nor loses it.
 * The caller allows sure holds only when routing cannot change before its
 * COMMIT (OutboxDispatch); a session's outbox_relay(), whose locks last
 * while it sends, takes no lock on another's event ($4 false), and trusts
 * its own claim ($5) as its own outcomes release what it holds.
 */
#define HOLD_MIN "1 minute"
#define HOLD_MAX "10 minutes"
#define HOLD_SHORT "1 second"
#define BLOCKER_PENDING(b, blocker) \
	"SELECT FROM %1$s.outbox " b \
	" WHERE " b ".id = " blocker " AND " b ".delivered_at IS NULL" \
	"   AND " b ".cancelled_at IS NULL AND " b ".skipped_at IS NULL"
static const Oid hold_argtypes[] = {TIDARRAYOID, INT8ARRAYOID, BOOLARRAYOID, BOOLOID, BOOLOID};
static OutboxStatement hold_stmt = {
	.sql =
		"UPDATE %1$s.outbox o"
		"   SET held_by = v.blocker,"
		"       next_attempt_at = now() + CASE WHEN v.sure"
		"           THEN least(interval '" HOLD_MAX "',"
		"                      greatest(interval '" HOLD_MIN "', now() - o.created_at))"
		"           ELSE interval '" HOLD_SHORT "' END"
		"  FROM (SELECT u.tid, u.blocker,"
		"               (u.mine AND $5) OR"
		"               ($4 AND EXISTS (" BLOCKER_PENDING("b", "u.blocker") " FOR SHARE OF b SKIP LOCKED)) AS sure"
		"          FROM unnest($1::tid[], $2::bigint[], $3::bool[]) AS u(tid, blocker, mine)"
		"        OFFSET 0) v"		/* not pulled up: "sure" locks, once */
		" WHERE o.ctid = ANY ($1) AND o.ctid = v.tid"
		"   AND (v.sure OR EXISTS (" BLOCKER_PENDING("s", "v.blocker") "))",
	.nargs = 5,
	.argtypes = hold_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN,
	.path = OUTBOX_PLAN_BY_TID
};

/*
 * The events held for those in $1, which are delivered: due at once. Only
 * those still waiting (an event whose recheck came due may be claimed, in
 * flight: its row must not change under its outcome), and not those that
 * another claim has locked: it tests them itself, and waiting for it could
 * close a cycle of claims that release each other's events.
 */
static const Oid release_argtypes[] = {INT8ARRAYOID};
static OutboxStatement release_stmt = {
	.sql =
		"UPDATE %1$s.outbox o"
		"   SET held_by = NULL, next_attempt_at = now()"
		" WHERE o.ctid = ANY (ARRAY("
		"           SELECT h.ctid FROM %1$s.outbox h"
		"            WHERE h.held_by = ANY ($1) AND h.next_attempt_at > now()"
		"              AND h.delivered_at IS NULL"
		"              FOR UPDATE OF h SKIP LOCKED))"
		"   AND o.held_by = ANY ($1) AND o.next_attempt_at > now()",
	.nargs = 1,
	.argtypes = release_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN,
	.path = OUTBOX_PLAN_KEYED
};

/*
 * Holds the n claimed events in held, which are not the head of their key
 * for an ordered destination (ev->blocked_by, see hold_stmt). mine lists
 * the nmine ids of the claim's events that stay undelivered after its
 * COMMIT (held, in flight, failed), sorted in place here. lock_others
 * allows long holds for an event outside the claim, read under a lock,
 * trust_mine for one of the claim's (see hold_stmt). Returns how many
 * were not held: they are due, and the caller should claim again at
 * once. Never waits for a lock. Runs in the claim's transaction with SPI
 * connected, after its marks; raises ERROR only if SPI fails, which
 * aborts the claim and leaves every claimed event pending.
 */
int
OutboxHold(OutboxEvent **held, int n, int64 *mine, int nmine, bool lock_others,
		   bool trust_mine)
{
	Datum	   *blockers;
	Datum	   *owned;
	Datum		values[5];
	int			rc;

	if (n == 0)
		return 0;
	qsort(mine, nmine, sizeof(int64), OutboxCmpInt64);
	blockers = palloc(sizeof(Datum) * n);
	owned = palloc(sizeof(Datum) * n);
	for (int i = 0; i < n; i++)
	{
		blockers[i] = Int64GetDatum(held[i]->blocked_by);
		owned[i] = BoolGetDatum(OutboxSortedHas(mine, nmine, held[i]->blocked_by));
	}
	values[0] = OutboxTidArray(held, n);
	values[1] = PointerGetDatum(construct_array(blockers, n, INT8OID, 8, FLOAT8PASSBYVAL,
												TYPALIGN_DOUBLE));
	values[2] = PointerGetDatum(construct_array(owned, n, BOOLOID, 1, true, TYPALIGN_CHAR));
	values[3] = BoolGetDatum(lock_others);
	values[4] = BoolGetDatum(trust_mine);
	rc = SPI_execute_plan(OutboxStatementPlan(&hold_stmt, OutboxQueueSchema()), values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "could not hold events of ordered destinations: %s", SPI_result_code_string(rc));
	return n - (int) SPI_processed;
}

/*
 * Makes due at once the events held for those of the n events (just
 * marked delivered, in this transaction; see release_stmt): the next
 * event of each key. Any event with an aggregate id may have some, its
 * destination ordered now or not (it may have become ordered since its
 * claim); events without one are passed over, and nothing is run if none
 * has. Returns how many events were released. Runs in the transaction
 * that marks them delivered (a claim's, or one recording outcomes), with
 * SPI connected; raises ERROR only if SPI fails, which aborts it.
 */
int
OutboxReleaseHeld(OutboxEvent **events, int n)
{
	int64	   *ids = palloc(sizeof(int64) * Max(n, 1));
	int			nids = 0;
	Datum		values[1];
	int			rc;

	for (int i = 0; i < n; i++)
		if (events[i]->aggregate_id != NULL)
			ids[nids++] = events[i]->id;
	if (nids == 0)
		return 0;
	values[0] = OutboxInt8Array(ids, nids);
	rc = SPI_execute_plan(OutboxStatementPlan(&release_stmt, OutboxQueueSchema()),
						  values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "could not release held events: %s", SPI_result_code_string(rc));
	return (int) SPI_processed;
}

/*
 * Takes a SHARE lock on outbox_destinations if it can at once, until the
 * transaction ends: then no change of routing commits before then, and
 * statements started after see every one committed. Returns whether it
 * did. Never waits. Caller has a transaction open and OutboxQueueOpen()
 * done: a relay's claim, before its snapshot (OutboxDispatch), or the
 * parking of events that no destination takes (OutboxMarkUnroutable).
 */
bool
OutboxLockRouting(void)
{
	Oid			destinations = get_relname_relid("outbox_destinations", OutboxQueueSchema());

	return OidIsValid(destinations) && ConditionalLockRelationOid(destinations, ShareLock);
}
