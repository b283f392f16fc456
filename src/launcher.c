/*-------------------------------------------------------------------------
 *
 * launcher.c
 *	  The launcher: a static background worker that keeps one relay worker
 *	  running for each database named in outbox.databases.
 *
 * The launcher connects to no database (shared catalogs only), so it can
 * look databases up in pg_database without depending on any one of them.
 * It reconciles on start, on reload (SIGHUP), when one of its relays starts
 * or stops (it is their bgw_notify_pid), and every LAUNCHER_NAP_MS to notice
 * databases created later. A relay that exits is started again after
 * RELAY_RESTART_DELAY_MS, doubling up to a minute while relays keep exiting
 * quickly; one for a database that is being dropped is held back while the
 * pause set by dropdb_guard.c is in force. Relays are dynamic workers that the
 * postmaster never restarts by itself, so the launcher alone decides; the
 * launcher itself is restarted by the postmaster.
 *
 * src/launcher.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "guc.h"
#include "health.h"
#include "launcher.h"
#include "shmem.h"

#define LAUNCHER_NAP_MS 10000
#define RELAY_RESTART_DELAY_MS 1000
#define RELAY_RESTART_DELAY_MAX_MS 60000
#define RELAY_HEALTHY_RUN_MS 60000
#define NO_SLOT_RETRY_MS 10000

typedef struct RelayEntry
{
	Oid			dboid;
	int			relay_no;		/* 0 .. outbox.relays_per_database - 1 */
	char		dbname[NAMEDATALEN];
	BackgroundWorkerHandle *handle; /* NULL: not started */
	TimestampTz next_start;		/* do not start before */
	TimestampTz started_at;		/* when the current relay was started */
	int			restart_delay;	/* ms; grows while relays exit quickly */
	bool		wanted;
} RelayEntry;

static RelayEntry relays[OUTBOX_MAX_RELAYS * OUTBOX_MAX_RELAYS_PER_DATABASE];
static int	nrelays = 0;
static bool warned_no_slot = false;

/*
 * Registers the launcher. Called from _PG_init in the postmaster while
 * shared_preload_libraries is processed.
 */
void
OutboxRegisterLauncher(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	strlcpy(worker.bgw_library_name, "outbox", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "OutboxLauncherMain", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "outbox launcher", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "outbox launcher", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

/* The launcher's entry for relay relay_no of database dboid, or NULL. */
static RelayEntry *
find_entry(Oid dboid, int relay_no)
{
	for (int i = 0; i < nrelays; i++)
		if (relays[i].dboid == dboid && relays[i].relay_no == relay_no)
			return &relays[i];
	return NULL;
}

/* How many databases have entries. */
static int
count_databases(void)
{
	int			n = 0;

	for (int i = 0; i < nrelays; i++)
		n += relays[i].relay_no == 0;
	return n;
}

/*
 * Logs the names in outbox.databases that have no running relay entry
 * (no such database, connections not allowed, or more than
 * OUTBOX_MAX_RELAYS), once for each change of that set rather than on
 * every reconcile.
 */
static void
report_missing(List *names)
{
	static char *last_reported = NULL;
	StringInfoData missing;
	List	   *missing_names = NIL;
	ListCell   *lc;

	initStringInfo(&missing);
	foreach(lc, names)
	{
		bool		found = false;

		for (int i = 0; i < nrelays && !found; i++)
			found = relays[i].wanted && strcmp(relays[i].dbname, lfirst(lc)) == 0;
		if (!found)
		{
			appendStringInfo(&missing, "%s\"%s\"", missing.len ? ", " : "",
							 (char *) lfirst(lc));
			missing_names = lappend(missing_names, lfirst(lc));
		}
	}
	OutboxHealthMissing(missing_names);
	if (last_reported != NULL && strcmp(last_reported, missing.data) == 0)
		return;
	if (missing.len > 0)
		ereport(LOG,
				(errmsg("no outbox relay for databases named in \"outbox.databases\": %s", missing.data),
				 errdetail("Each of them does not exist, does not allow connections, or is beyond the limit of %d databases with relays.",
						   OUTBOX_MAX_RELAYS)));
	if (last_reported != NULL)
		pfree(last_reported);
	last_reported = MemoryContextStrdup(TopMemoryContext, missing.data);
}

/*
 * Marks the entry of every database named in outbox.databases that exists
 * and accepts connections as wanted, adding entries as needed. Reads
 * pg_database with a heap scan in a short transaction.
 */
static void
mark_wanted_databases(void)
{
	MemoryContext cxt = CurrentMemoryContext;
	char	   *raw = pstrdup(outbox_databases ? outbox_databases : "");
	List	   *names = NIL;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;

	for (int i = 0; i < nrelays; i++)
		relays[i].wanted = false;

	if (!SplitGUCList(raw, ',', &names))
	{
		ereport(WARNING,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid list syntax in parameter \"%s\"", "outbox.databases")));
		return;
	}
	if (names == NIL)
		return;

	StartTransactionCommand();
	(void) GetTransactionSnapshot();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);
		ListCell   *lc;

		if (!db->datallowconn)
			continue;
		foreach(lc, names)
		{
			if (strcmp((char *) lfirst(lc), NameStr(db->datname)) != 0)
				continue;
			if (find_entry(db->oid, 0) == NULL && count_databases() >= OUTBOX_MAX_RELAYS)
				continue;
			for (int r = 0; r < outbox_relays_per_database; r++)
			{
				RelayEntry *e = find_entry(db->oid, r);

				if (e == NULL)
				{
					e = &relays[nrelays++];
					memset(e, 0, sizeof(*e));
					e->dboid = db->oid;
					e->relay_no = r;
				}
				strlcpy(e->dbname, NameStr(db->datname), NAMEDATALEN);
				e->wanted = true;
			}
		}
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);

	report_missing(names);
}

/*
 * Registers a dynamic relay worker for the entry's database; when no worker
 * slot is free, warns once and tries again in NO_SLOT_RETRY_MS.
 */
static void
start_relay(RelayEntry *e, TimestampTz now)
{
	BackgroundWorker worker;
	MemoryContext old;
	bool		registered;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "outbox", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "OutboxRelayMain", BGW_MAXLEN);
	if (e->relay_no == 0)
		snprintf(worker.bgw_name, BGW_MAXLEN, "outbox relay for database %s", e->dbname);
	else
		snprintf(worker.bgw_name, BGW_MAXLEN, "outbox relay %d for database %s",
				 e->relay_no, e->dbname);
	strlcpy(worker.bgw_type, "outbox relay", BGW_MAXLEN);
	worker.bgw_main_arg = ObjectIdGetDatum(e->dboid);
	memcpy(worker.bgw_extra, &e->relay_no, sizeof(int));
	worker.bgw_notify_pid = MyProcPid;

	e->started_at = now;

	/* the handle outlives the loop's memory context */
	old = MemoryContextSwitchTo(TopMemoryContext);
	registered = RegisterDynamicBackgroundWorker(&worker, &e->handle);
	MemoryContextSwitchTo(old);
	if (registered)
	{
		warned_no_slot = false;
		OutboxHealthLaunch(e->dboid, e->relay_no, e->dbname, OUTBOX_LAUNCH_STARTING, 0, NULL);
		return;
	}
	e->handle = NULL;
	e->next_start = TimestampTzPlusMilliseconds(now, NO_SLOT_RETRY_MS);
	OutboxHealthLaunch(e->dboid, e->relay_no, e->dbname, OUTBOX_LAUNCH_NOT_STARTED,
					   e->next_start, "no background worker slot is free (max_worker_processes)");
	if (!warned_no_slot)
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("could not start an outbox relay for database \"%s\"", e->dbname),
				 errdetail("No background worker slot is free."),
				 errhint("Increase \"max_worker_processes\": outbox needs one worker for its launcher and one per database.")));
	warned_no_slot = true;
}

/*
 * The databases that should have relays (valid until the next reconcile),
 * and their number in *n.
 */
static Oid *
wanted_dboids(int *n)
{
	Oid		   *oids = palloc(sizeof(Oid) * Max(nrelays, 1));

	*n = 0;
	for (int i = 0; i < nrelays; i++)
		if (relays[i].relay_no == 0)
			oids[(*n)++] = relays[i].dboid;
	return oids;
}

/*
 * Notes that the relay of e exited, at now: it starts again after a delay,
 * which doubles while relays keep exiting within a minute (an error that
 * every pass meets), so that the log is not flooded; a relay that ran for
 * a while gets the short delay again.
 */
static void
note_exited(RelayEntry *e, TimestampTz now)
{
	pfree(e->handle);
	e->handle = NULL;
	if (TimestampDifferenceExceeds(e->started_at, now, RELAY_HEALTHY_RUN_MS) ||
		e->restart_delay == 0)
		e->restart_delay = RELAY_RESTART_DELAY_MS;
	else
		e->restart_delay = Min(e->restart_delay * 2, RELAY_RESTART_DELAY_MAX_MS);
	e->next_start = TimestampTzPlusMilliseconds(now, e->restart_delay);
	OutboxHealthLaunch(e->dboid, e->relay_no, e->dbname, OUTBOX_LAUNCH_RESTARTING,
					   e->next_start, NULL);
}

/*
 * Starts, restarts and stops relays so that exactly the wanted databases
 * have one. Returns how long the launcher may sleep, in ms.
 */
static long
reconcile(void)
{
	TimestampTz now = GetCurrentTimestamp();
	long		nap = LAUNCHER_NAP_MS;
	int			keep = 0;
	Oid		   *dboids;
	int			ndboids;

	mark_wanted_databases();

	for (int i = 0; i < nrelays; i++)
	{
		RelayEntry *e = &relays[i];
		pid_t		pid;
		BgwHandleStatus status = BGWH_STOPPED;

		if (e->handle != NULL)
			status = GetBackgroundWorkerPid(e->handle, &pid);

		if (!e->wanted)
		{
			if (e->handle != NULL)
			{
				if (status != BGWH_STOPPED)
					TerminateBackgroundWorker(e->handle);
				pfree(e->handle);
			}
			continue;			/* forget the entry */
		}

		if (status == BGWH_STOPPED && e->handle != NULL)
			note_exited(e, now);
		if (e->handle == NULL && OutboxRelayPid(e->dboid, e->relay_no) != 0)
		{
			/*
			 * A relay started by a previous launcher still serves it: adopt
			 * it. Its exit is not signalled to us, so look again soon.
			 */
			nap = Min(nap, RELAY_RESTART_DELAY_MS);
		}
		else if (e->handle == NULL)
		{
			bool		paused = OutboxRelayPaused(e->dboid);

			if (paused)
				OutboxHealthLaunch(e->dboid, e->relay_no, e->dbname, OUTBOX_LAUNCH_NOT_STARTED, 0,
								   "paused while a command needs the database to itself (DROP DATABASE or similar)");
			if (e->next_start <= now && !paused)
				start_relay(e, now);
			else
			{
				long		wait = RELAY_RESTART_DELAY_MS;

				if (e->next_start > now)
					wait = (long) ((e->next_start - now) / 1000) + 1;
				nap = Min(nap, wait);
			}
		}
		relays[keep++] = *e;
	}
	nrelays = keep;
	dboids = wanted_dboids(&ndboids);
	OutboxStopRelaysExcept(dboids, ndboids, outbox_relays_per_database);
	OutboxHealthSweep(dboids, ndboids, outbox_relays_per_database);
	return nap;
}

/*
 * Entry point of the launcher worker. Never returns: exits on SIGTERM or
 * postmaster death; on ERROR it exits and the postmaster restarts it.
 */
void
OutboxLauncherMain(Datum main_arg pg_attribute_unused())
{
	uint32		wait_event;
	MemoryContext loop_cxt;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	wait_event = OutboxWaitEvent("OutboxLauncherMain");

	loop_cxt = AllocSetContextCreate(TopMemoryContext, "outbox launcher loop",
									 ALLOCSET_DEFAULT_SIZES);

	for (;;)
	{
		long		nap;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		MemoryContextSwitchTo(loop_cxt);
		nap = reconcile();
		MemoryContextSwitchTo(TopMemoryContext);
		MemoryContextReset(loop_cxt);

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 nap, wait_event);
		ResetLatch(MyLatch);
	}
}
