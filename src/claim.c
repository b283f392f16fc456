/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  The claim: one short transaction that takes due events, sends those
 *	  of kinds that send at COMMIT, parks or fails what cannot be sent,
 *	  and puts the rest in flight. The relay worker runs it as a step;
 *	  outbox_relay() runs it, sends and records in the caller's
 *	  transaction.
 *
 * The claim writes nothing to the row of an event it puts in flight: its
 * row lock keeps other claims away until COMMIT, the in-flight set in
 * shared memory from then on (it is filled before COMMIT, and each claim
 * checks the rows it locked against it again: a claim whose snapshot
 * predates another relay's COMMIT can still lock that relay's rows). What
 * must survive a crash is the journal row (journal.c), written in the same
 * transaction.
 *
 * src/claim.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "claim.h"
#include "destination.h"
#include "fan_out.h"
#include "kind_registry.h"
#include "guc.h"
#include "journal.h"
#include "ordering.h"
#include "outcome.h"
#include "pass.h"
#include "queue.h"
#include "shmem.h"
#include "version.h"
#include "wait.h"

PG_FUNCTION_INFO_V1(outbox_relay);

/* The result of one outbox_relay() pass. */
typedef struct OutboxPassResult
{
	int			claimed;
	int			delivered;
	int			failed;
	int			unroutable;
} OutboxPassResult;

/*
 * Prepares a claimed event (OutboxPrepareFn, called by OutboxClaim in the
 * claim's memory context): an event that has a destination and no error
 * yet is handed to its kind's prepare, which checks the kind's rules and
 * builds the body (see destination.h). An event that breaks a rule gets no
 * body and a permanent failure with the reason, and is dead-lettered on
 * its own. Returns the bytes the body costs.
 */
static Size
prepare_event(OutboxEvent *ev)
{
	if (ev->error != NULL || ev->dest.name == NULL)
		return 0;				/* over a limit, or unroutable: nothing to build */
	return OutboxKindPrepare(ev);
}

/* Claims this relay has journaled: the last one's number. */
static int64 claim_seq = 0;

/*
 * The rows of a claim are locked now: leaves out (keep[i] false, in the
 * returned array) what another relay put in flight meanwhile, and, for a
 * relay, adds its own events in flight to the set at once, noting them in
 * d->published: if anything after this fails, the caller takes them out
 * again.
 */
static bool *
publish_claimed(const OutboxClaimRequest *req, OutboxEvent *events, int n,
				OutboxDispatchResult *d)
{
	int64	   *ids = palloc(sizeof(int64) * Max(n, 1));
	bool	   *publish = palloc(sizeof(bool) * Max(n, 1));
	bool	   *keep = palloc(sizeof(bool) * Max(n, 1));

	for (int i = 0; i < n; i++)
	{
		ids[i] = events[i].id;
		publish[i] = OutboxEventGoesInFlight(&events[i]);
	}
	OutboxInFlightClaim(MyDatabaseId, ids, req->run != 0 ? publish : NULL, n, keep);
	for (int i = 0; req->run != 0 && i < n; i++)
		if (keep[i] && publish[i])
			d->published[d->npublished++] = events[i].id;
	return keep;
}

/*
 * Sorts the kept events of a claim: sends those of kinds that send at
 * COMMIT, marks them delivered (or failed), fails those that cannot be
 * sent, parks those without a destination, holds those that are not their
 * key's turn, fans out those that several destinations take, and lists
 * the rest in d->in_flight, journaled under a new claim number for a
 * relay.
 */
static void
send_and_mark(const OutboxClaimRequest *req, OutboxEvent *events, int n,
			  const bool *keep, OutboxDispatchResult *d)
{
	OutboxEvent **ok = palloc(sizeof(OutboxEvent *) * Max(n, 1));
	OutboxEvent **failed = palloc(sizeof(OutboxEvent *) * Max(n, 1));
	OutboxEvent **unroutable = palloc(sizeof(OutboxEvent *) * Max(n, 1));
	OutboxEvent **held = palloc(sizeof(OutboxEvent *) * Max(n, 1));
	OutboxEvent **fanned = palloc(sizeof(OutboxEvent *) * Max(n, 1));
	int			nfanned = 0;
	bool		marked;

	for (int i = 0; i < n; i++)
	{
		OutboxEvent *ev = &events[i];

		CHECK_FOR_INTERRUPTS();
		if (!keep[i])
			continue;
		if (ev->fan_out)
			fanned[nfanned++] = ev;
		else if (ev->blocked_by != 0)
			held[d->held++] = ev;
		else if (ev->error != NULL || (ev->dest.name != NULL && ev->body == NULL))
			failed[d->failed++] = ev;
		else if (ev->dest.name == NULL)
			unroutable[d->unroutable++] = ev;
		else if (ev->dest.kind->send_point == OUTBOX_SEND_AT_COMMIT)
		{
			OutboxKindSend(ev);
			if (ev->ok)
				ok[d->delivered++] = ev;
			else
				failed[d->failed++] = ev;
		}
		else
		{
			ev->extoid = d->extoid;
			d->in_flight[d->nin_flight++] = ev;
		}
	}
	/* released: the next events of their keys are due now */
	if (OutboxMarkDelivered(ok, d->delivered, d->routing_locked, &marked) > 0)
		d->due_again = true;
	d->marks_short = !marked;
	if (!OutboxMarkFailed(failed, d->failed))
		d->marks_short = true;
	OutboxMarkUnroutable(unroutable, d->unroutable);
	if (d->held > 0)
	{
		/* the claim's events that stay undelivered: the held wait for them */
		int64	   *mine = palloc(sizeof(int64) * n);
		int			nmine = 0;

		for (int i = 0; i < d->held; i++)
			mine[nmine++] = held[i]->id;
		for (int i = 0; i < d->nin_flight; i++)
			mine[nmine++] = d->in_flight[i]->id;
		for (int i = 0; i < d->failed; i++)
			mine[nmine++] = failed[i]->id;
		/* after the marks: one delivered above is not waited for */
		if (OutboxHold(held, d->held, mine, nmine, d->routing_locked,
					   d->routing_locked || req->run == 0) > 0)
			d->due_again = true;
	}
	/*
	 * Last: the rows held above for an event fanned out here are released
	 * by it, and the next claim, at once, takes its new rows.
	 */
	if (nfanned > 0)
	{
		OutboxFanOut(fanned, nfanned);
		d->due_again = true;
	}
	if (req->run != 0 && d->nin_flight > 0)
	{
		d->claim = ++claim_seq;
		OutboxJournal(d->in_flight, d->nin_flight, req->run, d->claim, req->relay);
	}
}

/*
 * The claim: claims up to req->batch_size due events that are not in
 * flight (skip and only_id as for OutboxClaim) into memory context
 * req->cxt, sends the events of kinds that send at COMMIT, parks events
 * without a destination, fails those that cannot be sent, and, for a relay
 * (req->run not 0), puts the events of kinds that send after COMMIT in
 * flight: into the in-flight set, under run, and the journal, under relay
 * number req->relay. A backend (run 0, outbox_relay()) only checks the
 * set: it records its outcomes before its transaction ends, while the
 * rows are still locked. Fills *d. Caller has a transaction open and SPI
 * connected; what is sent at COMMIT, every mark and the journal row take
 * effect at its COMMIT, and d->in_flight must not be sent before it. If
 * the transaction fails, the caller takes d->published out of the set.
 */
void
OutboxDispatch(const OutboxClaimRequest *req, OutboxDispatchResult *d)
{
	int			batch_size = req->batch_size;
	OutboxEvent *events;
	int64	   *exclude;
	int			nexclude;
	int			room;
	bool	   *keep;
	int			n;
	OutboxClaimLimits lim;
	OutboxClaimLeft left;

	memset(d, 0, sizeof(*d));
	if (!OutboxQueueOpen())
		return;
	d->opened = true;
	d->extoid = OutboxQueueExtension();

	/*
	 * Before the claim's snapshot: with routing fixed until COMMIT, a
	 * claim may hold events of ordered destinations for long (OutboxHold).
	 * Not from outbox_relay(), whose transaction lasts while it sends: it
	 * trusts only its own claim's events, whose outcomes it records.
	 */
	d->routing_locked = req->run != 0 && OutboxLockRouting();

	exclude = OutboxInFlightIds(MyDatabaseId, req->run == 0, &nexclude, &room);
	if (req->run != 0 && room < batch_size)
	{
		/*
		 * Take no more events than fit in flight; with no room left at
		 * all, a claim still sends the events of kinds that send at
		 * COMMIT and parks or fails others, and the rest stay pending
		 * (OutboxInFlightClaim).
		 */
		d->room_limited = true;
		if (room > 0)
			batch_size = room;
	}
	d->asked = batch_size;
	lim.batch_size = batch_size;
	lim.skip = req->skip;
	lim.exclude = exclude;
	lim.nexclude = nexclude;
	lim.only_id = req->only_id;
	lim.held = req->held;
	lim.holding = req->holding;

	/*
	 * One destination puts at most half the set's room in flight per
	 * claim, as it gets at most half the connections while another is busy
	 * (a hanging endpoint must not fill the set for every other one): the
	 * next claim leaves it out once its kind is full, and others take the
	 * rest.
	 */
	lim.per_dest = req->run != 0 ? Max(room / 2, 1) : 0;
	/* a relay sends those alone; outbox_relay() journals nothing */
	lim.leave_alone = req->run != 0 && !req->alone;
	n = OutboxClaim(&lim, req->cxt, prepare_event, &events, &left);
	d->claimed = left.claimed;
	d->budget_limited = left.budget_limited;
	d->dest_limited = left.dest_limited;
	d->kind_limited = left.kind_limited;
	d->alone_left = left.alone;
	d->in_flight = MemoryContextAlloc(req->cxt, sizeof(OutboxEvent *) * Max(n, 1));
	d->published = MemoryContextAlloc(req->cxt, sizeof(int64) * Max(n, 1));
	keep = publish_claimed(req, events, n, d);
	send_and_mark(req, events, n, keep, d);
}

/*
 * Whether claim d was cut (by the set's room while it took all it asked
 * for, the memory budget or a kind's room), and settled events (sent at
 * COMMIT, failed, parked or held: out of the due range now) but put none
 * in flight. A relay with nothing else in flight then has no outcome
 * coming to make it claim again, and must claim again at once, or the
 * events left due wait for outbox.poll_interval or the next commit (with
 * outbox.batch_size over the set's room, a NOTIFY backlog went at one cut
 * claim per poll interval). Not after a claim that settled nothing, nor
 * one whose marks missed rows (a trigger on outbox, say): it would take
 * the same rows again. Any process; no transaction needed.
 */
bool
OutboxClaimCutSettled(const OutboxDispatchResult *d)
{
	bool		cut = (d->room_limited && d->claimed >= d->asked) ||
		d->budget_limited || d->kind_limited;

	return cut && d->nin_flight == 0 && !d->marks_short &&
		d->delivered + d->failed + d->unroutable + d->held > 0;
}

/*
 * Runs one relay pass in the current transaction: claims up to batch_size
 * due events, delivers them and records each outcome, all before returning
 * (the requests are sent while the caller's transaction is open: this is
 * for outbox_relay(), not the worker). Caller has SPI connected; all
 * allocations go to SPI's context. ERROR aborts the caller's transaction,
 * and with it every mark of the pass.
 */
static void
relay_pass(int batch_size, OutboxPassResult *result)
{
	OutboxClaimRequest req = {.batch_size = batch_size, .relay = -1, .cxt = CurrentMemoryContext};
	OutboxDispatchResult d;

	memset(result, 0, sizeof(*result));
	OutboxDispatch(&req, &d);
	if (!d.opened)
		return;
	OutboxSendAndWait(d.in_flight, d.nin_flight);
	OutboxRecordOutcomes(d.in_flight, d.nin_flight);
	result->claimed = d.claimed;
	result->delivered = d.delivered;
	result->failed = d.failed;
	result->unroutable = d.unroutable;
	for (int i = 0; i < d.nin_flight; i++)
	{
		if (d.in_flight[i]->ok)
			result->delivered++;
		else
			result->failed++;
	}
}

/*
 * outbox_relay(batch_size integer) RETURNS (delivered integer, failed integer)
 *
 * SQL-callable: one relay pass in the calling session's transaction, with
 * the worker's claim, transports and marks. batch_size NULL means
 * outbox.batch_size. Needs the privileges of outbox_admin. Errors:
 * batch_size out of 1..10000 (22023); called during recovery (25006); the
 * SQL objects are not of this library's version (55000, with the step that
 * is missing: ALTER EXTENSION UPDATE or a restart).
 */
Datum
outbox_relay(PG_FUNCTION_ARGS)
{
	int			batch_size = PG_ARGISNULL(0) ? outbox_batch_size : PG_GETARG_INT32(0);
	OutboxPassResult result;
	TupleDesc	tupdesc;
	Datum		values[2];
	bool		nulls[2] = {false, false};
	int			nestlevel;

	if (batch_size < 1 || batch_size > OUTBOX_MAX_BATCH_SIZE)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("batch size must be between 1 and %d", OUTBOX_MAX_BATCH_SIZE)));
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot relay events during recovery"),
				 errhint("Run outbox_relay() on the primary.")));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	/* the worker pauses on a mismatch; a caller is told what to do */
	OutboxRequireSqlVersion();

	/*
	 * The relay's statements pin their access path in a generic plan
	 * (statements.c); a session's plan_cache_mode = force_custom_plan
	 * would plan each execution afresh from the statistics instead. The
	 * worker overrides it for its whole life (session.c); here, for the
	 * pass (an ERROR restores it with the transaction).
	 */
	nestlevel = NewGUCNestLevel();
	(void) set_config_option("plan_cache_mode", "auto", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	relay_pass(batch_size, &result);
	SPI_finish();
	AtEOXact_GUC(true, nestlevel);

	values[0] = Int32GetDatum(result.delivered);
	values[1] = Int32GetDatum(result.failed);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}
