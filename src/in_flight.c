/*-------------------------------------------------------------------------
 *
 * in_flight.c
 *	  The in-flight sets in shared memory: per database, the ids of the
 *	  events that a relay has handed to a kind that sends after COMMIT and
 *	  whose outcome is not recorded yet, each with the run of the relay
 *	  that holds it.
 *
 * No relay claims an event in the set, so the claim itself writes nothing
 * to the event's row (claim.c). A set is filled in the claim's transaction,
 * before COMMIT, and each claim checks the rows it locked against it again:
 * a claim whose snapshot predates another relay's COMMIT can still lock
 * that relay's rows. An entry outlives the relay that holds it: a relay
 * that exits leaves its events in the set until another one has counted
 * their cut-off attempts (OutboxInFlightForget); a crash restart clears
 * everything, and the first relay to start counts them all (journal.c).
 *
 * Set number i belongs to the database of relay slot i (shmem.c). Each
 * set has an LWLock of its own, as a claim copies it whole; a set found
 * under another database's OID was left by a database whose relays are
 * all gone, and is empty for the new one.
 *
 * The area exists only when the library is in shared_preload_libraries;
 * without it every set is empty, with room for a full one.
 *
 * src/in_flight.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "shmem.h"
#include "sorted_ids.h"

/* An event in flight, and the run of the relay that holds it. */
typedef struct InFlightEntry
{
	int64		id;
	int64		run;
} InFlightEntry;

typedef struct InFlightSet
{
	Oid			dboid;			/* the database whose entries these are */
	int			n;
	InFlightEntry entries[OUTBOX_IN_FLIGHT_PER_DATABASE];
} InFlightSet;

static InFlightSet *sets = NULL;	/* OUTBOX_MAX_RELAYS of them */
static LWLockPadded *locks = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* Asks for the sets and their locks (shmem_request_hook, postmaster). */
static void
in_flight_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(mul_size(sizeof(InFlightSet), OUTBOX_MAX_RELAYS));
	RequestNamedLWLockTranche("outbox in flight", OUTBOX_MAX_RELAYS);
}

/* Creates or attaches to the sets (shmem_startup_hook). */
static void
in_flight_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	sets = ShmemInitStruct("outbox in flight",
						   mul_size(sizeof(InFlightSet), OUTBOX_MAX_RELAYS), &found);
	if (!found)
		memset(sets, 0, mul_size(sizeof(InFlightSet), OUTBOX_MAX_RELAYS));
	locks = GetNamedLWLockTranche("outbox in flight");
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Installs the shared-memory hooks of the sets. Called from _PG_init in the
 * postmaster only, when the library is being preloaded.
 */
void
OutboxInFlightShmemInit(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = in_flight_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = in_flight_shmem_startup;
}

/*
 * The set of dboid and its lock, or NULL without the area or without a
 * relay slot for dboid; *live (palloc'd, *nlive) gets the runs of its
 * running relays.
 */
static InFlightSet *
set_of(Oid dboid, LWLock **lock, int64 **live, int *nlive)
{
	int			slot_no;

	*live = OutboxRelayLiveRuns(dboid, nlive, &slot_no);
	if (sets == NULL || slot_no < 0)
		return NULL;
	*lock = &locks[slot_no].lock;
	return &sets[slot_no];
}

/* Whether run is among the n in runs. */
static bool
run_in(int64 run, const int64 *runs, int n)
{
	for (int j = 0; j < n; j++)
		if (runs[j] == run)
			return true;
	return false;
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
	int64	   *live;
	int			nlive;
	InFlightSet *set = set_of(dboid, &lock, &live, &nlive);
	int64	   *ids;

	*n = 0;
	*room = OUTBOX_IN_FLIGHT_PER_DATABASE;
	if (set == NULL)
		return palloc(sizeof(int64));
	ids = palloc(sizeof(int64) * OUTBOX_IN_FLIGHT_PER_DATABASE);
	LWLockAcquire(lock, LW_SHARED);
	if (set->dboid == dboid)
	{
		for (int i = 0; i < set->n; i++)
			if (!live_only || run_in(set->entries[i].run, live, nlive))
				ids[(*n)++] = set->entries[i].id;
		*room = OUTBOX_IN_FLIGHT_PER_DATABASE - set->n;
	}
	LWLockRelease(lock);
	return ids;
}

/*
 * Checks n events that a claim has just locked against dboid's in-flight
 * set, and adds those with publish[i] under this relay's run. keep[i] is
 * set false for an event already in the set: a relay whose claim committed
 * after this claim's snapshot holds it (its row lock was gone by the time
 * this claim locked the row). Called in the claim's transaction, before
 * COMMIT: once the row locks are gone, the set is all that keeps other
 * relays away. publish may be NULL (a backend's check, outbox_relay(),
 * which leaves out the events of running relays only, see
 * OutboxInFlightIds). An event that does not fit (the set is full) is
 * dropped too.
 */
void
OutboxInFlightClaim(Oid dboid, const int64 *ids, const bool *publish, int n, bool *keep)
{
	LWLock	   *lock;
	int64	   *live;
	int			nlive;
	InFlightSet *set = set_of(dboid, &lock, &live, &nlive);
	int64	   *sorted = palloc(sizeof(int64) * Max(n, 1));
	int64	   *taken = palloc(sizeof(int64) * Max(n, 1));
	int			ntaken = 0;

	for (int i = 0; i < n; i++)
		keep[i] = true;
	if (set == NULL)
		return;
	memcpy(sorted, ids, sizeof(int64) * n);
	qsort(sorted, n, sizeof(int64), OutboxCmpInt64);

	LWLockAcquire(lock, publish != NULL ? LW_EXCLUSIVE : LW_SHARED);
	if (set->dboid != dboid && publish != NULL)
	{
		/* left by a database whose relays are all gone */
		set->dboid = dboid;
		set->n = 0;
	}
	if (set->dboid == dboid)
	{
		for (int i = 0; i < set->n; i++)
		{
			/* a backend leaves out the events of running relays only */
			if (OutboxSortedHas(sorted, n, set->entries[i].id) &&
				(publish != NULL || run_in(set->entries[i].run, live, nlive)))
				taken[ntaken++] = set->entries[i].id;
		}
		qsort(taken, ntaken, sizeof(int64), OutboxCmpInt64);
		for (int i = 0; i < n; i++)
		{
			if (OutboxSortedHas(taken, ntaken, ids[i]))
				keep[i] = false;
			else if (publish != NULL && publish[i])
			{
				if (set->n >= OUTBOX_IN_FLIGHT_PER_DATABASE)
					keep[i] = false;
				else
				{
					set->entries[set->n].id = ids[i];
					set->entries[set->n].run = OutboxRelayRun();
					set->n++;
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
remove_entries(Oid dboid, bool (*gone) (const InFlightEntry *e, const void *arg),
			   const void *arg)
{
	LWLock	   *lock;
	int64	   *live;
	int			nlive;
	InFlightSet *set = set_of(dboid, &lock, &live, &nlive);

	if (set == NULL)
		return;
	LWLockAcquire(lock, LW_EXCLUSIVE);
	for (int i = 0; set->dboid == dboid && i < set->n;)
	{
		if (gone(&set->entries[i], arg))
			set->entries[i] = set->entries[--set->n];
		else
			i++;
	}
	LWLockRelease(lock);
	pfree(live);
}

/* ids (sorted) of this relay's run, for remove_entries */
typedef struct SortedIds
{
	const int64 *ids;
	int			n;
} SortedIds;

static bool
mine_among(const InFlightEntry *e, const void *arg)
{
	const SortedIds *s = arg;

	return e->run == OutboxRelayRun() && OutboxSortedHas(s->ids, s->n, e->id);
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
	qsort(sorted, n, sizeof(int64), OutboxCmpInt64);
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
	int64	   *live;
	InFlightSet *set = set_of(dboid, &lock, &live, n);

	if (dead == NULL)
		return live;
	*dead = palloc(sizeof(int64) * OUTBOX_IN_FLIGHT_PER_DATABASE);
	*ndead = 0;
	if (set == NULL)
		return live;
	LWLockAcquire(lock, LW_SHARED);
	for (int i = 0; set->dboid == dboid && i < set->n; i++)
	{
		int64		run = set->entries[i].run;

		if (!run_in(run, live, *n) && !run_in(run, *dead, *ndead))
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
run_among(const InFlightEntry *e, const void *arg)
{
	const Runs *r = arg;

	return run_in(e->run, r->runs, r->n);
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
