/*-------------------------------------------------------------------------
 *
 * relay.c
 *	  The relay: claims due events, delivers them and records each outcome,
 *	  with no transaction open while it waits on the network. The relay
 *	  worker runs this as a loop; outbox_relay() runs one pass in the
 *	  calling session.
 *
 * The worker's state machine, per event:
 *
 *	 due --claim--> [NOTIFY] delivered, in the claim's own transaction
 *				   [none]   parked (see queue.c)
 *				   [HTTP]   in flight: in the in-flight set in shared
 *							memory, and in the journal (outbox_in_flight)
 *	 in flight --request--> delivered | retry later | dead-lettered, each
 *							recorded (attempt counted) in a short
 *							transaction as it comes, then out of the set
 *
 * A claim is one short transaction: FOR UPDATE SKIP LOCKED over due events
 * not in the in-flight set, NOTIFY queued and marked, HTTP events added to
 * the set and journaled, COMMIT; only then are the HTTP requests started.
 * The claim writes nothing to an HTTP event's row: its row lock keeps
 * other claims away until COMMIT, the set from then on (it is filled
 * before COMMIT, and each claim checks the rows it locked against it
 * again: a claim whose snapshot predates another relay's COMMIT can still
 * lock that relay's rows). The transport (deliver_http.c) returns outcomes
 * as they arrive, and the loop records them at once and claims more while
 * others are in flight, so a slow endpoint delays no one else's marks and
 * holds no lock or snapshot.
 *
 * Relays that are gone. The set lives in shared memory, so a crash
 * restart empties it, and an exited relay's entries stay until released.
 * Before its first claim, and within RELEASE_CHECK_MS of finding another
 * relay's entries without their relay, a relay releases the journal rows
 * of every relay that does not run: each event still at its claimed
 * attempt count gets that cut-off attempt counted, and is due again at
 * once, with the same webhook-id (at-least-once). Releases take a lock,
 * so that no relay claims before the release that comes first after a
 * restart has committed.
 *
 * Faults. Every transaction runs under PG_TRY: an ERROR (a user trigger, a
 * failed COMMIT, a full NOTIFY queue, out of memory) aborts that
 * transaction only, and the worker goes on. Since nothing was sent for a
 * claim that did not commit, a failed claim costs no delivery; the relay
 * then claims one event per transaction until it has passed the one that
 * fails, and records that event's failure (retried with backoff, then
 * dead-lettered, the error in last_error). A batch of outcomes that cannot
 * be recorded is recorded one by one; an event whose outcome cannot be
 * recorded gets a failed attempt instead, written with user triggers off
 * (session_replication_role = replica) if they are what fails. So after a
 * fault every other event is sent at most twice, and the worker never
 * restarts over it; errors are logged at most once per ERROR_LOG_INTERVAL_MS.
 *
 * The worker sleeps on its latch, which a committing backend sets when its
 * transaction emitted (emit.c); the next due time, read with a fresh
 * snapshot after each step, bounds the sleep, and outbox.poll_interval is
 * the fallback for events inserted without outbox_emit().
 *
 * src/relay.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_authid.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "destination.h"
#include "envelope.h"
#include "event.h"
#include "guc.h"
#include "health.h"
#include "purge.h"
#include "queue.h"
#include "relay.h"
#include "shmem.h"
#include "validate.h"
#include "version.h"
#include "wait.h"

PG_FUNCTION_INFO_V1(outbox_relay);

/* A relay looks this often for entries of relays that are gone. */
#define RELEASE_CHECK_MS 1000
/*
 * Outcomes are recorded together: once this many are in, or the first has
 * waited RECORD_DELAY_MS, or nothing else is in flight (so an idle relay
 * records at once).
 */
#define RECORD_BATCH 64
#define RECORD_DELAY_MS 5
/*
 * A claim that left out full destinations and still found less than a
 * batch found every due event of the others: repeating it before an
 * outcome frees one of those destinations can only find what was emitted
 * or became due since, and it walks the full destinations' due backlog
 * again to do so. Such a repeat waits this many times as long as that
 * claim took, which keeps walking a large backlog under a tenth of the
 * relay's time.
 */
#define DRY_CLAIM_REPEAT_FACTOR 10
/* Caught errors are logged at most this often. */
#define ERROR_LOG_INTERVAL_MS 10000
/* The wait after a step failed, doubled while failures go on. */
#define ERROR_BACKOFF_MIN_MS 100
#define ERROR_BACKOFF_MAX_MS 60000

/* A growing array of int64, kept between steps (in TopMemoryContext). */
typedef struct IdList
{
	int64	   *ids;
	int			n;
	int			cap;
} IdList;

/* The events of one claim that are still in the HTTP transport. */
typedef struct ClaimBatch
{
	MemoryContext cxt;			/* the events and their strings */
	int			open;			/* events in flight whose outcome is not in */
	IdList		unrecorded;		/* events whose outcome changed no row */
	int64		claim;			/* its number in the journal (0: none) */
	Oid			extoid;			/* in the extension of this OID */
} ClaimBatch;

/* What a claim did (dispatch). */
typedef struct Dispatch
{
	bool		opened;			/* the extension was there to work on */
	int			claimed;		/* rows locked */
	int			delivered;		/* NOTIFY */
	int			failed;
	int			unroutable;
	bool		room_limited;	/* fewer than asked: the in-flight set is full */
	OutboxEvent **in_flight;	/* to be sent after COMMIT */
	int			nin_flight;
	int64	   *published;		/* their ids, in the in-flight set */
	int			npublished;
	int64		claim;			/* their journal row's claim number, or 0 */
	Oid			extoid;			/* the extension they were claimed from */
} Dispatch;

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
	return ev->dest.kind->prepare(ev);
}

/* Claims this relay has journaled: the last one's number. */
static int64 claim_seq = 0;

/* Whether a claimed event is to be sent after COMMIT (put in flight). */
static bool
goes_in_flight(const OutboxEvent *ev)
{
	return ev->error == NULL && ev->dest.name != NULL && ev->body != NULL &&
		ev->dest.kind->send_point == OUTBOX_SEND_AFTER_COMMIT;
}

/*
 * The claim: claims up to batch_size due events that are not in flight
 * (skip and only_id as for OutboxClaim) into memory context cxt, queues
 * NOTIFY deliveries, parks events without a destination, fails those that
 * cannot be sent, and, for a relay (run not 0), puts the HTTP events in
 * flight: into the in-flight set, under run, and the journal, under relay
 * number relay. A backend (run 0, outbox_relay()) only checks the set:
 * it records its outcomes before its transaction ends, while the rows are
 * still locked. Fills *d. Caller has a transaction open and SPI connected;
 * NOTIFY deliveries, every mark and the journal row take effect at its
 * COMMIT, and the HTTP events must not be sent before it. If the
 * transaction fails, the caller takes d->published out of the set.
 */
static void
dispatch(int batch_size, List *skip, int64 only_id, int64 run, int relay,
		 MemoryContext cxt, Dispatch *d)
{
	OutboxEvent *events;
	OutboxEvent **ok,
			  **failed,
			  **unroutable;
	int64	   *exclude;
	int			nexclude;
	int			room;
	int64	   *ids;
	bool	   *publish;
	bool	   *keep;
	int			n;
	int			nok = 0,
				nfailed = 0,
				nunroutable = 0;

	memset(d, 0, sizeof(*d));
	if (!OutboxQueueOpen())
		return;
	d->opened = true;
	d->extoid = OutboxQueueExtension();

	exclude = OutboxInFlightIds(MyDatabaseId, run == 0, &nexclude, &room);
	if (run != 0 && room < batch_size)
	{
		/*
		 * Take no more HTTP events than fit; with no room left at all, a
		 * claim still delivers NOTIFY events and parks or fails others,
		 * and its HTTP events stay pending (OutboxInFlightClaim).
		 */
		d->room_limited = true;
		if (room > 0)
			batch_size = room;
	}
	n = OutboxClaim(batch_size, skip, exclude, nexclude, only_id, cxt, prepare_event,
					&events, &d->claimed);
	ok = palloc(sizeof(OutboxEvent *) * Max(n, 1));
	failed = palloc(sizeof(OutboxEvent *) * Max(n, 1));
	unroutable = palloc(sizeof(OutboxEvent *) * Max(n, 1));
	d->in_flight = MemoryContextAlloc(cxt, sizeof(OutboxEvent *) * Max(n, 1));
	d->published = MemoryContextAlloc(cxt, sizeof(int64) * Max(n, 1));

	/* the rows are locked now: leave out what another relay put in flight */
	ids = palloc(sizeof(int64) * Max(n, 1));
	publish = palloc(sizeof(bool) * Max(n, 1));
	keep = palloc(sizeof(bool) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		ids[i] = events[i].id;
		publish[i] = goes_in_flight(&events[i]);
	}
	OutboxInFlightClaim(MyDatabaseId, ids, run != 0 ? publish : NULL, n, keep);
	/* at once: if anything below fails, the caller takes these out again */
	for (int i = 0; run != 0 && i < n; i++)
		if (keep[i] && publish[i])
			d->published[d->npublished++] = events[i].id;

	for (int i = 0; i < n; i++)
	{
		OutboxEvent *ev = &events[i];

		CHECK_FOR_INTERRUPTS();
		if (!keep[i])
			continue;
		if (ev->error != NULL || (ev->dest.name != NULL && ev->body == NULL))
			failed[nfailed++] = ev;
		else if (ev->dest.name == NULL)
			unroutable[nunroutable++] = ev;
		else if (ev->dest.kind->send_point == OUTBOX_SEND_AT_COMMIT)
		{
			ev->dest.kind->send(ev);
			if (ev->ok)
				ok[nok++] = ev;
			else
				failed[nfailed++] = ev;
		}
		else
			d->in_flight[d->nin_flight++] = ev;
	}
	OutboxMarkDelivered(ok, nok);
	OutboxMarkFailed(failed, nfailed);
	OutboxMarkUnroutable(unroutable, nunroutable);
	if (run != 0 && d->nin_flight > 0)
	{
		d->claim = ++claim_seq;
		OutboxJournal(d->in_flight, d->nin_flight, run, d->claim, relay);
	}
	d->delivered = nok;
	d->failed = nfailed;
	d->unroutable = nunroutable;
}

/*
 * Runs one relay pass in the current transaction: claims up to batch_size
 * due events, delivers them and records each outcome, all before returning
 * (the requests are sent while the caller's transaction is open: this is
 * for outbox_relay(), not the worker). Caller has SPI connected; all
 * allocations go to SPI's context. ERROR aborts the caller's transaction,
 * and with it every mark of the pass.
 */
void
OutboxRelayPass(int batch_size, OutboxPassResult *result)
{
	Dispatch	d;

	memset(result, 0, sizeof(*result));
	dispatch(batch_size, NIL, 0, 0, -1, CurrentMemoryContext, &d);
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

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	OutboxRelayPass(batch_size, &result);
	SPI_finish();

	values[0] = Int32GetDatum(result.delivered);
	values[1] = Int32GetDatum(result.failed);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}

/* ---------------------------------------------------------------------
 * The worker
 * ---------------------------------------------------------------------
 */

static int	relay_no = 0;		/* this relay's number in its database */
static MemoryContext relay_cxt = NULL;	/* parent of the claim batches */
static TimestampTz last_error_log = 0;
static int	errors_not_logged = 0;

/* A step of the worker: runs inside a transaction with SPI connected. */
typedef void (*StepFn) (void *arg);

/*
 * Logs an error caught by run_step, at most once per ERROR_LOG_INTERVAL_MS
 * (counting the ones left out), so that a fault met on every step cannot
 * flood the log.
 */
static void
log_caught(const char *what, ErrorData *edata)
{
	TimestampTz now = GetCurrentTimestamp();

	if (last_error_log != 0 &&
		!TimestampDifferenceExceeds(last_error_log, now, ERROR_LOG_INTERVAL_MS))
	{
		errors_not_logged++;
		return;
	}
	ereport(WARNING,
			(errcode(edata->sqlerrcode),
			 errmsg("outbox relay could not %s: %s", what, edata->message),
			 errors_not_logged > 0 ?
			 errdetail("%d more such errors were not logged in the last %d seconds.",
					   errors_not_logged, ERROR_LOG_INTERVAL_MS / 1000) : 0,
			 errhint("The relay goes on; the event that causes the error is retried and dead-lettered on its own.")));
	last_error_log = now;
	errors_not_logged = 0;
}

/*
 * Runs fn in a transaction of its own and commits it. On ERROR (in fn or
 * at COMMIT) the transaction is rolled back, the error logged (log_caught),
 * its message copied into *error (current memory context) if error is not
 * NULL, and false returned; the worker goes on. FATAL still ends the
 * process (SIGTERM, for one). Called by the worker outside any transaction.
 */
static bool
run_step(const char *what, StepFn fn, void *arg, char **error)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool ok = true;

	SetCurrentStatementStartTimestamp();
	debug_query_string = what;
	pgstat_report_activity(STATE_RUNNING, what);
	PG_TRY();
	{
		StartTransactionCommand();
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		PushActiveSnapshot(GetTransactionSnapshot());
		fn(arg);
		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		HOLD_INTERRUPTS();
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		RESUME_INTERRUPTS();
		log_caught(what, edata);
		OutboxHealthRelayError(what, edata->message);
		if (error != NULL)
			*error = pstrdup(edata->message);
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	debug_query_string = NULL;
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
	return ok;
}

/* Arguments and result of claim_step. */
typedef struct ClaimStep
{
	int			batch_size;
	List	   *skip;
	int64		only_id;		/* one event at a time: its id */
	int32		only_attempts;	/* and its attempts, when it was found */
	ClaimBatch *batch;
	Dispatch	d;
} ClaimStep;

/* Finds the event that a claim of one would take (isolation). */
static void
next_pending_step(void *arg)
{
	ClaimStep  *c = arg;

	c->only_id = 0;
	if (OutboxQueueOpen())
	{
		int			nexclude;
		int			room;
		int64	   *exclude = OutboxInFlightIds(MyDatabaseId, false, &nexclude, &room);

		if (!OutboxNextPending(c->skip, exclude, nexclude, &c->only_id, &c->only_attempts))
			c->only_id = 0;
	}
}

static void
claim_step(void *arg)
{
	ClaimStep  *c = arg;

	/* flushed by the worker once the requests are under way */
	(void) set_config_option("synchronous_commit", "off", PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
	dispatch(c->batch_size, c->skip, c->only_id, OutboxRelayRun(), relay_no,
			 c->batch->cxt, &c->d);
}

/* Arguments and result of release_step. */
typedef struct ReleaseStep
{
	int64	   *own;			/* this relay's claims whose rows to release */
	int			nown;
	Oid			own_extoid;		/* the extension they were claimed from */
	bool		replica;		/* user triggers off */
	bool		opened;			/* the extension was there */
	MemoryContext cxt;			/* where dead goes: it outlives the step */
	int64	   *dead;			/* runs gone, their entries to forget */
	int			ndead;
	uint64		counted;		/* cut-off attempts counted */
} ReleaseStep;

/*
 * Releases the journal rows of the relays that do not run, and this
 * relay's rows in r->own (see OutboxReleaseJournal), under the journal's
 * lock. The runs gone are read with the lock held: a relay that starts
 * later releases after this one commits, and claims only then.
 */
static void
release_step(void *arg)
{
	ReleaseStep *r = arg;
	int64	   *live;
	int			nlive;
	MemoryContext old;

	r->opened = false;
	if (!OutboxQueueOpen())
		return;
	r->opened = true;
	/* the extension was dropped and created again: those rows are gone */
	if (OutboxQueueExtension() != r->own_extoid)
		r->nown = 0;
	if (r->replica)
		(void) set_config_option("session_replication_role", "replica",
								 PGC_SUSET, PGC_S_SESSION, GUC_ACTION_LOCAL,
								 true, 0, false);
	OutboxLockJournal();
	old = MemoryContextSwitchTo(r->cxt);
	live = OutboxRelayRuns(MyDatabaseId, &nlive, &r->dead, &r->ndead);
	MemoryContextSwitchTo(old);
	r->counted = OutboxReleaseJournal(live, nlive, r->own, r->nown);
}

/* Writes the journal's end for n claims whose outcomes are all recorded. */
typedef struct JournalDoneStep
{
	int64	   *claims;
	int			n;
	Oid			extoid;			/* the extension they were claimed from */
} JournalDoneStep;

static void
journal_done_step(void *arg)
{
	JournalDoneStep *j = arg;

	(void) set_config_option("synchronous_commit", "off", PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
	if (OutboxQueueOpen() && OutboxQueueExtension() == j->extoid)
		OutboxJournalDone(j->claims, j->n, OutboxRelayRun());
}

/* Reads the next due time (see OutboxNextDueMs) into *arg, a double. */
static void
next_due_step(void *arg)
{
	double	   *due_ms = arg;

	*due_ms = OutboxQueueOpen() ? OutboxNextDueMs() : -1;
}

/* Arguments of record_step. */
typedef struct RecordStep
{
	OutboxEvent **events;
	int			n;
	bool		single_failure; /* record events[0] as failed */
	bool		replica;		/* with single_failure: user triggers off */
	bool		recorded;
	double		next_due_ms;
} RecordStep;

static void
record_step(void *arg)
{
	RecordStep *r = arg;
	OutboxEvent **events;
	int			n = 0;

	r->next_due_ms = -1;
	for (int i = 0; i < r->n; i++)
		r->events[i]->recorded = false;
	if (!OutboxQueueOpen())
		return;					/* dropped meanwhile: nothing to record */

	/*
	 * Events claimed from an extension dropped since (and maybe created
	 * again, its ids starting over) have nothing to record here. (A local
	 * list: r outlives this step's memory, and may be run again.)
	 */
	events = palloc(sizeof(OutboxEvent *) * Max(r->n, 1));
	for (int i = 0; i < r->n; i++)
	{
		ClaimBatch *b = r->events[i]->owner;

		if (b == NULL || b->extoid == OutboxQueueExtension())
			events[n++] = r->events[i];
	}
	if (n == 0)
		return;

	/*
	 * An outcome's commit need not wait for the WAL flush: one lost in a
	 * crash only sends its event again, which at-least-once allows, while a
	 * flush per outcome batch would bound the relay to the disk's flush
	 * rate. A claim is flushed as soon as its requests are under way (see
	 * the worker's loop): its journal row must survive a crash, so that
	 * the attempt it cut off is counted.
	 */
	(void) set_config_option("synchronous_commit", "off", PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
	if (r->single_failure)
	{
		if (r->replica)
			(void) set_config_option("session_replication_role", "replica",
									 PGC_SUSET, PGC_S_SESSION, GUC_ACTION_LOCAL,
									 true, 0, false);
		r->recorded = OutboxRecordFailure(events[0]);
	}
	else
		OutboxRecordOutcomes(events, n);

	/*
	 * Only a failure schedules an attempt (its retry); a delivery can only
	 * make the next due time later, so it need not be read again.
	 */
	for (int i = 0; i < n; i++)
	{
		if (!events[i]->ok)
		{
			r->next_due_ms = OutboxNextDueMs();
			break;
		}
	}
}

/*
 * Records a failed attempt of ev after an ERROR that it caused (its text in
 * error): first plainly, then, if that fails too and the relay may, with
 * user triggers off. Returns false if nothing could be recorded.
 */
static bool
record_isolated_failure(OutboxEvent *ev, const char *what, const char *error)
{
	RecordStep	r;

	ev->ok = false;
	ev->permanent = false;
	ev->retry_after_ms = -1;
	ev->error = psprintf("could not %s: %s", what, error);
	memset(&r, 0, sizeof(r));
	r.events = &ev;
	r.n = 1;
	r.single_failure = true;
	if (run_step("record the failure of an event", record_step, &r, NULL))
		return true;
	if (!superuser())
		return false;
	r.replica = true;
	if (run_step("record the failure of an event", record_step, &r, NULL))
		return true;
	ev->recorded = false;		/* rolled back */
	return false;
}

/* Creates the batch that a claim's events live in. */
static ClaimBatch *
new_batch(void)
{
	ClaimBatch *b;
	MemoryContext cxt = AllocSetContextCreate(relay_cxt, "outbox claim",
											  ALLOCSET_DEFAULT_SIZES);

	b = MemoryContextAllocZero(cxt, sizeof(ClaimBatch));
	b->cxt = cxt;
	return b;
}

/* arr (of n elements of size elem, room for *cap) with room for one more */
static void *
grow(void *arr, int n, int *cap, Size elem)
{
	if (n < *cap)
		return arr;
	*cap = Max(*cap * 2, 16);
	return arr == NULL ? MemoryContextAlloc(TopMemoryContext, elem * *cap)
		: repalloc(arr, elem * *cap);
}

static void
id_list_add(IdList *l, int64 id)
{
	l->ids = grow(l->ids, l->n, &l->cap, sizeof(int64));
	l->ids[l->n++] = id;
}

/* The worker's view between steps. */
typedef struct RelayState
{
	bool		look;			/* claim again as soon as possible */
	int			nfull;			/* destinations the last claim left out, full */
	List	   *outcomes;		/* not recorded yet, in outcome_cxt */
	TimestampTz first_outcome;	/* when the oldest of them came */
	TimestampTz next_look;		/* claim again by then at the latest */
	TimestampTz not_before;		/* but not before (after failed steps) */
	int			isolate;		/* claims left to make one event at a time */
	int			error_backoff_ms;	/* after failed steps; 0 after success */
	XLogRecPtr	flush_lsn;		/* a claim's commit, not flushed yet */
	bool		want_next_due;	/* read the next due time after the claim */
	List	   *dry_skip;		/* left out by the last dry claim, or NIL */
	TimestampTz dry_until;		/* do not repeat that claim before then */
	bool		room_limited;	/* the last claim was cut to the set's room */
	bool		released;		/* the first release has committed */
	bool		release_wanted; /* relays gone: release before the next claim */
	TimestampTz next_release_check; /* look for relays gone then */
	IdList		journal_done;	/* claims whose outcomes are all in */
	IdList		journal_release;	/* claims with outcomes that changed no row */
	IdList		unrecorded;		/* those events, in the set until released */
	Oid			journal_extoid; /* the extension of those claims */
} RelayState;

/* Forgets the claims kept for the journal, and lets their events go. */
static void
drop_journal_lists(RelayState *st)
{
	OutboxInFlightRemove(MyDatabaseId, st->unrecorded.ids, st->unrecorded.n);
	st->journal_done.n = 0;
	st->journal_release.n = 0;
	st->unrecorded.n = 0;
}

/*
 * Lets go of one event in flight, whose outcome step has ended. With the
 * last one of its claim, the claim's journal row is done: deleted if every
 * outcome changed its row, else released (so that those attempts are
 * still counted), and its events whose outcome changed nothing stay in the
 * in-flight set until then. Frees the batch.
 */
static void
batch_done(RelayState *st, OutboxEvent *ev)
{
	ClaimBatch *b = ev->owner;
	/* the extension was dropped, and maybe created again: its journal is gone */
	bool		gone = b->extoid != OutboxQueueExtension();

	if (!ev->recorded)
	{
		if (gone)
			OutboxInFlightRemove(MyDatabaseId, &ev->id, 1);
		else
			id_list_add(&b->unrecorded, ev->id);
	}
	if (--b->open > 0)
		return;
	if (!gone && b->claim != 0)
	{
		if (st->journal_extoid != b->extoid)
		{
			drop_journal_lists(st);
			st->journal_extoid = b->extoid;
		}
		if (b->unrecorded.n == 0)
			id_list_add(&st->journal_done, b->claim);
		else
		{
			id_list_add(&st->journal_release, b->claim);
			for (int i = 0; i < b->unrecorded.n; i++)
				id_list_add(&st->unrecorded, b->unrecorded.ids[i]);
		}
	}
	if (b->unrecorded.ids != NULL)
		pfree(b->unrecorded.ids);
	MemoryContextDelete(b->cxt);
}

/*
 * Releases the journal rows of relays that are gone, and this relay's own
 * rows in st->journal_release (release_step), then lets their events go
 * from the in-flight set. Tried with user triggers off too, if the relay
 * may. Returns false if the release failed.
 */
static bool
worker_release(RelayState *st)
{
	ReleaseStep r;

	memset(&r, 0, sizeof(r));
	r.cxt = CurrentMemoryContext;
	r.own = st->journal_release.ids;
	r.nown = st->journal_release.n;
	r.own_extoid = st->journal_extoid;
	if (!run_step("release the events of relays that are gone", release_step, &r, NULL))
	{
		if (!superuser())
			return false;
		r.replica = true;
		r.nown = st->journal_release.n;
		if (!run_step("release the events of relays that are gone", release_step, &r, NULL))
			return false;
	}
	if (r.opened)
	{
		st->released = true;
		OutboxInFlightForget(MyDatabaseId, r.dead, r.ndead);
		st->journal_release.n = 0;
		OutboxInFlightRemove(MyDatabaseId, st->unrecorded.ids, st->unrecorded.n);
		st->unrecorded.n = 0;
	}
	if (r.counted > 0)
		ereport(LOG,
				(errmsg_plural("outbox relay counted %llu attempt that no outcome recorded",
							   "outbox relay counted %llu attempts that no outcome recorded",
							   (unsigned long) r.counted, (unsigned long long) r.counted),
				 errdetail("Their requests were cut off when a relay stopped, or their outcomes found the event changed (cancelled, for one); those still pending are due again.")));
	return true;
}

/*
 * Whether the in-flight set holds entries of a relay that is gone, looked
 * for at most every RELEASE_CHECK_MS. (A release is also due before the
 * first claim, and when this relay has rows of its own to release.)
 */
static bool
relays_gone(RelayState *st)
{
	TimestampTz now;
	int			nlive;
	int			ndead;
	int64	   *dead;

	now = GetCurrentTimestamp();
	if (now < st->next_release_check)
		return false;
	st->next_release_check = TimestampTzPlusMilliseconds(now, RELEASE_CHECK_MS);
	pfree(OutboxRelayRuns(MyDatabaseId, &nlive, &dead, &ndead));
	pfree(dead);
	return ndead > 0;
}

/* Whether every name in sub is in list (both lists of destination names). */
static bool
names_subset(List *sub, List *list)
{
	ListCell   *lc;

	foreach(lc, sub)
	{
		ListCell   *lc2;
		bool		found = false;

		foreach(lc2, list)
		{
			if (strcmp(lfirst(lc), lfirst(lc2)) == 0)
			{
				found = true;
				break;
			}
		}
		if (!found)
			return false;
	}
	return true;
}

/*
 * Remembers whether a claim that left out the destinations in skip was dry
 * (see DRY_CLAIM_REPEAT_FACTOR); started: when it began.
 */
static void
note_dry_claim(RelayState *st, List *skip, bool dry, TimestampTz started)
{
	ListCell   *lc;
	TimestampTz now = GetCurrentTimestamp();
	MemoryContext old;

	/* a claim that left nothing out says nothing about the others */
	if (skip == NIL)
		return;
	list_free_deep(st->dry_skip);
	st->dry_skip = NIL;
	if (!dry)
		return;
	old = MemoryContextSwitchTo(TopMemoryContext);
	foreach(lc, skip)
		st->dry_skip = lappend(st->dry_skip, pstrdup(lfirst(lc)));
	MemoryContextSwitchTo(old);
	st->dry_until = now + (now - started) * DRY_CLAIM_REPEAT_FACTOR;
}

/* Looks again no later than due_ms from now (<0: poll interval only). */
static void
look_again_in(RelayState *st, double due_ms)
{
	TimestampTz now = GetCurrentTimestamp();
	long		ms = outbox_poll_interval;

	if (due_ms >= 0 && due_ms < ms)
		ms = (long) ceil(due_ms) + 1;
	st->next_look = Min(st->next_look, TimestampTzPlusMilliseconds(now, ms));
}

/* After a failed step: wait before claiming again, longer each time. */
static void
step_failed(RelayState *st)
{
	st->error_backoff_ms = st->error_backoff_ms == 0 ? ERROR_BACKOFF_MIN_MS
		: Min(st->error_backoff_ms * 2, ERROR_BACKOFF_MAX_MS);
	st->look = true;
	st->not_before = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), st->error_backoff_ms);
}

/*
 * One claim by the worker, in a transaction of its own (after a release,
 * when one is due), then the events put in flight handed to the transport.
 * On ERROR nothing was sent, and they leave the set again: the worker
 * then claims one event per transaction (st->isolate) and records the
 * failure of the one whose claim fails.
 */
static void
worker_claim(RelayState *st)
{
	ClaimStep	c;
	char	   *error = NULL;
	TimestampTz started = GetCurrentTimestamp();

	memset(&c, 0, sizeof(c));
	c.batch_size = outbox_batch_size;
	c.skip = OutboxKindsFull();
	st->next_look = DT_NOEND;

	/* no claim before the first release: it counts what a crash cut off */
	if (st->release_wanted || !st->released || st->journal_release.n > 0)
	{
		bool		ok = worker_release(st);

		if (ok)
			st->release_wanted = false;
		if (!st->released)
		{
			/* failed, or the extension could not be opened: not yet */
			if (ok)
			{
				st->look = false;
				look_again_in(st, -1);
			}
			else
				step_failed(st);
			return;
		}
	}

	/* the last claim found the others dry, and nothing freed a full one */
	if (st->isolate == 0 && st->dry_skip != NIL && started < st->dry_until &&
		names_subset(st->dry_skip, c.skip))
	{
		st->look = false;
		st->next_look = st->dry_until;
		return;
	}

	if (st->isolate > 0)
	{
		/* find the next event first, so that its failure can be recorded */
		if (!run_step("find the next event", next_pending_step, &c, NULL))
		{
			step_failed(st);
			return;
		}
		if (c.only_id == 0)
		{
			st->isolate = 0;
			st->look = false;
			look_again_in(st, -1);
			return;
		}
		c.batch_size = 1;
	}

	c.batch = new_batch();
	if (!run_step("claim events", claim_step, &c, &error))
	{
		/* nothing of it was committed, nor sent */
		OutboxInFlightRemove(MyDatabaseId, c.d.published, c.d.npublished);
		MemoryContextDelete(c.batch->cxt);
		if (st->isolate == 0)
		{
			st->isolate = outbox_batch_size;
			st->look = true;
			return;
		}
		/* this one event fails its claim: record that, then go on */
		{
			OutboxEvent ev;

			memset(&ev, 0, sizeof(ev));
			ev.id = c.only_id;
			ev.attempts = c.only_attempts;
			ev.event_id = psprintf("with id %lld", (long long) c.only_id);
			ev.dest.name = NULL;
			if (!record_isolated_failure(&ev, "claim the event", error))
			{
				step_failed(st);
				return;
			}
		}
		st->isolate--;
		st->look = true;
		return;
	}
	st->error_backoff_ms = 0;
	if (c.d.claimed > 0)
		st->flush_lsn = XactLastCommitEnd;
	OutboxHealthRelayPass();
	if (st->isolate > 0)
		st->isolate--;

	c.batch->claim = c.d.claim;
	c.batch->extoid = c.d.extoid;
	for (int i = 0; i < c.d.nin_flight; i++)
	{
		c.d.in_flight[i]->owner = c.batch;
		c.batch->open++;
		c.d.in_flight[i]->dest.kind->enqueue(c.d.in_flight[i]);
	}
	if (c.batch->open == 0)
		MemoryContextDelete(c.batch->cxt);
	st->room_limited = c.d.room_limited;

	/* destinations were left out, full: outcomes, not the clock, bring more */
	st->nfull = list_length(c.skip);
	if (st->isolate == 0)
		note_dry_claim(st, c.skip, c.d.claimed < c.batch_size, started);
	st->look = st->isolate > 0 || (c.d.claimed >= c.batch_size && !c.d.room_limited);
	/* read once the requests are under way: it is not on their path */
	st->want_next_due = !st->look;
}

/*
 * Records the outcomes the transport returned: all in one transaction or,
 * if that fails, one per transaction; an event whose outcome cannot be
 * recorded gets a failed attempt instead (record_isolated_failure). Then
 * the events' batches are let go.
 */
static void
worker_record(RelayState *st, List *done)
{
	int			n = list_length(done);
	OutboxEvent **events = palloc(sizeof(OutboxEvent *) * n);
	RecordStep	r;
	ListCell   *lc;
	int			i = 0;

	foreach(lc, done)
		events[i++] = lfirst(lc);
	memset(&r, 0, sizeof(r));
	r.events = events;
	r.n = n;
	if (run_step("record outcomes", record_step, &r, NULL))
		look_again_in(st, r.next_due_ms);
	else
	{
		/* rolled back: nothing of it was recorded */
		for (i = 0; i < n; i++)
			events[i]->recorded = false;
		for (i = 0; i < n; i++)
		{
			RecordStep	one;
			char	   *error = NULL;

			memset(&one, 0, sizeof(one));
			one.events = &events[i];
			one.n = 1;
			if (run_step("record the outcome of an event", record_step, &one, &error))
				look_again_in(st, one.next_due_ms);
			else
			{
				events[i]->recorded = false;
				if (!record_isolated_failure(events[i], "record the outcome", error))
					step_failed(st);	/* released with its claim's journal row */
			}
		}
	}

	/* recorded and committed: others may claim them again */
	{
		int64	   *ids = palloc(sizeof(int64) * Max(n, 1));
		int			nids = 0;

		for (i = 0; i < n; i++)
			if (events[i]->recorded)
				ids[nids++] = events[i]->id;
		OutboxInFlightRemove(MyDatabaseId, ids, nids);
	}
	for (i = 0; i < n; i++)
		batch_done(st, events[i]);
	if (st->journal_done.n > 0)
	{
		JournalDoneStep j = {st->journal_done.ids, st->journal_done.n, st->journal_extoid};

		/* if this fails, the rows are deleted with the next ones */
		if (run_step("delete from the journal of events in flight", journal_done_step, &j, NULL))
			st->journal_done.n = 0;
	}
	/* a full destination, or the in-flight set, has room again */
	if ((st->nfull > 0 && list_length(OutboxKindsFull()) < st->nfull) || st->room_limited)
		st->look = true;
}

/* A setting as the server's configuration had it before the worker connected. */
typedef struct ServerSetting
{
	char	   *name;
	char	   *value;
} ServerSetting;

static ServerSetting *server_settings = NULL;
static int	nserver_settings = 0;

/*
 * Remembers the value of every setting that ALTER DATABASE or ALTER ROLE
 * can change (user and superuser settings), as postgresql.conf and the
 * command line made it. Called by the worker before it connects, so that
 * drop_database_settings() can put them back.
 */
static void
save_server_settings(void)
{
	int			n;
	struct config_generic **vars = OutboxGucVariables(&n);

	server_settings = MemoryContextAlloc(TopMemoryContext, sizeof(ServerSetting) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		const char *value;

		if (vars[i]->context != PGC_USERSET && vars[i]->context != PGC_SUSET)
			continue;
		value = GetConfigOption(vars[i]->name, true, false);
		if (value == NULL)
			continue;
		server_settings[nserver_settings].name = MemoryContextStrdup(TopMemoryContext, vars[i]->name);
		server_settings[nserver_settings].value = MemoryContextStrdup(TopMemoryContext, value);
		nserver_settings++;
	}
}

/*
 * Undoes what ALTER DATABASE ... SET and ALTER ROLE ... SET applied when the
 * worker connected (BackgroundWorkerInitializeConnectionByOid applies them
 * like for any session): each such setting gets back the value that
 * save_server_settings() saw, with the priority of an override, so that no
 * later SET can change it either. The owner of a database can set any user
 * setting for it, and none of them must change what the relay's SQL means
 * or whether it succeeds: standard_conforming_strings changes how its
 * statements parse, role the user it runs as, exit_on_error makes every
 * caught error end it, TimeZone the envelope's created_at, and so on. The
 * server's own settings (postgresql.conf, ALTER SYSTEM) still apply, as
 * they were when the relay started. session_authorization has no saved
 * value (it is not set before connecting): it goes back to the bootstrap
 * superuser, the user the worker connects as. Called by the worker in a
 * transaction right after connecting.
 *
 * XXX: a setting of a library that is not loaded yet (plpgsql.*, say) is
 * only a placeholder here, without a server value to go back to; it is
 * left as it is.
 */
static void
drop_database_settings(void)
{
	int			n;
	struct config_generic **vars = OutboxGucVariables(&n);

	for (int i = 0; i < n; i++)
	{
		struct config_generic *var = vars[i];
		const char *value = NULL;

		if (var->source < PGC_S_GLOBAL || var->source > PGC_S_DATABASE_USER)
			continue;
		if (strcmp(var->name, "session_authorization") == 0)
			value = GetUserNameFromId(BOOTSTRAP_SUPERUSERID, false);
		for (int j = 0; value == NULL && j < nserver_settings; j++)
			if (strcmp(server_settings[j].name, var->name) == 0)
				value = server_settings[j].value;
		if (value == NULL)
			continue;
		(void) set_config_option(var->name, value, PGC_SUSET, PGC_S_OVERRIDE,
								 GUC_ACTION_SET, true, WARNING, false);
	}
}

/*
 * Settings from postgresql.conf or ALTER SYSTEM that would break a step
 * do not apply in the worker either: timeouts, a serializable or read-only
 * default, and a forced custom plan, which would be planned at each
 * execution without the access paths the relay's statements pin
 * (statements.c). The worker's queries name every object; user schemas
 * stay out.
 */
static void
override_server_settings(void)
{
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("lock_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("idle_in_transaction_session_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
#if PG_VERSION_NUM >= 170000
	SetConfigOption("transaction_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
#endif
	SetConfigOption("default_transaction_isolation", "read committed", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_read_only", "off", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("plan_cache_mode", "auto", PGC_SUSET, PGC_S_OVERRIDE);
}

/*
 * Connects the worker to database dboid as the bootstrap superuser, with
 * its own settings whatever the database's or role's say, and attaches it
 * to its slot (exits quietly if another process has it). Then logs that
 * it started.
 */
static void
relay_connect(Oid dboid)
{
	save_server_settings();
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	pgstat_report_appname("outbox relay " OUTBOX_VERSION);

	StartTransactionCommand();
	drop_database_settings();
	CommitTransactionCommand();
	override_server_settings();

	/* whatever the database's settings said, the relay is the superuser */
	if (GetSessionUserId() != BOOTSTRAP_SUPERUSERID || GetUserId() != BOOTSTRAP_SUPERUSERID)
		ereport(FATAL,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("outbox relay is not running as the bootstrap superuser")));

	if (!OutboxRelayAttach(dboid, relay_no))
	{
		ereport(LOG,
				(errmsg("outbox relay %d for database %u not started", relay_no, dboid),
				 errdetail("Another process is that relay, or the database is being dropped.")));
		proc_exit(0);
	}
	OutboxHealthRelayStarted(dboid, relay_no);

	StartTransactionCommand();
	if (relay_no == 0)
		ereport(LOG,
				(errmsg("outbox relay started for database \"%s\"",
						get_database_name(dboid))));
	else
		ereport(LOG,
				(errmsg("outbox relay %d started for database \"%s\"",
						relay_no, get_database_name(dboid))));
	CommitTransactionCommand();
}

static MemoryContext loop_cxt = NULL;	/* reset after each round */
static MemoryContext outcome_cxt = NULL;	/* outcomes until recorded */
static uint32 relay_wait_event;

/*
 * The start of a round: signals and reloads, then whether to claim now: a
 * commit set the latch, the next look is due, or a relay went away and
 * left events in flight.
 */
static void
begin_round(RelayState *st)
{
	CHECK_FOR_INTERRUPTS();
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
	MemoryContextSwitchTo(loop_cxt);

	/* reset before claiming: a commit during the claim sets it again */
	if (MyLatch->is_set)
	{
		ResetLatch(MyLatch);
		st->look = true;
	}
	if (GetCurrentTimestamp() >= st->next_look)
		st->look = true;
	/* events another relay left in flight when it went: take them */
	if (relays_gone(st))
		st->release_wanted = st->look = true;
}

/*
 * Waits up to wait_ms (OutboxWait: the latch, the kinds' sockets), then
 * adds what the kinds have finished to st->outcomes. An idle wait (nothing
 * in flight) shows in the relay's health.
 */
static void
wait_and_collect(RelayState *st, long wait_ms)
{
	bool		idle = !OutboxKindsBusy();
	List	   *done;

	if (idle && wait_ms > 0)
		OutboxHealthRelayIdle(true);
	(void) OutboxWait(wait_ms, relay_wait_event);
	if (idle && wait_ms > 0)
		OutboxHealthRelayIdle(false);
	if (idle)
		return;
	MemoryContextSwitchTo(outcome_cxt);
	done = OutboxKindsCollect();
	if (done != NIL && st->outcomes == NIL)
		st->first_outcome = GetCurrentTimestamp();
	st->outcomes = list_concat(st->outcomes, done);
	MemoryContextSwitchTo(loop_cxt);
}

/*
 * The claim's commit did not wait for the WAL flush: its events are handed
 * to the network first, then it is flushed, so that the disk's flush time
 * is not added to every delivery's latency. A crash of the server in the
 * millisecond at most before the flush has written the WAL (new
 * connections are given that long to connect and send), or of the
 * operating system before it is on disk, can lose the claim's journal row,
 * and with it the count of that attempt: the event itself is still pending
 * and is sent again, with the same webhook-id.
 */
static void
flush_claim(RelayState *st)
{
	if (XLogRecPtrIsInvalid(st->flush_lsn))
		return;
	if (OutboxKindsBusy())
	{
		/* starts the requests: they connect and send meanwhile */
		wait_and_collect(st, 0);
		wait_and_collect(st, 1);
	}
	XLogFlush(st->flush_lsn);
	st->flush_lsn = InvalidXLogRecPtr;
}

/* Reads the next due time, if the last claim asked for it. */
static void
read_next_due(RelayState *st)
{
	double		due_ms = -1;

	if (!st->want_next_due)
		return;
	st->want_next_due = false;
	if (run_step("find the next due time", next_due_step, &due_ms, NULL))
		look_again_in(st, due_ms);
	else
		step_failed(st);
}

/* The first relay of a database also purges old rows (purge.c). */
static void
purge_if_due(void)
{
	if (relay_no == 0 && OutboxPurgeDue())
		OutboxPurgeDone(run_step("purge old rows", OutboxPurgeStep, NULL, NULL));
}

/*
 * How long the relay may wait: until it is to claim again (or may, after
 * failed steps), at most outbox.poll_interval and, for the first relay,
 * until its purge; not at all with outcomes in hand.
 */
static long
wait_ms_for(RelayState *st)
{
	TimestampTz until = st->look ? st->not_before : st->next_look;
	TimestampTz now = GetCurrentTimestamp();
	long		secs;
	int			usecs;
	long		wait_ms;

	if (st->outcomes != NIL || until <= now)
		return 0;
	TimestampDifference(now, until, &secs, &usecs);
	wait_ms = Min(secs * 1000L + (usecs + 999) / 1000, (long) outbox_poll_interval);
	if (relay_no == 0)
		wait_ms = Min(wait_ms, OutboxPurgeWaitMs());
	return wait_ms;
}

/*
 * Records the outcomes in hand once RECORD_BATCH are in, or the first has
 * waited RECORD_DELAY_MS, or nothing else is in flight. An idle relay thus
 * records at once, unless a commit has just woken it: then the new events
 * are claimed first, and these outcomes wait for the next round.
 */
static void
record_if_ready(RelayState *st)
{
	if (st->outcomes == NIL)
		return;
	if (list_length(st->outcomes) >= RECORD_BATCH ||
		(OutboxKindsPending() == 0 && !MyLatch->is_set) ||
		TimestampDifferenceExceeds(st->first_outcome, GetCurrentTimestamp(), RECORD_DELAY_MS))
	{
		worker_record(st, st->outcomes);
		st->outcomes = NIL;
		MemoryContextReset(outcome_cxt);
	}
}

/*
 * Entry point of a relay worker, started by the launcher for one database
 * (main_arg: its OID; bgw_extra: the relay's number in it, an int). Runs as
 * the bootstrap superuser. Never returns: exits on SIGTERM or postmaster
 * death; errors in its steps are caught (see the file's header), so the
 * launcher restarts it only after a FATAL.
 */
void
OutboxRelayMain(Datum main_arg)
{
	RelayState	st;

	memcpy(&relay_no, MyBgworkerEntry->bgw_extra, sizeof(int));
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	relay_connect(DatumGetObjectId(main_arg));
	relay_wait_event = OutboxWaitEvent("OutboxRelayMain");
	relay_cxt = AllocSetContextCreate(TopMemoryContext, "outbox relay",
									  ALLOCSET_DEFAULT_SIZES);
	loop_cxt = AllocSetContextCreate(TopMemoryContext, "outbox relay loop",
									 ALLOCSET_DEFAULT_SIZES);
	outcome_cxt = AllocSetContextCreate(TopMemoryContext, "outbox relay outcomes",
										ALLOCSET_DEFAULT_SIZES);
	memset(&st, 0, sizeof(st));
	st.look = true;

	for (;;)
	{
		begin_round(&st);
		if (st.look && GetCurrentTimestamp() >= st.not_before)
			worker_claim(&st);
		flush_claim(&st);
		read_next_due(&st);
		purge_if_due();
		wait_and_collect(&st, wait_ms_for(&st));
		record_if_ready(&st);

		MemoryContextSwitchTo(TopMemoryContext);
		MemoryContextReset(loop_cxt);
	}
}
