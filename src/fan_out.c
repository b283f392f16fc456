/*-------------------------------------------------------------------------
 *
 * fan_out.c
 *	  Fan-out: an event that several destinations take is replaced, in
 *	  the claim that finds it, by one row per destination.
 *
 * Under 'all' routing (outbox_config), an event goes to every destination
 * whose pattern and filter take it. Its delivery state (attempts, backoff,
 * last_error, dead letter, hold, the in-flight journal) lives on its row,
 * so each destination gets a row of its own: the claim that finds an
 * event with several routes (_outbox_pending.fan_out) deletes its row and
 * inserts one per destination, with the event's event_id, content and
 * created_at, destination_id naming the destination and origin_id the
 * deleted row (its place in its aggregate's order, outbox_key_idx). From
 * then on each row is claimed, sent, retried, held and dead-lettered as
 * any row, so a destination that fails, hangs or is disabled changes
 * nothing for the others. An event that one destination takes keeps its
 * one row, as in 1.1, with no write added.
 *
 * The row of the destination that its last attempt went to (an event
 * retried before a second destination took it) keeps that attempt's
 * state; the others start at 0 attempts, due now. Rows held for the
 * deleted row (the next events of its key at an ordered destination) are
 * released: the next claim holds them again, for the new row of their
 * destination. All in the claim's transaction: a crash leaves the event's
 * one row or its rows, never both, never neither. The rows are the
 * claim's next batch (its caller claims again at once).
 *
 * Why rows, and not a table of deliveries beside the event: docs/fan-out.md.
 *
 * src/fan_out.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"

#include "fan_out.h"
#include "pass.h"
#include "statements.h"

/*
 * $1: the claimed rows, by TID. The routes are read through the view
 * _outbox_routes_of, which sees the rows as the statement's snapshot
 * does, before the DELETE. The relay's statements name relations only.
 * This statement's snapshot is newer than the claim's: a row whose routes
 * all went meanwhile (its destinations deleted or changed, when the claim
 * could not lock outbox_destinations) is not deleted, and the next claim
 * parks it as unroutable rather than losing it.
 */
static const Oid fan_out_argtypes[] = {TIDARRAYOID};
static OutboxStatement fan_out_stmt = {
	.sql =
		"WITH gone AS ("
		"    DELETE FROM %1$s.outbox o"
		"     WHERE o.ctid = ANY ($1) AND o.destination_id IS NULL"
		"       AND EXISTS (SELECT FROM %1$s._outbox_routes_of r WHERE r.id = o.id)"
		"    RETURNING o.*),"
		"  made AS ("
		"    INSERT INTO %1$s.outbox (event_id, event_type, aggregate_type, aggregate_id,"
		"                             payload, headers, created_at, redelivered_at,"
		"                             attempts, last_error, destination, cut_off_attempts,"
		"                             destination_id, origin_id)"
		"    SELECT g.event_id, g.event_type, g.aggregate_type, g.aggregate_id,"
		"           g.payload, g.headers, g.created_at, g.redelivered_at,"
		"           CASE WHEN r.destination = g.destination THEN g.attempts ELSE 0 END,"
		"           CASE WHEN r.destination = g.destination THEN g.last_error END,"
		"           CASE WHEN r.destination = g.destination THEN g.destination END,"
		"           CASE WHEN r.destination = g.destination THEN g.cut_off_attempts ELSE 0 END,"
		"           r.destination_id, g.id"
		"      FROM gone g JOIN %1$s._outbox_routes_of r ON r.id = g.id"
		"    RETURNING 1)"
		"UPDATE %1$s.outbox h"
		"   SET held_by = NULL, next_attempt_at = now()"
		"  FROM gone g"
		" WHERE h.held_by = g.id",
	.nargs = 1,
	.argtypes = fan_out_argtypes,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN,
	.path = OUTBOX_PLAN_KEYED
};

/*
 * Replaces the rows of the n claimed events (each with fan_out set, and
 * locked by the claim) by one row per destination that takes it. Runs in
 * the claim's transaction with SPI connected, in the relay worker or a
 * backend running outbox_relay(); raises ERROR only if SPI fails, which
 * aborts the claim and leaves every event as it was.
 */
void
OutboxFanOut(OutboxEvent **events, int n)
{
	Datum		values[1];
	int			rc;

	if (n == 0)
		return;
	values[0] = OutboxTidArray(events, n);
	rc = SPI_execute_plan(OutboxStatementPlan(&fan_out_stmt, OutboxQueueSchema()),
						  values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "could not fan events out: %s", SPI_result_code_string(rc));
}
