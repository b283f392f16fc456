/*-------------------------------------------------------------------------
 *
 * queue.c
 *	  The claim's SQL: claim due events, mark those the claim delivers or
 *	  parks, find the next event and when the next retry is due. A claimed
 *	  row is decoded in claim_decode.c; the extension's tables for a pass,
 *	  and the helpers every statement over them shares, are in pass.c; the
 *	  journal of events in flight is in journal.c, the recording of
 *	  outcomes in outcome.c.
 *
 * Every function here but the SQL-callable ones runs with a transaction
 * open, SPI connected and OutboxQueueOpen() done, in the relay worker or
 * in a backend calling outbox_relay(). Each statement's access path is
 * pinned (OutboxPlanPath, see pass.c): the claim and the next-due lookup
 * walk outbox_pending_idx in its order, marks and outcomes fetch rows by
 * TID, failures by primary key, whatever ANALYZE last saw in the table.
 *
 * Routing's rule has one home, the SQL function _outbox_takes() (a
 * destination's pattern and filter against an event), which every routing
 * function applies: _outbox_route(), read by the view _outbox_pending
 * that the statements here read (its ordered probe applies it directly),
 * and _outbox_routes(), read by outbox_status and the fan-out statement. So
 * has the text that marks a parked event: the trigger on
 * outbox_destinations reads it with _outbox_unroutable_error().
 *
 * Claiming uses FOR UPDATE SKIP LOCKED: any number of relays can run over
 * one table and no event is claimed by two of them at once. The locks are
 * held until the claim commits; from then on the in-flight set in shared
 * memory (in_flight.c), which every claim leaves out, keeps other relays
 * away from an event in flight, and the journal (journal.c) keeps the
 * count of its attempt if a crash cuts it off. Nothing is written to
 * the event's row until its outcome: it stays pending, due again at once
 * if its relay goes (at-least-once).
 *
 * The claim also keeps the relay within its memory budget
 * (OUTBOX_RELAY_BYTES), one destination within half the in-flight set's
 * room and within the room its kind has: events left out stay pending,
 * unchanged (OutboxClaim; the limits are applied in admission.c).
 *
 * src/queue.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "claim_decode.h"
#include "health.h"
#include "ordering.h"
#include "pass.h"
#include "queue.h"
#include "skip.h"
#include "statements.h"

PG_FUNCTION_INFO_V1(_outbox_claim_query);
PG_FUNCTION_INFO_V1(_outbox_unroutable_error);

/* last_error of a parked event; the trigger on destinations looks for it */
#define UNROUTABLE_ERROR "no enabled destination matches the event type"
#define UNROUTABLE_RECHECK "10 seconds"

/*
 * The claim: due, live events in due order, each with the destination that
 * routing chooses for its type, or NULLs when none does (the view
 * _outbox_pending); $2 names destinations to leave alone for now (their
 * queue in the relay is full) and $4 kinds (every connection they have is
 * taken, a round's worth waits: the queues of a thousand webhooks, full
 * one by one, would hold thousands of events, each walked past again by
 * every claim); an event to be fanned out is taken all the same, as the
 * others it goes to must not wait for those. $3 is the events in flight
 * (the set in shared memory), which it tests with a hashed subplan, one
 * hash table per claim.
 * It returns each row's ctid: the rows stay locked until the claim's
 * transaction ends, and marking them by TID scan costs about a third less
 * than by primary key lookups. Its select list, OUTBOX_CLAIM_COLUMNS, is
 * next to the Anum_claim_* numbers that decode it (claim_decode.h).
 * claim_one_stmt takes the one event with id $5 (isolation after an
 * error): a separate statement, as an "id = $5 or any" test would spoil
 * the generic plan of the normal claim (it walks the pending index in
 * order, without sorting).
 */
#define CLAIM_SELECT \
	"SELECT " OUTBOX_CLAIM_COLUMNS \
	"  FROM %1$s._outbox_pending p" \
	" WHERE p.next_attempt_at <= now()" \
	"   AND (p.dest_name IS NULL OR p.fan_out" \
	"        OR (p.dest_name <> ALL ($2) AND (p.dest).kind <> ALL ($4)))" \
	"   AND p.id NOT IN (SELECT unnest($3::bigint[]))"
#define CLAIM_LOCK \
	" ORDER BY p.next_attempt_at, p.id" \
	" LIMIT $1" \
	"   FOR UPDATE OF p SKIP LOCKED"

static const Oid claim_argtypes[] = {INT4OID, TEXTARRAYOID, INT8ARRAYOID, TEXTARRAYOID, INT8OID};
static OutboxStatement claim_stmt = {
	.sql = CLAIM_SELECT CLAIM_LOCK,
	.nargs = 4,
	.argtypes = claim_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN,
	.path = OUTBOX_PLAN_KEYED
};
static OutboxStatement claim_one_stmt = {
	.sql = CLAIM_SELECT " AND p.id = $5" CLAIM_LOCK,
	.nargs = 5,
	.argtypes = claim_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN,
	.path = OUTBOX_PLAN_KEYED
};

/*
 * See OUTBOX_DELIVERED_DESTINATION; $5: routing cannot have changed since
 * the claim read it (OutboxLockRouting), so that each event's destination
 * is still the one it was claimed for, untested (and $3 and $4 are NULL).
 */
static const Oid delivered_argtypes[] = {TIDARRAYOID, TEXTARRAYOID, TEXTARRAYOID, TIMESTAMPTZARRAYOID,
BOOLOID};
static OutboxStatement delivered_stmt = {
	.sql =
		"UPDATE %1$s.outbox o"
		"   SET delivered_at = now(), attempts = o.attempts + 1,"
		"       last_error = NULL, held_by = NULL,"
		"       destination = CASE WHEN $5 THEN u.dest"
		"                     ELSE " OUTBOX_DELIVERED_DESTINATION("$2") " END"
		"  FROM unnest($1::tid[], $2::text[], $3::text[], $4::timestamptz[])"
		"       AS u(tid, dest, kind, created)"
		" WHERE o.ctid = ANY ($1) AND o.ctid = u.tid",
	.nargs = 5,
	.argtypes = delivered_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN,
	.path = OUTBOX_PLAN_BY_TID
};


/*
 * Events that no destination takes are parked: pending, attempts unchanged,
 * not claimed again for as long as they have waited already (at least
 * UNROUTABLE_RECHECK, at most an hour), so that a relay woken by every
 * commit does not walk them on every pass, nor a large backlog of them
 * every few seconds. The trigger on outbox_destinations makes parked
 * events due again when a destination is added or changed (its condition
 * matches this last_error text). So that no change slips between the two,
 * the claim first takes a SHARE lock on outbox_destinations, which waits
 * for no one (OutboxMarkUnroutable): with it, no change is in progress,
 * and this statement's snapshot, newer than the claim's, sees every one
 * committed, and routing is checked again with it; a change that starts
 * later waits for the claim's COMMIT, and its trigger then finds these
 * events parked. Without the lock (a change in progress, whose trigger
 * may not see them), they are parked for UNROUTABLE_SHORT only.
 */
#define UNROUTABLE_SET \
	"       last_error = '" UNROUTABLE_ERROR "'" \
	" WHERE o.ctid = ANY($1)" \
	"   AND NOT EXISTS (SELECT FROM %1$s._outbox_pending p" \
	"                    WHERE p.id = o.id AND p.dest_name IS NOT NULL)"
#define UNROUTABLE_SHORT "1 second"
static const Oid unroutable_argtypes[] = {TIDARRAYOID};
static OutboxStatement unroutable_stmt = {
	.sql =
		"UPDATE %1$s.outbox o"
		"   SET next_attempt_at = now() + least(interval '1 hour',"
		"           greatest(interval '" UNROUTABLE_RECHECK "', now() - o.created_at)),"
		UNROUTABLE_SET,
	.nargs = 1,
	.argtypes = unroutable_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN,
	.path = OUTBOX_PLAN_KEYED
};
static OutboxStatement unroutable_short_stmt = {
	.sql =
		"UPDATE %1$s.outbox o"
		"   SET next_attempt_at = now() + interval '" UNROUTABLE_SHORT "',"
		UNROUTABLE_SET,
	.nargs = 1,
	.argtypes = unroutable_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN,
	.path = OUTBOX_PLAN_KEYED
};

static OutboxStatement next_due_stmt = {
	.sql =
		"SELECT (extract(epoch FROM o.next_attempt_at - now()) * 1000)::float8"
		"  FROM %1$s.outbox o"
		" WHERE o.delivered_at IS NULL AND o.dead_at IS NULL"
		"   AND o.next_attempt_at > now()"
		" ORDER BY o.next_attempt_at"
		" LIMIT 1",
	.nargs = 0,
	.argtypes = NULL,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN,
	.path = OUTBOX_PLAN_KEYED
};

/*
 * Whether an enabled destination exists other than those named in $1 and
 * those of the kinds named in $2. A claim that leaves out every enabled
 * destination could only find events that have none (to park) or go to
 * several (to fan out), and would walk the whole due backlog of those it
 * leaves out to find them: it is not made; such events wait for the next
 * claim that leaves something in (their deliveries could not start
 * before it anyway).
 */
static const Oid others_argtypes[] = {TEXTARRAYOID, TEXTARRAYOID};
static OutboxStatement others_stmt = {
	.sql =
		"SELECT EXISTS (SELECT FROM %1$s.outbox_destinations d"
		"                WHERE d.enabled AND d.name <> ALL ($1) AND d.kind <> ALL ($2))",
	.nargs = 2,
	.argtypes = others_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN
};

/* The next event the claim would take, without locking it. */
static const Oid next_pending_argtypes[] = {TEXTARRAYOID, INT8ARRAYOID, TEXTARRAYOID};
static OutboxStatement next_pending_stmt = {
	.sql =
		"SELECT p.id, p.attempts"
		"  FROM %1$s._outbox_pending p"
		" WHERE p.next_attempt_at <= now()"
		"   AND (p.dest_name IS NULL OR p.fan_out"
		"        OR (p.dest_name <> ALL ($1) AND (p.dest).kind <> ALL ($3)))"
		"   AND p.id NOT IN (SELECT unnest($2::bigint[]))"
		" ORDER BY p.next_attempt_at, p.id"
		" LIMIT 1",
	.nargs = 3,
	.argtypes = next_pending_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN,
	.path = OUTBOX_PLAN_KEYED
};

/*
 * The next event to be sent alone (see OUTBOX_ALONE_AFTER) that is due and
 * not in flight, by the partial index of such events (outbox_alone_idx):
 * there are none unless relays ended with events in flight.
 */
static const Oid next_alone_argtypes[] = {INT8ARRAYOID};
static OutboxStatement next_alone_stmt = {
	.sql =
		"SELECT p.id, p.attempts"
		"  FROM %1$s._outbox_pending p"
		" WHERE p.cut_off_attempts >= " CppAsString2(OUTBOX_ALONE_AFTER)
		"   AND p.next_attempt_at <= now()"
		"   AND p.id NOT IN (SELECT unnest($1::bigint[]))"
		" ORDER BY p.next_attempt_at, p.id"
		" LIMIT 1",
	.nargs = 1,
	.argtypes = next_alone_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN,
	.path = OUTBOX_PLAN_KEYED
};

/*
 * _outbox_claim_query() RETURNS text
 *
 * SQL-callable, internal: the text of the relay's claim query for the
 * extension's schema, so that its plan can be checked with EXPLAIN by
 * tests and DBAs. Its parameters: $1 int, the batch size; $2 text[],
 * destinations to leave out; $3 bigint[], events in flight; $4 text[],
 * kinds to leave out.
 */
Datum
_outbox_claim_query(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(OutboxStatementText(&claim_stmt,
														 get_func_namespace(fcinfo->flinfo->fn_oid))));
}

/*
 * _outbox_unroutable_error() RETURNS text
 *
 * SQL-callable, internal, IMMUTABLE: the last_error text of a parked event,
 * for the trigger that makes parked events due again.
 */
Datum
_outbox_unroutable_error(PG_FUNCTION_ARGS pg_attribute_unused())
{
	PG_RETURN_TEXT_P(cstring_to_text(UNROUTABLE_ERROR));
}

/*
 * Runs the claim's statement (see OutboxClaim for the arguments), leaving
 * the rows it locked in SPI_tuptable. Returns false, claiming nothing, when
 * skip leaves out every enabled destination (see others_stmt).
 */
static bool
claim_rows(int batch_size, const OutboxSkip *skip, const int64 *exclude, int nexclude,
		   int64 only_id)
{
	Datum		values[5];
	int			rc;

	values[0] = Int32GetDatum(batch_size);
	values[1] = OutboxSkipArray(skip->dests);
	values[2] = OutboxInt8Array(exclude, nexclude);
	values[3] = OutboxSkipArray(skip->kinds);
	values[4] = Int64GetDatum(only_id);

	if (!OutboxSkipNone(skip) && only_id == 0)
	{
		bool		isnull;
		Datum		others[2] = {values[1], values[3]};

		rc = SPI_execute_plan(OutboxStatementPlan(&others_stmt, OutboxQueueSchema()),
							  others, NULL, false, 1);
		if (rc != SPI_OK_SELECT || SPI_processed != 1)
			elog(ERROR, "could not look for destinations: %s", SPI_result_code_string(rc));
		if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
			return false;
	}

	rc = SPI_execute_plan(OutboxStatementPlan(only_id != 0 ? &claim_one_stmt : &claim_stmt,
											  OutboxQueueSchema()),
						  values, NULL, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not claim events: %s", SPI_result_code_string(rc));
	if (SPI_tuptable->tupdesc->natts != Natts_claim)
		elog(ERROR, "claim returned %d columns, expected %d",
			 SPI_tuptable->tupdesc->natts, Natts_claim);
	return true;
}

/*
 * Claims up to lim->batch_size due events and returns them in *events,
 * decoded into memory context cxt (the rows' values are copied: the
 * events outlive the claim's transaction) and each handed to prepare (in
 * cxt too), which builds what will be sent and returns the bytes that
 * costs. Events whose destination or kind lim->skip names are left for
 * later (an event to be fanned out is not), and so are the lim->nexclude
 * events in lim->exclude (those in flight); lim->only_id, if not 0, claims that one event. An
 * event without a destination has dest.name NULL; one over a size limit
 * has a permanent error (see OutboxDecodeEvent). Returns the number of
 * events to process, each with its cost (what it takes in the relay's
 * memory: columns, and the body prepare built), and fills *left: the rows
 * locked, and which limit left events out.
 *
 * The limits. The relay's memory budget (OUTBOX_RELAY_BYTES) leaves events
 * out: those that would go in flight once the events in flight cost more
 * than it, lim->held (bytes the caller holds already) included, unless
 * nothing is held then; and any event after the first once the claim's
 * own cost would pass it. Smaller events after one left out are still
 * taken if they fit: a large event must not hold back another
 * destination's events (it waits for the events in flight before it,
 * which the connection limits keep few, not for all those that come
 * later). lim->per_dest, if not 0, is the most events of one destination
 * the claim puts in flight: one destination's backlog must not take every
 * entry of the in-flight set (whose room the caller divides). Nor does it
 * put in flight more events of a destination than its kind has room for
 * (room in destination.h), less those of lim->holding: an event handed
 * over starts at once, and none waits in the kind for room. With
 * lim->leave_alone, an event to be sent alone (cut off
 * OUTBOX_ALONE_AFTER times in a row, see journal.c) is left out of a
 * claim that would put it in flight: the relay claims it by itself.
 *
 * Events left out are freed, and their rows unlocked unchanged when the
 * transaction ends (admission.c). Interruptible between events. Caller has
 * a transaction open, SPI connected and OutboxQueueOpen() done; ERROR if
 * SPI fails, which aborts the claim.
 */
int
OutboxClaim(const OutboxClaimLimits *lim, MemoryContext cxt, OutboxPrepareFn prepare,
			OutboxEvent **events, OutboxClaimLeft *left)
{
	OutboxClaimSecrets secrets;
	OutboxAdmission adm = {.held = lim->held, .per_dest = lim->per_dest,
		.holding = lim->holding, .leave_alone = lim->leave_alone, .secrets = &secrets};
	int			n;
	MemoryContext old;

	SPITupleTable *claimed;

	memset(left, 0, sizeof(*left));
	*events = NULL;
	if (!claim_rows(lim->batch_size, &lim->skip, lim->exclude, lim->nexclude, lim->only_id))
		return 0;

	left->claimed = (int) SPI_processed;
	claimed = SPI_tuptable;		/* kept until SPI_finish */
	OutboxLoadSecrets(&secrets);
	old = MemoryContextSwitchTo(cxt);
	*events = palloc0(sizeof(OutboxEvent) * Max(left->claimed, 1));
	n = OutboxAdmit(claimed, *events, left->claimed, prepare, &adm);
	MemoryContextSwitchTo(old);
	left->budget_limited = adm.budget_limited;
	left->dest_limited = adm.dest_limited;
	left->kind_limited = adm.kind_limited;
	left->alone = adm.alone_left;
	return n;
}

/*
 * Marks n claimed events delivered: delivered_at = now() (the pass's start),
 * attempts + 1, last_error cleared, destination recorded; then releases
 * the events held for them (OutboxReleaseHeld), and returns how many;
 * *all_marked: whether every one was marked.
 * routing_locked: the claim took OutboxLockRouting() before its snapshot
 * (each statement takes its own: the relay runs in READ COMMITTED), so
 * each event's destination stands as the claim read it, untested (the
 * test took 1 us an event: 10.4 against 9.4 ms for 1,000). Runs in the
 * pass's transaction with SPI connected; raises ERROR only if SPI fails,
 * which aborts the pass and leaves every claimed event pending.
 */
int
OutboxMarkDelivered(OutboxEvent **events, int n, bool routing_locked, bool *all_marked)
{
	Datum		values[5] = {0};
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	int			rc;

	*all_marked = true;
	if (n == 0)
		return 0;
	for (int i = 0; i < n; i++)
		OutboxHealthNote(events[i], NULL);
	values[0] = OutboxTidArray(events, n);
	OutboxDeliveryDestinations(events, n, &values[1], routing_locked);
	if (routing_locked)
		nulls[2] = nulls[3] = 'n';
	values[4] = BoolGetDatum(routing_locked);

	rc = SPI_execute_plan(OutboxStatementPlan(&delivered_stmt, OutboxQueueSchema()), values, nulls, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "could not mark events delivered: %s", SPI_result_code_string(rc));
	*all_marked = OutboxCheckMarked(n, true);
	return OutboxReleaseHeld(events, n);
}

/*
 * Parks n claimed events that no enabled destination takes (see
 * unroutable_stmt): attempts unchanged. Holds a SHARE lock on
 * outbox_destinations until the transaction ends if it can take one at
 * once, and never waits for it. Same context and errors as
 * OutboxMarkDelivered.
 */
void
OutboxMarkUnroutable(OutboxEvent **events, int n)
{
	Datum		values[1];
	int			rc;
	bool		locked;

	if (n == 0)
		return;
	values[0] = OutboxTidArray(events, n);
	locked = OutboxLockRouting();
	rc = SPI_execute_plan(OutboxStatementPlan(locked ? &unroutable_stmt : &unroutable_short_stmt,
											  OutboxQueueSchema()),
						  values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "could not park events without a destination: %s", SPI_result_code_string(rc));
}

/*
 * Finds the event the claim would take next (skip and exclude as for
 * OutboxClaim), without locking it: sets *id and *attempts and returns
 * true, or returns false if none is due. Caller has a transaction open,
 * SPI connected and OutboxQueueOpen() done; ERROR if SPI fails.
 */
bool
OutboxNextPending(const OutboxSkip *skip, const int64 *exclude, int nexclude, int64 *id,
				  int32 *attempts)
{
	Datum		values[3];
	bool		isnull;
	int			rc;

	values[0] = OutboxSkipArray(skip->dests);
	values[1] = OutboxInt8Array(exclude, nexclude);
	values[2] = OutboxSkipArray(skip->kinds);
	rc = SPI_execute_plan(OutboxStatementPlan(&next_pending_stmt, OutboxQueueSchema()), values, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not find the next event: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return false;
	*id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	*attempts = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	return true;
}

/*
 * Finds the next event to be sent alone (next_alone_stmt), leaving out the
 * nexclude events in exclude: sets *id and *attempts and returns true, or
 * returns false if there is none. Caller has a transaction open, SPI
 * connected and OutboxQueueOpen() done; ERROR if SPI fails.
 */
bool
OutboxNextAlone(const int64 *exclude, int nexclude, int64 *id, int32 *attempts)
{
	Datum		values[1];
	bool		isnull;
	int			rc;

	values[0] = OutboxInt8Array(exclude, nexclude);
	rc = SPI_execute_plan(OutboxStatementPlan(&next_alone_stmt, OutboxQueueSchema()), values, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not find the next event to send alone: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return false;
	*id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	*attempts = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	return true;
}

/*
 * Milliseconds until the earliest scheduled attempt (a retry or a parked
 * event), or -1 when none is waiting. Events in flight are not among
 * them: they end in outcomes, or, if their relay is gone, in a release of
 * its journal that makes them due at once (relay.c). Run with a
 * snapshot of its own (not read-only), so that it sees this transaction's
 * writes and whatever was committed meanwhile: a decision about when to look
 * again must never rest on an older picture. Caller has a transaction
 * open, SPI connected and OutboxQueueOpen() done; ERROR if SPI fails.
 */
double
OutboxNextDueMs(void)
{
	int			rc;
	bool		isnull;
	Datum		d;

	rc = SPI_execute_plan(OutboxStatementPlan(&next_due_stmt, OutboxQueueSchema()), NULL, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not find the next retry: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return -1;
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? -1 : Max(DatumGetFloat8(d), 0.0);
}
