/*-------------------------------------------------------------------------
 *
 * relay.c
 *	  The relay worker: claims due events, hands them to their kinds and
 *	  records each outcome, with no transaction open while it waits on the
 *	  network. outbox_relay() runs one pass of the same claim in the
 *	  calling session instead (claim.c).
 *
 * The worker's state machine, per event:
 *
 *	 due --claim--> [sent at COMMIT]   delivered, in the claim's own
 *									   transaction (NOTIFY)
 *				   [no destination]   parked (see queue.c)
 *				   [sent after COMMIT] in flight: in the in-flight set in
 *									   shared memory, and in the journal
 *									   (outbox_in_flight) (HTTP)
 *	 in flight --send--> delivered | retry later | dead-lettered, each
 *						 recorded (attempt counted) in a short
 *						 transaction as it comes, then out of the set
 *
 * A claim is one short transaction (claim.c, run as a step: steps.c);
 * only after its COMMIT are its in-flight events handed to their kinds.
 * The kinds return outcomes as they arrive, and the loop records them at
 * once and claims more while others are in flight, so a slow endpoint
 * delays no one else's marks and holds no lock or snapshot.
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
 * Faults. Every step runs under PG_TRY (steps.c): an ERROR (a user
 * trigger, a failed COMMIT, a full NOTIFY queue, out of memory) aborts that
 * transaction only, and the worker goes on. Since nothing was sent for a
 * claim that did not commit, a failed claim costs no delivery; the relay
 * then claims one event per transaction until it has passed the one that
 * fails, and records that event's failure (retried with backoff, then
 * dead-lettered, the error in last_error). A batch of outcomes that cannot
 * be recorded is recorded one by one; an event whose outcome cannot be
 * recorded gets a failed attempt instead, written with user triggers off
 * (session_replication_role = replica) if they are what fails. So after a
 * fault every other event is sent at most twice, and the worker never
 * restarts over it.
 *
 * The loop's one wait (wait.c) is on the latch, which a committing backend
 * sets when its transaction emitted (emit.c), and on the kinds' sockets;
 * the next due time, read with a fresh snapshot after each claim, bounds
 * it, and outbox.poll_interval is the fallback for events inserted without
 * outbox_emit().
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

#include "claim.h"
#include "compat.h"
#include "destination.h"
#include "kind_registry.h"
#include "event.h"
#include "guc.h"
#include "health.h"
#include "horizon.h"
#include "pass.h"
#include "purge.h"
#include "relay.h"
#include "session.h"
#include "shmem.h"
#include "start_log.h"
#include "steps.h"
#include "wait.h"

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
 * A claim that left out full destinations or saturated kinds and still
 * found less than a batch found every due event of the others: repeating
 * it before an outcome frees one of them can only find what was emitted
 * or became due since, and it walks their due backlog again to do so.
 * Such a repeat waits this many times as long as that claim took, which
 * keeps walking a large backlog under a tenth of the relay's time.
 */
#define DRY_CLAIM_REPEAT_FACTOR 10
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

/* The events of one claim that are still in flight. */
typedef struct ClaimBatch
{
	MemoryContext cxt;			/* the events and their strings */
	int			open;			/* events in flight whose outcome is not in */
	IdList		unrecorded;		/* events whose outcome changed no row */
	int64		claim;			/* its number in the journal (0: none) */
	Oid			extoid;			/* in the extension of this OID */
} ClaimBatch;

/* ---------------------------------------------------------------------
 * The worker
 * ---------------------------------------------------------------------
 */

static int	relay_no = 0;		/* this relay's number in its database */
static MemoryContext relay_cxt = NULL;	/* parent of the claim batches */
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
typedef struct WorkerState
{
	bool		look;			/* claim again as soon as possible */
	OutboxSkip	left_full;		/* what the last claim left out, full */
	List	   *outcomes;		/* not recorded yet, in outcome_cxt */
	TimestampTz first_outcome;	/* when the oldest of them came */
	TimestampTz next_look;		/* claim again by then at the latest */
	TimestampTz not_before;		/* but not before (after failed steps) */
	int			isolate;		/* claims left to make one event at a time */
	int			error_backoff_ms;	/* after failed steps; 0 after success */
	XLogRecPtr	flush_lsn;		/* a claim's commit, not flushed yet */
	bool		want_next_due;	/* read the next due time after the claim */
	OutboxSkip	dry_skip;		/* left out by the last dry claim, or none */
	TimestampTz dry_until;		/* do not repeat that claim before then */
	bool		room_limited;	/* the last claim was cut to the set's room */
	Size		held_bytes;		/* what the events in flight cost (their cost) */
	bool		budget_limited; /* the last claim left events for that budget */
	bool		kind_limited;	/* and events for which their kind had no room */
	bool		released;		/* the first release has committed */
	bool		release_wanted; /* relays gone: release before the next claim */
	TimestampTz next_release_check; /* look for relays gone then */
	bool		alone_wanted;	/* a claim left out events to be sent alone */
	IdList		journal_done;	/* claims whose outcomes are all in */
	IdList		journal_release;	/* claims with outcomes that changed no row */
	IdList		unrecorded;		/* those events, in the set until released */
	Oid			journal_extoid; /* the extension of those claims */
} WorkerState;

/* Forgets the claims kept for the journal, and lets their events go. */
static void
drop_journal_lists(WorkerState *st)
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
batch_done(WorkerState *st, OutboxEvent *ev)
{
	ClaimBatch *b = ev->owner;
	/* the extension was dropped, and maybe created again: its journal is gone */
	bool		gone = b->extoid != OutboxQueueExtension();

	Assert(st->held_bytes >= ev->cost);
	st->held_bytes -= ev->cost;
	OutboxStartLogEnded(ev);

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
 * from the in-flight set (OutboxReleaseAll). Returns false if the release
 * failed.
 */
static bool
worker_release(WorkerState *st)
{
	OutboxReleaseStepArgs r;

	memset(&r, 0, sizeof(r));
	r.cxt = CurrentMemoryContext;
	r.own = st->journal_release.ids;
	r.nown = st->journal_release.n;
	r.own_extoid = st->journal_extoid;
	if (!OutboxReleaseAll(&r))
		return false;
	if (r.opened)
	{
		OutboxStartLogRemove(&r.logs);
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
	if (r.alone > 0)
		ereport(LOG,
				(errmsg_plural("outbox relay will send %llu event alone",
							   "outbox relay will send %llu events alone",
							   (unsigned long) r.alone, (unsigned long long) r.alone),
				 errdetail("Their attempts were cut off by their relay's end %d times in a row, or until outbox.max_attempts: each is sent with nothing else in flight, and dead-lettered if its relay ends again.",
						   OUTBOX_ALONE_AFTER)));
	return true;
}

/*
 * Whether the in-flight set holds entries of a relay that is gone, looked
 * for at most every RELEASE_CHECK_MS. (A release is also due before the
 * first claim, and when this relay has rows of its own to release.)
 */
static bool
relays_gone(WorkerState *st)
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

/*
 * Remembers whether a claim that left out the destinations in skip was dry
 * (see DRY_CLAIM_REPEAT_FACTOR); started: when it began.
 */
static void
note_dry_claim(WorkerState *st, const OutboxSkip *skip, bool dry, TimestampTz started)
{
	TimestampTz now = GetCurrentTimestamp();
	OutboxSkip	none = {NIL, NIL};

	/* a whole batch: more may be due, whatever was left out */
	if (!dry)
		OutboxSkipKeep(&st->dry_skip, &none);
	/* a dry claim that left nothing out says nothing about the others */
	if (!dry || OutboxSkipNone(skip))
		return;
	OutboxSkipKeep(&st->dry_skip, skip);
	st->dry_until = now + (now - started) * DRY_CLAIM_REPEAT_FACTOR;
}

/* Looks again no later than due_ms from now (<0: poll interval only). */
static void
look_again_in(WorkerState *st, double due_ms)
{
	TimestampTz now = GetCurrentTimestamp();
	long		ms = outbox_poll_interval;

	if (due_ms >= 0 && due_ms < ms)
		ms = (long) ceil(due_ms) + 1;
	st->next_look = Min(st->next_look, TimestampTzPlusMilliseconds(now, ms));
}

/* After a failed step: wait before claiming again, longer each time. */
static void
step_failed(WorkerState *st)
{
	st->error_backoff_ms = st->error_backoff_ms == 0 ? ERROR_BACKOFF_MIN_MS
		: Min(st->error_backoff_ms * 2, ERROR_BACKOFF_MAX_MS);
	st->look = true;
	st->not_before = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), st->error_backoff_ms);
}

/*
 * Whether the worker may claim now as far as releases go: none is due, or
 * the one due has committed (worker_release). No claim comes before the
 * first release, as it counts what a crash cut off.
 */
static bool
release_before_claim(WorkerState *st)
{
	bool		ok;

	if (!st->release_wanted && st->released && st->journal_release.n == 0)
		return true;
	ok = worker_release(st);
	if (ok)
		st->release_wanted = false;
	if (st->released)
		return true;
	/* failed, or the extension could not be opened: not yet */
	if (ok)
	{
		st->look = false;
		look_again_in(st, -1);
	}
	else
		step_failed(st);
	return false;
}

/*
 * While isolating (one event per claim after a failed claim), finds the
 * next event first, so that its failure can be recorded; sets c->only_id
 * and c->batch_size. Returns false when there is nothing to claim now.
 */
static bool
next_isolated(WorkerState *st, OutboxClaimStepArgs *c)
{
	if (!OutboxRunStep("find the next event", OutboxNextPendingStep, c, NULL))
	{
		step_failed(st);
		return false;
	}
	if (c->only_id == 0)
	{
		st->isolate = 0;
		st->look = false;
		look_again_in(st, -1);
		return false;
	}
	c->batch_size = 1;
	return true;
}

/*
 * Events to be sent alone are waiting (a claim left one out): no claim
 * until every event of this relay in flight has its outcome recorded, so
 * that if the relay ends, the event sent alone is the only one it cuts off
 * (worker_record calls the relay back); then sets up c to claim the next
 * of them by itself. Returns false when nothing is to be claimed now.
 * With none left, normal claims go on.
 */
static bool
next_alone(WorkerState *st, OutboxClaimStepArgs *c)
{
	if (OutboxKindsPending() > 0 || st->outcomes != NIL)
	{
		st->look = false;
		return false;
	}
	if (!OutboxRunStep("find the next event to send alone", OutboxNextAloneStep, c, NULL))
	{
		step_failed(st);
		return false;
	}
	if (c->only_id == 0)
	{
		st->alone_wanted = false;
		return true;
	}
	c->batch_size = 1;
	c->alone = true;
	return true;
}

/*
 * After a claim failed (error: its message), nothing of which was
 * committed or sent: a full claim starts the isolation of the event that
 * fails; a claim of one records that event's failure, then goes on.
 */
static void
claim_failed(WorkerState *st, OutboxClaimStepArgs *c, const char *error)
{
	OutboxEvent ev;

	/* a claim of one event to be sent alone is isolated already */
	if (st->isolate == 0 && !c->alone)
	{
		st->isolate = outbox_batch_size;
		st->look = true;
		return;
	}
	memset(&ev, 0, sizeof(ev));
	ev.id = c->only_id;
	ev.attempts = c->only_attempts;
	/*
	 * A kind that sends at COMMIT whose queue was full failed the COMMIT
	 * (commit_full_errcode): nothing was sent, and a queue that any role
	 * can fill must not use up the event's attempts. It waits, with the
	 * reason. The same SQLSTATE raised before COMMIT (by a kind's function
	 * in the claim, an index row too large) is a failed attempt.
	 */
	ev.not_sent = OutboxStepFailedAtCommit() && OutboxKindsCommitFull(OutboxStepErrcode());
	ev.event_id = psprintf("with id %lld", (long long) c->only_id);
	ev.dest.name = NULL;
	if (!OutboxRecordIsolatedFailure(&ev, "claim the event", error))
	{
		step_failed(st);
		return;
	}
	if (st->isolate > 0)
		st->isolate--;
	st->look = true;
}

/* Hands the claim's events in flight to their kinds, in batch's memory. */
static void
hand_over(WorkerState *st, OutboxDispatchResult *d, ClaimBatch *batch)
{
	batch->claim = d->claim;
	batch->extoid = d->extoid;
	for (int i = 0; i < d->nin_flight; i++)
	{
		d->in_flight[i]->owner = batch;
		batch->open++;
		st->held_bytes += d->in_flight[i]->cost;
		OutboxKindEnqueue(d->in_flight[i]);
	}
	if (batch->open == 0)
		MemoryContextDelete(batch->cxt);
}

/*
 * One claim by the worker, in a transaction of its own (after a release,
 * when one is due), then the events put in flight handed to their kinds.
 * On ERROR nothing was sent, and they leave the set again: the worker
 * then claims one event per transaction (st->isolate) and records the
 * failure of the one whose claim fails.
 */
static void
worker_claim(WorkerState *st)
{
	OutboxClaimStepArgs c;
	ClaimBatch *batch;
	char	   *error = NULL;
	TimestampTz started = GetCurrentTimestamp();

	memset(&c, 0, sizeof(c));
	c.batch_size = outbox_batch_size;
	OutboxSkipNow(&c.skip);
	st->next_look = DT_NOEND;
	if (!release_before_claim(st))
		return;

	/* the last claim found the others dry, and nothing freed a full one */
	if (st->isolate == 0 && !OutboxSkipNone(&st->dry_skip) && started < st->dry_until &&
		OutboxSkipCovers(&c.skip, &st->dry_skip))
	{
		st->look = false;
		st->next_look = st->dry_until;
		return;
	}
	if (st->isolate > 0 && !next_isolated(st, &c))
		return;
	if (st->isolate == 0 && st->alone_wanted && !next_alone(st, &c))
		return;

	batch = new_batch();
	c.relay = relay_no;
	c.cxt = batch->cxt;
	c.held = st->held_bytes;
	/* outcomes in hand are still in flight: they count against the kinds' room */
	c.holding = st->outcomes;
	if (!OutboxRunStep("claim events", OutboxClaimStep, &c, &error))
	{
		OutboxInFlightRemove(MyDatabaseId, c.d.published, c.d.npublished);
		MemoryContextDelete(batch->cxt);
		claim_failed(st, &c, error);
		return;
	}
	st->error_backoff_ms = 0;
	if (c.d.claimed > 0)
		st->flush_lsn = XactLastCommitEnd;
	if (st->isolate > 0)
		st->isolate--;
	hand_over(st, &c.d, batch);
	OutboxHealthRelayPass(c.d.budget_limited, st->held_bytes);
	st->room_limited = c.d.room_limited;
	st->budget_limited = c.d.budget_limited;
	st->kind_limited = c.d.kind_limited;
	st->alone_wanted |= c.d.alone_left;

	/* destinations were left out, full: outcomes, not the clock, bring more */
	OutboxSkipKeep(&st->left_full, &c.skip);
	if (st->isolate == 0)
		note_dry_claim(st, &c.skip, c.d.claimed < c.batch_size, started);
	/*
	 * cut by the set's room, the memory budget or a kind's room: outcomes
	 * make room (a kind's, as they are collected or recorded), and with
	 * none coming the next claim runs at once; cut for a destination's
	 * share: the next claim takes the others'
	 */
	st->look = st->isolate > 0 || c.d.dest_limited || c.d.alone_left || c.d.due_again ||
		(c.d.claimed >= c.batch_size && !c.d.room_limited && !c.d.budget_limited &&
		 !c.d.kind_limited) ||
		(OutboxClaimCutSettled(&c.d) && st->outcomes == NIL && OutboxKindsPending() == 0);
	/* read once the requests are under way: it is not on their path */
	st->want_next_due = !st->look;
}

/*
 * Whether a destination that the last claim left out, full, has room
 * again (by name: another may have filled up meanwhile), or a kind it
 * left out, saturated, has a connection free. Asked as
 * soon as the kind hands outcomes back (the only thing that frees one),
 * before they are recorded, so that the next claim runs and commits while
 * the last requests of the previous one are still under way: a relay that
 * waited for every outcome of a claim before claiming again would leave
 * the connections idle for a claim and a WAL flush per batch.
 */
static bool
destination_freed(WorkerState *st)
{
	OutboxSkip	now;

	if (OutboxSkipNone(&st->left_full))
		return false;
	OutboxSkipNow(&now);
	return !OutboxSkipCovers(&now, &st->left_full);
}

/*
 * Records the outcomes the kinds returned: all in one transaction or, if
 * that fails, one per transaction; an event whose outcome cannot be
 * recorded gets a failed attempt instead (OutboxRecordIsolatedFailure). Then
 * the events' batches are let go.
 */
static void
worker_record(WorkerState *st, List *done)
{
	int			n = list_length(done);
	OutboxEvent **events = palloc(sizeof(OutboxEvent *) * n);
	OutboxRecordStepArgs r;
	ListCell   *lc;
	int			i = 0;

	foreach(lc, done)
		events[i++] = lfirst(lc);
	memset(&r, 0, sizeof(r));
	r.events = events;
	r.n = n;
	if (OutboxRunStep("record outcomes", OutboxRecordStep, &r, NULL))
		look_again_in(st, r.next_due_ms);
	else
	{
		/* rolled back: nothing of it was recorded */
		for (i = 0; i < n; i++)
			events[i]->recorded = false;
		for (i = 0; i < n; i++)
		{
			OutboxRecordStepArgs one;
			char	   *error = NULL;

			memset(&one, 0, sizeof(one));
			one.events = &events[i];
			one.n = 1;
			if (OutboxRunStep("record the outcome of an event", OutboxRecordStep, &one, &error))
				look_again_in(st, one.next_due_ms);
			else
			{
				events[i]->recorded = false;
				if (!OutboxRecordIsolatedFailure(events[i], "record the outcome", error))
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
	{
		OutboxKindRecorded(events[i]);
		batch_done(st, events[i]);
	}
	if (st->journal_done.n > 0)
	{
		OutboxJournalDoneStepArgs j = {st->journal_done.ids, st->journal_done.n, st->journal_extoid};

		/* if this fails, the rows are deleted with the next ones */
		if (OutboxRunStep("delete from the journal of events in flight", OutboxJournalDoneStep, &j, NULL))
			st->journal_done.n = 0;
	}
	/*
	 * the in-flight set, the memory budget or a kind has room again (a
	 * full destination is seen as outcomes are collected; one whose room
	 * the outcomes in hand took, once they are recorded); or events to be
	 * sent alone wait for the relay to be empty
	 */
	if (st->room_limited || st->budget_limited || st->kind_limited || st->alone_wanted)
		st->look = true;
}

/*
 * Connects the worker to database dboid (OutboxWorkerConnect) and attaches
 * it to its slot (exits quietly if another process has it). Then logs that
 * it started.
 */
static void
relay_connect(Oid dboid)
{
	OutboxWorkerConnect(dboid);

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
begin_round(WorkerState *st)
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
wait_and_collect(WorkerState *st, long wait_ms)
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
	if (done != NIL && destination_freed(st))
		st->look = true;
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
flush_claim(WorkerState *st)
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
read_next_due(WorkerState *st)
{
	double		due_ms = -1;

	if (!st->want_next_due)
		return;
	st->want_next_due = false;
	if (OutboxRunStep("find the next due time", OutboxNextDueStep, &due_ms, NULL))
		look_again_in(st, due_ms);
	else
		step_failed(st);
}

/*
 * The first relay of a database also purges old rows (purge.c) and names
 * a transaction that slows every claim (horizon.c).
 */
static void
upkeep_if_due(void)
{
	if (relay_no == 0 && OutboxPurgeDue())
		OutboxPurgeDone(OutboxRunStep("purge old rows", OutboxPurgeStep, NULL, NULL));
	if (relay_no == 0 && OutboxHorizonDue())
		(void) OutboxRunStep("check the oldest transaction", OutboxHorizonStep, NULL, NULL);
}

/*
 * How long the relay may wait: until it is to claim again (or may, after
 * failed steps), at most outbox.poll_interval and, for the first relay,
 * until its purge. With outcomes in hand, until they are to be recorded
 * (record_if_ready): not at all once nothing else is in flight, else at
 * most until the first has waited RECORD_DELAY_MS, as more outcomes (and
 * a commit, through the latch) wake the wait (looking without waiting meanwhile
 * would spend the relay's CPU on empty rounds).
 */
static long
wait_ms_for(WorkerState *st)
{
	TimestampTz until = st->look ? st->not_before : st->next_look;
	TimestampTz now = GetCurrentTimestamp();
	long		secs;
	int			usecs;
	long		wait_ms;

	if (st->outcomes != NIL)
	{
		if (OutboxKindsPending() == 0)
			return 0;
		until = Min(until, TimestampTzPlusMilliseconds(st->first_outcome, RECORD_DELAY_MS));
	}
	if (until <= now)
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
record_if_ready(WorkerState *st)
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

/* a SIGTERM came: the relay was asked to stop */
static volatile sig_atomic_t stop_requested = false;

/*
 * The relay's SIGTERM handler: notes that it was asked to stop (a server
 * shutdown, the launcher, pg_terminate_backend), then does what die() does.
 */
static void
relay_sigterm(SIGNAL_ARGS)
{
	stop_requested = true;
	die(postgres_signal_arg);
}

/*
 * Exiting (a before_shmem_exit callback): after a SIGTERM, notes in the
 * start log that the relay was asked to stop, so that the attempts it cuts
 * off are not held against their events (start_log.c). Any other exit
 * that runs callbacks (an ERROR out of the loop, the postmaster's death)
 * leaves the log as it is.
 */
static void
relay_at_exit(int code pg_attribute_unused(), Datum arg pg_attribute_unused())
{
	if (stop_requested)
		OutboxStartLogStopped();
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
	WorkerState	st;

	memcpy(&relay_no, MyBgworkerEntry->bgw_extra, sizeof(int));
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, relay_sigterm);
	BackgroundWorkerUnblockSignals();

	relay_connect(DatumGetObjectId(main_arg));
	OutboxStartLogBegin(MyDatabaseId, OutboxRelayRun());
	before_shmem_exit(relay_at_exit, (Datum) 0);
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
		upkeep_if_due();
		wait_and_collect(&st, wait_ms_for(&st));
		record_if_ready(&st);

		MemoryContextSwitchTo(TopMemoryContext);
		MemoryContextReset(loop_cxt);
	}
}
