/*-------------------------------------------------------------------------
 *
 * queue.c
 *	  All SQL the relay runs against the outbox table: claim due events,
 *	  mark them delivered or failed, find when the next retry is due.
 *
 * Every function here runs with a transaction open and SPI connected, in the
 * relay worker or in a backend calling outbox_relay(). Statements are
 * prepared once per process and kept (SPI_keepplan); they name the tables
 * with the extension's schema, looked up from the catalog, and are prepared
 * again if the extension is dropped and created anew.
 *
 * Claiming uses FOR UPDATE SKIP LOCKED: any number of relays can run over
 * one table and no event is claimed by two of them at once. The locks are
 * held until the pass commits, so a crash at any point leaves every claimed
 * event pending and it is delivered again (at-least-once).
 *
 * src/queue.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/detoast.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "common/pg_prng.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "relay.h"

PG_FUNCTION_INFO_V1(_outbox_claim_query);

#define UNROUTABLE_RECHECK "10 seconds"

enum
{
	PLAN_CLAIM,
	PLAN_DELIVERED,
	PLAN_FAILED,
	PLAN_UNROUTABLE,
	PLAN_NEXT_DUE,
	NUM_PLANS
};

static Oid	plans_extoid = InvalidOid;
static SPIPlanPtr plans[NUM_PLANS];
static bool nsp_callback_registered = false;

/*
 * The statements name the extension's schema in their text: a change to
 * pg_namespace (a renamed schema) has them prepared again on next use.
 */
static void
nsp_changed(Datum arg pg_attribute_unused(), int cacheid pg_attribute_unused(),
			uint32 hashvalue pg_attribute_unused())
{
	plans_extoid = InvalidOid;
}

/*
 * The claim: due, live events in due order, each with the first enabled
 * destination (by name) whose pattern matches its type, or NULLs when none
 * does (_outbox_like_pattern turns the destination's pattern into LIKE's).
 * Header arrays are built only when there are headers (the subplans cost a
 * few percent of a pass otherwise). It returns each row's ctid: the rows
 * stay locked by the pass, so no one else can move them, and marking them
 * by TID scan costs about a third less than by primary key lookups.
 */
static const char *const claim_sql =
"SELECT o.id, o.event_id::text, o.attempts, o.event_type, o.aggregate_type,"
"       o.aggregate_id, o.created_at, o.payload,"
"       d.name, d.url, d.channel, d.secret, d.timeout_ms,"
"       CASE WHEN d.headers IS NOT NULL THEN"
"           ARRAY(SELECT h.key || ': ' || h.value FROM jsonb_each_text(d.headers) h"
"                  WHERE h.value IS NOT NULL) END,"
"       CASE WHEN o.headers IS NOT NULL THEN"
"           ARRAY(SELECT h.key || ': ' || h.value FROM jsonb_each_text(o.headers) h"
"                  WHERE h.value IS NOT NULL) END,"
"       o.ctid"
"  FROM %1$s.outbox o"
"  LEFT JOIN LATERAL ("
"       SELECT d.name, d.url, d.channel, d.secret, d.timeout_ms, d.headers"
"         FROM %1$s.outbox_destinations d"
"        WHERE d.enabled"
"          AND o.event_type LIKE %1$s._outbox_like_pattern(d.event_types)"
"        ORDER BY d.name"
"        LIMIT 1) d ON true"
" WHERE o.delivered_at IS NULL AND o.dead_at IS NULL"
"   AND o.next_attempt_at <= now()"
" ORDER BY o.next_attempt_at, o.id"
" LIMIT $1"
"   FOR UPDATE OF o SKIP LOCKED";

static const char *const delivered_sql =
"UPDATE %1$s.outbox o"
"   SET delivered_at = now(), attempts = o.attempts + 1,"
"       last_error = NULL, destination = u.dest"
"  FROM unnest($1::tid[], $2::text[]) AS u(tid, dest)"
" WHERE o.ctid = u.tid";

static const char *const failed_sql =
"UPDATE %1$s.outbox o"
"   SET attempts = o.attempts + 1, last_error = u.err, destination = u.dest,"
"       next_attempt_at = CASE WHEN u.dead THEN o.next_attempt_at"
"                         ELSE now() + make_interval(secs => u.delay_ms / 1000.0) END,"
"       dead_at = CASE WHEN u.dead THEN now() END"
"  FROM unnest($1::tid[], $2::text[], $3::text[], $4::float8[], $5::bool[])"
"       AS u(tid, dest, err, delay_ms, dead)"
" WHERE o.ctid = u.tid";

/*
 * Events that no destination takes are parked: pending, attempts unchanged,
 * not claimed again for as long as they have waited already (at least
 * UNROUTABLE_RECHECK, at most an hour), so that a relay woken by every
 * commit does not walk them on every pass, nor a large backlog of them
 * every few seconds. Routing is checked again here, with this statement's
 * newer snapshot, so a destination committed since the claim keeps its
 * events due. The trigger on outbox_destinations makes
 * parked events due again when a destination is added or changed (its
 * condition matches this last_error text); a pass running concurrently with
 * that change may still park a few until their next check.
 */
static const char *const unroutable_sql =
"UPDATE %1$s.outbox o"
"   SET next_attempt_at = now() + least(interval '1 hour',"
"           greatest(interval '" UNROUTABLE_RECHECK "', now() - o.created_at)),"
"       last_error = '" OUTBOX_UNROUTABLE_ERROR "'"
" WHERE o.ctid = ANY($1)"
"   AND NOT EXISTS ("
"       SELECT 1 FROM %1$s.outbox_destinations d"
"        WHERE d.enabled"
"          AND o.event_type LIKE %1$s._outbox_like_pattern(d.event_types))";

static const char *const next_due_sql =
"SELECT (extract(epoch FROM o.next_attempt_at - now()) * 1000)::float8"
"  FROM %1$s.outbox o"
" WHERE o.delivered_at IS NULL AND o.dead_at IS NULL"
"   AND o.next_attempt_at > now()"
" ORDER BY o.next_attempt_at"
" LIMIT 1";

/*
 * _outbox_claim_query() RETURNS text
 *
 * SQL-callable, internal: the text of the relay's claim query for the
 * extension's schema (its batch size is the parameter $1), so that its
 * plan can be checked with EXPLAIN by tests and DBAs.
 */
Datum
_outbox_claim_query(PG_FUNCTION_ARGS)
{
	StringInfoData sql;

	initStringInfo(&sql);
	appendStringInfo(&sql, claim_sql,
					 quote_identifier(get_namespace_name(get_func_namespace(fcinfo->flinfo->fn_oid))));
	PG_RETURN_TEXT_P(cstring_to_text(sql.data));
}

/* Prepares fmt (with the schema filled in) as a generic plan kept for life. */
static SPIPlanPtr
prepare_kept(const char *fmt, const char *nsp, int nargs, Oid *argtypes)
{
	StringInfoData sql;
	SPIPlanPtr	plan;

	initStringInfo(&sql);
	appendStringInfo(&sql, fmt, nsp);
	/*
	 * Always the generic plan: the custom plans that the plan cache would
	 * otherwise try are the same, yet cost a planning per execution (the
	 * mark statements take arrays whose size the planner would look at).
	 */
	plan = SPI_prepare_cursor(sql.data, nargs, argtypes, CURSOR_OPT_GENERIC_PLAN);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s",
			 sql.data, SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	return plan;
}

/* Looks up the schema of extension extoid and prepares every statement. */
static void
prepare_plans(Oid extoid)
{
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(extoid)};
	Oid			claim_args[1] = {INT4OID};
	Oid			delivered_args[2] = {TIDARRAYOID, TEXTARRAYOID};
	Oid			unroutable_args[1] = {TIDARRAYOID};
	Oid			failed_args[5] = {TIDARRAYOID, TEXTARRAYOID, TEXTARRAYOID,
	FLOAT8ARRAYOID, BOOLARRAYOID};
	bool		isnull;
	Oid			nspoid;
	const char *nsp;
	int			rc;

	rc = SPI_execute_with_args("SELECT extnamespace FROM pg_catalog.pg_extension"
							   " WHERE oid OPERATOR(pg_catalog.=) $1",
							   1, argtypes, values, NULL, true, 1);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not find the schema of extension %u", extoid);
	nspoid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0],
											SPI_tuptable->tupdesc, 1, &isnull));
	nsp = quote_identifier(get_namespace_name(nspoid));

	for (int i = 0; i < NUM_PLANS; i++)
	{
		if (plans[i] != NULL)
			SPI_freeplan(plans[i]);
		plans[i] = NULL;
	}
	plans_extoid = InvalidOid;

	plans[PLAN_CLAIM] = prepare_kept(claim_sql, nsp, 1, claim_args);
	plans[PLAN_DELIVERED] = prepare_kept(delivered_sql, nsp, 2, delivered_args);
	plans[PLAN_FAILED] = prepare_kept(failed_sql, nsp, 5, failed_args);
	plans[PLAN_UNROUTABLE] = prepare_kept(unroutable_sql, nsp, 1, unroutable_args);
	plans[PLAN_NEXT_DUE] = prepare_kept(next_due_sql, nsp, 0, NULL);
	plans_extoid = extoid;
}

/*
 * Makes the outbox tables ready for a pass: returns false, doing nothing,
 * when the extension is not installed in this database or another session
 * holds it for DROP EXTENSION. Otherwise the extension is locked against a
 * concurrent DROP until the end of the transaction, so the pass never meets
 * half-dropped tables.
 */
bool
OutboxQueueOpen(void)
{
	Oid			extoid = get_extension_oid("outbox", true);

	if (!OidIsValid(extoid))
		return false;
	if (!ConditionalLockDatabaseObject(ExtensionRelationId, extoid, 0,
									   AccessShareLock))
		return false;
	/* the lock processed invalidations: make sure it still exists */
	if (get_extension_oid("outbox", true) != extoid)
		return false;

	if (!nsp_callback_registered)
	{
		CacheRegisterSyscacheCallback(NAMESPACEOID, nsp_changed, (Datum) 0);
		nsp_callback_registered = true;
	}
	if (plans_extoid != extoid)
		prepare_plans(extoid);
	return true;
}

/*
 * Appends the "name: value" lines of a text[] to the event's headers,
 * skipping names already there (compared case-insensitively, as HTTP
 * does): called with the destination's headers first, so they win.
 */
static void
add_headers(OutboxEvent *ev, Datum array)
{
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;

	deconstruct_array(DatumGetArrayTypeP(array), TEXTOID, -1, false,
					  TYPALIGN_INT, &elems, &nulls, &nelems);
	if (nelems == 0)
		return;
	ev->headers = ev->headers == NULL
		? palloc(sizeof(char *) * nelems)
		: repalloc(ev->headers, sizeof(char *) * (ev->nheaders + nelems));
	for (int j = 0; j < nelems; j++)
	{
		char	   *line;
		size_t		namelen;
		bool		seen = false;

		if (nulls[j])
			continue;
		line = TextDatumGetCString(elems[j]);
		namelen = strcspn(line, ":");
		for (int k = 0; k < ev->nheaders && !seen; k++)
			seen = strcspn(ev->headers[k], ":") == namelen &&
				pg_strncasecmp(ev->headers[k], line, namelen) == 0;
		if (!seen)
			ev->headers[ev->nheaders++] = line;
	}
}

/* The text in column col, or NULL. */
static char *
text_or_null(HeapTuple tuple, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tuple, desc, col, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

/*
 * Claims up to batch_size due events and returns them in *events (allocated
 * in the current memory context, which is SPI's: valid until SPI_finish).
 * An event without a destination has dest_name NULL. Sets *claimed to the
 * number of rows the claim locked, and returns the number of events to
 * process, fewer when their payloads exceed the pass's memory budget.
 */
int
OutboxClaim(int batch_size, OutboxEvent **events, int *claimed)
{
	Size		payload_bytes = 0;
	Datum		values[1] = {Int32GetDatum(batch_size)};
	int			rc;
	int			n;
	OutboxEvent *ev;
	TupleDesc	desc;

	rc = SPI_execute_plan(plans[PLAN_CLAIM], values, NULL, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not claim events: %s", SPI_result_code_string(rc));

	n = (int) SPI_processed;
	*claimed = n;
	desc = SPI_tuptable->tupdesc;
	ev = palloc0(sizeof(OutboxEvent) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[i];
		bool		isnull;
		Datum		d;

		/*
		 * Bound the memory of a pass: once the payloads taken so far reach
		 * OUTBOX_PASS_PAYLOAD_BYTES, leave the rest of the batch alone. Those
		 * rows are unlocked unchanged at COMMIT and claimed by the next pass.
		 */
		d = SPI_getbinval(tuple, desc, 8, &isnull);
		payload_bytes += toast_raw_datum_size(d);
		if (i > 0 && payload_bytes > OUTBOX_PASS_PAYLOAD_BYTES)
		{
			n = i;
			break;
		}

		ev[i].id = DatumGetInt64(SPI_getbinval(tuple, desc, 1, &isnull));
		ev[i].event_id = SPI_getvalue(tuple, desc, 2);
		ev[i].attempts = DatumGetInt32(SPI_getbinval(tuple, desc, 3, &isnull));
		ev[i].dest_name = SPI_getvalue(tuple, desc, 9);
		if (ev[i].dest_name == NULL)
		{
			/* to be parked: no envelope needed */
		}
		else if (toast_raw_datum_size(d) > OUTBOX_MAX_PAYLOAD_BYTES)
		{
			/* stored by a plain INSERT: outbox_emit() refuses such payloads */
			ev[i].permanent = true;
			ev[i].error = psprintf("payload of %zu bytes is larger than the limit of %d bytes",
								   (size_t) toast_raw_datum_size(d), OUTBOX_MAX_PAYLOAD_BYTES);
		}
		else
			ev[i].body = OutboxBuildEnvelope(ev[i].event_id,
											 text_or_null(tuple, desc, 4),
											 text_or_null(tuple, desc, 5),
											 text_or_null(tuple, desc, 6),
											 DatumGetTimestampTz(SPI_getbinval(tuple, desc, 7, &isnull)),
											 ev[i].attempts + 1,
											 DatumGetJsonbP(d));
		ev[i].url = SPI_getvalue(tuple, desc, 10);
		ev[i].channel = SPI_getvalue(tuple, desc, 11);
		ev[i].secret = SPI_getvalue(tuple, desc, 12);
		d = SPI_getbinval(tuple, desc, 13, &isnull);
		ev[i].timeout_ms = isnull ? outbox_http_timeout : DatumGetInt32(d);

		ev[i].tid = *(ItemPointer) DatumGetPointer(SPI_getbinval(tuple, desc, 16, &isnull));

		/* the destination's headers first, so that they win */
		for (int col = 14; col <= 15; col++)
		{
			d = SPI_getbinval(tuple, desc, col, &isnull);
			if (!isnull)
				add_headers(&ev[i], d);
		}
	}
	*events = ev;
	return n;
}

/* The claimed row versions of n events, as a tid[] for the mark statements. */
static Datum
tid_array(OutboxEvent **events, int n)
{
	Datum	   *tids = palloc(sizeof(Datum) * n);

	for (int i = 0; i < n; i++)
		tids[i] = PointerGetDatum(&events[i]->tid);
	return PointerGetDatum(construct_array(tids, n, TIDOID, sizeof(ItemPointerData),
										   false, TYPALIGN_SHORT));
}

/*
 * Warns when a mark statement changed fewer rows than it was given: the
 * rows are locked by the pass, so this should not happen, and an unmarked
 * event would be delivered again.
 */
static void
check_marked(int n, const char *what)
{
	if (SPI_processed != (uint64) n)
		ereport(WARNING,
				(errmsg("marked %llu of %d events %s",
						(unsigned long long) SPI_processed, n, what),
				 errdetail("The others stay pending and will be delivered again.")));
}

/*
 * Marks n claimed events delivered: delivered_at = now() (the pass's start),
 * attempts + 1, last_error cleared, destination recorded. Runs in the pass's
 * transaction with SPI connected; raises ERROR only if SPI fails, which
 * aborts the pass and leaves every claimed event pending.
 */
void
OutboxMarkDelivered(OutboxEvent **events, int n)
{
	Datum	   *dests;
	Datum		values[2];
	int			rc;

	if (n == 0)
		return;
	dests = palloc(sizeof(Datum) * n);
	for (int i = 0; i < n; i++)
		dests[i] = CStringGetTextDatum(events[i]->dest_name);
	values[0] = tid_array(events, n);
	values[1] = PointerGetDatum(construct_array(dests, n, TEXTOID, -1, false, TYPALIGN_INT));

	rc = SPI_execute_plan(plans[PLAN_DELIVERED], values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "could not mark events delivered: %s", SPI_result_code_string(rc));
	check_marked(n, "delivered");
}

/*
 * Parks n claimed events that no enabled destination takes (see
 * unroutable_sql): attempts unchanged. Same context and errors as
 * OutboxMarkDelivered.
 */
void
OutboxMarkUnroutable(OutboxEvent **events, int n)
{
	Datum		values[1];
	int			rc;

	if (n == 0)
		return;
	values[0] = tid_array(events, n);

	rc = SPI_execute_plan(plans[PLAN_UNROUTABLE], values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "could not park events without a destination: %s", SPI_result_code_string(rc));
}

/*
 * Delay before the next attempt after `attempts` failed ones, in ms:
 * exponential from outbox.backoff_base, capped at outbox.backoff_max, with
 * "equal jitter" (half fixed, half random; the variant of that name in the
 * AWS Architecture Blog's "Exponential Backoff And Jitter") so that events
 * failing together do not all come back at the same instant.
 */
static double
backoff_ms(int attempts)
{
	double		delay = (double) outbox_backoff_base * pow(2.0, Min(attempts - 1, 60));

	delay = Min(delay, (double) outbox_backoff_max);
	return delay / 2.0 + pg_prng_double(&pg_global_prng_state) * delay / 2.0;
}

/*
 * Records a failed attempt of each event: attempts + 1, the error text, and
 * either the time of the next attempt or, when the event failed permanently
 * or has used up outbox.max_attempts, the dead-letter mark. Each failure is
 * logged (LOG, or WARNING for a dead letter). Same context and errors as
 * OutboxMarkDelivered.
 */
void
OutboxMarkFailed(OutboxEvent **events, int n)
{
	Datum	   *dests,
			   *errs,
			   *delays,
			   *dead;
	Datum		values[5];
	int			rc;

	if (n == 0)
		return;
	dests = palloc(sizeof(Datum) * n);
	errs = palloc(sizeof(Datum) * n);
	delays = palloc(sizeof(Datum) * n);
	dead = palloc(sizeof(Datum) * n);
	for (int i = 0; i < n; i++)
	{
		OutboxEvent *ev = events[i];
		int			attempts = ev->attempts + 1;
		bool		is_dead = ev->permanent || attempts >= outbox_max_attempts;

		dests[i] = CStringGetTextDatum(ev->dest_name);
		errs[i] = CStringGetTextDatum(ev->error ? ev->error : "unknown error");
		delays[i] = Float8GetDatum(is_dead ? 0.0 : backoff_ms(attempts));
		dead[i] = BoolGetDatum(is_dead);

		ereport(is_dead ? WARNING : LOG,
				(errmsg("could not deliver event %s to destination \"%s\": %s",
						ev->event_id, ev->dest_name, ev->error ? ev->error : "unknown error"),
				 is_dead ?
				 errdetail_plural("The event was dead-lettered after %d attempt.",
								  "The event was dead-lettered after %d attempts.",
								  attempts, attempts) :
				 errdetail("Attempt %d of %d; the event will be retried.",
						   attempts, outbox_max_attempts)));
	}
	values[0] = tid_array(events, n);
	values[1] = PointerGetDatum(construct_array(dests, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[2] = PointerGetDatum(construct_array(errs, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[3] = PointerGetDatum(construct_array(delays, n, FLOAT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[4] = PointerGetDatum(construct_array(dead, n, BOOLOID, 1, true, TYPALIGN_CHAR));

	rc = SPI_execute_plan(plans[PLAN_FAILED], values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "could not record failed attempts: %s", SPI_result_code_string(rc));
	check_marked(n, "failed");
}

/*
 * Milliseconds until the earliest scheduled retry, or -1 when none is
 * waiting. Lets an idle relay wake up for a retry due before its next poll.
 */
double
OutboxNextDueMs(void)
{
	int			rc;
	bool		isnull;
	Datum		d;

	rc = SPI_execute_plan(plans[PLAN_NEXT_DUE], NULL, NULL, true, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not find the next retry: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return -1;
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? -1 : Max(DatumGetFloat8(d), 0.0);
}
