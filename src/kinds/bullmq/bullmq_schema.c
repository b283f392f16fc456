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
 * than it can itself. That holds only if the schema, its ledger and
 * add_job have one owner (the owner of a schema may replace anything in
 * it, the functions add_job calls included), and if nobody's temporary
 * table can stand for one of BullMQ's (add_job's search_path names its
 * schema, and a session's temporary tables come first): the checks below
 * refuse either case.
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
#include "catalog/pg_namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "storage/lock.h"
#include "utils/acl.h"
#include "utils/syscache.h"
#include "utils/timeout.h"

#include "compat.h"
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
 * Whether schema nsp, its ledger (a plain table) and add_job are all owned
 * by owner.
 */
static bool
one_owner(Oid nsp, Oid ledger, Oid owner)
{
	HeapTuple	tup = SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(nsp));
	bool		same;

	if (!HeapTupleIsValid(tup))
		return false;
	same = ((Form_pg_namespace) GETSTRUCT(tup))->nspowner == owner;
	ReleaseSysCache(tup);
	return same && get_rel_relkind(ledger) == RELKIND_RELATION &&
		OutboxRelationOwnercheck(ledger, owner);
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
	/*
	 * As BullMQ's migrator reads it: min_client_version came in a later
	 * 6.x, and a ledger without it is BullMQ 6's (its own major, there)
	 */
	sql = psprintf("SELECT pg_catalog.count(*), "
				   "COALESCE(pg_catalog.max(version), 0)::pg_catalog.int4, "
				   "COALESCE(pg_catalog.max((pg_catalog.to_jsonb(m) "
				   "OPERATOR(pg_catalog.->>) 'min_client_version')::pg_catalog.int4), %d) "
				   "FROM %s.migration m", BULLMQ_MAJOR, quote_identifier(schema));
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
 * is). for_write: a destination is being written, where the writer must
 * be allowed to add jobs (BullmqSchemaWriterCheck, before the ledger is
 * read for it) and an empty ledger is let pass (pg_restore may load the
 * destinations before the ledger's rows; the relay checks again). In a
 * transaction, any backend; ERROR only if the ledger exists and cannot be
 * read.
 */
bool
BullmqSchemaCheck(const char *schema, bool for_write, BullmqSchema *out)
{
	Oid			nsp = get_namespace_oid(schema, true);
	Oid			ledger;
	int64		rows;

	memset(out, 0, sizeof(BullmqSchema));
	out->nsp = nsp;
	if (!OidIsValid(nsp))
		return OutboxProblemSet(&out->problem, ERRCODE_INVALID_SCHEMA_NAME,
								pstrdup("the BullMQ schema of the destination does not exist"),
								pstrdup("BullMQ's migrations create it: runMigrations(), or migrate: true on BullMQ's connection, in this database."));
	ledger = get_relname_relid("migration", nsp);
	if (!OidIsValid(ledger))
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
	if (!one_owner(nsp, ledger, out->owner))
		return OutboxProblemSet(&out->problem, ERRCODE_INSUFFICIENT_PRIVILEGE,
								pstrdup("the BullMQ schema of the destination, its migration ledger and its add_job have different owners"),
								pstrdup("The relay adds jobs as add_job's owner, so whoever owns the schema could run code as that role. Run BullMQ's migrations as the schema's owner."));
	if (for_write && !BullmqSchemaWriterCheck(out))
		return false;
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
 * Whether the current user may have jobs added to schema s (checked by
 * BullmqSchemaCheck, usable): USAGE on the schema and EXECUTE on add_job,
 * as CREATE TRIGGER needs EXECUTE on the function its trigger will run
 * as another role. The relay adds the jobs as add_job's owner; without
 * this, any outbox_admin could add jobs to any queue in the database. False
 * with s->problem set (42501). In the writer's transaction.
 */
bool
BullmqSchemaWriterCheck(BullmqSchema *s)
{
	Oid			user = GetUserId();

	if (OutboxNamespaceAclcheck(s->nsp, user, ACL_USAGE) != ACLCHECK_OK ||
		OutboxProcAclcheck(s->add_job, user, ACL_EXECUTE) != ACLCHECK_OK)
		return OutboxProblemSet(&s->problem, ERRCODE_INSUFFICIENT_PRIVILEGE,
								pstrdup("permission denied for the BullMQ schema of the destination"),
								pstrdup("Writing a BullMQ destination needs USAGE on its schema and EXECUTE on its add_job: the relay adds the jobs as add_job's owner."));
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
		if (strcmp(c->name, schema) != 0)
			continue;
		/* a session's transaction may drop it between two passes */
		if (c->s.problem.sqlstate != 0 ||
			SearchSysCacheExists1(PROCOID, ObjectIdGetDatum(c->s.add_job)))
			return &c->s;
		checked = foreach_delete_current(checked, lc);
		break;
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
 * its owner (see the file's header), waiting at most lock_timeout_ms for a
 * lock (BullMQ's locks are the claim's: a queue being obliterated, a
 * migration) and, in the relay worker (where no statement_timeout runs),
 * that long for the whole call; returns its result (the job's id). In the
 * relay worker, releases the session-level advisory locks add_job took
 * (the relay takes none of its own). ERROR: whatever add_job raises, a
 * lock (55P03) or statement (57014) timeout. In the claim's transaction; the
 * call's lookup (and add_job's setting of its search_path) is kept in s
 * for the transaction's other calls, as a statement keeps a function's.
 */
Datum
BullmqAddJob(BullmqSchema *s, NullableDatum *args, int lock_timeout_ms)
{
	AsOwner		saved;
	volatile Datum result = (Datum) 0;
	volatile bool armed = false;

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
	(void) set_config_option("lock_timeout", psprintf("%d", lock_timeout_ms), PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	/* and for the whole call (a sleep): unless a session's own runs */
	if (!get_timeout_active(STATEMENT_TIMEOUT))
	{
		enable_timeout_after(STATEMENT_TIMEOUT, lock_timeout_ms);
		armed = true;
	}
	PG_TRY();
	{
		result = FunctionCallInvoke(fcinfo);
	}
	PG_FINALLY();
	{
		if (armed)
			disable_timeout(STATEMENT_TIMEOUT, false);
	}
	PG_END_TRY();
	as_owner_end(&saved);
	/* no session-level lock of the owner's outlives the call in the relay */
	if (OutboxInBackgroundWorker())
		LockReleaseSession(USER_LOCKMETHOD);
	return result;
}
