/*-------------------------------------------------------------------------
 *
 * validate.c
 *	  The rules of events and destinations, and the triggers that apply
 *	  them when a row is written.
 *
 * The limits are in event.h, their checks in size_limits.c; the header rules in headers.c, the secret
 * rules in signature.c, and each destination kind's own rules with its
 * kind (check_destination, destination.h). The triggers _outbox_check_event (BEFORE INSERT or
 * UPDATE of an event's own columns on outbox) and _outbox_check_destination
 * (BEFORE INSERT OR UPDATE on outbox_destinations) replace 1.0's check
 * constraints: a violated constraint prints the whole row ("Failing row
 * contains ...": payload, header values, secrets) to the client and the
 * server log. A trigger runs before PostgreSQL's own NOT NULL and CHECK
 * tests, so it raises its own errors first; they name the field and the
 * rule, never a value. NOT NULL is tested here for the same reason.
 *
 * The relay applies the same checks to what it claims (claim_decode.c,
 * and the kinds' prepare), on the stored sizes first, so that an event
 * that got past the trigger is dead-lettered with the reason before
 * anything large is built from it; a destination's headers and secret are
 * checked again when a request is built from them.
 *
 * A restore is let through (restoring()): a dump holds rows that older
 * versions' rules allowed, and the COPY that loads a table is all or
 * nothing, so one such row refused would empty the whole table, and the
 * COPY's error context would print the row to the log. Those rows are
 * kept as they are and dealt with when the relay claims them.
 *
 * Runs in any backend, inside a transaction.
 *
 * src/validate.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/htup_details.h"
#include "catalog/pg_class.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "nodes/plannodes.h"
#include "tcop/pquery.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"
#include "utils/rel.h"

#include "cloudevents.h"
#include "compat.h"
#include "destination.h"
#include "emit_hold.h"
#include "kind_registry.h"
#include "event.h"
#include "headers.h"
#include "size_limits.h"
#include "route_filter.h"
#include "trace_context.h"
#include "signature.h"
#include "validate.h"

PG_FUNCTION_INFO_V1(_outbox_check_event);
PG_FUNCTION_INFO_V1(_outbox_check_destination);

/* The trigger's row and relation, after checking how it was called. */
static HeapTuple
trigger_row(FunctionCallInfo fcinfo, const char *name, Relation *rel)
{
	TriggerData *td = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BEFORE(td->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event) ||
		!(TRIGGER_FIRED_BY_INSERT(td->tg_event) || TRIGGER_FIRED_BY_UPDATE(td->tg_event)))
		elog(ERROR, "%s must be called as a BEFORE INSERT OR UPDATE row trigger", name);
	*rel = td->tg_relation;
	return TRIGGER_FIRED_BY_UPDATE(td->tg_event) ? td->tg_newtuple : td->tg_trigtuple;
}

/*
 * Raises PostgreSQL's not-null error for the first NOT NULL column that is
 * null in tuple, without the "Failing row contains" detail.
 */
static void
check_not_null(Relation rel, HeapTuple tuple)
{
	TupleDesc	desc = RelationGetDescr(rel);

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attnotnull && !att->attisdropped && heap_attisnull(tuple, i + 1, desc))
			ereport(ERROR,
					(errcode(ERRCODE_NOT_NULL_VIOLATION),
					 errmsg("null value in column \"%s\" of relation \"%s\" violates not-null constraint",
							NameStr(att->attname), RelationGetRelationName(rel))));
	}
}

/* The value of column name, or isnull set. ERROR if there is no such column. */
static Datum
column(Relation rel, HeapTuple tuple, const char *name, bool *isnull)
{
	int			attnum = SPI_fnumber(RelationGetDescr(rel), name);

	if (attnum <= 0)
		elog(ERROR, "column \"%s\" of relation \"%s\" does not exist",
			 name, RelationGetRelationName(rel));
	return heap_getattr(tuple, attnum, RelationGetDescr(rel), isnull);
}

/* The size of column name as stored, detoasted; 0 for NULL. */
static Size
column_size(Relation rel, HeapTuple tuple, const char *name)
{
	bool		isnull;
	Datum		d = column(rel, tuple, name, &isnull);

	return isnull ? 0 : toast_raw_datum_size(d) - VARHDRSZ;
}

/*
 * Whether the row being written into rel comes from a restore: the
 * statement running is COPY rel FROM (how pg_restore and a plain dump load
 * a table), and its role owns rel or is a superuser, who could turn the
 * trigger off anyway. A writer's COPY, or a COPY into another table whose
 * trigger emits events, is checked as usual.
 */
static bool
restoring(Relation rel)
{
	PlannedStmt *ps;
	CopyStmt   *copy;

	if (ActivePortal == NULL || list_length(ActivePortal->stmts) != 1)
		return false;
	ps = linitial_node(PlannedStmt, ActivePortal->stmts);
	if (ps->commandType != CMD_UTILITY || ps->utilityStmt == NULL ||
		!IsA(ps->utilityStmt, CopyStmt))
		return false;
	copy = (CopyStmt *) ps->utilityStmt;
	if (!copy->is_from || copy->relation == NULL ||
		strcmp(copy->relation->relname, RelationGetRelationName(rel)) != 0 ||
		(copy->relation->schemaname != NULL &&
		 strcmp(copy->relation->schemaname, get_namespace_name(RelationGetNamespace(rel))) != 0))
		return false;
	return superuser() || OutboxRelationOwnercheck(RelationGetRelid(rel), GetUserId());
}

/*
 * An event being inserted with its trace context settled
 * (OutboxTraceContextSettle): its headers as given, or changed. Returns
 * the tuple, changed or not.
 */
static HeapTuple
settle_trace_context(Relation rel, HeapTuple tuple)
{
	int			attnum = SPI_fnumber(RelationGetDescr(rel), "headers");
	bool		isnull;
	Datum		d = column(rel, tuple, "headers", &isnull);
	Jsonb	   *given = isnull ? NULL : DatumGetJsonbP(d);
	Jsonb	   *settled = OutboxTraceContextSettle(given);
	Datum		value;

	if (settled == given)
		return tuple;
	value = JsonbPGetDatum(settled);
	isnull = false;
	return heap_modify_tuple_by_cols(tuple, RelationGetDescr(rel), 1, &attnum, &value, &isnull);
}

/*
 * _outbox_check_event() RETURNS trigger
 *
 * BEFORE INSERT OR UPDATE OF the event's columns, FOR EACH ROW, on outbox
 * (outbox_emit's INSERT fires it too). Raises, naming the field and the
 * rule: 23502 for a NULL in a NOT NULL column, 22023 for an empty
 * event_type, 54000 for a size over a limit of event.h (type, aggregate
 * fields, payload, headers, envelope), 22023/23514/54000 for headers
 * (OutboxHeadersCheck, with the names events may carry), 23514 for
 * negative attempts. A row that is already delivered or dead-lettered is
 * history (a restore, say) and is not checked.
 */
Datum
_outbox_check_event(PG_FUNCTION_ARGS)
{
	Relation	rel;
	HeapTuple	tuple = trigger_row(fcinfo, "_outbox_check_event", &rel);
	OutboxEventSizes sizes;
	OutboxProblem p;
	bool		isnull;
	Datum		d;

	check_not_null(rel, tuple);
	if (restoring(rel))
		return PointerGetDatum(tuple);
	(void) column(rel, tuple, "delivered_at", &isnull);
	if (!isnull)
		return PointerGetDatum(tuple);
	(void) column(rel, tuple, "dead_at", &isnull);
	if (!isnull)
		return PointerGetDatum(tuple);

	if (TRIGGER_FIRED_BY_INSERT(((TriggerData *) fcinfo->context)->tg_event))
		tuple = settle_trace_context(rel, tuple);

	d = column(rel, tuple, "attempts", &isnull);
	if (!isnull && DatumGetInt32(d) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("attempts must not be negative")));

	sizes.event_type = column_size(rel, tuple, "event_type");
	sizes.aggregate_type = column_size(rel, tuple, "aggregate_type");
	sizes.aggregate_id = column_size(rel, tuple, "aggregate_id");
	sizes.payload = column_size(rel, tuple, "payload");
	sizes.headers = column_size(rel, tuple, "headers");
	if (sizes.event_type == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("event type must not be empty")));
	if (!OutboxEventSizesCheck(&sizes, &p))
		OutboxRaiseProblem(&p);

	d = column(rel, tuple, "headers", &isnull);
	if (!isnull && !OutboxHeadersCheck(DatumGetJsonbP(d), true, &p))
		OutboxRaiseProblem(&p);
	d = column(rel, tuple, "payload", &isnull);
	if (!OutboxEnvelopeCheck(OutboxEnvelopeBound(&sizes, d), &p))
		OutboxRaiseProblem(&p);
	if (TRIGGER_FIRED_BY_INSERT(((TriggerData *) fcinfo->context)->tg_event))
		tuple = OutboxEmitHold(rel, tuple);
	return PointerGetDatum(tuple);
}

/* Raises 23514 with message and detail (both constant text). */
static void
refuse(const char *message, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_CHECK_VIOLATION),
			 errmsg_internal("%s", message),
			 detail ? errdetail_internal("%s", detail) : 0));
}

/*
 * The kind whose target column is the only one set in tuple, or NULL if
 * none or several are. A kind whose target is an option has no column.
 */
static const OutboxDestinationKind *
kind_by_target(Relation rel, HeapTuple tuple)
{
	const OutboxDestinationKind *found = NULL;

	for (int i = 0; i < OutboxKindCount(); i++)
	{
		bool		isnull;

		if (OutboxKindTargetIsOption(OutboxKindAt(i)))
			continue;
		(void) column(rel, tuple, OutboxKindAt(i)->target_column, &isnull);
		if (isnull)
			continue;
		if (found != NULL)
			return NULL;
		found = OutboxKindAt(i);
	}
	return found;
}

/*
 * Raises 23514 for a destination of a kind this build left out (make
 * with_<kind>=no): one that names it (kind_name, or NULL), or that sets its
 * target column or one of its own (every kind's rows leave them NULL).
 * Returns if there is none.
 */
static void
refuse_left_out(Relation rel, HeapTuple tuple, const char *kind_name)
{
	bool		kind_unset;

	(void) column(rel, tuple, "kind", &kind_unset);
	for (const OutboxKindLeftOut *const *k = OutboxKindsLeftOut(); *k != NULL; k++)
	{
		const char *set = NULL;
		bool		isnull;

		if (kind_name == NULL && kind_unset &&
			SPI_fnumber(RelationGetDescr(rel), (*k)->target_column) > 0)
		{
			/* written without a kind, with this one's target: of this kind */
			(void) column(rel, tuple, (*k)->target_column, &isnull);
			if (!isnull)
				kind_name = (*k)->name;
		}
		if (kind_name != NULL && strcmp(kind_name, (*k)->name) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_CHECK_VIOLATION),
					 errmsg("destination kind \"%s\" is not in this build of outbox", (*k)->name),
					 errdetail("The library was built with make with_%s=no.", (*k)->name),
					 errhint("Install a build with the kind, or use another kind.")));
		if (SPI_fnumber(RelationGetDescr(rel), (*k)->target_column) > 0)
		{
			(void) column(rel, tuple, (*k)->target_column, &isnull);
			if (!isnull)
				set = (*k)->target_column;
		}
		for (const OutboxKindColumn *c = (*k)->own_columns; set == NULL && c->name != NULL; c++)
		{
			if (SPI_fnumber(RelationGetDescr(rel), c->name) <= 0)
				continue;
			(void) column(rel, tuple, c->name, &isnull);
			if (!isnull)
				set = c->name;
		}
		if (set != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_CHECK_VIOLATION),
					 errmsg("destination %s is for %s, a kind not in this build of outbox",
							set, (*k)->description),
					 errdetail("The library was built with make with_%s=no.", (*k)->name),
					 errhint("Install a build with the kind, or leave %s out.", set)));
	}
}

/*
 * The rule that a destination has one target, the one of its kind: the
 * message, and a detail listing the kinds built in ("A destination is a
 * webhook (url) or a NOTIFY channel (channel), not both.").
 */
static void
refuse_targets(void)
{
	StringInfoData detail;
	int			n = OutboxKindCount();

	initStringInfo(&detail);
	appendStringInfoString(&detail, "A destination is ");
	for (int i = 0; i < n; i++)
	{
		const OutboxDestinationKind *k = OutboxKindAt(i);
		const char *sep = i == 0 ? "" : i == n - 1 ? " or " : ", ";

		appendStringInfo(&detail, "%s%s (%s%s)", sep, k->description,
						 OutboxKindTargetIsOption(k) ? "options." : "", k->target_column);
	}
	appendStringInfoString(&detail, n == 2 ? ", not both." : ", only one of them.");
	refuse("destination must have exactly one target", detail.data);
}

/*
 * Sets the kind of a destination written without one: the kind whose
 * target column is set (url: http, channel: notify). Returns the tuple,
 * changed or not.
 */
static HeapTuple
fill_kind(Relation rel, HeapTuple tuple)
{
	int			attnum = SPI_fnumber(RelationGetDescr(rel), "kind");
	const OutboxDestinationKind *k;
	bool		isnull;
	Datum		value;

	if (attnum <= 0)
		elog(ERROR, "column \"kind\" of relation \"%s\" does not exist",
			 RelationGetRelationName(rel));
	(void) heap_getattr(tuple, attnum, RelationGetDescr(rel), &isnull);
	if (!isnull || (k = kind_by_target(rel, tuple)) == NULL)
		return tuple;
	value = CStringGetTextDatum(k->name);
	isnull = false;
	return heap_modify_tuple_by_cols(tuple, RelationGetDescr(rel), 1, &attnum,
									 &value, &isnull);
}

/*
 * The kind of a destination row whose kind is set (fill_kind): one this
 * library has, its target alone set, and on UPDATE (old: the row before)
 * the same name and kind as before. Raises 23514 otherwise.
 */
static const OutboxDestinationKind *
check_kind(Relation rel, HeapTuple tuple, HeapTuple old)
{
	const OutboxDestinationKind *kind;
	bool		isnull;

	kind = column_size(rel, tuple, "kind") > OUTBOX_MAX_TYPE_BYTES ? NULL :
		OutboxKindByName(TextDatumGetCString(column(rel, tuple, "kind", &isnull)));
	if (kind == NULL)
	{
		StringInfoData kinds;

		if (column_size(rel, tuple, "kind") <= OUTBOX_MAX_TYPE_BYTES)
			refuse_left_out(rel, tuple, TextDatumGetCString(column(rel, tuple, "kind", &isnull)));

		initStringInfo(&kinds);
		for (int i = 0; i < OutboxKindCount(); i++)
			appendStringInfo(&kinds, "%s%s", i == 0 ? "" : ", ", OutboxKindAt(i)->name);
		refuse("destination kind is not valid", psprintf("It is one of: %s.", kinds.data));
	}
	if (old != NULL)
	{
		const OutboxDestinationKind *by_target = kind_by_target(rel, tuple);

		if (strcmp(TextDatumGetCString(column(rel, tuple, "name", &isnull)),
				   TextDatumGetCString(column(rel, old, "name", &isnull))) != 0)
			refuse("a destination cannot be renamed",
				   "Insert a destination with the new name and delete the old one.");
		if (strcmp(TextDatumGetCString(column(rel, old, "kind", &isnull)), kind->name) != 0 ||
			(by_target != NULL && by_target != kind))
			refuse("a destination cannot change its kind",
				   "Insert a new destination and delete the old one.");
	}
	/* a kind whose target is an option sets no target column */
	if (kind_by_target(rel, tuple) != (OutboxKindTargetIsOption(kind) ? NULL : kind))
		refuse_targets();
	return kind;
}

/*
 * A destination of kind uses no other kind's own columns (own_columns in
 * destination.h): each holds its unset value. Raises 23514 naming the
 * column and the kind it is for, never its value.
 */
static void
check_own_columns(Relation rel, HeapTuple tuple, const OutboxDestinationKind *kind)
{
	for (int i = 0; i < OutboxKindCount(); i++)
	{
		const OutboxDestinationKind *other = OutboxKindAt(i);

		if (other == kind)
			continue;
		for (const OutboxKindColumn *c = other->own_columns; c->name != NULL; c++)
		{
			int			attnum = SPI_fnumber(RelationGetDescr(rel), c->name);
			bool		isnull;
			Datum		d = column(rel, tuple, c->name, &isnull);
			Oid			out;
			bool		varlena;

			if (isnull)
				continue;
			if (c->unset != NULL)
			{
				getTypeOutputInfo(TupleDescAttr(RelationGetDescr(rel), attnum - 1)->atttypid,
								  &out, &varlena);
				if (strcmp(OidOutputFunctionCall(out, d), c->unset) == 0)
					continue;
			}
			refuse(psprintf("destination %s is for %s", c->name, other->description),
				   psprintf("This destination is %s: leave %s out.", kind->description, c->name));
		}
	}
}

/*
 * The rules of the columns every kind may have: headers, secret (only for
 * a kind that signs: OutboxKindSigningCheck), cloudevents_source (only for
 * a kind with a CloudEvents format: OutboxCloudEventSourceCheck),
 * event_headers (OutboxEventHeadersListCheck: 22023, 54000, 23514),
 * filter (OutboxFilterCheck: 23514, 54000), timeout_ms, format (one of kind's formats). Only webhooks send headers and have a time limit,
 * but 1.0 accepted both on channels (which ignore them), so a channel may
 * keep them: a restore or an upgrade keeps its rows. Raises 23514, or
 * 54000 for a size over a limit.
 */
static void
check_shared_columns(Relation rel, HeapTuple tuple, const OutboxDestinationKind *kind)
{
	OutboxProblem p;
	bool		isnull;
	Datum		d;

	d = column(rel, tuple, "headers", &isnull);
	if (!isnull)
	{
		if (toast_raw_datum_size(d) > OUTBOX_MAX_HEADERS_BYTES)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("destination headers are larger than %d bytes",
							OUTBOX_MAX_HEADERS_BYTES)));
		if (!OutboxHeadersCheck(DatumGetJsonbP(d), false, &p))
			OutboxRaiseProblem(&p);
	}

	d = column(rel, tuple, "secret", &isnull);
	if (!isnull)
	{
		OutboxKindSigningCheck(kind);
		if (toast_raw_datum_size(d) - VARHDRSZ > OUTBOX_MAX_SECRET_BYTES)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("destination secret is longer than %d bytes",
							OUTBOX_MAX_SECRET_BYTES)));
		if (!OutboxSecretCheck(TextDatumGetCString(d), &p))
			OutboxRaiseProblem(&p);
	}

	/* from 1.2; the 1.1 table has none (a 1.2 library before the update) */
	if (SPI_fnumber(RelationGetDescr(rel), "event_headers") > 0)
	{
		d = column(rel, tuple, "event_headers", &isnull);
		if (!isnull && !OutboxEventHeadersListCheck(DatumGetArrayTypeP(d), &p))
			OutboxRaiseProblem(&p);
	}

	/* from 1.2, as event_headers */
	if (SPI_fnumber(RelationGetDescr(rel), "filter") > 0)
	{
		d = column(rel, tuple, "filter", &isnull);
		if (!isnull && !OutboxFilterCheck(DatumGetJsonPathP(d), &p))
			OutboxRaiseProblem(&p);
	}

	/* a format's option: for a kind that can send CloudEvents */
	d = column(rel, tuple, "cloudevents_source", &isnull);
	if (!isnull)
	{
		if (!OutboxKindHasFormat(kind, OUTBOX_FORMAT_CLOUDEVENTS))
			refuse("destination cloudevents_source is for a destination that can send CloudEvents",
				   psprintf("This destination is %s: leave cloudevents_source out.", kind->description));
		if (!OutboxCloudEventSourceCheck(TextDatumGetCString(d), &p))
			OutboxRaiseProblem(&p);
	}

	d = column(rel, tuple, "timeout_ms", &isnull);
	if (!isnull && (DatumGetInt32(d) < 1 || DatumGetInt32(d) > OUTBOX_MAX_TIMEOUT_MS))
		refuse(psprintf("destination timeout_ms must be between 1 and %d", OUTBOX_MAX_TIMEOUT_MS), NULL);

	if (column_size(rel, tuple, "format") > OUTBOX_MAX_TYPE_BYTES ||
		!OutboxKindHasFormat(kind, TextDatumGetCString(column(rel, tuple, "format", &isnull))))
	{
		StringInfoData formats;

		initStringInfo(&formats);
		for (const char *const *f = kind->formats; *f != NULL; f++)
			appendStringInfo(&formats, "%s%s", f == kind->formats ? "" : ", ", *f);
		refuse("destination format is not valid",
			   psprintf("The formats of %s: %s.", kind->description, formats.data));
	}
}

/*
 * The kind's options (kind_options.c: OutboxKindOptionsCheck), before its
 * own rules read them: 22023, 23514 or 54000. From 1.2; a 1.1 table has
 * no options column (a 1.2 library before the update).
 */
static void
check_options(Relation rel, HeapTuple tuple, const OutboxDestinationKind *kind)
{
	OutboxProblem p;
	bool		isnull;
	Datum		d;

	if (SPI_fnumber(RelationGetDescr(rel), "options") <= 0)
		return;
	d = column(rel, tuple, "options", &isnull);
	if (!isnull && !OutboxKindOptionsCheck(kind, DatumGetJsonbP(d), &p))
		OutboxRaiseProblem(&p);
}

/*
 * _outbox_check_destination() RETURNS trigger
 *
 * BEFORE INSERT OR UPDATE, FOR EACH ROW, on outbox_destinations: the rules
 * of 1.0's check constraints, tightened, with errors that never show the
 * row (its secret and headers are credentials). A row written without a
 * kind gets the kind of the one target it has (fill_kind). Then: 23502
 * for NULL in a NOT NULL column; 23514 for an empty name or pattern, a
 * kind this library does not have, a target other than the kind's one,
 * invalid headers (OutboxHeadersCheck) or secret (OutboxSecretCheck), a
 * timeout_ms outside 1..OUTBOX_MAX_TIMEOUT_MS, an unknown format, options
 * the kind does not declare or of another type (22023; check_options), what the
 * kind's own rules refuse (its check_destination: the url of a webhook,
 * a channel's name, notify_mode), a value in another kind's own column
 * (check_own_columns), and, on UPDATE, a change of name or of kind; 54000
 * for a size over a limit.
 *
 * Name and kind are fixed because outbox_catch_up() gives consumers the
 * events delivered under a NOTIFY destination's name since its created_at:
 * a webhook turned into a channel, or a channel renamed to the name a
 * webhook had, would show them the webhook's events.
 */
Datum
_outbox_check_destination(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	Relation	rel;
	HeapTuple	tuple = trigger_row(fcinfo, "_outbox_check_destination", &rel);
	OutboxDestinationRow row;
	const OutboxDestinationKind *kind;
	OutboxProblem p;
	bool		isnull;

	/* what writers' backends know of destinations is read again (emit_hold.c) */
	CacheInvalidateRelcache(rel);

	tuple = fill_kind(rel, tuple);
	(void) column(rel, tuple, "kind", &isnull);
	if (isnull)
	{
		refuse_left_out(rel, tuple, NULL);
		refuse_targets();		/* none or several: no kind to take */
	}
	check_not_null(rel, tuple);
	if (restoring(rel))
		return PointerGetDatum(tuple);
	if (column_size(rel, tuple, "name") == 0)
		refuse("destination name must not be empty", NULL);
	if (column_size(rel, tuple, "name") > OUTBOX_MAX_TYPE_BYTES ||
		column_size(rel, tuple, "event_types") > OUTBOX_MAX_TYPE_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("destination name and event_types are limited to %d bytes each",
						OUTBOX_MAX_TYPE_BYTES)));
	if (column_size(rel, tuple, "event_types") == 0)
		refuse("destination event_types must not be empty", NULL);

	kind = check_kind(rel, tuple,
					  TRIGGER_FIRED_BY_UPDATE(td->tg_event) ? td->tg_trigtuple : NULL);
	/* the columns of a kind this build left out, which no kind here checks */
	refuse_left_out(rel, tuple, NULL);
	check_own_columns(rel, tuple, kind);
	check_shared_columns(rel, tuple, kind);
	check_options(rel, tuple, kind);
	row.desc = RelationGetDescr(rel);
	row.tuple = tuple;
	row.old_tuple = TRIGGER_FIRED_BY_UPDATE(td->tg_event) ? td->tg_trigtuple : NULL;
	row.cache = NULL;
	if (!OutboxKindCheckDestination(kind, &row, &p))
		OutboxRaiseProblem(&p);
	return PointerGetDatum(tuple);
}
