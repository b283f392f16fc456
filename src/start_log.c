/*-------------------------------------------------------------------------
 *
 * start_log.c
 *	  The start log: which of its events in flight a relay had started
 *	  sending, in files that outlive the relay, so that the release of its
 *	  journal counts an attempt only for an event that was sent.
 *
 * A claim journals every event it puts in flight, but a kind starts them
 * as its connections allow: a relay that ends has usually sent only some
 * of them. Writing that to a table before each request would cost a
 * transaction per wave of requests; a write() to a file costs a system
 * call, and what it wrote survives the end of the process (the kernel has
 * it), including a crash restart of the server, which empties shared
 * memory and loses WAL not yet written. Only a crash of the operating
 * system can lose it, like the unflushed commit of a claim (relay.c,
 * flush_claim); a relay with no log file (it could not be written, or was
 * lost) has every event of its journal rows counted, as before.
 *
 * Each relay run has two files, $PGDATA/outbox_in_flight/<database
 * OID>_<run>_<0|1>, created empty when it starts. Records (event id and
 * attempt count as claimed) are appended to the current one; once it
 * holds START_LOG_SWITCH_BYTES, the log switches to the other file as
 * soon as every event noted there has its outcome, truncating it first.
 * So the files stay small, and each event in flight is in one of them.
 * The release of a gone relay's journal reads its files (in the release's
 * transaction) and removes them after it commits. A relay that was asked
 * to stop (SIGTERM: a shutdown, pg_terminate_backend) appends a record of
 * event id 0 as it exits: its end was not an event's doing, and the
 * release counts its attempts cut off without blaming the events.
 *
 * Runs in the relay worker only: outbox_relay() records its outcomes in
 * the transaction that claims them, and keeps no journal.
 *
 * src/start_log.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file_perm.h"
#include "storage/fd.h"
#include "utils/memutils.h"

#include "destination.h"
#include "start_log.h"

/* under the data directory, as pg_prewarm keeps autoprewarm.blocks there */
#define START_LOG_DIR "outbox_in_flight"
#define START_LOG_SWITCH_BYTES (256 * 1024)

typedef struct StartRecord
{
	int64		id;
	int32		attempts;
	int32		unused;
} StartRecord;

static bool log_active = false;
static int	log_fd[2] = {-1, -1};
static char log_path[2][MAXPGPATH];
static int	log_cur = 0;
static off_t log_size[2];
static int64 log_open[2];		/* events noted in each file, outcome not in */
static StartRecord *pending = NULL; /* noted, not written yet */
static int	npending = 0;
static int	pending_cap = 0;

/*
 * Stops logging for this run after a failed write: the files go, so that a
 * release counts every event of this run's journal rows.
 */
static void
log_failed(const char *what, const char *path)
{
	int			save_errno = errno;

	for (int g = 0; g < 2; g++)
	{
		if (log_fd[g] >= 0)
			close(log_fd[g]);
		log_fd[g] = -1;
		(void) unlink(log_path[g]);
	}
	log_active = false;
	errno = save_errno;
	ereport(WARNING,
			(errcode_for_file_access(),
			 errmsg("could not %s file \"%s\": %m", what, path),
			 errdetail("If this relay ends with events in flight, an attempt is counted for every event of its claims, sent or not.")));
}

/*
 * Starts this relay's start log: creates its two files, empty, under run
 * run of database dboid. Called once by the relay worker, before its first
 * claim. A failure is a WARNING, and the relay goes on without a log.
 */
void
OutboxStartLogBegin(Oid dboid, int64 run)
{
	if (MakePGDirectory(START_LOG_DIR) < 0 && errno != EEXIST)
	{
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not create directory \"%s\": %m", START_LOG_DIR),
				 errdetail("If this relay ends with events in flight, an attempt is counted for every event of its claims, sent or not.")));
		return;
	}
	for (int g = 0; g < 2; g++)
	{
		snprintf(log_path[g], MAXPGPATH, "%s/%u_%016llx_%d", START_LOG_DIR,
				 dboid, (unsigned long long) run, g);
		log_fd[g] = BasicOpenFilePerm(log_path[g], O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY,
									  pg_file_create_mode);
		if (log_fd[g] < 0)
		{
			log_failed("create", log_path[g]);
			return;
		}
		log_size[g] = 0;
		log_open[g] = 0;
	}
	log_cur = 0;
	log_active = true;
}

/*
 * Notes that a request for ev is about to start: recorded in the current
 * file at the next OutboxStartLogFlush, which the kind calls before its
 * requests go out. Called by a kind that sends after COMMIT, in the relay
 * worker; does nothing elsewhere.
 */
void
OutboxStartLogNote(OutboxEvent *ev)
{
	if (!log_active)
		return;
	if (npending >= pending_cap)
	{
		pending_cap = Max(pending_cap * 2, 64);
		pending = pending == NULL
			? MemoryContextAlloc(TopMemoryContext, sizeof(StartRecord) * pending_cap)
			: repalloc(pending, sizeof(StartRecord) * pending_cap);
	}
	pending[npending].id = ev->id;
	pending[npending].attempts = ev->attempts;
	pending[npending].unused = 0;
	npending++;
	ev->start_log = log_cur + 1;
	log_open[log_cur]++;
}

/*
 * Writes the records noted since the last call, then switches files if
 * the current one is full and the other has no event in flight left.
 * Called by a kind after noting the requests it starts and before they go
 * out, in the relay worker. A failed write is a WARNING (log_failed).
 */
void
OutboxStartLogFlush(void)
{
	int			other = 1 - log_cur;
	size_t		len = sizeof(StartRecord) * npending;

	if (!log_active || npending == 0)
	{
		npending = 0;
		return;
	}
	npending = 0;
	if (pg_pwrite(log_fd[log_cur], pending, len, log_size[log_cur]) != (ssize_t) len)
	{
		if (errno == 0)
			errno = ENOSPC;
		log_failed("write to", log_path[log_cur]);
		return;
	}
	log_size[log_cur] += len;
	if (log_size[log_cur] >= START_LOG_SWITCH_BYTES && log_open[other] == 0)
	{
		if (ftruncate(log_fd[other], 0) != 0)
		{
			log_failed("truncate", log_path[other]);
			return;
		}
		log_size[other] = 0;
		log_cur = other;
	}
}

/*
 * The outcome of ev is in (or the relay let it go): its record no longer
 * keeps its file from being reused. Called by the relay worker for every
 * event in flight it is done with.
 */
void
OutboxStartLogEnded(OutboxEvent *ev)
{
	if (ev->start_log > 0)
		log_open[ev->start_log - 1]--;
	ev->start_log = 0;
}

/* Whether file name fname is a start log of database dboid; sets *run. */
static bool
log_file_of(const char *fname, Oid dboid, int64 *run)
{
	unsigned int db;
	unsigned long long r;
	int			gen;

	if (sscanf(fname, "%u_%16llx_%d", &db, &r, &gen) != 3 || db != dboid)
		return false;
	*run = (int64) r;
	return true;
}

/* Whether run is among the nlive in live. */
static bool
run_is_live(int64 run, const int64 *live, int nlive)
{
	for (int i = 0; i < nlive; i++)
		if (live[i] == run)
			return true;
	return false;
}

/*
 * Notes in the start log that this relay was asked to stop (the record of
 * event id 0), so that the release of its journal does not count its end
 * against the events it had in flight (journal.c). Called by the relay
 * worker as it exits after a SIGTERM (a before_shmem_exit callback: no
 * transaction); a failed write leaves the log as it was.
 */
void
OutboxStartLogStopped(void)
{
	StartRecord rec = {0, 0, 0};

	if (!log_active)
		return;
	if (pg_pwrite(log_fd[log_cur], &rec, sizeof(rec), log_size[log_cur]) == (ssize_t) sizeof(rec))
		log_size[log_cur] += sizeof(rec);
	log_active = false;
}

/* Appends the records of the file at path, of run run, to logs. */
static void
read_log_file(const char *path, int64 run, OutboxStartLogs *logs, int *cap, int *stopped_cap)
{
	int			fd = OpenTransientFile(path, O_RDONLY | PG_BINARY);
	struct stat st;
	StartRecord *recs;
	int			nrecs;

	if (fd < 0)
	{
		if (errno == ENOENT)
			return;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
	}
	if (fstat(fd, &st) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat file \"%s\": %m", path)));
	nrecs = (int) (st.st_size / sizeof(StartRecord));
	recs = palloc(sizeof(StartRecord) * Max(nrecs, 1));
	if (nrecs > 0 && read(fd, recs, sizeof(StartRecord) * nrecs) != (ssize_t) (sizeof(StartRecord) * nrecs))
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not read file \"%s\": %m", path)));
	CloseTransientFile(fd);

	if (logs->n + nrecs > *cap)
	{
		*cap = Max(*cap * 2, logs->n + nrecs);
		logs->ids = repalloc(logs->ids, sizeof(int64) * *cap);
		logs->attempts = repalloc(logs->attempts, sizeof(int32) * *cap);
	}
	for (int i = 0; i < nrecs; i++)
	{
		if (recs[i].id == 0)
		{
			/* OutboxStartLogStopped's record */
			if (logs->nstopped >= *stopped_cap)
			{
				*stopped_cap *= 2;
				logs->stopped = repalloc(logs->stopped, sizeof(int64) * *stopped_cap);
			}
			logs->stopped[logs->nstopped++] = run;
			continue;
		}
		logs->ids[logs->n] = recs[i].id;
		logs->attempts[logs->n] = recs[i].attempts;
		logs->n++;
	}
	pfree(recs);
}

/*
 * Reads the start logs of the relays of database dboid that do not run
 * (every run not among the nlive in live) into *logs, in the current
 * memory context. Called by a release, in its transaction, with the
 * journal's lock held (OutboxLockJournal): a relay that starts meanwhile
 * has no record before the release commits. ERROR if a file cannot be
 * read.
 */
void
OutboxStartLogRead(Oid dboid, const int64 *live, int nlive, OutboxStartLogs *logs)
{
	DIR		   *dir;
	struct dirent *de;
	int			cap = 64;
	int			runs_cap = 8;
	int			files_cap = 8;
	int			stopped_cap = 8;

	memset(logs, 0, sizeof(*logs));
	logs->stopped = palloc(sizeof(int64) * stopped_cap);
	logs->ids = palloc(sizeof(int64) * cap);
	logs->attempts = palloc(sizeof(int32) * cap);
	logs->runs = palloc(sizeof(int64) * runs_cap);
	logs->files = palloc(sizeof(char *) * files_cap);

	dir = AllocateDir(START_LOG_DIR);
	if (dir == NULL && errno == ENOENT)
		return;
	while ((de = ReadDir(dir, START_LOG_DIR)) != NULL)
	{
		int64		run;
		char		path[MAXPGPATH];
		bool		seen = false;

		if (!log_file_of(de->d_name, dboid, &run) || run_is_live(run, live, nlive))
			continue;
		snprintf(path, sizeof(path), "%s/%s", START_LOG_DIR, de->d_name);
		read_log_file(path, run, logs, &cap, &stopped_cap);
		if (logs->nfiles >= files_cap)
		{
			files_cap *= 2;
			logs->files = repalloc(logs->files, sizeof(char *) * files_cap);
		}
		logs->files[logs->nfiles++] = pstrdup(path);
		for (int i = 0; i < logs->nruns; i++)
			seen |= logs->runs[i] == run;
		if (seen)
			continue;
		if (logs->nruns >= runs_cap)
		{
			runs_cap *= 2;
			logs->runs = repalloc(logs->runs, sizeof(int64) * runs_cap);
		}
		logs->runs[logs->nruns++] = run;
	}
	FreeDir(dir);
}

/*
 * Removes the start logs of database dboid, which DROP DATABASE has just
 * dropped (its relays were stopped first): nothing will read them. Called
 * by the backend that ran the command, after it; a file that cannot be
 * removed is a WARNING.
 */
void
OutboxStartLogForget(Oid dboid)
{
	DIR		   *dir = AllocateDir(START_LOG_DIR);
	struct dirent *de;
	int64		run;

	if (dir == NULL && errno == ENOENT)
		return;
	while ((de = ReadDirExtended(dir, START_LOG_DIR, WARNING)) != NULL)
	{
		char		path[MAXPGPATH];

		if (!log_file_of(de->d_name, dboid, &run))
			continue;
		snprintf(path, sizeof(path), "%s/%s", START_LOG_DIR, de->d_name);
		if (unlink(path) != 0 && errno != ENOENT)
			ereport(WARNING,
					(errcode_for_file_access(),
					 errmsg("could not remove file \"%s\": %m", path)));
	}
	FreeDir(dir);
}

/*
 * Removes the files a release read, once it has committed: their runs'
 * journal rows are gone. A file that cannot be removed is a WARNING; it
 * is read again by the next release, which finds no rows of its run.
 */
void
OutboxStartLogRemove(const OutboxStartLogs *logs)
{
	for (int i = 0; i < logs->nfiles; i++)
		if (unlink(logs->files[i]) != 0 && errno != ENOENT)
			ereport(WARNING,
					(errcode_for_file_access(),
					 errmsg("could not remove file \"%s\": %m", logs->files[i])));
}
