/*-------------------------------------------------------------------------
 *
 * outcome.c
 *	  Recording what an attempt came to: a delivery, or a failed attempt
 *	  with its retry (exponential backoff with jitter, or the endpoint's
 *	  Retry-After) or its dead-letter mark.
 *
 * Each attempt is counted with its outcome, and only on the row version
 * its claim read (by TID) or, for a failure, while the row still has the
 * attempt count it was claimed with: an outcome that finds the row moved
 * on (redelivered, cancelled, released) changes nothing. Each recorded
 * outcome is noted in the destination statistics (health.c).
 *
 * Every function runs with a transaction open and SPI connected (after
 * OutboxQueueOpen()), in the relay worker or an outbox_relay() backend.
 *
 * src/outcome.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "executor/spi.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/resowner.h"

#include "event.h"
#include "guc.h"
#include "destination.h"
#include "health.h"
#include "ordering.h"
#include "outcome.h"
#include "pass.h"
#include "statements.h"

/*
 * Outcomes of events in flight, each in a short transaction of its own
 * after the request: by the TID the claim read (a third cheaper than
 * primary key lookups), and only while the row still has the claim's
 * attempt count; the outcome counts the attempt. A row changed since (an
 * admin redelivered or cancelled the event, a release counted a cut-off
 * attempt) is a newer version: its old TID finds nothing, and the outcome
 * changes nothing. The id is checked too: once that old version is
 * pruned, its line pointer can be reused by another row.
 */
static const Oid recorded_argtypes[] = {TIDARRAYOID, INT8ARRAYOID, INT4ARRAYOID, TEXTARRAYOID,
TEXTARRAYOID, TIMESTAMPTZARRAYOID};
static OutboxStatement recorded_stmt = {
	.sql =
		"UPDATE %1$s.outbox o"
		"   SET delivered_at = now(), attempts = o.attempts + 1, last_error = NULL,"
		"       destination = " OUTBOX_DELIVERED_DESTINATION("$4") ", held_by = NULL"
		"  FROM unnest($1::tid[], $2::bigint[], $3::int[], $4::text[], $5::text[],"
		"              $6::timestamptz[])"
		"       AS u(tid, id, attempts, dest, kind, created)"
		" WHERE o.ctid = ANY ($1) AND o.ctid = u.tid"
		"   AND o.id = u.id AND o.attempts = u.attempts"
		"   AND o.delivered_at IS NULL AND o.dead_at IS NULL"
		" RETURNING o.id",
	.nargs = 6,
	.argtypes = recorded_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN,
	.path = OUTBOX_PLAN_BY_TID
};

/*
 * A failed attempt, by id: expected is the attempt count the row must still
 * have (the one it was claimed with), attempts the count to record. It was
 * not cut off: the count of those in a row starts again (journal.c).
 */
static const Oid failure_argtypes[] = {INT8ARRAYOID, INT4ARRAYOID, INT4ARRAYOID,
TEXTARRAYOID, FLOAT8ARRAYOID, BOOLARRAYOID, TEXTARRAYOID};
static OutboxStatement failure_stmt = {
	.sql =
		"UPDATE %1$s.outbox o"
		"   SET attempts = u.attempts, last_error = u.err, cut_off_attempts = 0,"
		"       destination = coalesce(u.dest, o.destination),"
		"       next_attempt_at = CASE WHEN u.dead THEN o.next_attempt_at"
		"                         ELSE now() + make_interval(secs => u.delay_ms / 1000.0) END,"
		"       dead_at = CASE WHEN u.dead THEN now() END"
		"  FROM unnest($1::bigint[], $2::int[], $3::int[], $4::text[], $5::float8[],"
		"              $6::bool[], $7::text[])"
		"       AS u(id, expected, attempts, err, delay_ms, dead, dest)"
		" WHERE o.id = ANY ($1) AND o.id = u.id AND o.attempts = u.expected"
		"   AND coalesce(o.delivered_at, o.dead_at) IS NULL"
		" RETURNING o.id",
	.nargs = 7,
	.argtypes = failure_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN,
	.path = OUTBOX_PLAN_KEYED
};

/*
 * The longest delay before the next attempt after `attempts` failed ones,
 * in ms: outbox.backoff_base doubling, capped at outbox.backoff_max. The
 * one place the schedule's formula is written.
 */
static double
backoff_cap_ms(int attempts)
{
	return Min((double) outbox_backoff_base * pow(2.0, Min(attempts - 1, 60)),
			   (double) outbox_backoff_max);
}

/*
 * Delay before the next attempt of ev after `attempts` failed ones, in ms:
 * exponential from outbox.backoff_base, capped at outbox.backoff_max, with
 * "equal jitter" (half fixed, half random; the variant of that name in the
 * AWS Architecture Blog's "Exponential Backoff And Jitter") so that events
 * failing together do not all come back at the same instant. The events
 * of one request (a webhook's batch) share their random share, which the
 * kind drew (ev->jitter), so that they come back together, in one request
 * again.
 */
static double
backoff_ms(const OutboxEvent *ev, int attempts)
{
	double		delay = backoff_cap_ms(attempts);
	double		jitter = ev->jitter_set ? ev->jitter : pg_prng_double(&pg_global_prng_state);

	return delay / 2.0 + jitter * delay / 2.0;
}

/*
 * The longest time from an event's first attempt to its last under the
 * retry schedule: outbox.max_attempts attempts, each taking up to
 * timeout_ms, and between them the longest backoff (its jitter at most).
 * See destination.h. A broker that deduplicates by message id for a
 * window (JetStream's duplicate window) deduplicates a resend only if it
 * comes within it.
 */
double
OutboxRetrySpanMs(int timeout_ms)
{
	double		span = timeout_ms;

	for (int k = 1; k < outbox_max_attempts; k++)
		span += backoff_cap_ms(k) + timeout_ms;
	return span;
}

/*
 * Decides what a failed attempt of ev means and logs it (LOG, or WARNING
 * for a dead letter): returns true if the event is dead-lettered now, else
 * sets *delay_ms, the wait before the next attempt. attempts counts this
 * attempt. A Retry-After from the endpoint replaces the backoff, capped at
 * outbox.backoff_max.
 */
static bool
failed_attempt(const OutboxEvent *ev, int attempts, double *delay_ms)
{
	bool		dead = !ev->not_sent && ev->gone_target == NULL &&
		(ev->permanent || attempts >= outbox_max_attempts);
	const char *error = ev->error ? ev->error : "unknown error";

	*delay_ms = 0.0;
	if (!dead)
		*delay_ms = ev->retry_after_ms >= 0
			? (double) Min(ev->retry_after_ms, (int64) outbox_backoff_max)
			: backoff_ms(ev, ev->not_sent ? attempts + 1 : attempts);

	ereport(dead ? WARNING : LOG,
			(ev->dest.name != NULL ?
			 errmsg("could not deliver event %s to destination \"%s\": %s",
					ev->event_id, ev->dest.name, error) :
			 errmsg("could not deliver event %s: %s", ev->event_id, error),
			 dead ?
			 (ev->permanent ?
			  errdetail("The event was dead-lettered: retrying cannot help.") :
			  errdetail_plural("The event was dead-lettered after %d attempt.",
							   "The event was dead-lettered after %d attempts.",
							   attempts, attempts)) :
			 ev->not_sent ?
			 errdetail("Nothing was sent, so no attempt is counted; the event will be retried in %.0f ms.",
					   *delay_ms) :
			 errdetail("Attempt %d of %d; the event will be retried in %.0f ms.",
					   attempts, outbox_max_attempts, *delay_ms)));
	return dead;
}

/*
 * Disables a destination whose endpoint said it is gone, if its target
 * (the column or option $4, its kind's target_column) is still the one the event was
 * sent to (an operator may have moved it since) and nobody holds its row.
 * disabled_at is set by the enabled trigger.
 */
static const Oid disable_argtypes[] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID};
static OutboxStatement disable_stmt = {
	.sql =
		"UPDATE %1$s.outbox_destinations d"
		"   SET enabled = false, disabled_reason = $3"
		" WHERE d.ctid = (SELECT ctid FROM %1$s.outbox_destinations t"
		"                  WHERE name = $1 AND enabled AND coalesce(to_jsonb(t) ->> $4, t.options ->> $4) = $2"
		"                    FOR UPDATE SKIP LOCKED)"
		"   AND d.name = $1",
	.nargs = 4,
	.argtypes = disable_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN,
	.path = OUTBOX_PLAN_KEYED
};

/* how long disabling a gone destination may wait for a lock, in ms */
#define DISABLE_LOCK_TIMEOUT "100"

/*
 * Runs disable_stmt for one destination, in a subtransaction: the
 * update's triggers (disabled_at, and the statement trigger that makes
 * parked events due) may need locks that a relay's claim or an open
 * outbox_relay() session holds, and the relay must not wait for them. So
 * the table's lock is taken only if it is free (a claim that parks holds
 * SHARE on it), the rest waits at most DISABLE_LOCK_TIMEOUT ms, and any
 * error is rolled back and logged: the destination stays enabled, and its
 * endpoint's next such answer tries again. Returns whether it was
 * disabled.
 */
static bool
disable_one(const OutboxEvent *ev)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	Oid			destinations = get_relname_relid("outbox_destinations", OutboxQueueSchema());
	bool		disabled = false;

	if (!OidIsValid(destinations) || !ConditionalLockRelationOid(destinations, RowExclusiveLock))
	{
		ereport(LOG,
				(errmsg("could not disable destination \"%s\" now: outbox_destinations is locked",
						ev->dest.name),
				 errdetail("Its endpoint answered %s; its next such answer tries again.",
						   ev->gone_answer)));
		return false;
	}
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		Datum		values[4];
		int			rc;
		/* a SAVE level of its own: a LOCAL setting would outlive the subtransaction */
		int			nestlevel = NewGUCNestLevel();

		(void) set_config_option("lock_timeout", DISABLE_LOCK_TIMEOUT, PGC_USERSET,
								 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
		values[0] = CStringGetTextDatum(ev->dest.name);
		values[1] = CStringGetTextDatum(ev->gone_target);
		values[2] = CStringGetTextDatum(psprintf("the endpoint answered %s to event %s",
												 ev->gone_answer, ev->event_id));
		values[3] = CStringGetTextDatum(ev->dest.kind->target_column);
		rc = SPI_execute_plan(OutboxStatementPlan(&disable_stmt, OutboxQueueSchema()),
							  values, NULL, false, 0);
		if (rc != SPI_OK_UPDATE)
			elog(ERROR, "%s", SPI_result_code_string(rc));
		disabled = SPI_processed > 0;
		AtEOXact_GUC(true, nestlevel);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		ereport(LOG,
				(errmsg("could not disable destination \"%s\" now: %s", ev->dest.name,
						edata->message),
				 errdetail("Its endpoint answered %s; its next such answer tries again.",
						   ev->gone_answer)));
		FreeErrorData(edata);
		disabled = false;
	}
	PG_END_TRY();
	return disabled;
}

/*
 * Disables the destination of each event whose endpoint said it is gone
 * (ev->gone_target), once per destination and target (disable_one), and
 * says so in the log (WARNING) and the destination's statistics.
 */
static void
disable_gone(OutboxEvent **events, int n)
{
	for (int i = 0; i < n; i++)
	{
		OutboxEvent *ev = events[i];
		bool		seen = false;

		if (ev->gone_target == NULL || ev->dest.name == NULL)
			continue;
		for (int j = 0; j < i && !seen; j++)
			seen = events[j]->gone_target != NULL && events[j]->dest.name != NULL &&
				strcmp(events[j]->dest.name, ev->dest.name) == 0 &&
				strcmp(events[j]->gone_target, ev->gone_target) == 0;
		if (!seen && disable_one(ev))
			ereport(WARNING,
					(errmsg("destination \"%s\" was disabled: its endpoint answered %s",
							ev->dest.name, ev->gone_answer),
					 errdetail("Its events stay pending."),
					 errhint("Set enabled = true in outbox_destinations once the endpoint takes events again; its events then go.")));
	}
}

/*
 * Notes in the statistics the outcome of each event whose row the last
 * statement changed (its RETURNING gives the ids): an outcome that changed
 * nothing (the row had moved on) is not counted. failed: the events
 * failed (each noted with its error, without the answer), else delivered.
 */
static void
note_changed(OutboxEvent **events, bool failed, int n)
{
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		int64		id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r],
													 SPI_tuptable->tupdesc, 1, &isnull));

		for (int i = 0; i < n; i++)
		{
			if (events[i]->id == id)
			{
				events[i]->recorded = true;
				/* the error without the endpoint's answer: see OutboxHealthNote */
				OutboxHealthNote(events[i], !failed ? NULL :
								 events[i]->error ? events[i]->error : "unknown error");
				break;
			}
		}
	}
}

/*
 * Records failed attempts by id: each row must still have the attempt
 * count its event was claimed with, and gets one more. Returns how many
 * rows changed; an event whose row moved on is left alone.
 */
static uint64
record_failures(OutboxEvent **events, int n)
{
	Datum	   *ids = palloc(sizeof(Datum) * n);
	Datum	   *expected = palloc(sizeof(Datum) * n);
	Datum	   *attempts = palloc(sizeof(Datum) * n);
	Datum	   *errs = palloc(sizeof(Datum) * n);
	char	  **errors = palloc(sizeof(char *) * n);
	Datum	   *delays = palloc(sizeof(Datum) * n);
	Datum	   *dead = palloc(sizeof(Datum) * n);
	Datum	   *dests = palloc(sizeof(Datum) * n);
	bool	   *dest_nulls = palloc(sizeof(bool) * n);
	Datum		values[7];
	int			rc;
	uint64		processed;
	int			dims[1] = {n};
	int			lbs[1] = {1};

	for (int i = 0; i < n; i++)
	{
		OutboxEvent *ev = events[i];
		double		delay;

		ids[i] = Int64GetDatum(ev->id);
		expected[i] = Int32GetDatum(ev->attempts);
		/* not sent: the failure is recorded, but it was no attempt */
		attempts[i] = Int32GetDatum(ev->attempts + (ev->not_sent ? 0 : 1));
		errors[i] = psprintf("%s%s%s", ev->error ? ev->error : "unknown error",
							 ev->response ? ": " : "",
							 ev->response ? ev->response : "");
		errs[i] = CStringGetTextDatum(errors[i]);
		ev->dead_lettered = failed_attempt(ev, DatumGetInt32(attempts[i]), &delay);
		dead[i] = BoolGetDatum(ev->dead_lettered);
		delays[i] = Float8GetDatum(delay);
		dest_nulls[i] = ev->dest.name == NULL;
		dests[i] = dest_nulls[i] ? (Datum) 0 : CStringGetTextDatum(ev->dest.name);
	}
	values[0] = PointerGetDatum(construct_array(ids, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[1] = PointerGetDatum(construct_array(expected, n, INT4OID, 4, true, TYPALIGN_INT));
	values[2] = PointerGetDatum(construct_array(attempts, n, INT4OID, 4, true, TYPALIGN_INT));
	values[3] = PointerGetDatum(construct_array(errs, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[4] = PointerGetDatum(construct_array(delays, n, FLOAT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[5] = PointerGetDatum(construct_array(dead, n, BOOLOID, 1, true, TYPALIGN_CHAR));
	values[6] = PointerGetDatum(construct_md_array(dests, dest_nulls, 1, dims, lbs,
												   TEXTOID, -1, false, TYPALIGN_INT));

	rc = SPI_execute_plan(OutboxStatementPlan(&failure_stmt, OutboxQueueSchema()), values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "could not record failed attempts: %s", SPI_result_code_string(rc));
	note_changed(events, true, n);
	processed = SPI_processed;
	disable_gone(events, n);
	return processed;
}

/*
 * Records a failed attempt of each claimed (locked) event, in the claim's
 * transaction: attempts + 1, the error text, and either the time of the next
 * attempt or the dead-letter mark (see failed_attempt). Returns whether
 * every one was recorded. Same context and errors as OutboxMarkDelivered.
 */
bool
OutboxMarkFailed(OutboxEvent **events, int n)
{
	if (n == 0 || record_failures(events, n) == (uint64) n)
		return true;
	(void) OutboxCheckMarked(n, false);
	return false;
}

/*
 * Records the outcomes of n events that were in flight, on the row
 * versions their claim read (see recorded_stmt): delivered, or a failed
 * attempt (see failed_attempt); either counts the attempt. A delivery of
 * an event with an aggregate id releases the events held for it
 * (OutboxReleaseHeld). Returns how many events that made due.
 * Caller has a transaction open and SPI connected; ERROR if SPI fails.
 */
int
OutboxRecordOutcomes(OutboxEvent **events, int n)
{
	OutboxEvent **failed = palloc(sizeof(OutboxEvent *) * Max(n, 1));
	OutboxEvent **ok = palloc(sizeof(OutboxEvent *) * Max(n, 1));
	Datum	   *ids = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *attempts = palloc(sizeof(Datum) * Max(n, 1));
	int			nok = 0;
	int			nfailed = 0;
	int			released = 0;
	int			nrecorded = 0;

	for (int i = 0; i < n; i++)
	{
		if (!events[i]->ok)
		{
			failed[nfailed++] = events[i];
			continue;
		}
		ok[nok] = events[i];
		ids[nok] = Int64GetDatum(events[i]->id);
		attempts[nok] = Int32GetDatum(events[i]->attempts);
		nok++;
	}
	if (nok > 0)
	{
		Datum		values[6];
		int			rc;

		values[0] = OutboxTidArray(ok, nok);
		values[1] = PointerGetDatum(construct_array(ids, nok, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		values[2] = PointerGetDatum(construct_array(attempts, nok, INT4OID, 4, true, TYPALIGN_INT));
		OutboxDeliveryDestinations(ok, nok, &values[3], false);
		rc = SPI_execute_plan(OutboxStatementPlan(&recorded_stmt, OutboxQueueSchema()), values, NULL, false, 0);
		if (rc != SPI_OK_UPDATE_RETURNING)
			elog(ERROR, "could not record deliveries: %s", SPI_result_code_string(rc));
		note_changed(ok, false, nok);
		/* an outcome that changed nothing releases nothing */
		for (int i = 0; i < nok; i++)
			if (ok[i]->recorded)
				ok[nrecorded++] = ok[i];
		released = OutboxReleaseHeld(ok, nrecorded);
	}
	if (nfailed > 0)
		(void) record_failures(failed, nfailed);
	return released;
}

/*
 * Records a failed attempt of one event by id, outside the normal path:
 * after an ERROR that the event caused. Returns false if the row had
 * moved on.
 */
bool
OutboxRecordFailure(OutboxEvent *ev)
{
	return record_failures(&ev, 1) == 1;
}
