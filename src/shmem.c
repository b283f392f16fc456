/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  The small shared-memory area of the extension: one slot per database
 *	  with a relay, holding the relay's pid and latch.
 *
 * Backends read a slot to wake the relay of their database at COMMIT; the
 * DROP DATABASE guard (utility.c) writes a pause into it; the relay fills it
 * in when it starts and clears it when it exits. All of this is a handful of
 * fields, so one spinlock protects the whole area; nothing is done while
 * holding it but copying those fields.
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
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "shmem.h"

typedef struct OutboxRelaySlot
{
	Oid			dboid;			/* InvalidOid: free */
	pid_t		pid;			/* 0: no relay running */
	Latch	   *latch;			/* the relay's MyLatch, NULL when not running */
	TimestampTz paused_until;	/* launcher must not start a relay before */
} OutboxRelaySlot;

typedef struct OutboxShared
{
	slock_t		mutex;
	OutboxRelaySlot slots[OUTBOX_MAX_RELAYS];
} OutboxShared;

static OutboxShared *shared = NULL;
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

/*
 * Finds the slot of dboid, or claims a free one when create is set; NULL if
 * there is none. A slot is free when its relay is gone and no pause is in
 * force. Caller holds the spinlock.
 */
static OutboxRelaySlot *
find_slot(Oid dboid, bool create, TimestampTz now)
{
	OutboxRelaySlot *free_slot = NULL;

	for (int i = 0; i < OUTBOX_MAX_RELAYS; i++)
	{
		OutboxRelaySlot *slot = &shared->slots[i];

		if (slot->dboid == dboid)
			return slot;
		if (free_slot == NULL &&
			(slot->dboid == InvalidOid ||
			 (slot->pid == 0 && slot->paused_until <= now)))
			free_slot = slot;
	}
	if (create && free_slot != NULL)
	{
		free_slot->dboid = dboid;
		free_slot->pid = 0;
		free_slot->latch = NULL;
		free_slot->paused_until = 0;
	}
	return create ? free_slot : NULL;
}

/* on_shmem_exit callback of a relay: clears its pid and latch. */
static void
relay_detach(int code pg_attribute_unused(), Datum arg)
{
	Oid			dboid = DatumGetObjectId(arg);
	OutboxRelaySlot *slot;

	SpinLockAcquire(&shared->mutex);
	slot = find_slot(dboid, false, 0);
	if (slot != NULL && slot->pid == MyProcPid)
	{
		slot->pid = 0;
		slot->latch = NULL;
	}
	SpinLockRelease(&shared->mutex);
}

/*
 * Publishes the calling relay worker's latch for its database, so that
 * committing backends can wake it; the slot is cleared at process exit.
 * Called once by the relay after it connected. Returns false, taking
 * nothing, when another relay already serves the database (one left running
 * by a launcher that was restarted) or a pause is in force (a DROP DATABASE
 * is under way); the caller then exits. Raises ERROR when all slots are
 * taken (more than OUTBOX_MAX_RELAYS databases).
 */
bool
OutboxRelayAttach(Oid dboid)
{
	OutboxRelaySlot *slot;
	bool		attached = false;
	TimestampTz now = GetCurrentTimestamp();

	SpinLockAcquire(&shared->mutex);
	slot = find_slot(dboid, true, now);
	if (slot != NULL && slot->pid == 0 && slot->paused_until <= now)
	{
		slot->pid = MyProcPid;
		slot->latch = MyLatch;
		attached = true;
	}
	SpinLockRelease(&shared->mutex);

	if (slot == NULL)
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
 * The pid of the relay serving dboid, or 0. A slot's pid is cleared when its
 * relay exits (and all of shared memory is reset by a crash restart), so a
 * pid here is a live relay. Called by the launcher to adopt relays that a
 * previous launcher started.
 */
pid_t
OutboxRelayPid(Oid dboid)
{
	OutboxRelaySlot *slot;
	pid_t		pid = 0;

	SpinLockAcquire(&shared->mutex);
	slot = find_slot(dboid, false, 0);
	if (slot != NULL)
		pid = slot->pid;
	SpinLockRelease(&shared->mutex);
	return pid;
}

/*
 * Sends SIGTERM to every running relay whose database is not among the n in
 * keep: relays of databases removed from outbox.databases, including those
 * a previous launcher started (which the current one has no handle for).
 * Called by the launcher.
 */
void
OutboxStopRelaysExcept(const Oid *keep, int n)
{
	pid_t		doomed[OUTBOX_MAX_RELAYS];
	int			ndoomed = 0;

	SpinLockAcquire(&shared->mutex);
	for (int i = 0; i < OUTBOX_MAX_RELAYS; i++)
	{
		OutboxRelaySlot *slot = &shared->slots[i];
		bool		wanted = false;

		if (slot->pid == 0)
			continue;
		for (int j = 0; j < n && !wanted; j++)
			wanted = keep[j] == slot->dboid;
		if (!wanted)
			doomed[ndoomed++] = slot->pid;
	}
	SpinLockRelease(&shared->mutex);

	for (int i = 0; i < ndoomed; i++)
		kill(doomed[i], SIGTERM);
}

/*
 * Sets the latch of the relay of dboid, if one runs. Called by any backend at
 * COMMIT of a transaction that emitted (emit.c), so it must not fail: no
 * allocation, no ERROR. A no-op without the shared area.
 */
void
OutboxWakeRelay(Oid dboid)
{
	OutboxRelaySlot *slot;
	Latch	   *latch = NULL;

	if (shared == NULL)
		return;

	SpinLockAcquire(&shared->mutex);
	slot = find_slot(dboid, false, 0);
	if (slot != NULL)
		latch = slot->latch;
	SpinLockRelease(&shared->mutex);

	/* A latch of an exited process is still valid memory: a spurious wake. */
	if (latch != NULL)
		SetLatch(latch);
}

/*
 * Stops the relay of dboid, if any, and keeps the launcher from starting one
 * for pause_ms milliseconds. Called by a backend about to run a command that
 * needs the database to itself (DROP DATABASE and the like, utility.c); the
 * command's own wait for other sessions to leave covers the relay's exit.
 */
void
OutboxPauseRelay(Oid dboid, int pause_ms)
{
	OutboxRelaySlot *slot;
	pid_t		pid = 0;
	TimestampTz now = GetCurrentTimestamp();

	if (shared == NULL)
		return;

	SpinLockAcquire(&shared->mutex);
	slot = find_slot(dboid, true, now);
	if (slot != NULL)
	{
		slot->paused_until = TimestampTzPlusMilliseconds(now, pause_ms);
		pid = slot->pid;
	}
	SpinLockRelease(&shared->mutex);

	if (pid != 0)
		kill(pid, SIGTERM);
}

/* True while a pause set by OutboxPauseRelay is in force; launcher only. */
bool
OutboxRelayPaused(Oid dboid)
{
	OutboxRelaySlot *slot;
	bool		paused = false;
	TimestampTz now = GetCurrentTimestamp();

	SpinLockAcquire(&shared->mutex);
	slot = find_slot(dboid, false, 0);
	if (slot != NULL)
		paused = slot->paused_until > now;
	SpinLockRelease(&shared->mutex);
	return paused;
}
