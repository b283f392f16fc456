/*-------------------------------------------------------------------------
 *
 * horizon.c
 *	  Names the transaction that holds back the removal of old row
 *	  versions in the relay's database, once it is older than
 *	  outbox.horizon_warning.
 *
 * Every claim, mark and outcome writes new versions of outbox rows, and
 * pruning and vacuum remove the old ones only once no snapshot can see
 * them. A session that keeps one snapshot open (a transaction left idle,
 * a long REPEATABLE READ report, a prepared transaction) keeps every
 * version written since: the claim's walk of outbox_pending_idx reads
 * them all, and a claim that read one buffer read some 15,000 after a
 * minute and a half. Nothing in the relay's own figures names the cause,
 * so the first relay of each database looks every HORIZON_CHECK_MS for
 * the oldest transaction of its database that has a snapshot or an xid,
 * or a prepared one, and if it began more than outbox.horizon_warning ago,
 * logs a WARNING naming it (once per transaction) and shows it in
 * outbox_status (through health.c). The relay runs as a superuser and
 * sees every session's start; a replication slot's xmin, which has no
 * start time, is left to pg_replication_slots.
 *
 * src/horizon.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "health.h"
#include "horizon.h"

/* how often the relay looks, in ms, at most (and at least as often as
 * outbox.horizon_warning) */
#define HORIZON_CHECK_MS 10000

/*
 * The oldest transaction of this database that has a snapshot or an xid
 * (a process, not this one: a READ COMMITTED transaction idle after a
 * write has no snapshot, but its xid holds the horizon), or is prepared,
 * if it began more than $1 seconds ago:
 * its pid (-1 when prepared), its start, and what it is, for the log.
 */
#define HORIZON_SQL \
	"SELECT h.pid, h.since, h.what FROM (" \
	"  SELECT a.pid, a.xact_start AS since," \
	"         pg_catalog.format('process %s (%s of role %s, application \"%s\", %s)'," \
	"                           a.pid, a.backend_type, a.usename, a.application_name, a.state) AS what" \
	"    FROM pg_catalog.pg_stat_activity a" \
	"   WHERE (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)" \
	"     AND a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()" \
	"     AND a.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()" \
	"  UNION ALL" \
	"  SELECT -1, p.prepared, pg_catalog.format('prepared transaction \"%s\" of role %s', p.gid, p.owner)" \
	"    FROM pg_catalog.pg_prepared_xacts p" \
	"   WHERE p.database OPERATOR(pg_catalog.=) pg_catalog.current_database()) h" \
	" WHERE h.since OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-)" \
	"                                         pg_catalog.make_interval(secs => $1))" \
	" ORDER BY h.since LIMIT 1"

static TimestampTz next_check = 0;
/* the holder last logged: a pid and its transaction's start */
static int	logged_pid = 0;
static TimestampTz logged_since = 0;

/*
 * Whether the calling relay should run OutboxHorizonStep now: the check
 * is on (outbox.horizon_warning > 0) and HORIZON_CHECK_MS, or
 * outbox.horizon_warning if shorter, have passed since the last. Called by relay number 0 of each database, between steps.
 */
bool
OutboxHorizonDue(void)
{
	TimestampTz now;

	if (outbox_horizon_warning <= 0)
	{
		if (logged_pid != 0)
			OutboxHealthRelayHorizon(0, 0);
		logged_pid = 0;
		return false;
	}
	now = GetCurrentTimestamp();
	if (now < next_check)
		return false;
	next_check = TimestampTzPlusMilliseconds(now, Min(HORIZON_CHECK_MS, outbox_horizon_warning));
	return true;
}

/*
 * The check (an OutboxRunStep step: a transaction and SPI are open; arg is
 * unused): finds the oldest such transaction, records it in the relay's
 * health row (0 when there is none), and logs a WARNING the first time it
 * sees it. Raises an ERROR only if the query fails, which OutboxRunStep
 * catches and logs.
 */
void
OutboxHorizonStep(void *arg pg_attribute_unused())
{
	Oid			argtypes[1] = {FLOAT8OID};
	Datum		args[1] = {Float8GetDatum(outbox_horizon_warning / 1000.0)};
	int			rc = SPI_execute_with_args(HORIZON_SQL, 1, argtypes, args, NULL, true, 1);
	bool		isnull;
	int			pid;
	TimestampTz since;
	char	   *what;

	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read the oldest transaction: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
	{
		OutboxHealthRelayHorizon(0, 0);
		logged_pid = 0;
		return;
	}
	pid = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	since = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	what = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3);
	OutboxHealthRelayHorizon(pid, since);
	if (pid == logged_pid && since == logged_since)
		return;
	logged_pid = pid;
	logged_since = since;
	ereport(WARNING,
			(errmsg("outbox relay: a transaction that began at %s holds back the removal of old row versions: %s",
					timestamptz_to_str(since), what ? what : "unknown"),
			 errdetail("Every claim reads the versions of the outbox's rows that this transaction still keeps, written since it began; claims slow down for as long as it lasts."),
			 pid > 0 ?
			 errhint("End that transaction, or if it is abandoned: SELECT pg_terminate_backend(%d). idle_in_transaction_session_timeout ends idle ones.", pid) :
			 errhint("Commit or roll back the prepared transaction (COMMIT PREPARED or ROLLBACK PREPARED).")));
}
