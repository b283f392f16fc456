/*-------------------------------------------------------------------------
 *
 * relay.c
 *	  The relay: one pass claims due events, delivers them and marks them;
 *	  the relay worker runs passes in a loop; outbox_relay() runs one pass
 *	  in the calling session.
 *
 * A pass is one transaction. Events are claimed with FOR UPDATE SKIP LOCKED,
 * NOTIFY deliveries are queued in that transaction, HTTP deliveries run
 * concurrently, then successes and failures are marked, each event on its
 * own: a failed event is recorded as a failure and never rolls back the
 * others. A crash anywhere before COMMIT leaves every claimed event pending,
 * so it is delivered again (at-least-once; the webhook-id stays the same).
 *
 * The worker sleeps on its latch, which a committing backend sets when its
 * transaction emitted an event (emit.c); the poll interval is the fallback
 * for events inserted without outbox_emit(). Errors are not caught: an ERROR
 * in the worker ends it and the launcher starts it again.
 *
 * src/relay.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "access/xlog.h"
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
#include "utils/wait_event.h"

#include "compat.h"
#include "deliver_http.h"
#include "deliver_notify.h"
#include "envelope.h"
#include "event.h"
#include "guc.h"
#include "queue.h"
#include "relay.h"
#include "shmem.h"

PG_FUNCTION_INFO_V1(outbox_relay);

/*
 * Builds the body of a routed event. An event stored by a plain INSERT with
 * a payload over OUTBOX_MAX_PAYLOAD_BYTES (outbox_emit() refuses those)
 * gets none and fails permanently.
 */
static void
build_body(OutboxEvent *ev)
{
	Size		size = VARSIZE(ev->payload);

	if (size > OUTBOX_MAX_PAYLOAD_BYTES)
	{
		ev->permanent = true;
		ev->error = psprintf("payload of %zu bytes is larger than the limit of %d bytes",
							 (size_t) size, OUTBOX_MAX_PAYLOAD_BYTES);
		return;
	}
	ev->body = OutboxBuildEnvelope(ev, ev->attempts + 1);
}

/*
 * Runs one relay pass: claims up to batch_size due events, delivers them and
 * records each outcome; events that no destination takes are parked (see
 * OutboxMarkUnroutable). Caller has a transaction open and SPI connected; all
 * allocations go to SPI's context and are gone at SPI_finish. When
 * want_next_due is set and the pass was not full, result->next_due_ms tells
 * when the next retry is due.
 */
void
OutboxRelayPass(int batch_size, bool want_next_due, OutboxPassResult *result)
{
	OutboxEvent *events;
	OutboxEvent **http;
	OutboxEvent **ok;
	OutboxEvent **failed;
	OutboxEvent **unroutable;
	int			n;
	int			nunroutable = 0;
	int			nhttp = 0;
	int			nok = 0;
	int			nfailed = 0;

	memset(result, 0, sizeof(*result));
	result->next_due_ms = -1;

	if (!OutboxQueueOpen())
		return;

	n = OutboxClaim(batch_size, &events, &result->claimed);

	http = palloc(sizeof(OutboxEvent *) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		if (events[i].dest.name == NULL)
			continue;			/* unroutable */
		build_body(&events[i]);
		if (events[i].body == NULL)
			continue;			/* failed already */
		else if (events[i].dest.channel != NULL)
			OutboxDeliverNotify(&events[i]);
		else
			http[nhttp++] = &events[i];
	}
	if (nhttp > 0)
		OutboxDeliverHttp(http, nhttp);

	ok = palloc(sizeof(OutboxEvent *) * Max(n, 1));
	failed = palloc(sizeof(OutboxEvent *) * Max(n, 1));
	unroutable = palloc(sizeof(OutboxEvent *) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		if (events[i].dest.name == NULL)
			unroutable[nunroutable++] = &events[i];
		else if (events[i].ok)
			ok[nok++] = &events[i];
		else
			failed[nfailed++] = &events[i];
	}
	OutboxMarkDelivered(ok, nok);
	OutboxMarkFailed(failed, nfailed);
	OutboxMarkUnroutable(unroutable, nunroutable);
	result->delivered = nok;
	result->failed = nfailed;
	result->unroutable = nunroutable;

	if (want_next_due && result->claimed < batch_size)
		result->next_due_ms = OutboxNextDueMs();
}

/*
 * outbox_relay(batch_size integer) RETURNS (delivered integer, failed integer)
 *
 * SQL-callable: one relay pass in the calling session's transaction, the same
 * code the worker runs. batch_size NULL means outbox.batch_size. Needs the
 * privileges of outbox_admin. Errors: batch_size out of 1..10000 (22023);
 * called during recovery (25006).
 */
Datum
outbox_relay(PG_FUNCTION_ARGS)
{
	int			batch_size = PG_ARGISNULL(0) ? outbox_batch_size : PG_GETARG_INT32(0);
	OutboxPassResult result;
	TupleDesc	tupdesc;
	Datum		values[2];
	bool		nulls[2] = {false, false};

	if (batch_size < 1 || batch_size > 10000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("batch size must be between 1 and 10000")));
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot relay events during recovery"),
				 errhint("Run outbox_relay() on the primary.")));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	OutboxRelayPass(batch_size, false, &result);
	SPI_finish();

	values[0] = Int32GetDatum(result.delivered);
	values[1] = Int32GetDatum(result.failed);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}

/* One pass in its own transaction, as the worker runs it. */
static void
relay_transaction(OutboxPassResult *result)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	debug_query_string = "outbox relay pass";
	pgstat_report_activity(STATE_RUNNING, debug_query_string);

	OutboxRelayPass(outbox_batch_size, true, result);

	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	debug_query_string = NULL;
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * Entry point of a relay worker, started by the launcher for one database
 * (main_arg: its OID). Runs as the bootstrap superuser. Never returns: exits
 * on SIGTERM or postmaster death, and on ERROR (the launcher restarts it).
 */
void
OutboxRelayMain(Datum main_arg)
{
	Oid			dboid = DatumGetObjectId(main_arg);
	MemoryContext loop_cxt;
	uint32		wait_event;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	pgstat_report_appname("outbox relay " OUTBOX_VERSION);

	/*
	 * Settings from postgresql.conf, ALTER DATABASE or ALTER ROLE that would
	 * break a pass after it delivered (so that it is sent again, forever) do
	 * not apply here: timeouts, a serializable or read-only default. The
	 * worker's queries name every object; user schemas stay out.
	 */
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("lock_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("idle_in_transaction_session_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
#if PG_VERSION_NUM >= 170000
	SetConfigOption("transaction_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
#endif
	SetConfigOption("default_transaction_isolation", "read committed", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_read_only", "off", PGC_SUSET, PGC_S_OVERRIDE);

	if (!OutboxRelayAttach(dboid))
	{
		ereport(LOG,
				(errmsg("outbox relay for database %u not started: another relay serves it, or it is being dropped",
						dboid)));
		proc_exit(0);
	}

	wait_event = OutboxWaitEvent("OutboxRelayMain");

	loop_cxt = AllocSetContextCreate(TopMemoryContext, "outbox relay loop",
									 ALLOCSET_DEFAULT_SIZES);
	StartTransactionCommand();
	ereport(LOG,
			(errmsg("outbox relay started for database \"%s\"",
					get_database_name(dboid))));
	CommitTransactionCommand();

	for (;;)
	{
		OutboxPassResult result;
		long		timeout;
		MemoryContext old;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		old = MemoryContextSwitchTo(loop_cxt);
		relay_transaction(&result);
		MemoryContextSwitchTo(old);
		MemoryContextReset(loop_cxt);

		/* a full batch: more events are probably due, go on at once */
		if (result.claimed >= outbox_batch_size)
			continue;

		timeout = outbox_poll_interval;
		if (result.next_due_ms >= 0 && result.next_due_ms < timeout)
			timeout = (long) ceil(result.next_due_ms) + 1;

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout, wait_event);
		ResetLatch(MyLatch);
	}
}
