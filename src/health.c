/*-------------------------------------------------------------------------
 *
 * health.c
 *	  What the relays and destinations have done, kept in shared memory so
 *	  that it can be read in SQL: one row per relay (its state, passes,
 *	  outcomes, last error) and one per destination (outcomes, last success
 *	  and failure, a latency histogram).
 *
 * Who writes what. The launcher writes a relay's state while no relay
 * process is attached to the row (starting, restarting at a given time, not
 * started and why); the relay itself writes it while it runs (running,
 * idle) and marks it stopped when it exits. Outcomes are noted by whatever
 * records them (outcome.c and queue.c, in a relay or in a session running
 * outbox_relay())
 * into backend-local totals, which a transaction callback adds to shared
 * memory at COMMIT and drops at abort: the counts follow what the outbox
 * table says, not what was attempted.
 *
 * Locking, after pg_stat_statements: one LWLock guards the two hash
 * tables' membership (shared to find an entry, exclusive to add or remove
 * one), and each entry's counters and texts are guarded by its own
 * spinlock, held only to copy a few fields. Nothing is held across a wait,
 * the network or an allocation. A relay keeps a pointer to its own row: a
 * row with a live pid is never removed.
 *
 * Lifetime: rows survive a relay's restart (the launcher's restart keeps
 * its row) but not a server restart or crash, which reinitialise shared
 * memory. outbox_stats_reset() zeroes a database's relay counters and
 * drops its destination rows. The destination table holds
 * outbox.max_destination_stats rows, first come, first served, whatever
 * database they are of; the outcomes of a destination that finds none
 * (logged once) go into its database's overflow row (an empty name, shown
 * with a NULL destination), of which OVERFLOW_ROWS databases may have one
 * beyond the setting, until a reset frees rows.
 *
 * Latency is the time from an event's created_at (its transaction's start,
 * as now() gave it) to the moment its delivery is recorded, for delivered
 * events only: what a consumer waits, queueing and retries included. It is
 * kept as a histogram with the fixed bounds of latency_bounds_ms[].
 *
 * src/health.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "commands/dbcommands.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "destination.h"
#include "guc.h"
#include "health.h"
#include "shmem.h"

PG_FUNCTION_INFO_V1(outbox_relay_stats);
PG_FUNCTION_INFO_V1(outbox_relay_stats_1_2);
PG_FUNCTION_INFO_V1(outbox_destination_stats);
PG_FUNCTION_INFO_V1(outbox_destination_stats_1_2);
PG_FUNCTION_INFO_V1(outbox_destination_latency);
PG_FUNCTION_INFO_V1(outbox_stats_reset);

#define MAX_RELAY_ROWS (OUTBOX_MAX_RELAYS * OUTBOX_MAX_RELAYS_PER_DATABASE)
#define REASON_BYTES 128

/* Upper bounds of the latency buckets, in ms; a last bucket takes the rest. */
static const double latency_bounds_ms[] = {
	1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
	60000, 300000, 3600000
};

#define NBOUNDS lengthof(latency_bounds_ms)
#define NBUCKETS (NBOUNDS + 1)

typedef enum RelayState
{
	RELAY_NOT_STARTED,
	RELAY_STARTING,
	RELAY_RESTARTING,
	RELAY_RUNNING,
	RELAY_IDLE,
	RELAY_STOPPED
} RelayState;

static const char *const relay_state_names[] = {
	[RELAY_NOT_STARTED] = "not started",
	[RELAY_STARTING] = "starting",
	[RELAY_RESTARTING] = "restarting",
	[RELAY_RUNNING] = "running",
	[RELAY_IDLE] = "idle",
	[RELAY_STOPPED] = "stopped",
};

typedef struct RelayKey
{
	Oid			dboid;
	int			relay_no;
} RelayKey;

typedef struct RelayHealth
{
	RelayKey	key;
	slock_t		mutex;			/* guards every field below */
	NameData	dbname;			/* as the launcher last saw it */
	pid_t		pid;			/* 0: no relay process attached */
	RelayState	state;
	char		reason[REASON_BYTES];	/* why not started */
	TimestampTz next_start;		/* restarting: started again then */
	TimestampTz started_at;		/* the current or last process's start */
	TimestampTz last_exit_at;
	int64		restarts;		/* processes started after the first */
	int64		passes;
	TimestampTz last_pass_at;
	int64		delivered;
	int64		failed;
	char		last_error[OUTBOX_HEALTH_ERROR_BYTES];
	TimestampTz last_error_at;
	TimestampTz failing_since;	/* the first of the steps failing since the
								 * last one that succeeded; 0: none */
	TimestampTz stats_since;	/* the counters began then */
	int			horizon_pid;	/* holds the horizon back (horizon.c): its
								 * pid, -1 a prepared transaction, 0 none */
	TimestampTz horizon_since;	/* its transaction's start */
	int64		held_bytes;		/* what the events it holds in flight cost
								 * (OUTBOX_RELAY_BYTES) */
	TimestampTz memory_full_since;	/* the first of the claims in a row that
									 * left events out for that budget; 0:
									 * the last claim did not */
} RelayHealth;

typedef struct DestKey
{
	Oid			dboid;
	char		name[OUTBOX_HEALTH_NAME_BYTES];	/* zero-padded */
} DestKey;

typedef struct DestCounts
{
	int64		delivered;
	int64		failed;
	int64		deduplicated;	/* of delivered, those the receiver had already */
	int64		dead_lettered;	/* of failed, those that dead-lettered the event */
	TimestampTz last_success_at;
	TimestampTz last_failure_at;
	char		last_error[OUTBOX_HEALTH_ERROR_BYTES];
	int64		latency[NBUCKETS];
} DestCounts;

typedef struct DestHealth
{
	DestKey		key;
	slock_t		mutex;			/* guards counts and stats_since */
	DestCounts	counts;
	TimestampTz stats_since;
} DestHealth;

typedef struct HealthShared
{
	LWLock	   *lock;			/* membership of both hash tables */
	int			ndests;			/* rows of dest_hash but overflow rows; under lock */
	int			noverflow;		/* overflow rows of dest_hash; under lock */
	bool		full_logged;	/* the table was full, and that was logged */
	int			nmissing;		/* databases named but without relays */
	NameData	missing[OUTBOX_MAX_RELAYS];
} HealthShared;

static HealthShared *health = NULL;
static HTAB *relay_hash = NULL;
static HTAB *dest_hash = NULL;

/* This process's relay row, when it is a relay. */
static RelayHealth *my_relay = NULL;
/* Whether its failing_since is set (read without the lock). */
static bool my_relay_failing = false;

/* Outcomes noted in the current transaction, per destination. */
typedef struct PendingDest
{
	DestKey		key;
	DestCounts	counts;
} PendingDest;

static HTAB *pending = NULL;	/* NULL: nothing noted */
static int64 pending_delivered = 0;
static int64 pending_failed = 0;
static bool xact_callback_registered = false;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/*
 * Databases that may have an overflow row beyond outbox.max_destination_stats
 * (see the header); others' outcomes then go to their relays' totals only.
 */
#define OVERFLOW_ROWS 64

/* Rows of the destination table, overflow rows included. */
static long
dest_rows_max(void)
{
	return (long) outbox_max_destination_stats + OVERFLOW_ROWS;
}

/* Size of the area: the header and both tables (shmem_request_hook). */
static Size
health_shmem_size(void)
{
	return add_size(MAXALIGN(sizeof(HealthShared)),
					add_size(hash_estimate_size(MAX_RELAY_ROWS, sizeof(RelayHealth)),
							 hash_estimate_size(dest_rows_max(), sizeof(DestHealth))));
}

/* Asks for the area and its lock; shmem_request_hook, postmaster only. */
static void
health_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(health_shmem_size());
	RequestNamedLWLockTranche("outbox health", 1);
}

/*
 * Creates or attaches to the area; shmem_startup_hook (postmaster, and each
 * process where shared memory is attached rather than inherited).
 */
static void
health_shmem_startup(void)
{
	bool		found;
	HASHCTL		info;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	health = ShmemInitStruct("outbox health", sizeof(HealthShared), &found);
	if (!found)
	{
		memset(health, 0, sizeof(HealthShared));
		health->lock = &(GetNamedLWLockTranche("outbox health"))->lock;
	}
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(RelayKey);
	info.entrysize = sizeof(RelayHealth);
	relay_hash = ShmemInitHash("outbox relay health", MAX_RELAY_ROWS, MAX_RELAY_ROWS,
							   &info, HASH_ELEM | HASH_BLOBS);
	info.keysize = sizeof(DestKey);
	info.entrysize = sizeof(DestHealth);
	dest_hash = ShmemInitHash("outbox destination health",
							  dest_rows_max(), dest_rows_max(),
							  &info, HASH_ELEM | HASH_BLOBS);
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Installs the statistics area's shared-memory hooks. Called from _PG_init
 * in the postmaster only, when the library is being preloaded.
 */
void
OutboxHealthShmemInit(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = health_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = health_shmem_startup;
}

/* Copies src into dst (size bytes), cut at a character boundary. */
static void
clip_copy(char *dst, const char *src, int size)
{
	int			len = pg_mbcliplen(src, strlen(src), size - 1);

	memcpy(dst, src, len);
	dst[len] = '\0';
}

/*
 * The relay row of (dboid, relay_no), added if missing and create is set;
 * NULL when absent or the table is full. Takes and releases the lock.
 */
static RelayHealth *
relay_row(Oid dboid, int relay_no, bool create)
{
	RelayKey	key;
	RelayHealth *r;
	bool		found;

	memset(&key, 0, sizeof(key));
	key.dboid = dboid;
	key.relay_no = relay_no;
	LWLockAcquire(health->lock, LW_SHARED);
	r = hash_search(relay_hash, &key, HASH_FIND, NULL);
	LWLockRelease(health->lock);
	if (r != NULL || !create)
		return r;

	LWLockAcquire(health->lock, LW_EXCLUSIVE);
	r = hash_search(relay_hash, &key, HASH_ENTER_NULL, &found);
	if (r != NULL && !found)
	{
		memset((char *) r + sizeof(RelayKey), 0, sizeof(RelayHealth) - sizeof(RelayKey));
		SpinLockInit(&r->mutex);
		r->state = RELAY_NOT_STARTED;
		r->stats_since = GetCurrentTimestamp();
	}
	LWLockRelease(health->lock);
	return r;
}

/*
 * Records what the launcher knows of relay relay_no of database dboid
 * (named dbname) while no relay process is attached to its row: starting,
 * restarting at next_start, or not started for reason. A row with a live
 * relay is left alone: the relay's own state is newer. Called by the
 * launcher outside any transaction; never raises.
 */
void
OutboxHealthLaunch(Oid dboid, int relay_no, const char *dbname,
				   OutboxLaunchState state, TimestampTz next_start,
				   const char *reason)
{
	RelayHealth *r;

	if (health == NULL)
		return;
	r = relay_row(dboid, relay_no, true);
	if (r == NULL)
		return;
	SpinLockAcquire(&r->mutex);
	namestrcpy(&r->dbname, dbname);
	if (r->pid == 0)
	{
		r->state = state == OUTBOX_LAUNCH_STARTING ? RELAY_STARTING
			: state == OUTBOX_LAUNCH_RESTARTING ? RELAY_RESTARTING
			: RELAY_NOT_STARTED;
		r->next_start = state == OUTBOX_LAUNCH_STARTING ? 0 : next_start;
		strlcpy(r->reason, reason ? reason : "", REASON_BYTES);
	}
	SpinLockRelease(&r->mutex);
}

/*
 * Drops the rows of relays that are no longer wanted: of databases not
 * among the n in keep, or numbered relays_per_database or more, once their
 * process is gone. Called by the launcher after each reconcile.
 */
void
OutboxHealthSweep(const Oid *keep, int n, int relays_per_database)
{
	HASH_SEQ_STATUS seq;
	RelayHealth *r;

	if (health == NULL)
		return;
	LWLockAcquire(health->lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, relay_hash);
	while ((r = hash_seq_search(&seq)) != NULL)
	{
		bool		wanted = false;

		for (int i = 0; i < n && !wanted; i++)
			wanted = keep[i] == r->key.dboid;
		if ((!wanted || r->key.relay_no >= relays_per_database) && r->pid == 0)
			hash_search(relay_hash, &r->key, HASH_REMOVE, NULL);
	}
	LWLockRelease(health->lock);
}

/*
 * Records the names in outbox.databases that have no relay at all (no such
 * database, connections not allowed, over the limit of databases): a List
 * of C strings. Called by the launcher after each reconcile.
 */
void
OutboxHealthMissing(List *names)
{
	ListCell   *lc;

	if (health == NULL)
		return;
	LWLockAcquire(health->lock, LW_EXCLUSIVE);
	health->nmissing = 0;
	foreach(lc, names)
	{
		if (health->nmissing >= OUTBOX_MAX_RELAYS)
			break;
		namestrcpy(&health->missing[health->nmissing++], lfirst(lc));
	}
	LWLockRelease(health->lock);
}

/* on_shmem_exit callback of a relay: its row shows it stopped. */
static void
relay_exit(int code pg_attribute_unused(), Datum arg pg_attribute_unused())
{
	if (my_relay == NULL)
		return;
	SpinLockAcquire(&my_relay->mutex);
	if (my_relay->pid == MyProcPid)
	{
		my_relay->pid = 0;
		my_relay->state = RELAY_STOPPED;
		my_relay->last_exit_at = GetCurrentTimestamp();
	}
	SpinLockRelease(&my_relay->mutex);
	my_relay = NULL;
}

/*
 * Attaches the calling relay worker to its row (added if the launcher has
 * not yet): its pid, start time and state running. Called by the relay
 * once, after it took its slot (OutboxRelayAttach); the row shows it
 * stopped when the process exits.
 */
void
OutboxHealthRelayStarted(Oid dboid, int relay_no)
{
	RelayHealth *r;

	if (health == NULL)
		return;
	r = relay_row(dboid, relay_no, true);
	if (r == NULL)
		return;
	SpinLockAcquire(&r->mutex);
	if (r->started_at != 0)
		r->restarts++;
	r->pid = MyProcPid;
	r->state = RELAY_RUNNING;
	r->reason[0] = '\0';
	r->next_start = 0;
	r->started_at = GetCurrentTimestamp();
	r->held_bytes = 0;
	r->memory_full_since = 0;
	SpinLockRelease(&r->mutex);
	my_relay = r;
	on_shmem_exit(relay_exit, (Datum) 0);
}

/*
 * Marks the calling relay idle (sleeping, nothing in flight) or running.
 * Called by the relay around its sleep; a no-op elsewhere.
 */
void
OutboxHealthRelayIdle(bool idle)
{
	if (my_relay == NULL)
		return;
	SpinLockAcquire(&my_relay->mutex);
	my_relay->state = idle ? RELAY_IDLE : RELAY_RUNNING;
	SpinLockRelease(&my_relay->mutex);
}

/*
 * Counts a pass (a claim that committed) of the calling relay, once its
 * events are handed over. budget_limited: the claim left events out for
 * the relay's memory budget (OUTBOX_RELAY_BYTES), which memory_full_since
 * tells from the first such claim in a row on; held_bytes: what the
 * events the relay holds in flight cost it now. A relay claims at least
 * once per outbox.poll_interval, so these are that fresh for
 * outbox_relay_stats, without a write to shared memory per outcome.
 */
void
OutboxHealthRelayPass(bool budget_limited, Size held_bytes)
{
	TimestampTz now;

	if (my_relay == NULL)
		return;
	now = GetCurrentTimestamp();
	SpinLockAcquire(&my_relay->mutex);
	my_relay->passes++;
	my_relay->last_pass_at = now;
	my_relay->held_bytes = (int64) held_bytes;
	if (!budget_limited)
		my_relay->memory_full_since = 0;
	else if (my_relay->memory_full_since == 0)
		my_relay->memory_full_since = now;
	SpinLockRelease(&my_relay->mutex);
}

/*
 * Records an error the calling relay caught in a step ("could not <what>:
 * <message>", cut to OUTBOX_HEALTH_ERROR_BYTES). Called by the relay after
 * the step's transaction was rolled back, for every error, logged or not.
 */
void
OutboxHealthRelayError(const char *what, const char *message)
{
	char		text[OUTBOX_HEALTH_ERROR_BYTES];
	char	   *full;
	TimestampTz now;

	if (my_relay == NULL)
		return;
	full = psprintf("could not %s: %s", what, message ? message : "unknown error");
	clip_copy(text, full, sizeof(text));
	pfree(full);
	now = GetCurrentTimestamp();
	SpinLockAcquire(&my_relay->mutex);
	memcpy(my_relay->last_error, text, sizeof(text));
	my_relay->last_error_at = now;
	if (my_relay->failing_since == 0)
		my_relay->failing_since = now;
	SpinLockRelease(&my_relay->mutex);
	my_relay_failing = true;
}

/*
 * Records what holds back the horizon of the calling relay's database
 * (horizon.c): pid (-1: a prepared transaction, 0: nothing) and the start
 * of its transaction. Called by the relay; a no-op elsewhere.
 */
void
OutboxHealthRelayHorizon(int pid, TimestampTz since)
{
	if (my_relay == NULL)
		return;
	SpinLockAcquire(&my_relay->mutex);
	my_relay->horizon_pid = pid;
	my_relay->horizon_since = pid != 0 ? since : 0;
	SpinLockRelease(&my_relay->mutex);
}

PG_FUNCTION_INFO_V1(_outbox_horizon);

/*
 * _outbox_horizon(OUT pid integer, OUT since timestamptz) RETURNS SETOF record
 *
 * SQL-callable, for the outbox_status view: what a relay of the current
 * database last found holding back the removal of old row versions for
 * longer than outbox.horizon_warning (horizon.c): a process's pid (NULL
 * for a prepared transaction) and when its transaction began; no row when
 * nothing does, or without shared memory (the library not preloaded), so
 * that outbox_status works there too. For outbox_admin; raises no error.
 */
Datum
_outbox_horizon(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS seq;
	RelayHealth *r;
	int			pid = 0;
	TimestampTz since = 0;

	InitMaterializedSRF(fcinfo, 0);
	if (health == NULL)
		return (Datum) 0;		/* not preloaded: no relay, nothing found */
	LWLockAcquire(health->lock, LW_SHARED);
	hash_seq_init(&seq, relay_hash);
	while ((r = hash_seq_search(&seq)) != NULL)
	{
		if (r->key.dboid != MyDatabaseId)
			continue;
		SpinLockAcquire(&r->mutex);
		if (r->horizon_pid != 0 && r->pid != 0 && (pid == 0 || r->horizon_since < since))
		{
			pid = r->horizon_pid;
			since = r->horizon_since;
		}
		SpinLockRelease(&r->mutex);
	}
	LWLockRelease(health->lock);
	if (pid != 0)
	{
		Datum		values[2] = {Int32GetDatum(pid), TimestampTzGetDatum(since)};
		bool		nulls[2] = {pid < 0, false};

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * Notes that a step of the calling relay succeeded: the failing steps, if
 * any, are over (failing_since cleared). Called by the relay after every
 * step that committed; touches shared memory only after a failure.
 */
void
OutboxHealthRelayStepOk(void)
{
	if (my_relay == NULL || !my_relay_failing)
		return;
	SpinLockAcquire(&my_relay->mutex);
	my_relay->failing_since = 0;
	SpinLockRelease(&my_relay->mutex);
	my_relay_failing = false;
}

/* The bucket of a latency in ms. */
static int
latency_bucket(double ms)
{
	for (int i = 0; i < (int) NBOUNDS; i++)
		if (ms <= latency_bounds_ms[i])
			return i;
	return NBOUNDS;
}

/* Adds the counts in src to dst; the newer times and error win. */
static void
add_counts(DestCounts *dst, const DestCounts *src)
{
	dst->delivered += src->delivered;
	dst->failed += src->failed;
	dst->deduplicated += src->deduplicated;
	dst->dead_lettered += src->dead_lettered;
	dst->last_success_at = Max(dst->last_success_at, src->last_success_at);
	if (src->last_failure_at >= dst->last_failure_at && src->failed > 0)
	{
		dst->last_failure_at = src->last_failure_at;
		memcpy(dst->last_error, src->last_error, sizeof(dst->last_error));
	}
	for (int i = 0; i < (int) NBUCKETS; i++)
		dst->latency[i] += src->latency[i];
}

/* Whether key is a database's overflow row (an empty name). */
static bool
is_overflow(const DestKey *key)
{
	return key->name[0] == '\0';
}

/*
 * The row of key, added if there is room for it: a destination's within
 * outbox.max_destination_stats, an overflow row within OVERFLOW_ROWS.
 * NULL if there is none. The lock is held exclusively.
 */
static DestHealth *
enter_row(const DestKey *key)
{
	bool		overflow = is_overflow(key);
	bool		found;
	DestHealth *d;

	if (overflow ? health->noverflow >= OVERFLOW_ROWS :
		health->ndests >= outbox_max_destination_stats)
		return NULL;
	d = hash_search(dest_hash, key, HASH_ENTER_NULL, &found);
	if (d != NULL && !found)
	{
		memset(&d->counts, 0, sizeof(d->counts));
		SpinLockInit(&d->mutex);
		d->stats_since = GetCurrentTimestamp();
		if (overflow)
			health->noverflow++;
		else
			health->ndests++;
	}
	return d;
}

/*
 * Adds what the committed transaction noted to shared memory. Runs in the
 * COMMIT callback, after the commit record: it must not fail, so it neither
 * allocates in shared memory beyond the table's limit nor raises.
 */
static void
flush_pending(void)
{
	HASH_SEQ_STATUS seq;
	PendingDest *p;
	bool		exclusive = false;
	bool		log_full = false;

	if (pending == NULL)
		goto relay_totals;
	LWLockAcquire(health->lock, LW_SHARED);
	hash_seq_init(&seq, pending);
	while ((p = hash_seq_search(&seq)) != NULL)
	{
		if (hash_search(dest_hash, &p->key, HASH_FIND, NULL) == NULL)
		{
			exclusive = true;
			hash_seq_term(&seq);
			break;
		}
	}
	if (exclusive)
	{
		LWLockRelease(health->lock);
		LWLockAcquire(health->lock, LW_EXCLUSIVE);
	}

	hash_seq_init(&seq, pending);
	while ((p = hash_seq_search(&seq)) != NULL)
	{
		DestHealth *d = hash_search(dest_hash, &p->key, HASH_FIND, NULL);

		if (d == NULL && exclusive)
			d = enter_row(&p->key);
		if (d == NULL && exclusive)
		{
			/* no row for it: its database's overflow row */
			DestKey		overflow;

			memset(&overflow, 0, sizeof(overflow));
			overflow.dboid = p->key.dboid;
			d = hash_search(dest_hash, &overflow, HASH_FIND, NULL);
			if (d == NULL)
				d = enter_row(&overflow);
			if (!health->full_logged)
				log_full = health->full_logged = true;
		}
		if (d == NULL)
			continue;
		SpinLockAcquire(&d->mutex);
		add_counts(&d->counts, &p->counts);
		SpinLockRelease(&d->mutex);
	}
	LWLockRelease(health->lock);

relay_totals:
	if (my_relay != NULL)
	{
		SpinLockAcquire(&my_relay->mutex);
		my_relay->delivered += pending_delivered;
		my_relay->failed += pending_failed;
		SpinLockRelease(&my_relay->mutex);
	}

	/* LOG is written, not thrown: safe after the commit record */
	if (log_full)
		ereport(LOG,
				(errmsg("outbox destination statistics are full"),
				 errdetail("outbox.max_destination_stats is %d; the outcomes of other destinations are counted in their database's overflow row of outbox_destination_stats(), whose destination is NULL.",
						   outbox_max_destination_stats),
				 errhint("Raise outbox.max_destination_stats (a restart is needed), or run outbox_stats_reset() to free the rows of old destinations.")));
}

/* Forgets what the current transaction noted. */
static void
discard_pending(void)
{
	if (pending != NULL)
		hash_destroy(pending);
	pending = NULL;
	pending_delivered = 0;
	pending_failed = 0;
}

/* Transaction callback: outcomes count once their transaction commits. */
static void
health_xact_callback(XactEvent event, void *arg pg_attribute_unused())
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
			if (health != NULL &&
				(pending != NULL || pending_delivered > 0 || pending_failed > 0))
				flush_pending();
			discard_pending();
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			discard_pending();
			break;
		default:
			break;
	}
}

/*
 * Notes the outcome of one attempt of ev, recorded by the caller in the
 * current transaction: delivered when error is NULL (and deduplicated too
 * when its kind set ev->duplicate), else failed with that
 * error: the kind's text without the start of the endpoint's answer that
 * the event's last_error adds (ev->response), as outbox_monitor reads
 * these and an answer may quote the payload. It counts in shared memory when, and only
 * if, the transaction commits. Called by queue.c with a transaction open;
 * a no-op without shared memory (library not preloaded). May raise ERROR
 * (out of memory), like the statement that recorded the outcome.
 */
void
OutboxHealthNote(const OutboxEvent *ev, const char *error)
{
	TimestampTz now;

	if (health == NULL)
		return;
	if (!xact_callback_registered)
	{
		RegisterXactCallback(health_xact_callback, NULL);
		xact_callback_registered = true;
	}
	now = GetCurrentTimestamp();
	if (error == NULL)
		pending_delivered++;
	else
		pending_failed++;
	if (ev->dest.name == NULL)
		return;

	if (pending == NULL)
	{
		HASHCTL		info;

		memset(&info, 0, sizeof(info));
		info.keysize = sizeof(DestKey);
		info.entrysize = sizeof(PendingDest);
		info.hcxt = TopTransactionContext;
		pending = hash_create("outbox pending outcomes", 16, &info,
							  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	{
		DestKey		key;
		PendingDest *p;
		bool		found;

		memset(&key, 0, sizeof(key));
		key.dboid = MyDatabaseId;
		clip_copy(key.name, ev->dest.name, sizeof(key.name));
		p = hash_search(pending, &key, HASH_ENTER, &found);
		if (!found)
			memset(&p->counts, 0, sizeof(p->counts));
		if (error == NULL)
		{
			double		ms = (double) (now - ev->created_at) / 1000.0;

			p->counts.delivered++;
			if (ev->duplicate)
				p->counts.deduplicated++;
			p->counts.last_success_at = now;
			p->counts.latency[latency_bucket(Max(ms, 0.0))]++;
		}
		else
		{
			p->counts.failed++;
			if (ev->dead_lettered)
				p->counts.dead_lettered++;
			p->counts.last_failure_at = now;
			clip_copy(p->counts.last_error, error, sizeof(p->counts.last_error));
		}
	}
}

/*
 * Puts a warning about destination name of the current database in its
 * last_error (outbox_destination_stats), without counting a failure: a
 * kind found something wrong with its setup that does not fail an attempt
 * (a JetStream stream's duplicate window shorter than the retry schedule).
 * Creates the destination's row if there is room. Called by a relay, with
 * or without a transaction; a no-op without shared memory.
 */
void
OutboxHealthDestinationWarning(const char *name, const char *text)
{
	DestKey		key;
	DestHealth *d;

	if (health == NULL)
		return;
	memset(&key, 0, sizeof(key));
	key.dboid = MyDatabaseId;
	clip_copy(key.name, name, sizeof(key.name));
	LWLockAcquire(health->lock, LW_EXCLUSIVE);
	d = hash_search(dest_hash, &key, HASH_FIND, NULL);
	if (d == NULL)
		d = enter_row(&key);
	if (d != NULL)
	{
		SpinLockAcquire(&d->mutex);
		clip_copy(d->counts.last_error, text, sizeof(d->counts.last_error));
		SpinLockRelease(&d->mutex);
	}
	LWLockRelease(health->lock);
}

/* ---------------------------------------------------------------------
 * SQL functions
 * ---------------------------------------------------------------------
 */

/*
 * Raises the errors common to the SQL functions: the library must be
 * preloaded (55000), and showing other databases needs the privileges of
 * pg_read_all_stats (42501), as pg_stat_activity does for other sessions.
 */
static void
check_access(bool all_databases)
{
	if (health == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("outbox must be loaded via \"shared_preload_libraries\" to keep relay statistics")));
	if (all_databases && !has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to read the outbox statistics of other databases"),
				 errdetail("Only roles with privileges of the \"pg_read_all_stats\" role may pass all_databases => true.")));
}

/*
 * Whether the caller may read the error texts of the statistics: a role
 * with the privileges of outbox_admin, who reads the events themselves.
 * Others, outbox_monitor among them, get NULL: an error text can carry
 * what came from outside or from an event (a subject made of an aggregate
 * id, a broker's or a responder's words, a Location header, a step's
 * error), and they are to see counts, times and states only.
 */
static bool
may_read_errors(void)
{
	Oid			admin = get_role_oid("outbox_admin", true);

	return superuser() || (OidIsValid(admin) && has_privs_of_role(GetUserId(), admin));
}

/* A timestamptz Datum, or a NULL in *isnull for 0. */
static Datum
ts_or_null(TimestampTz t, bool *isnull)
{
	*isnull = (t == 0);
	return TimestampTzGetDatum(t);
}

/* A text Datum, or a NULL in *isnull for an empty string. */
static Datum
text_datum_or_null(const char *s, bool *isnull)
{
	*isnull = (s[0] == '\0');
	return *isnull ? (Datum) 0 : CStringGetTextDatum(s);
}

/* The name of a database for the output: its current name, else as kept. */
static Datum
database_name(Oid dboid, const char *kept, bool *isnull)
{
	char	   *name = OidIsValid(dboid) ? get_database_name(dboid) : NULL;
	NameData   *result;

	if (name == NULL && kept != NULL && kept[0] != '\0')
		name = pstrdup(kept);
	*isnull = (name == NULL);
	if (*isnull)
		return (Datum) 0;
	result = palloc(sizeof(NameData));
	namestrcpy(result, name);
	return NameGetDatum(result);
}

/* outbox_relay_stats's columns in 1.2; 1.1 has the first 16 */
#define RELAY_COLS 19

/*
 * Adds a row to outbox_relay_stats for each name in outbox.databases that
 * has no relay: state "not started", and why.
 */
static void
put_missing(ReturnSetInfo *rsinfo, const NameData *missing, int nmissing)
{
	for (int i = 0; i < nmissing; i++)
	{
		Datum		values[RELAY_COLS];
		bool		nulls[RELAY_COLS];

		memset(nulls, true, sizeof(nulls));
		values[0] = NameGetDatum(&missing[i]);
		nulls[0] = false;
		values[3] = CStringGetTextDatum(relay_state_names[RELAY_NOT_STARTED]);
		nulls[3] = false;
		values[4] = CStringGetTextDatum(psprintf("no such database, it does not allow connections, or more than %d databases have relays",
												 OUTBOX_MAX_RELAYS));
		nulls[4] = false;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}

/*
 * The rows of outbox_relay_stats, with its 16 columns of 1.1 or, with
 * memory, the 19 of 1.2 (held_bytes, memory_budget and memory_full_since
 * last).
 */
static Datum
relay_stats(FunctionCallInfo fcinfo, bool memory)
{
	bool		all = !PG_ARGISNULL(0) && PG_GETARG_BOOL(0);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RelayHealth *rows;
	int			nrows = 0;
	NameData   *missing;
	int			nmissing;
	HASH_SEQ_STATUS seq;
	RelayHealth *r;
	bool		errors = may_read_errors();

	check_access(all);
	InitMaterializedSRF(fcinfo, 0);
	if (rsinfo->setDesc->natts != (memory ? RELAY_COLS : RELAY_COLS - 3))
		elog(ERROR, "outbox_relay_stats has %d columns, expected %d",
			 rsinfo->setDesc->natts, memory ? RELAY_COLS : RELAY_COLS - 3);

	rows = palloc(sizeof(RelayHealth) * MAX_RELAY_ROWS);
	missing = palloc(sizeof(NameData) * OUTBOX_MAX_RELAYS);
	LWLockAcquire(health->lock, LW_SHARED);
	hash_seq_init(&seq, relay_hash);
	while ((r = hash_seq_search(&seq)) != NULL)
	{
		if (!all && r->key.dboid != MyDatabaseId)
			continue;
		SpinLockAcquire(&r->mutex);
		memcpy(&rows[nrows++], r, sizeof(RelayHealth));
		SpinLockRelease(&r->mutex);
	}
	nmissing = all ? health->nmissing : 0;
	memcpy(missing, health->missing, sizeof(NameData) * nmissing);
	LWLockRelease(health->lock);

	for (int i = 0; i < nrows; i++)
	{
		Datum		values[RELAY_COLS];
		bool		nulls[RELAY_COLS];

		r = &rows[i];
		memset(nulls, 0, sizeof(nulls));
		values[0] = database_name(r->key.dboid, NameStr(r->dbname), &nulls[0]);
		values[1] = Int32GetDatum(r->key.relay_no);
		values[2] = Int32GetDatum(r->pid);
		nulls[2] = (r->pid == 0);
		values[3] = CStringGetTextDatum(relay_state_names[r->state]);
		values[4] = text_datum_or_null(r->reason, &nulls[4]);
		values[5] = ts_or_null(r->state == RELAY_RESTARTING || r->state == RELAY_NOT_STARTED
							   ? r->next_start : 0, &nulls[5]);
		values[6] = ts_or_null(r->started_at, &nulls[6]);
		values[7] = Int64GetDatum(r->restarts);
		values[8] = Int64GetDatum(r->passes);
		values[9] = ts_or_null(r->last_pass_at, &nulls[9]);
		values[10] = Int64GetDatum(r->delivered);
		values[11] = Int64GetDatum(r->failed);
		values[12] = text_datum_or_null(errors ? r->last_error : "", &nulls[12]);
		values[13] = ts_or_null(r->last_error_at, &nulls[13]);
		values[14] = ts_or_null(r->failing_since, &nulls[14]);
		values[15] = ts_or_null(r->stats_since, &nulls[15]);
		/* what a relay not running holds is nothing */
		values[16] = Int64GetDatum(r->pid != 0 ? r->held_bytes : 0);
		values[17] = Int64GetDatum((int64) OUTBOX_RELAY_BYTES);
		values[18] = ts_or_null(r->pid != 0 ? r->memory_full_since : 0, &nulls[18]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	put_missing(rsinfo, missing, nmissing);
	return (Datum) 0;
}

/*
 * outbox_relay_stats(all_databases boolean DEFAULT false) RETURNS SETOF record
 *
 * SQL-callable, 1.1's definition (kept for a database not updated yet):
 * one row per relay of the current database (every database with
 * all_databases, which also lists names in outbox.databases that have no
 * relay): database, relay, pid, state, reason, next_start, started_at,
 * restarts, passes, last_pass_at, delivered, failed, last_error,
 * last_error_at, failing_since (set while its steps keep failing: a stall
 * to alert on), stats_since. For outbox_admin and outbox_monitor
 * (last_error NULL unless may_read_errors); errors in check_access.
 */
Datum
outbox_relay_stats(PG_FUNCTION_ARGS)
{
	return relay_stats(fcinfo, false);
}

/*
 * outbox_relay_stats(all_databases boolean DEFAULT false) RETURNS SETOF record
 *
 * SQL-callable, 1.2's definition: the columns of 1.1's, then held_bytes
 * (what the events the relay holds in flight cost it now, 0 while it does
 * not run), memory_budget (OUTBOX_RELAY_BYTES, the most it holds) and
 * memory_full_since (since when its claims leave events out for that
 * budget; NULL when the last one did not).
 * Runs in any backend; errors in check_access.
 */
Datum
outbox_relay_stats_1_2(PG_FUNCTION_ARGS)
{
	return relay_stats(fcinfo, true);
}

/*
 * Copies the destination rows to show (the current database's, or all),
 * into memory allocated under the lock for the rows there are (an
 * out-of-memory ERROR releases the lock, as any error does).
 */
static DestHealth *
copy_dests(bool all, int *n)
{
	DestHealth *rows;
	HASH_SEQ_STATUS seq;
	DestHealth *d;
	long		cap;

	*n = 0;
	LWLockAcquire(health->lock, LW_SHARED);
	/* the rows there are now, not the table's room (up to 100,064 rows) */
	cap = Max(hash_get_num_entries(dest_hash), 1);
	rows = palloc_extended(sizeof(DestHealth) * cap, MCXT_ALLOC_HUGE);
	hash_seq_init(&seq, dest_hash);
	while ((d = hash_seq_search(&seq)) != NULL)
	{
		if (!all && d->key.dboid != MyDatabaseId)
			continue;
		if (*n >= cap)
		{
			hash_seq_term(&seq);
			break;
		}
		SpinLockAcquire(&d->mutex);
		memcpy(&rows[(*n)++], d, sizeof(DestHealth));
		SpinLockRelease(&d->mutex);
	}
	LWLockRelease(health->lock);
	return rows;
}

/*
 * The q-quantile (0 < q < 1) of a latency histogram, in ms, estimated by
 * linear interpolation within the bucket where it falls (as Prometheus's
 * histogram_quantile does); the last bucket, unbounded, gives its lower
 * bound. NULL (false) without deliveries.
 */
static bool
latency_quantile(const int64 *buckets, double q, double *ms)
{
	int64		total = 0;
	double		rank;
	int64		below = 0;

	for (int i = 0; i < (int) NBUCKETS; i++)
		total += buckets[i];
	if (total == 0)
		return false;
	rank = q * (double) total;
	for (int i = 0; i < (int) NBUCKETS; i++)
	{
		double		lo = i == 0 ? 0.0 : latency_bounds_ms[i - 1];

		if (buckets[i] > 0 && (double) (below + buckets[i]) >= rank)
		{
			if (i == (int) NBOUNDS)
				*ms = lo;
			else
				*ms = lo + (latency_bounds_ms[i] - lo) * (rank - (double) below) / (double) buckets[i];
			return true;
		}
		below += buckets[i];
	}
	*ms = latency_bounds_ms[NBOUNDS - 1];
	return true;
}

/*
 * The rows of outbox_destination_stats, with its 10 columns of 1.1 or,
 * with deduplicated, the 12 of 1.2 (deduplicated and dead_lettered last).
 */
static Datum
destination_stats(FunctionCallInfo fcinfo, bool deduplicated)
{
#define DEST_COLS 12
	bool		all = !PG_ARGISNULL(0) && PG_GETARG_BOOL(0);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	DestHealth *rows;
	int			n;
	bool		errors = may_read_errors();

	check_access(all);
	InitMaterializedSRF(fcinfo, 0);
	if (rsinfo->setDesc->natts != (deduplicated ? DEST_COLS : DEST_COLS - 2))
		elog(ERROR, "outbox_destination_stats has %d columns, expected %d",
			 rsinfo->setDesc->natts, deduplicated ? DEST_COLS : DEST_COLS - 2);
	rows = copy_dests(all, &n);
	for (int i = 0; i < n; i++)
	{
		DestHealth *d = &rows[i];
		Datum		values[DEST_COLS];
		bool		nulls[DEST_COLS];
		double		ms;

		memset(nulls, 0, sizeof(nulls));
		values[0] = database_name(d->key.dboid, NULL, &nulls[0]);
		values[1] = CStringGetTextDatum(d->key.name);
		nulls[1] = is_overflow(&d->key);
		values[2] = Int64GetDatum(d->counts.delivered);
		values[3] = Int64GetDatum(d->counts.failed);
		values[4] = ts_or_null(d->counts.last_success_at, &nulls[4]);
		values[5] = ts_or_null(d->counts.last_failure_at, &nulls[5]);
		values[6] = text_datum_or_null(errors ? d->counts.last_error : "", &nulls[6]);
		nulls[7] = !latency_quantile(d->counts.latency, 0.5, &ms);
		values[7] = Float8GetDatum(nulls[7] ? 0.0 : ms);
		nulls[8] = !latency_quantile(d->counts.latency, 0.99, &ms);
		values[8] = Float8GetDatum(nulls[8] ? 0.0 : ms);
		values[9] = ts_or_null(d->stats_since, &nulls[9]);
		values[10] = Int64GetDatum(d->counts.deduplicated);
		values[11] = Int64GetDatum(d->counts.dead_lettered);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * outbox_destination_stats(all_databases boolean DEFAULT false) RETURNS SETOF record
 *
 * SQL-callable, 1.1's definition (kept for a database not updated yet):
 * one row per destination with outcomes in the current database (every
 * database with all_databases): database, destination, delivered, failed,
 * last_success_at, last_failure_at, last_error, latency_p50_ms,
 * latency_p99_ms, stats_since. For outbox_admin and outbox_monitor
 * (last_error NULL unless may_read_errors); errors in check_access.
 */
Datum
outbox_destination_stats(PG_FUNCTION_ARGS)
{
	return destination_stats(fcinfo, false);
}

/*
 * outbox_destination_stats(all_databases boolean DEFAULT false) RETURNS SETOF record
 *
 * SQL-callable, 1.2's definition: the columns of 1.1's, then
 * deduplicated (deliveries the receiver already had, among delivered) and
 * dead_lettered (failed attempts that dead-lettered their event, among
 * failed).
 * Runs in any backend; errors in check_access.
 */
Datum
outbox_destination_stats_1_2(PG_FUNCTION_ARGS)
{
	return destination_stats(fcinfo, true);
}

/*
 * outbox_destination_latency(all_databases boolean DEFAULT false) RETURNS SETOF record
 *
 * SQL-callable: the latency histogram of each destination as cumulative
 * buckets, in the shape Prometheus expects: database, destination, le_ms
 * (the bucket's upper bound, Infinity for the last), count (deliveries at
 * most that late). For outbox_admin; errors in check_access.
 */
Datum
outbox_destination_latency(PG_FUNCTION_ARGS)
{
	bool		all = !PG_ARGISNULL(0) && PG_GETARG_BOOL(0);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	DestHealth *rows;
	int			n;

	check_access(all);
	InitMaterializedSRF(fcinfo, 0);
	rows = copy_dests(all, &n);
	for (int i = 0; i < n; i++)
	{
		DestHealth *d = &rows[i];
		int64		cumulative = 0;
		bool		dbnull;
		Datum		db = database_name(d->key.dboid, NULL, &dbnull);
		Datum		name = CStringGetTextDatum(d->key.name);

		for (int b = 0; b < (int) NBUCKETS; b++)
		{
			Datum		values[4];
			bool		nulls[4] = {dbnull, is_overflow(&d->key), false, false};

			cumulative += d->counts.latency[b];
			values[0] = db;
			values[1] = name;
			values[2] = Float8GetDatum(b < (int) NBOUNDS ? latency_bounds_ms[b]
									   : get_float8_infinity());
			values[3] = Int64GetDatum(cumulative);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	return (Datum) 0;
}

/*
 * outbox_stats_reset() RETURNS void
 *
 * SQL-callable: zeroes the counters, passes and last errors of the current
 * database's relays (their state stays) and drops its destination rows.
 * For outbox_admin; 55000 without the preloaded library.
 */
Datum
outbox_stats_reset(PG_FUNCTION_ARGS pg_attribute_unused())
{
	HASH_SEQ_STATUS seq;
	RelayHealth *r;
	DestHealth *d;
	TimestampTz now = GetCurrentTimestamp();

	check_access(false);
	LWLockAcquire(health->lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, relay_hash);
	while ((r = hash_seq_search(&seq)) != NULL)
	{
		if (r->key.dboid != MyDatabaseId)
			continue;
		SpinLockAcquire(&r->mutex);
		r->restarts = 0;
		r->passes = 0;
		r->last_pass_at = 0;
		r->delivered = 0;
		r->failed = 0;
		r->last_error[0] = '\0';
		r->last_error_at = 0;
		r->stats_since = now;
		SpinLockRelease(&r->mutex);
	}
	hash_seq_init(&seq, dest_hash);
	while ((d = hash_seq_search(&seq)) != NULL)
	{
		if (d->key.dboid != MyDatabaseId)
			continue;
		if (is_overflow(&d->key))
			health->noverflow--;
		else
			health->ndests--;
		hash_search(dest_hash, &d->key, HASH_REMOVE, NULL);
	}
	health->full_logged = false;
	LWLockRelease(health->lock);
	PG_RETURN_VOID();
}
