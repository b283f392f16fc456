/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  The small shared-memory area of the extension: one slot per database
 *	  with relays, holding each relay's pid and latch, and a separate table
 *	  of pauses.
 *
 * Backends read a slot to wake the relay of their database at COMMIT; the
 * relay fills it in when it starts and clears it when it exits. The DROP
 * DATABASE guard (utility.c) writes a pause, which keeps a database's relay
 * from starting, into the pause table, never into a slot: a pause lasts
 * until the end of its command's transaction (and no longer than the time
 * it was set for) and belongs to the backend that set it, and since only
 * relay databases are ever paused, no one can use pauses to take the slots
 * that relays need.
 * All of this is a handful of fields, so one spinlock protects the whole
 * area; nothing is done while holding it but copying those fields.
 *
 * Each slot also holds its database's in-flight set: the ids of the HTTP
 * events that a relay has sent or is sending and whose outcome is not
 * recorded yet, each with the run of the relay that holds it. No relay
 * claims an event in the set, so the claim itself writes nothing to the
 * event's row (see relay.c). It has its own LWLock per slot, as it is
 * copied whole for every claim. An entry outlives the relay that holds it:
 * a relay that exits leaves its events in the set until another one has
 * counted their cut-off attempts (OutboxInFlightForget); a crash restart
 * clears everything, and the first relay to start counts them all.
 *
 * The area exists only when the library is in shared_preload_libraries.
 * Without it, events are still stored and outbox_relay() still delivers;
 * there is simply no worker to wake.
 *
 * src/shmem.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "miscadmin.h"
#include "port/pg_bitutils.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "health.h"
#include "shmem.h"

typedef struct OutboxRelayProc
{
	pid_t		pid;			/* 0: no relay running */
	Latch	   *latch;			/* the relay's MyLatch, NULL when not running */
	int64		run;			/* the running relay's run (OutboxRelayRun) */
} OutboxRelayProc;

/* An event in flight, and the run of the relay that holds it. */
typedef struct OutboxInFlightEntry
{
	int64		id;
	int64		run;
} OutboxInFlightEntry;

typedef struct OutboxRelaySlot
{
	Oid			dboid;			/* InvalidOid: free */
	OutboxRelayProc relays[OUTBOX_MAX_RELAYS_PER_DATABASE];	/* by number */
	/* the in-flight set, under in_flight_locks[slot number] */
	int			n_in_flight;
	OutboxInFlightEntry in_flight[OUTBOX_IN_FLIGHT_PER_DATABASE];
} OutboxRelaySlot;

/* A database whose relay must not start: a command needs it to itself. */
typedef struct OutboxPause
{
	Oid			dboid;			/* InvalidOid: free */
	pid_t		pid;			/* the backend running the command */
	TimestampTz until;			/* the pause ends then at the latest */
} OutboxPause;

typedef struct OutboxShared
{
	slock_t		mutex;
	OutboxRelaySlot slots[OUTBOX_MAX_RELAYS];
	OutboxPause pauses[OUTBOX_MAX_PAUSES];
} OutboxShared;

static OutboxShared *shared = NULL;
static LWLockPadded *in_flight_locks = NULL;
static int64 my_run = 0;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* Asks for the shared area (shmem_request_hook, postmaster). */
static void
outbox_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(OutboxShared)));
	RequestNamedLWLockTranche("outbox in flight", OUTBOX_MAX_RELAYS);
	OutboxHealthShmemRequest();
}

/* Creates or attaches to the shared area (shmem_startup_hook). */
static void
outbox_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("outbox", sizeof(OutboxShared), &found);
	if (!found)
	{
		memset(shared, 0, sizeof(OutboxShared));
		SpinLockInit(&shared->mutex);
	}
	in_flight_locks = GetNamedLWLockTranche("outbox in flight");
	LWLockRelease(AddinShmemInitLock);
	OutboxHealthShmemStartup();
}

/*
 * Installs the shared-memory hooks. Called from _PG_init in the postmaster
 * only, when the library is being preloaded.
 */
void
OutboxShmemInit(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = outbox_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = outbox_shmem_startup;
}

/* True if no relay of the slot runs. Caller holds the spinlock. */
static bool
slot_idle(const OutboxRelaySlot *slot)
{
	for (int i = 0; i < OUTBOX_MAX_RELAYS_PER_DATABASE; i++)
		if (slot->relays[i].pid != 0)
			return false;
	return true;
}

/*
 * Finds the slot of dboid, or claims a free one when create is set; NULL if
 * there is none. A slot is free when its relays are gone. Caller holds the
 * spinlock.
 */
static OutboxRelaySlot *
find_slot(Oid dboid, bool create)
{
	OutboxRelaySlot *free_slot = NULL;

	for (int i = 0; i < OUTBOX_MAX_RELAYS; i++)
	{
		OutboxRelaySlot *slot = &shared->slots[i];

		if (slot->dboid == dboid)
			return slot;
		if (free_slot == NULL &&
			(slot->dboid == InvalidOid || slot_idle(slot)))
			free_slot = slot;
	}
	if (create && free_slot != NULL)
	{
		memset(free_slot, 0, sizeof(OutboxRelaySlot));
		free_slot->dboid = dboid;
	}
	return create ? free_slot : NULL;
}

/* True while a pause of dboid is in force. Caller holds the spinlock. */
static bool
is_paused(Oid dboid, TimestampTz now)
{
	for (int i = 0; i < OUTBOX_MAX_PAUSES; i++)
		if (shared->pauses[i].dboid == dboid && shared->pauses[i].until > now)
			return true;
	return false;
}

/* on_shmem_exit callback of a relay: clears its pid and latch. */
static void
relay_detach(int code pg_attribute_unused(), Datum arg)
{
	Oid			dboid = DatumGetObjectId(arg);
	OutboxRelaySlot *slot;

	SpinLockAcquire(&shared->mutex);
	slot = find_slot(dboid, false);
	for (int i = 0; slot != NULL && i < OUTBOX_MAX_RELAYS_PER_DATABASE; i++)
	{
		if (slot->relays[i].pid == MyProcPid)
		{
			slot->relays[i].pid = 0;
			slot->relays[i].latch = NULL;
			slot->relays[i].run = 0;
		}
	}
	SpinLockRelease(&shared->mutex);
}

/*
 * Publishes the calling relay worker's latch as relay number relay_no of its
 * database, so that committing backends can wake it; it is cleared at
 * process exit. Called once by the relay after it connected. Returns false,
 * taking nothing, when another process already is that relay (one left
 * running by a launcher that was restarted) or a pause is in force (a DROP
 * DATABASE is under way); the caller then exits. Raises ERROR when all
 * slots are taken (more than OUTBOX_MAX_RELAYS databases).
 */
bool
OutboxRelayAttach(Oid dboid, int relay_no)
{
	OutboxRelaySlot *slot = NULL;
	bool		attached = false;
	bool		paused;
	TimestampTz now = GetCurrentTimestamp();

	Assert(relay_no >= 0 && relay_no < OUTBOX_MAX_RELAYS_PER_DATABASE);
	/* random, not a counter: runs of an earlier server life stay in the journal */
	while (my_run == 0)
		if (!pg_strong_random(&my_run, sizeof(my_run)))
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not generate a random number")));
	SpinLockAcquire(&shared->mutex);
	paused = is_paused(dboid, now);
	if (!paused)
		slot = find_slot(dboid, true);
	if (slot != NULL && slot->relays[relay_no].pid == 0)
	{
		slot->relays[relay_no].pid = MyProcPid;
		slot->relays[relay_no].latch = MyLatch;
		slot->relays[relay_no].run = my_run;
		attached = true;
	}
	SpinLockRelease(&shared->mutex);

	if (slot == NULL && !paused)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("too many outbox relays"),
				 errdetail("At most %d databases can have a relay at once.",
						   OUTBOX_MAX_RELAYS)));
	if (attached)
		on_shmem_exit(relay_detach, ObjectIdGetDatum(dboid));
	return attached;
}

/*
 * The pid of relay number relay_no of dboid, or 0. A pid is cleared when its
 * relay exits (and all of shared memory is reset by a crash restart), so a
 * pid here is a live relay. Called by the launcher to adopt relays that a
 * previous launcher started.
 */
pid_t
OutboxRelayPid(Oid dboid, int relay_no)
{
	OutboxRelaySlot *slot;
	pid_t		pid = 0;

	SpinLockAcquire(&shared->mutex);
	slot = find_slot(dboid, false);
	if (slot != NULL)
		pid = slot->relays[relay_no].pid;
	SpinLockRelease(&shared->mutex);
	return pid;
}

/*
 * Sends SIGTERM to every running relay whose database is not among the n in
 * keep, or whose number is relays_per_database or more: relays of databases
 * removed from outbox.databases or beyond a lowered count, including those
 * a previous launcher started (which the current one has no handle for).
 * Called by the launcher.
 */
void
OutboxStopRelaysExcept(const Oid *keep, int n, int relays_per_database)
{
	pid_t		doomed[OUTBOX_MAX_RELAYS * OUTBOX_MAX_RELAYS_PER_DATABASE];
	int			ndoomed = 0;

	SpinLockAcquire(&shared->mutex);
	for (int i = 0; i < OUTBOX_MAX_RELAYS; i++)
	{
		OutboxRelaySlot *slot = &shared->slots[i];
		bool		wanted = false;

		for (int j = 0; j < n && !wanted; j++)
			wanted = keep[j] == slot->dboid;
		for (int r = 0; r < OUTBOX_MAX_RELAYS_PER_DATABASE; r++)
			if (slot->relays[r].pid != 0 && (!wanted || r >= relays_per_database))
				doomed[ndoomed++] = slot->relays[r].pid;
	}
	SpinLockRelease(&shared->mutex);

	for (int i = 0; i < ndoomed; i++)
		kill(doomed[i], SIGTERM);
}

/*
 * Sets the latches of the relays of dboid, if any run. Called by any backend
 * at COMMIT of a transaction that emitted (emit.c), so it must not fail: no
 * allocation, no ERROR. A no-op without the shared area.
 */
void
OutboxWakeRelay(Oid dboid)
{
	OutboxRelaySlot *slot;
	Latch	   *latches[OUTBOX_MAX_RELAYS_PER_DATABASE];
	int			n = 0;

	if (shared == NULL)
		return;

	SpinLockAcquire(&shared->mutex);
	slot = find_slot(dboid, false);
	for (int i = 0; slot != NULL && i < OUTBOX_MAX_RELAYS_PER_DATABASE; i++)
		if (slot->relays[i].latch != NULL)
			latches[n++] = slot->relays[i].latch;
	SpinLockRelease(&shared->mutex);

	/* A latch of an exited process is still valid memory: a spurious wake. */
	for (int i = 0; i < n; i++)
		SetLatch(latches[i]);
}

/*
 * Stops the relays of dboid, if any, and keeps the launcher from starting
 * one until OutboxUnpauseRelays() or for pause_ms milliseconds, whichever
 * comes first. Called by a backend about to run a command that needs the
 * database to itself (DROP DATABASE and the like, utility.c), only for a
 * database that has or may have relays; the command's own wait for other
 * sessions to leave covers the relay's exit. The pause table has room for
 * as many pauses as there are slots; when it is full of pauses in force
 * (which would take that many relay databases at once) the relays are
 * stopped without one, and one may be started again before the command.
 */
void
OutboxPauseRelay(Oid dboid, int pause_ms)
{
	OutboxRelaySlot *slot;
	OutboxPause *pause = NULL;
	pid_t		pids[OUTBOX_MAX_RELAYS_PER_DATABASE];
	int			n = 0;
	TimestampTz now = GetCurrentTimestamp();

	if (shared == NULL)
		return;

	SpinLockAcquire(&shared->mutex);
	for (int i = 0; i < OUTBOX_MAX_PAUSES; i++)
	{
		OutboxPause *p = &shared->pauses[i];

		if (p->dboid == dboid && p->pid == MyProcPid)
		{
			pause = p;
			break;
		}
		if (pause == NULL && (p->dboid == InvalidOid || p->until <= now))
			pause = p;
	}
	if (pause != NULL)
	{
		pause->dboid = dboid;
		pause->pid = MyProcPid;
		pause->until = TimestampTzPlusMilliseconds(now, pause_ms);
	}
	slot = find_slot(dboid, false);
	for (int i = 0; slot != NULL && i < OUTBOX_MAX_RELAYS_PER_DATABASE; i++)
		if (slot->relays[i].pid != 0)
			pids[n++] = slot->relays[i].pid;
	SpinLockRelease(&shared->mutex);

	for (int i = 0; i < n; i++)
		kill(pids[i], SIGTERM);
}

/*
 * Ends the pauses that this backend set, of dboid or, with InvalidOid, of
 * every database: when the command failed, and when its transaction ends.
 * Must not fail: no allocation, no ERROR. A no-op without the shared area.
 */
void
OutboxUnpauseRelays(Oid dboid)
{
	if (shared == NULL)
		return;

	SpinLockAcquire(&shared->mutex);
	for (int i = 0; i < OUTBOX_MAX_PAUSES; i++)
	{
		OutboxPause *p = &shared->pauses[i];

		if (p->pid == MyProcPid && (dboid == InvalidOid || p->dboid == dboid))
		{
			p->dboid = InvalidOid;
			p->pid = 0;
			p->until = 0;
		}
	}
	SpinLockRelease(&shared->mutex);
}

/* True if a relay of dboid runs. */
bool
OutboxRelayRunning(Oid dboid)
{
	OutboxRelaySlot *slot;
	bool		running = false;

	if (shared == NULL)
		return false;

	SpinLockAcquire(&shared->mutex);
	slot = find_slot(dboid, false);
	if (slot != NULL)
		running = !slot_idle(slot);
	SpinLockRelease(&shared->mutex);
	return running;
}

/* True while a pause set by OutboxPauseRelay is in force; launcher only. */
bool
OutboxRelayPaused(Oid dboid)
{
	bool		paused;
	TimestampTz now = GetCurrentTimestamp();

	SpinLockAcquire(&shared->mutex);
	paused = is_paused(dboid, now);
	SpinLockRelease(&shared->mutex);
	return paused;
}

/* ---------------------------------------------------------------------
 * The in-flight sets
 * ---------------------------------------------------------------------
 */

/*
 * The run of this relay process: a random non-zero number drawn by
 * OutboxRelayAttach, which also names its rows in the outbox_in_flight
 * journal; 0 in any other process.
 */
int64
OutboxRelayRun(void)
{
	return my_run;
}

/*
 * The slot of dboid, or NULL. The slot stays dboid's while a relay of it
 * runs, so a relay may use it after the spinlock is let go; a backend may
 * read one that is being taken for another database, which costs it no
 * more than a wrong exclusion of a few events for one claim.
 */
static OutboxRelaySlot *
slot_of(Oid dboid, LWLock **lock)
{
	OutboxRelaySlot *slot;

	if (shared == NULL)
		return NULL;
	SpinLockAcquire(&shared->mutex);
	slot = find_slot(dboid, false);
	SpinLockRelease(&shared->mutex);
	if (slot != NULL)
		*lock = &in_flight_locks[slot - shared->slots].lock;
	return slot;
}

static int
cmp_int64(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return x < y ? -1 : x > y;
}

/* Whether id is among the n sorted values. */
static bool
sorted_has(const int64 *sorted, int n, int64 id)
{
	return n > 0 && bsearch(&id, sorted, n, sizeof(int64), cmp_int64) != NULL;
}

/*
 * A copy (palloc'd) of the ids of dboid's in-flight set, for a claim to
 * leave out; *n is their number, *room how many more the set can take
 * (OUTBOX_IN_FLIGHT_PER_DATABASE in all). With live_only, only the entries
 * of running relays: a backend (outbox_relay()) need not wait for a
 * release, which only relays make, to take the events of relays that are
 * gone (its claim holds their row locks until its outcomes are in, and a
 * release counts an attempt only where the row still has the claimed
 * count). Without the shared area, or without relays in dboid: none, and
 * room for a full set.
 */
int64 *
OutboxInFlightIds(Oid dboid, bool live_only, int *n, int *room)
{
	LWLock	   *lock;
	OutboxRelaySlot *slot = slot_of(dboid, &lock);
	int64	   *ids;
	int64	   *live = NULL;
	int			nlive = 0;

	*n = 0;
	*room = OUTBOX_IN_FLIGHT_PER_DATABASE;
	if (slot == NULL)
		return palloc(sizeof(int64));
	if (live_only)
		live = OutboxRelayRuns(dboid, &nlive, NULL, NULL);
	ids = palloc(sizeof(int64) * OUTBOX_IN_FLIGHT_PER_DATABASE);
	LWLockAcquire(lock, LW_SHARED);
	if (slot->dboid == dboid)
	{
		for (int i = 0; i < slot->n_in_flight; i++)
		{
			bool		keep = !live_only;

			for (int j = 0; j < nlive && !keep; j++)
				keep = live[j] == slot->in_flight[i].run;
			if (keep)
				ids[(*n)++] = slot->in_flight[i].id;
		}
		*room = OUTBOX_IN_FLIGHT_PER_DATABASE - slot->n_in_flight;
	}
	LWLockRelease(lock);
	return ids;
}

/*
 * Checks n events that a claim has just locked against dboid's in-flight
 * set, and adds those with publish[i] under this relay's run. keep[i] is
 * set false for an event already in the set: a relay whose claim committed
 * after this claim's snapshot holds it (its row lock was gone by the time
 * this claim locked the row). Called in
 * the claim's transaction, before COMMIT: once the row locks are gone, the
 * set is all that keeps other relays away. publish may be NULL (a backend's
 * check, outbox_relay(), which leaves out the events of running relays
 * only, see OutboxInFlightIds). An event that does not fit (the set is
 * full) is dropped too.
 */
void
OutboxInFlightClaim(Oid dboid, const int64 *ids, const bool *publish, int n, bool *keep)
{
	LWLock	   *lock;
	OutboxRelaySlot *slot = slot_of(dboid, &lock);
	int64	   *sorted = palloc(sizeof(int64) * Max(n, 1));
	int64	   *taken = palloc(sizeof(int64) * Max(n, 1));
	int			ntaken = 0;
	int64	   *live = NULL;
	int			nlive = 0;

	for (int i = 0; i < n; i++)
		keep[i] = true;
	if (slot == NULL)
		return;
	if (publish == NULL)
		live = OutboxRelayRuns(dboid, &nlive, NULL, NULL);
	memcpy(sorted, ids, sizeof(int64) * n);
	qsort(sorted, n, sizeof(int64), cmp_int64);

	LWLockAcquire(lock, publish != NULL ? LW_EXCLUSIVE : LW_SHARED);
	if (slot->dboid == dboid)
	{
		for (int i = 0; i < slot->n_in_flight; i++)
		{
			bool		holds = sorted_has(sorted, n, slot->in_flight[i].id);

			/* a backend leaves out the events of running relays only */
			if (holds && publish == NULL)
			{
				holds = false;
				for (int j = 0; j < nlive && !holds; j++)
					holds = live[j] == slot->in_flight[i].run;
			}
			if (holds)
				taken[ntaken++] = slot->in_flight[i].id;
		}
		qsort(taken, ntaken, sizeof(int64), cmp_int64);
		for (int i = 0; i < n; i++)
		{
			if (sorted_has(taken, ntaken, ids[i]))
				keep[i] = false;
			else if (publish != NULL && publish[i])
			{
				if (slot->n_in_flight >= OUTBOX_IN_FLIGHT_PER_DATABASE)
					keep[i] = false;
				else
				{
					slot->in_flight[slot->n_in_flight].id = ids[i];
					slot->in_flight[slot->n_in_flight].run = my_run;
					slot->n_in_flight++;
				}
			}
		}
	}
	LWLockRelease(lock);
	pfree(sorted);
	pfree(taken);
}

/*
 * Takes out of dboid's in-flight set every entry for which gone(entry, arg)
 * is true, in one pass under the set's lock.
 */
static void
remove_entries(Oid dboid, bool (*gone) (const OutboxInFlightEntry *e, const void *arg),
			   const void *arg)
{
	LWLock	   *lock;
	OutboxRelaySlot *slot = slot_of(dboid, &lock);

	if (slot == NULL)
		return;
	LWLockAcquire(lock, LW_EXCLUSIVE);
	for (int i = 0; slot->dboid == dboid && i < slot->n_in_flight;)
	{
		if (gone(&slot->in_flight[i], arg))
			slot->in_flight[i] = slot->in_flight[--slot->n_in_flight];
		else
			i++;
	}
	LWLockRelease(lock);
}

/* ids (sorted) of this relay's run, for remove_entries */
typedef struct SortedIds
{
	const int64 *ids;
	int			n;
} SortedIds;

static bool
mine_among(const OutboxInFlightEntry *e, const void *arg)
{
	const SortedIds *s = arg;

	return e->run == my_run && sorted_has(s->ids, s->n, e->id);
}

/*
 * Takes n events of this relay's run out of dboid's in-flight set: their
 * outcomes are recorded (or their claim did not commit). Must not fail
 * once the outcomes are committed: no ERROR but out of memory.
 */
void
OutboxInFlightRemove(Oid dboid, const int64 *ids, int n)
{
	int64	   *sorted;
	SortedIds	s;

	if (n == 0)
		return;
	sorted = palloc(sizeof(int64) * n);
	memcpy(sorted, ids, sizeof(int64) * n);
	qsort(sorted, n, sizeof(int64), cmp_int64);
	s.ids = sorted;
	s.n = n;
	remove_entries(dboid, mine_among, &s);
	pfree(sorted);
}

/*
 * The runs of dboid's running relays (palloc'd; *n of them), and in *dead
 * those that hold entries of its in-flight set but run no more (*ndead).
 * dead may be NULL.
 */
int64 *
OutboxRelayRuns(Oid dboid, int *n, int64 **dead, int *ndead)
{
	LWLock	   *lock;
	OutboxRelaySlot *slot;
	int64	   *live = palloc(sizeof(int64) * OUTBOX_MAX_RELAYS_PER_DATABASE);

	*n = 0;
	if (dead != NULL)
	{
		*dead = palloc(sizeof(int64) * OUTBOX_IN_FLIGHT_PER_DATABASE);
		*ndead = 0;
	}
	if (shared == NULL)
		return live;
	SpinLockAcquire(&shared->mutex);
	slot = find_slot(dboid, false);
	for (int i = 0; slot != NULL && i < OUTBOX_MAX_RELAYS_PER_DATABASE; i++)
		if (slot->relays[i].pid != 0)
			live[(*n)++] = slot->relays[i].run;
	SpinLockRelease(&shared->mutex);
	if (slot == NULL || dead == NULL)
		return live;

	lock = &in_flight_locks[slot - shared->slots].lock;
	LWLockAcquire(lock, LW_SHARED);
	for (int i = 0; slot->dboid == dboid && i < slot->n_in_flight; i++)
	{
		int64		run = slot->in_flight[i].run;
		bool		known = false;

		for (int j = 0; j < *n && !known; j++)
			known = live[j] == run;
		for (int j = 0; j < *ndead && !known; j++)
			known = (*dead)[j] == run;
		if (!known)
			(*dead)[(*ndead)++] = run;
	}
	LWLockRelease(lock);
	return live;
}

/* runs gone, for remove_entries */
typedef struct Runs
{
	const int64 *runs;
	int			n;
} Runs;

static bool
run_among(const OutboxInFlightEntry *e, const void *arg)
{
	const Runs *r = arg;

	for (int j = 0; j < r->n; j++)
		if (r->runs[j] == e->run)
			return true;
	return false;
}

/*
 * Takes the entries of the n runs in runs (relays that have exited) out of
 * dboid's in-flight set, once their journal rows are released: their
 * events can be claimed again.
 */
void
OutboxInFlightForget(Oid dboid, const int64 *runs, int n)
{
	Runs		r = {runs, n};

	if (n > 0)
		remove_entries(dboid, run_among, &r);
}
