/*-------------------------------------------------------------------------
 *
 * steps.c
 *	  The relay worker's steps: each runs in a transaction of its own, under
 *	  PG_TRY, so that an ERROR in one rolls back that transaction only and
 *	  the worker goes on.
 *
 * OutboxRunStep does what worker_spi does around each transaction
 * (statement start, snapshot, SPI, pgstat activity) and catches errors,
 * logging them at most once per ERROR_LOG_INTERVAL_MS. The steps take
 * their inputs and give their results in a struct (steps.h), as a step
 * is a function pointer with one argument.
 *
 * src/steps.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "claim.h"
#include "destination.h"
#include "health.h"
#include "journal.h"
#include "log_limit.h"
#include "outcome.h"
#include "pass.h"
#include "queue.h"
#include "shmem.h"
#include "steps.h"

/* Caught errors are logged at most this often. */
#define ERROR_LOG_INTERVAL_MS 10000

static OutboxLogLimit error_log;

/* Sets a setting for the rest of the current transaction (SET LOCAL). */
static void
set_local(const char *name, const char *value)
{
	(void) set_config_option(name, value, PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
}

/*
 * Logs an error caught by OutboxRunStep, at most once per ERROR_LOG_INTERVAL_MS
 * (counting the ones left out), so that a fault met on every step cannot
 * flood the log.
 */
static void
log_caught(const char *what, ErrorData *edata, const char *message)
{
	int			left_out;

	if (!OutboxLogLimitAllows(&error_log, ERROR_LOG_INTERVAL_MS, &left_out))
		return;
	ereport(WARNING,
			(errcode(edata->sqlerrcode),
			 errmsg("outbox relay could not %s: %s", what, message),
			 left_out > 0 ?
			 errdetail("%d more such errors were not logged in the last %d seconds.",
					   left_out, ERROR_LOG_INTERVAL_MS / 1000) : 0,
			 errhint("The relay goes on; the event that causes the error is retried and dead-lettered on its own.")));
}

/*
 * The message of an error a step caught, as the log and last_error get it:
 * printable, and at most this many bytes of it. A step runs functions the
 * extension does not own (a kind's, such as BullMQ's add_job, and the
 * triggers on outbox), whose messages can be of any size.
 */
#define CAUGHT_MESSAGE_BYTES 1024

static char *
caught_message(const char *message)
{
	size_t		len = strlen(message);
	char	   *text = OutboxPrintable(message, Min(len, CAUGHT_MESSAGE_BYTES));

	if (len <= CAUGHT_MESSAGE_BYTES)
		return text;
	return psprintf("%s... (%zu bytes more)", text, len - CAUGHT_MESSAGE_BYTES);
}

/*
 * Whether the worker's role is a superuser, as the last step found: a step
 * that failed is retried with user triggers off only then, and the worker
 * asks between steps, where the catalogs cannot be read.
 */
static bool step_superuser = false;
/* the step running is part of a larger one (OutboxRunStepPart) */
static bool step_part = false;
/* the SQLSTATE of the last step that failed, and whether at its COMMIT */
static int	step_errcode = 0;
static bool step_failed_at_commit = false;

bool
OutboxStepSuperuser(void)
{
	return step_superuser;
}

/* The SQLSTATE (ERRCODE_*) of the error of the last step that failed. */
int
OutboxStepErrcode(void)
{
	return step_errcode;
}

/*
 * Whether the last step that failed failed at its COMMIT (a deferred
 * trigger, a NOTIFY queue that is full) rather than in its body, where a
 * kind's function may raise the same SQLSTATE for another reason.
 */
bool
OutboxStepFailedAtCommit(void)
{
	return step_failed_at_commit;
}

/*
 * Runs fn in a transaction of its own and commits it. On ERROR (in fn or
 * at COMMIT) the transaction is rolled back, the error logged (log_caught),
 * its message copied into *error (current memory context) if error is not
 * NULL, and false returned; the worker goes on. FATAL still ends the
 * process (SIGTERM, for one). Called by the worker outside any transaction;
 * what is the step's name, for the log and pg_stat_activity.
 */
bool
OutboxRunStep(const char *what, OutboxStepFn fn, void *arg, char **error)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool ok = true;
	volatile bool at_commit = false;

	SetCurrentStatementStartTimestamp();
	debug_query_string = what;
	pgstat_report_activity(STATE_RUNNING, what);
	PG_TRY();
	{
		StartTransactionCommand();
		step_superuser = superuser();
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		PushActiveSnapshot(GetTransactionSnapshot());
		fn(arg);
		SPI_finish();
		PopActiveSnapshot();
		at_commit = true;
		CommitTransactionCommand();
		if (!step_part)
			OutboxHealthRelayStepOk();
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		char	   *message;

		HOLD_INTERRUPTS();
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		RESUME_INTERRUPTS();
		step_errcode = edata->sqlerrcode;
		step_failed_at_commit = at_commit;
		message = caught_message(edata->message);
		log_caught(what, edata, message);
		OutboxHealthRelayError(what, message);
		if (error != NULL)
			*error = message;
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

/*
 * Runs fn as OutboxRunStep does, as one part of a larger step whose
 * caller judges the outcome: its success alone does not end the relay's
 * failing state (outbox_relay_stats().failing_since), as a read that
 * succeeds within a release that keeps failing would.
 */
bool
OutboxRunStepPart(const char *what, OutboxStepFn fn, void *arg, char **error)
{
	bool		ok;

	step_part = true;
	ok = OutboxRunStep(what, fn, arg, error);
	step_part = false;
	return ok;
}

/*
 * Finds the next event for a claim of one, leaving out the events in
 * flight: the next due (alone false; isolation) or the next to be sent
 * alone (OutboxNextAlone). Sets c->only_id (0: none) and c->only_attempts.
 */
static void
next_one(OutboxClaimStepArgs *c, bool alone)
{
	int			nexclude;
	int			room;
	int64	   *exclude;
	bool		found;

	c->only_id = 0;
	if (!OutboxQueueOpen())
		return;
	exclude = OutboxInFlightIds(MyDatabaseId, false, &nexclude, &room);
	found = alone ? OutboxNextAlone(exclude, nexclude, &c->only_id, &c->only_attempts)
		: OutboxNextPending(&c->skip, exclude, nexclude, &c->only_id, &c->only_attempts);
	if (!found)
		c->only_id = 0;
}

/* Finds the event that a claim of one would take (isolation). */
void
OutboxNextPendingStep(void *arg)
{
	next_one(arg, false);
}

/* Finds the next event to be sent alone (OutboxNextAlone), if any. */
void
OutboxNextAloneStep(void *arg)
{
	next_one(arg, true);
}

/* The claim (OutboxDispatch), committed without waiting for the WAL flush. */
void
OutboxClaimStep(void *arg)
{
	OutboxClaimStepArgs *c = arg;
	OutboxClaimRequest req = {
		.batch_size = c->batch_size,
		.skip = c->skip,
		.only_id = c->only_id,
		.alone = c->alone,
		.run = OutboxRelayRun(),
		.relay = c->relay,
		.held = c->held,
		.holding = c->holding,
		.cxt = c->cxt
	};

	/* flushed by the worker once the requests are under way */
	set_local("synchronous_commit", "off");
	OutboxDispatch(&req, &c->d);
}

/*
 * Releases the journal rows of the relays that do not run, and this
 * relay's rows in r->own (see OutboxReleaseJournal), under the journal's
 * lock. The runs gone are read with the lock held: a relay that starts
 * later releases after this one commits, and claims only then.
 */
void
OutboxReleaseStep(void *arg)
{
	OutboxReleaseStepArgs *r = arg;
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
		set_local("session_replication_role", "replica");
	OutboxLockJournal();
	old = MemoryContextSwitchTo(r->cxt);
	live = OutboxRelayRuns(MyDatabaseId, &nlive, &r->dead, &r->ndead);
	OutboxStartLogRead(MyDatabaseId, live, nlive, &r->logs);
	MemoryContextSwitchTo(old);
	OutboxReleaseJournal(live, nlive, r->own, r->nown, &r->logs, r->only, &r->counted, &r->alone);
}

/*
 * Reads the keys of the journal rows a release would take (r->own as for
 * OutboxReleaseStep) into r->keys, in r->cxt.
 */
void
OutboxJournalKeysStep(void *arg)
{
	OutboxReleaseStepArgs *r = arg;
	int64	   *live;
	int			nlive;
	int64	   *dead;
	int			ndead;
	MemoryContext old;

	r->nkeys = 0;
	if (!OutboxQueueOpen())
		return;
	if (OutboxQueueExtension() != r->own_extoid)
		r->nown = 0;
	live = OutboxRelayRuns(MyDatabaseId, &nlive, &dead, &ndead);
	old = MemoryContextSwitchTo(r->cxt);
	r->nkeys = OutboxJournalKeys(live, nlive, r->own, r->nown, &r->keys);
	MemoryContextSwitchTo(old);
}

/* Deletes the journal row *arg (an OutboxJournalKey), counting nothing. */
void
OutboxJournalDropStep(void *arg)
{
	if (OutboxQueueOpen())
	{
		OutboxLockJournal();
		OutboxJournalDrop((OutboxJournalKey *) arg);
	}
}

/* Writes the journal's end for claims whose outcomes are all recorded. */
void
OutboxJournalDoneStep(void *arg)
{
	OutboxJournalDoneStepArgs *j = arg;

	set_local("synchronous_commit", "off");
	if (OutboxQueueOpen() && OutboxQueueExtension() == j->extoid)
		OutboxJournalDone(j->claims, j->n, OutboxRelayRun());
}

/* Reads the next due time (see OutboxNextDueMs) into *arg, a double. */
void
OutboxNextDueStep(void *arg)
{
	double	   *due_ms = arg;

	*due_ms = OutboxQueueOpen() ? OutboxNextDueMs() : -1;
}

/*
 * Records outcomes (OutboxRecordOutcomes), or the failure of events[0]
 * alone, for the events claimed from the extension that is there now.
 */
void
OutboxRecordStep(void *arg)
{
	OutboxRecordStepArgs *r = arg;
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
		if (r->events[i]->extoid == InvalidOid ||
			r->events[i]->extoid == OutboxQueueExtension())
			events[n++] = r->events[i];
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
	set_local("synchronous_commit", "off");
	if (r->single_failure)
	{
		if (r->replica)
			set_local("session_replication_role", "replica");
		r->recorded = OutboxRecordFailure(events[0]);
	}
	else if (OutboxRecordOutcomes(events, n) > 0)
	{
		/* deliveries released held events: they are due now */
		r->next_due_ms = 0;
		return;
	}

	/*
	 * Only a failure schedules an attempt (its retry); a delivery can only
	 * make the next due time later, unless it released events (above), so
	 * it need not be read again.
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
 * user triggers off. Returns false if nothing could be recorded. Called by
 * the worker outside any transaction.
 */
bool
OutboxRecordIsolatedFailure(OutboxEvent *ev, const char *what, const char *error)
{
	OutboxRecordStepArgs r;

	ev->ok = false;
	ev->permanent = false;
	ev->retry_after_ms = -1;
	ev->gone_target = NULL;		/* the outcome is this error, not the answer */
	ev->error = psprintf("could not %s: %s", what, error);
	memset(&r, 0, sizeof(r));
	r.events = &ev;
	r.n = 1;
	r.single_failure = true;
	if (OutboxRunStep("record the failure of an event", OutboxRecordStep, &r, NULL))
		return true;
	ev->recorded = false;		/* rolled back, even if its COMMIT was what failed */
	if (!OutboxStepSuperuser())
		return false;
	r.replica = true;
	if (OutboxRunStep("record the failure of an event", OutboxRecordStep, &r, NULL))
		return true;
	ev->recorded = false;		/* rolled back */
	return false;
}

/*
 * Runs a release (OutboxReleaseStep) with r: plainly, then, if the relay
 * may, with user triggers off. Returns false if both failed, with the
 * last error's message in *error (if not NULL).
 */
static bool
try_release(OutboxReleaseStepArgs *r, char **error)
{
	const char *what = "release the events of relays that are gone";

	r->replica = false;
	if (OutboxRunStep(what, OutboxReleaseStep, r, error))
		return true;
	if (!OutboxStepSuperuser())
		return false;
	r->replica = true;
	return OutboxRunStep(what, OutboxReleaseStep, r, error);
}

/*
 * The release failed as a whole, user triggers off too: a row that always
 * fails (a constraint of the user's on outbox, say) must not stop every
 * claim. So each journal row is released alone, and a row whose release
 * still fails is deleted without counting its attempts, with a WARNING:
 * those events are due again at once, with their attempt counts as they
 * were.
 */
static void
release_one_by_one(OutboxReleaseStepArgs *all)
{
	OutboxReleaseStepArgs k = *all;

	if (!OutboxRunStepPart("read the journal of events in flight", OutboxJournalKeysStep, &k, NULL))
		return;
	for (int i = 0; i < k.nkeys; i++)
	{
		OutboxReleaseStepArgs one = *all;
		char	   *error = NULL;

		one.only = &k.keys[i];
		if (try_release(&one, &error))
			continue;
		if (OutboxRunStepPart("delete a row of the journal of events in flight", OutboxJournalDropStep,
							  &k.keys[i], NULL))
			ereport(WARNING,
					(errmsg("outbox relay released claim %lld of relay run %016llx without counting its cut-off attempts",
							(long long) k.keys[i].claim, (unsigned long long) k.keys[i].run),
					 errdetail("Counting them failed: %s", error ? error : "unknown error"),
					 errhint("Its events are due again with the attempt counts they had.")));
	}
}

/*
 * Runs the release of r (OutboxReleaseStep): tried with user triggers off
 * too, if the relay may (try_release), then row by row
 * (release_one_by_one), then as a whole again. Returns false if it still
 * failed. In the relay, between steps (no transaction open).
 */
bool
OutboxReleaseAll(OutboxReleaseStepArgs *r)
{
	int			nown = r->nown;

	if (try_release(r, NULL))
		return true;
	release_one_by_one(r);
	r->nown = nown;
	return try_release(r, NULL);
}
