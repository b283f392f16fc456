/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  The relays' registry in shared memory: one slot per database with
 *	  relays, holding each relay's pid, latch and run, and a separate table
 *	  of pauses.
 *
 * Backends read a slot to wake the relay of their database at COMMIT; the
 * relay fills it in when it starts and clears it when it exits. The DROP
 * DATABASE guard (dropdb_guard.c) writes a pause, which keeps a database's relay
 * from starting, into the pause table, never into a slot: a pause lasts
 * until the end of its command's transaction (and no longer than the time
 * it was set for) and belongs to the backend that set it, and since only
 * relay databases are ever paused, no one can use pauses to take the slots
 * that relays need.
 * All of this is a handful of fields, so one spinlock protects the whole
 * area; nothing is done while holding it but copying those fields.
 *
 * A slot's number also numbers its database's in-flight set (in_flight.c),
 * an area of its own with its own locks.
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

#include "shmem.h"

typedef struct OutboxRelayProc
{
	pid_t		pid;			/* 0: no relay running */
	Latch	   *latch;			/* the relay's MyLatch, NULL when not running */
	int64		run;			/* the running relay's run (OutboxRelayRun) */
} OutboxRelayProc;

typedef struct OutboxRelaySlot
{
	Oid			dboid;			/* InvalidOid: free */
	OutboxRelayProc relays[OUTBOX_MAX_RELAYS_PER_DATABASE];	/* by number */
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
	LWLockRelease(AddinShmemInitLock);
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
 * database to itself (DROP DATABASE and the like, dropdb_guard.c), only for a
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

/*
 * The run of this relay process: a random non-zero number drawn by
 * OutboxRelayAttach, which also names its rows in the outbox_in_flight
 * journal and its entries in the in-flight set; 0 in any other process.
 */
int64
OutboxRelayRun(void)
{
	return my_run;
}

/*
 * The runs of dboid's running relays (palloc'd; *n of them), and in
 * *slot_no the number of its slot (-1 if it has none), which also numbers
 * its in-flight set (in_flight.c). The slot stays dboid's while a relay of
 * it runs; a backend may read one that is being taken for another
 * database, which costs it no more than a wrong exclusion of a few events
 * for one claim.
 */
int64 *
OutboxRelayLiveRuns(Oid dboid, int *n, int *slot_no)
{
	OutboxRelaySlot *slot;
	int64	   *live = palloc(sizeof(int64) * OUTBOX_MAX_RELAYS_PER_DATABASE);

	*n = 0;
	*slot_no = -1;
	if (shared == NULL)
		return live;
	SpinLockAcquire(&shared->mutex);
	slot = find_slot(dboid, false);
	for (int i = 0; slot != NULL && i < OUTBOX_MAX_RELAYS_PER_DATABASE; i++)
		if (slot->relays[i].pid != 0)
			live[(*n)++] = slot->relays[i].run;
	SpinLockRelease(&shared->mutex);
	if (slot != NULL)
		*slot_no = slot - shared->slots;
	return live;
}
