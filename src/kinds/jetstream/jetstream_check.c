/*-------------------------------------------------------------------------
 *
 * jetstream_check.c
 *	  outbox_jetstream_check(): connects to a JetStream destination as a
 *	  relay would and says whether its stream deduplicates every resend.
 *
 * Runs in any backend, in a transaction, with the kind's state of the
 * backend (OutboxKindState): the connection it makes stays on that
 * state's list while its thread may run, so that the process's exit
 * closes it.
 *
 * src/kinds/jetstream/jetstream_check.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/typcache.h"
#include "utils/wait_event.h"

#include "destination.h"

#include "jetstream_int.h"

/* An interval of ms milliseconds. */
static Datum
ms_interval(double ms)
{
	Interval   *iv = palloc0(sizeof(Interval));

	iv->time = (TimeOffset) (ms * 1000.0);
	return IntervalPGetDatum(iv);
}

/*
 * The stored row of destination name, read from the table whose row type
 * is the argument's (outbox_destinations, by the function's signature)
 * with the caller's privileges, into *row (its tuple and descriptor in the
 * current memory context). 42704, as for a missing destination, if there
 * is none.
 */
static void
stored_destination(Oid rowtype, const char *name, OutboxDestinationRow *row)
{
	Oid			relid = get_typ_typrelid(rowtype);
	MemoryContext caller = CurrentMemoryContext;
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1];
	char	   *sql;
	int			rc;

	if (!OidIsValid(relid))
		elog(ERROR, "the argument is not a row of outbox_destinations");
	sql = psprintf("SELECT * FROM %s.%s d WHERE d.name OPERATOR(pg_catalog.=) $1",
				   quote_identifier(get_namespace_name(get_rel_namespace(relid))),
				   quote_identifier(get_rel_name(relid)));
	args[0] = CStringGetTextDatum(name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	rc = SPI_execute_with_args(sql, 1, argtypes, args, NULL, true, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read destination \"%s\": %s", name, SPI_result_code_string(rc));
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("destination \"%s\" does not exist", name)));
	{
		MemoryContext spi = MemoryContextSwitchTo(caller);

		row->desc = CreateTupleDescCopy(SPI_tuptable->tupdesc);
		row->tuple = heap_copytuple(SPI_tuptable->vals[0]);
		MemoryContextSwitchTo(spi);
	}
	SPI_finish();
	row->old_tuple = NULL;
	row->cache = NULL;
}

PG_FUNCTION_INFO_V1(_outbox_jetstream_check);

/*
 * The name of destination row h, as the caller passed it; 22004 if it is
 * NULL.
 */
static char *
destination_name(HeapTupleHeader h)
{
	TupleDesc	arg_desc = lookup_rowtype_tupdesc(HeapTupleHeaderGetTypeId(h),
												  HeapTupleHeaderGetTypMod(h));
	HeapTupleData arg_tuple;
	OutboxDestinationRow row;
	char	   *name;

	arg_tuple.t_len = HeapTupleHeaderGetDatumLength(h);
	ItemPointerSetInvalid(&arg_tuple.t_self);
	arg_tuple.t_tableOid = InvalidOid;
	arg_tuple.t_data = h;
	row.desc = arg_desc;
	row.tuple = &arg_tuple;
	row.old_tuple = NULL;
	row.cache = NULL;
	name = OutboxDestinationText(&row, "name");
	ReleaseTupleDesc(arg_desc);
	if (name == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("destination must not be null")));
	return name;
}

/*
 * Connects to destination name with options o as a relay would, on a
 * thread of its own, this backend waiting on its latch (interruptible),
 * and stops once the stream is read: returns the connection, its thread
 * ended, and sets *stopped when it was stopped so (it read the stream).
 * The connection is on ks->checked meanwhile, for the process's exit.
 */
static JsConn *
connect_and_read(JsKindState *ks, const char *name, const JsDestOptions *o, bool *stopped)
{
	int			timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : outbox_jetstream_timeout;
	JsConn	   *c;
	MemoryContext old;

	JetStreamSetup(ks);
	c = JetStreamNewConn(ks, name, o, "", timeout_ms);
	old = MemoryContextSwitchTo(ks->cxt);
	ks->checked = lappend(ks->checked, c);
	MemoryContextSwitchTo(old);
	JetStreamStartConnect(c);
	PG_TRY();
	{
		while (!JetStreamStopOnceReady(c))
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 100, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_CATCH();
	{
		/* its thread may still run: leave it to end, the memory to the process */
		JetStreamRequestStop(c);
		PG_RE_THROW();
	}
	PG_END_TRY();
	*stopped = c->phase == JS_PHASE_STOPPING;
	if (JsConnThreadRuns(c))
		JetStreamJoin(c);
	return c;
}

/*
 * The result row's values for connection c, its thread ended: the
 * stream's figures and the problem with its window, if any; or, if it
 * did not read the stream (not stopped after reading it), NULL figures
 * and why.
 */
static void
check_result(const JsConn *c, bool stopped, Datum *values, bool *nulls)
{
	values[0] = CStringGetTextDatum(c->stream);
	/* the thread has ended: what it left is read without the lock */
	if (c->report == JS_REPORT_FAILED || !stopped)
	{
		const char *lib = c->lib_error;

		for (int i = 1; i < 5; i++)
			nulls[i] = true;
		values[5] = CStringGetTextDatum(psprintf("NATS at %s, stream \"%s\": %s%s", c->servers_text,
												 c->stream, c->error, OutboxRedact(lib, strlen(lib))));
	}
	else
	{
		double		window_ms;
		double		span_ms;
		char	   *problem = JetStreamWindowProblem(c, c->duplicates_ns, c->max_age_ns, &window_ms, &span_ms);

		values[1] = ms_interval(c->duplicates_ns / 1000000.0);
		values[2] = ms_interval(c->max_age_ns / 1000000.0);
		nulls[2] = c->max_age_ns <= 0;
		values[3] = ms_interval(span_ms);
		values[4] = BoolGetDatum(problem == NULL);
		values[5] = problem ? CStringGetTextDatum(problem) : (Datum) 0;
		nulls[5] = problem == NULL;
	}
}

/*
 * _outbox_jetstream_check(d outbox_destinations, OUT stream text,
 *     OUT duplicate_window interval, OUT max_age interval,
 *     OUT retry_span interval, OUT exactly_once boolean, OUT problem text)
 *
 * Connects to JetStream destination d.name as a relay would (on a thread of
 * its own, this backend waiting on its latch, interruptible) and reads its
 * stream: the duplicate window, max_age (NULL: none), the longest span of
 * the retry schedule at the current settings, whether every resend falls
 * within the window, and the problem if not, or why the connection or the
 * stream failed (then the figures are NULL). Only d's name is used: the
 * destination is read again from outbox_destinations, as its trigger
 * checked it (who may name a file, which servers), since a row value
 * made by the caller would pass none of those rules. For
 * outbox_jetstream_check(); runs in any backend, in a transaction. Errors:
 * 22004 for a NULL name, 42704 for a destination that does not exist,
 * 22023 for one of another kind.
 */
Datum
_outbox_jetstream_check(PG_FUNCTION_ARGS)
{
	HeapTupleHeader h = PG_GETARG_HEAPTUPLEHEADER(0);
	OutboxDestinationRow row;
	OutboxDestination dest;
	TupleDesc	result_desc;
	Datum		values[6];
	bool		nulls[6] = {false, false, false, false, false, false};
	char	   *name;
	char	   *kind;
	JsKindState *ks = OutboxKindState(&OutboxJetStreamKind);
	JsConn	   *c;
	bool		stopped;

	if (get_call_result_type(fcinfo, NULL, &result_desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	name = destination_name(h);
	stored_destination(HeapTupleHeaderGetTypeId(h), name, &row);
	kind = OutboxDestinationText(&row, "kind");
	if (kind == NULL || strcmp(kind, OutboxJetStreamKind.name) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("destination \"%s\" is not a JetStream destination", name)));
	memset(&dest, 0, sizeof(dest));
	(void) JetStreamDecode(&row, &dest);
	c = connect_and_read(ks, name, dest.options, &stopped);
	check_result(c, stopped, values, nulls);
	ks->checked = list_delete_ptr(ks->checked, c);
	JetStreamFreeConn(c);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(result_desc), values, nulls)));
}
