/*-------------------------------------------------------------------------
 *
 * emit.c
 *	  outbox_emit(): store one event in the caller's transaction, and wake
 *	  the relay when that transaction commits.
 *
 * The insert runs through SPI as the calling role, so the role needs only
 * INSERT on the outbox table: the event_id is generated here rather than read
 * back with RETURNING, which would need SELECT. The prepared INSERT is kept
 * by statements.c for the life of the backend.
 *
 * From 1.1 outbox_writer may not choose an event_id (a writer could reuse a
 * purged event's id with another payload, or probe which ids exist): the
 * column's default is _outbox_event_id(). outbox_emit() generates the id,
 * leaves it in pending_event_id and inserts without the column, and the
 * default hands that id to the row. A role that may insert event_id (an
 * admin, or any writer while the SQL objects are still those of 1.0)
 * gets the id inserted explicitly, as in 1.0.
 *
 * The rules and limits of an event are checked by the trigger on outbox
 * (validate.c), which this INSERT fires like any other.
 *
 * The wake-up is armed by a per-transaction flag; one transaction callback,
 * registered on first use in each backend, sets the relay's latch at COMMIT
 * and drops the flag at ABORT or PREPARE (a prepared transaction is picked up
 * by polling once it is committed).
 *
 * src/emit.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/acl.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "emit.h"
#include "event.h"
#include "shmem.h"
#include "statements.h"

PG_FUNCTION_INFO_V1(outbox_emit);
PG_FUNCTION_INFO_V1(_outbox_event_id);

static bool wake_pending = false;
/* the id outbox_emit() generated for the row it is inserting; see above */
static bool have_pending_event_id = false;
static pg_uuid_t pending_event_id;
static bool xact_callback_registered = false;

/* The INSERT; its parameters follow outbox_emit's arguments, after the event_id. */
static const Oid insert_argtypes[] = {UUIDOID, TEXTOID, JSONBOID, TEXTOID, TEXTOID, JSONBOID};
static OutboxStatement insert_stmt = {
	.sql =
		"INSERT INTO %1$s.outbox"
		" (event_id, event_type, payload, aggregate_type, aggregate_id, headers)"
		" VALUES ($1, $2, $3, $4, $5, $6)",
	.nargs = 6,
	.argtypes = insert_argtypes,
	.cursor_options = 0
};

/* The same without event_id, which the column's default then supplies. */
static OutboxStatement insert_default_stmt = {
	.sql =
		"INSERT INTO %1$s.outbox"
		" (event_type, payload, aggregate_type, aggregate_id, headers)"
		" VALUES ($1, $2, $3, $4, $5)",
	.nargs = 5,
	.argtypes = insert_argtypes + 1,
	.cursor_options = 0
};

/* Sets the relay's latch at COMMIT if this transaction emitted. */
static void
outbox_xact_callback(XactEvent event, void *arg pg_attribute_unused())
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (wake_pending)
				OutboxWakeRelay(MyDatabaseId);
			wake_pending = false;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			wake_pending = false;
			have_pending_event_id = false;
			break;
		default:
			break;
	}
}

/*
 * Arms the relay wake-up for the COMMIT of the current transaction. Called
 * in a backend with a transaction open, after an event was written.
 */
static void
wake_at_commit(void)
{
	if (!xact_callback_registered)
	{
		RegisterXactCallback(outbox_xact_callback, NULL);
		xact_callback_registered = true;
	}
	wake_pending = true;
}

/*
 * Fills *uuid with a UUID version 7 (RFC 9562): 48 bits of Unix time in
 * milliseconds, 12 bits of sub-millisecond time, then random bits. Time
 * ordering keeps inserts into the event_id index at its right edge. Within a
 * backend the 60-bit timestamp never repeats or goes back (RFC 9562, section
 * 6.2, method 3), so one session's event ids are strictly increasing.
 */
static void
generate_uuidv7(pg_uuid_t *uuid)
{
	static uint64 last_ts = 0;
	struct timespec ts;
	uint64		now;

	if (!pg_strong_random(uuid->data, UUID_LEN))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate random values")));

	clock_gettime(CLOCK_REALTIME, &ts);
	/* milliseconds << 12 | sub-millisecond fraction scaled to 12 bits */
	now = (((uint64) ts.tv_sec * 1000 + ts.tv_nsec / 1000000) << 12) |
		(((uint64) (ts.tv_nsec % 1000000) * 4096) / 1000000);
	if (now <= last_ts)
		now = last_ts + 1;
	last_ts = now;

	uuid->data[0] = (unsigned char) (now >> 52);
	uuid->data[1] = (unsigned char) (now >> 44);
	uuid->data[2] = (unsigned char) (now >> 36);
	uuid->data[3] = (unsigned char) (now >> 28);
	uuid->data[4] = (unsigned char) (now >> 20);
	uuid->data[5] = (unsigned char) (now >> 12);
	uuid->data[6] = (unsigned char) (0x70 | ((now >> 8) & 0x0f));
	uuid->data[7] = (unsigned char) now;
	uuid->data[8] = (unsigned char) (0x80 | (uuid->data[8] & 0x3f));
}

/*
 * _outbox_event_id() RETURNS uuid
 *
 * SQL-callable, VOLATILE; the default of outbox.event_id from 1.1: the id
 * outbox_emit() is inserting, if it is inserting one, else a new UUIDv7.
 * Executable by outbox_writer, whose plain INSERTs evaluate it.
 */
Datum
_outbox_event_id(PG_FUNCTION_ARGS pg_attribute_unused())
{
	pg_uuid_t  *id = (pg_uuid_t *) palloc(sizeof(pg_uuid_t));

	if (have_pending_event_id)
	{
		*id = pending_event_id;
		have_pending_event_id = false;
	}
	else
		generate_uuidv7(id);
	PG_RETURN_UUID_P(id);
}

/*
 * Whether the current role may insert outbox.event_id itself: true for an
 * admin, and for a writer while the SQL objects are those of 1.0.
 */
static bool
may_insert_event_id(Oid nspoid)
{
	Oid			relid = get_relname_relid("outbox", nspoid);
	AttrNumber	attnum;

	if (!OidIsValid(relid))
		return true;			/* the INSERT will say what is wrong */
	attnum = get_attnum(relid, "event_id");
	return attnum == InvalidAttrNumber ||
		pg_attribute_aclcheck(relid, attnum, GetUserId(), ACL_INSERT) == ACLCHECK_OK;
}

/*
 * outbox_emit(event_type text, payload jsonb, aggregate_type text,
 *			   aggregate_id text, headers jsonb) RETURNS uuid
 *
 * SQL-callable, in any backend, inside the caller's transaction (so from a
 * trigger or procedure too): inserts one event and returns its new event_id.
 * Rolling back the caller's transaction removes the event; committing it
 * wakes the relay. Privileges are the caller's: INSERT on outbox suffices.
 *
 * Errors: event_type NULL (22004 null_value_not_allowed) or empty
 * (22023 invalid_parameter_value); payload NULL (22004) or larger than
 * OUTBOX_MAX_PAYLOAD_BYTES (54000 program_limit_exceeded); headers not a
 * JSON object (22023); and those of the trigger on outbox
 * (_outbox_check_event: the other limits and header rules). Malformed JSON
 * is rejected by jsonb input before the call.
 */
Datum
outbox_emit(PG_FUNCTION_ARGS)
{
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
	pg_uuid_t  *event_id;
	SPIPlanPtr	plan;
	Oid			nspoid;
	int			rc;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("event type must not be null")));
	if (VARSIZE_ANY_EXHDR(PG_GETARG_DATUM(0)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("event type must not be empty")));
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("event payload must not be null"),
				 errhint("Use '{}' or 'null'::jsonb for an event without a body.")));
	if (toast_raw_datum_size(PG_GETARG_DATUM(1)) > OUTBOX_MAX_PAYLOAD_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("event payload is too large"),
				 errdetail("The payload takes %zu bytes; the limit is %d bytes.",
						   (size_t) toast_raw_datum_size(PG_GETARG_DATUM(1)),
						   OUTBOX_MAX_PAYLOAD_BYTES)));
	if (!PG_ARGISNULL(4) && !JB_ROOT_IS_OBJECT(PG_GETARG_JSONB_P(4)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("event headers must be a JSON object"),
				 errdetail("Headers map header names to values, for example {\"traceparent\": \"00-...\"}.")));

	event_id = (pg_uuid_t *) palloc(sizeof(pg_uuid_t));
	generate_uuidv7(event_id);

	values[0] = UUIDPGetDatum(event_id);
	for (int i = 0; i < 5; i++)
	{
		if (PG_ARGISNULL(i))
			nulls[i + 1] = 'n';
		else
			values[i + 1] = PG_GETARG_DATUM(i);
	}

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	nspoid = get_func_namespace(fcinfo->flinfo->fn_oid);
	if (may_insert_event_id(nspoid))
	{
		plan = OutboxStatementPlan(&insert_stmt, nspoid);
		rc = SPI_execute_plan(plan, values, nulls, false, 0);
	}
	else
	{
		plan = OutboxStatementPlan(&insert_default_stmt, nspoid);
		/* registered now, so that an abort forgets the pending id */
		if (!xact_callback_registered)
		{
			RegisterXactCallback(outbox_xact_callback, NULL);
			xact_callback_registered = true;
		}
		pending_event_id = *event_id;
		have_pending_event_id = true;
		rc = SPI_execute_plan(plan, values + 1, nulls + 1, false, 0);
		have_pending_event_id = false;
	}
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "SPI_execute_plan failed: %s", SPI_result_code_string(rc));
	SPI_finish();

	wake_at_commit();

	PG_RETURN_UUID_P(event_id);
}
