/*-------------------------------------------------------------------------
 *
 * bullmq_schema.c
 *	  A schema of BullMQ's PostgreSQL backend: found, checked against what
 *	  this kind knows, and add_job called in it.
 *
 * BullMQ's functions are internal to BullMQ, and its schema is versioned
 * per BullMQ major: a ledger (<schema>.migration) holds one row per
 * migration applied, with the lowest client major that may use the schema
 * after it (min_client_version). BullMQ's own clients refuse a schema whose
 * largest min_client_version is above their major (its migrator's
 * assertSchemaCompatibility); this kind keeps the same rule for BullMQ 6,
 * refuses any other major, and also requires add_job with BullMQ 6's
 * arguments. The check runs when a destination is written and again in
 * each claim's transaction that sends to the schema, so a migration to
 * another major stops the sending at once.
 *
 * The relay is the bootstrap superuser, and add_job is plpgsql that whoever
 * owns the schema may replace. So the ledger is read, and add_job called,
 * as the role that owns add_job, under SECURITY_RESTRICTED_OPERATION and
 * with its setting changes undone afterwards: as PostgreSQL's VACUUM and
 * ANALYZE run a table's index functions as the table's owner
 * (vacuum.c), so that the schema's owner can do no more through the relay
 * than it can itself.
 *
 * src/kinds/bullmq/bullmq_schema.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "bullmq_int.h"

/* add_job's argument types (BullMQ 6, migration 0002_functions) */
static const Oid add_job_types[BULLMQ_ADD_JOB_NARGS] = {
	TEXTOID,					/* p_queue */
	TEXTOID,					/* p_id */
	TEXTOID,					/* p_name */
	JSONBOID,					/* p_data */
	JSONBOID,					/* p_opts */
	INT4OID,					/* p_priority */
	INT8OID,					/* p_delay */
	INT8OID,					/* p_timestamp */
	INT4OID,					/* p_max_attempts */
	TEXTOID,					/* p_parent_queue */
	TEXTOID,					/* p_parent_id */
	TEXTOID,					/* p_parent_key */
	TEXTOID,					/* p_dedup_id */
	TEXTOID,					/* p_scheduler_id */
	BOOLOID						/* p_lifo */
};

#define HOW_TO_CHECK "Check with: SELECT max(version), max(min_client_version) FROM <schema>.migration;"

/* The identity and settings of a call made as add_job's owner. */
typedef struct AsOwner
{
	Oid			userid;
	int			sec_context;
	int			nestlevel;
} AsOwner;

static void
as_owner_begin(AsOwner *saved, Oid owner)
{
	GetUserIdAndSecContext(&saved->userid, &saved->sec_context);
	SetUserIdAndSecContext(owner, saved->sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	saved->nestlevel = NewGUCNestLevel();
}

static void
as_owner_end(const AsOwner *saved)
{
	AtEOXact_GUC(false, saved->nestlevel);
	SetUserIdAndSecContext(saved->userid, saved->sec_context);
}

/*
 * add_job in namespace nsp with BullMQ 6's arguments, a plain function
 * returning text that is not strict (NULL arguments are passed to it):
 * its oid and owner, or false.
 */
static bool
find_add_job(Oid nsp, Oid *fn, Oid *owner)
{
	oidvector  *types = buildoidvector(add_job_types, BULLMQ_ADD_JOB_NARGS);
	HeapTuple	tup;
	Form_pg_proc proc;
	bool		usable;

	*fn = GetSysCacheOid3(PROCNAMEARGSNSP, Anum_pg_proc_oid, CStringGetDatum("add_job"),
						  PointerGetDatum(types), ObjectIdGetDatum(nsp));
	if (!OidIsValid(*fn))
		return false;
	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(*fn));
	if (!HeapTupleIsValid(tup))
		return false;
	proc = (Form_pg_proc) GETSTRUCT(tup);
	usable = proc->prokind == PROKIND_FUNCTION && !proc->proretset &&
		proc->prorettype == TEXTOID && !proc->proisstrict;
	*owner = proc->proowner;
	ReleaseSysCache(tup);
	return usable;
}

/*
 * Reads the ledger of schema as owner: its rows, largest version and
 * largest min_client_version (0 when the ledger is empty). ERROR if it
 * cannot be read (no privilege, not BullMQ's table).
 */
static void
read_ledger(const char *schema, Oid owner, BullmqSchema *s, int64 *rows)
{
	AsOwner		saved;
	char	   *sql;
	bool		isnull;

	as_owner_begin(&saved, owner);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* as BullMQ's migrator reads it; min_client_version came in a later 6.x */
	sql = psprintf("SELECT pg_catalog.count(*), "
				   "COALESCE(pg_catalog.max(version), 0)::pg_catalog.int4, "
				   "COALESCE(pg_catalog.max((pg_catalog.to_jsonb(m) "
				   "OPERATOR(pg_catalog.->>) 'min_client_version')::pg_catalog.int4), 0) "
				   "FROM %s.migration m", quote_identifier(schema));
	if (SPI_execute(sql, true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not read the BullMQ migration ledger");
	*rows = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	s->schema_version = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
													SPI_tuptable->tupdesc, 2, &isnull));
	s->client_major = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
												  SPI_tuptable->tupdesc, 3, &isnull));
	SPI_finish();
	as_owner_end(&saved);
}

/*
 * Checks that schema holds a BullMQ 6 schema this kind can add jobs to,
 * filling *out: true, or false with out->problem set (SQLSTATE, message
 * and detail; the schema's name is not quoted, as no destination value
 * is). for_write: a destination is being written, where an empty ledger
 * is let pass (pg_restore may load the destinations before the ledger's
 * rows; the relay checks again). In a transaction, any backend; ERROR
 * only if the ledger exists and cannot be read.
 */
bool
BullmqSchemaCheck(const char *schema, bool for_write, BullmqSchema *out)
{
	Oid			nsp = get_namespace_oid(schema, true);
	int64		rows;

	memset(out, 0, sizeof(BullmqSchema));
	if (!OidIsValid(nsp))
		return OutboxProblemSet(&out->problem, ERRCODE_INVALID_SCHEMA_NAME,
								pstrdup("the BullMQ schema of the destination does not exist"),
								pstrdup("BullMQ's migrations create it: runMigrations(), or migrate: true on BullMQ's connection, in this database."));
	if (!OidIsValid(get_relname_relid("migration", nsp)))
		return OutboxProblemSet(&out->problem, ERRCODE_UNDEFINED_TABLE,
								pstrdup("the BullMQ schema of the destination has no migration ledger"),
								psprintf("BullMQ %d keeps one in <schema>.migration; run BullMQ's migrations.",
										 BULLMQ_MAJOR));
	if (!find_add_job(nsp, &out->add_job, &out->owner))
		return OutboxProblemSet(&out->problem, ERRCODE_UNDEFINED_FUNCTION,
								psprintf("the BullMQ schema of the destination has no add_job function of BullMQ %d",
										 BULLMQ_MAJOR),
								psprintf("outbox knows BullMQ %d, schema versions %s. %s",
										 BULLMQ_MAJOR, BULLMQ_KNOWN_SCHEMA_VERSIONS, HOW_TO_CHECK));
	read_ledger(schema, out->owner, out, &rows);
	if (rows == 0)
	{
		if (for_write)
			return true;
		return OutboxProblemSet(&out->problem, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
								pstrdup("the BullMQ schema's migration ledger is empty"),
								pstrdup("Run BullMQ's migrations, or finish restoring the schema."));
	}
	if (out->client_major != BULLMQ_MAJOR)
		return OutboxProblemSet(&out->problem, ERRCODE_FEATURE_NOT_SUPPORTED,
								psprintf("the BullMQ schema of the destination is for BullMQ %d clients (schema version %d)",
										 out->client_major, out->schema_version),
								psprintf("outbox knows BullMQ %d, schema versions %s and later ones of BullMQ %d. %s",
										 BULLMQ_MAJOR, BULLMQ_KNOWN_SCHEMA_VERSIONS, BULLMQ_MAJOR,
										 HOW_TO_CHECK));
	return true;
}

/*
 * The schemas checked in this process's current transaction, by name:
 * each is checked once per transaction, so a claim of many events reads
 * the ledger once, and the next transaction sees a migration or a drop.
 */
typedef struct CheckedSchema
{
	char		name[NAMEDATALEN];
	BullmqSchema s;
} CheckedSchema;

static List *checked = NIL;		/* of CheckedSchema, in TopTransactionContext */
static bool callback_registered = false;

static void
forget_checked(XactEvent event, void *arg pg_attribute_unused())
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
		checked = NIL;			/* its memory goes with the transaction */
}

/*
 * schema as BullmqSchemaCheck finds it for sending (problem.sqlstate 0:
 * usable), checked once per transaction. In the claim's transaction.
 */
BullmqSchema *
BullmqSchemaForSend(const char *schema)
{
	ListCell   *lc;
	CheckedSchema *c;
	MemoryContext old;

	foreach(lc, checked)
	{
		c = lfirst(lc);
		if (strcmp(c->name, schema) == 0)
			return &c->s;
	}
	if (!callback_registered)
	{
		RegisterXactCallback(forget_checked, NULL);
		callback_registered = true;
	}
	old = MemoryContextSwitchTo(TopTransactionContext);
	c = palloc0(sizeof(CheckedSchema));
	strlcpy(c->name, schema, NAMEDATALEN);
	(void) BullmqSchemaCheck(schema, false, &c->s);
	checked = lappend(checked, c);
	MemoryContextSwitchTo(old);
	return &c->s;
}

/*
 * Calls add_job of schema s (BullmqSchemaForSend's, usable) with args, as
 * its owner (see the file's header), and returns its result (the job's
 * id). ERROR: whatever add_job raises. In the claim's transaction; the
 * call's lookup (and add_job's setting of its search_path) is kept in s
 * for the transaction's other calls, as a statement keeps a function's.
 */
Datum
BullmqAddJob(BullmqSchema *s, NullableDatum *args)
{
	AsOwner		saved;
	Datum		result;

	LOCAL_FCINFO(fcinfo, BULLMQ_ADD_JOB_NARGS);

	if (!s->flinfo_set)
	{
		fmgr_info_cxt(s->add_job, &s->flinfo, TopTransactionContext);
		s->flinfo_set = true;
	}
	/* the default collation, as a call from SQL with text arguments has */
	InitFunctionCallInfoData(*fcinfo, &s->flinfo, BULLMQ_ADD_JOB_NARGS,
							 DEFAULT_COLLATION_OID, NULL, NULL);
	for (int i = 0; i < BULLMQ_ADD_JOB_NARGS; i++)
		fcinfo->args[i] = args[i];
	as_owner_begin(&saved, s->owner);
	result = FunctionCallInvoke(fcinfo);
	as_owner_end(&saved);
	return result;
}
