/*-------------------------------------------------------------------------
 *
 * statements.c
 *	  The cache of prepared statements that name the extension's schema.
 *
 * outbox_emit() and the relay run SQL that names the outbox tables with the
 * extension's schema in the text, so that no search_path can redirect them.
 * Each statement is prepared on first use in a process and kept
 * (SPI_keepplan). A kept plan follows its tables through DDL by itself, but
 * not a renamed schema, whose old name is in its text: one syscache
 * callback on pg_namespace, registered here once per process, marks every
 * kept plan stale, and each is prepared again on its next use. A statement
 * asked for another schema (the extension dropped and created elsewhere)
 * is prepared again too.
 *
 * The relay's statements touch a few rows of a table that may hold
 * millions, and the outbox table's statistics are a poor guide to which:
 * analyzed while it is empty (after a purge) or while nothing is pending
 * (the steady state), they make a sequential scan, or a walk of the
 * pending index joined to every row of a batch, look cheaper than
 * fetching each row by TID; the generic plan built then is kept until the
 * next ANALYZE, while a backlog turns each statement into a scan of it.
 * So a statement can pin its access path (OutboxPlanPath): its plan is
 * built with the other scan methods disabled, as a function's SET clause
 * would, for the planning only.
 *
 * Runs in any backend or worker, with SPI connected.
 *
 * src/statements.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/plancache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "statements.h"

/* bumped by every change to pg_namespace; plans of older ones are stale */
static uint64 nsp_generation = 1;
static bool callback_registered = false;

static void
nsp_changed(Datum arg pg_attribute_unused(), int cacheid pg_attribute_unused(),
			uint32 hashvalue pg_attribute_unused())
{
	nsp_generation++;
}

/*
 * The statement's text for schema nspoid, palloc'd in the current memory
 * context. ERROR if the schema does not exist.
 */
char *
OutboxStatementText(const OutboxStatement *stmt, Oid nspoid)
{
	char	   *nspname = get_namespace_name(nspoid);
	StringInfoData sql;

	if (nspname == NULL)
		elog(ERROR, "cache lookup failed for namespace %u", nspoid);
	initStringInfo(&sql);
	appendStringInfo(&sql, stmt->sql, quote_identifier(nspname));
	return sql.data;
}

/*
 * Planner settings off while a pinned plan is built. JIT too: a disabled
 * step that a plan cannot avoid (a sort of a few rows) adds its penalty to
 * the plan's cost, and past jit_above_cost each execution would compile
 * the plan, for statements that touch a few rows.
 */
static const char *const keyed_off[] = {
	"jit", "enable_seqscan", "enable_bitmapscan", "enable_sort", NULL
};
static const char *const by_tid_off[] = {
	"jit", "enable_seqscan", "enable_bitmapscan", "enable_sort",
	"enable_indexscan", "enable_indexonlyscan",
	"enable_nestloop", "enable_mergejoin", NULL
};

/*
 * Builds (or checks) the generic plan of kept plan with the planner methods
 * that path rules out disabled. Disabled, not forbidden: a plan with no
 * alternative still gets one. The settings are undone at once, and do not
 * reach anything the statement runs (triggers plan their own queries
 * later, under the session's settings). The plan then stays valid for
 * this transaction: its locks are held, so the execution that follows
 * does not read invalidations in between and uses this plan.
 */
static void
pin_plan(SPIPlanPtr plan, OutboxPlanPath path)
{
	const char *const *off = path == OUTBOX_PLAN_BY_TID ? by_tid_off : keyed_off;
	int			nestlevel = NewGUCNestLevel();
	bool		pushed = false;
	CachedPlan *cplan;

	for (; *off != NULL; off++)
		(void) set_config_option(*off, "off", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	/* planning may read the catalogs and estimate with a snapshot */
	if (!ActiveSnapshotSet())
	{
		PushActiveSnapshot(GetTransactionSnapshot());
		pushed = true;
	}
	cplan = SPI_plan_get_cached_plan(plan);
	if (cplan == NULL)
		elog(ERROR, "SPI_plan_get_cached_plan failed");
	/* kept plans count their references in CurrentResourceOwner */
	ReleaseCachedPlan(cplan, CurrentResourceOwner);
	if (pushed)
		PopActiveSnapshot();
	AtEOXact_GUC(true, nestlevel);
}

/* Prepares stmt for schema nspoid and keeps it in stmt, freeing the old plan. */
static void
prepare_statement(OutboxStatement *stmt, Oid nspoid)
{
	SPIPlanPtr	plan;
	char	   *sql;
	uint64		generation;

	/* read before the name: a change while preparing leaves the plan stale */
	generation = nsp_generation;
	sql = OutboxStatementText(stmt, nspoid);
	plan = SPI_prepare_cursor(sql, stmt->nargs, (Oid *) stmt->argtypes,
							  stmt->cursor_options);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s",
			 sql, SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	pfree(sql);

	if (stmt->plan != NULL)
		SPI_freeplan(stmt->plan);
	stmt->plan = plan;
	stmt->nspoid = nspoid;
	stmt->generation = generation;
}

/*
 * Returns the kept plan of stmt for the extension's schema nspoid,
 * preparing it if this process has none yet or it is stale, and for a
 * statement with a pinned path, its generic plan built now if the last
 * one was invalidated (pin_plan). Caller has SPI connected and a
 * transaction open, and executes the plan next. Errors: those of parse
 * analysis and planning (a missing table or function, for instance),
 * raised as ERROR.
 */
SPIPlanPtr
OutboxStatementPlan(OutboxStatement *stmt, Oid nspoid)
{
	if (!callback_registered)
	{
		CacheRegisterSyscacheCallback(NAMESPACEOID, nsp_changed, (Datum) 0);
		callback_registered = true;
	}
	if (stmt->plan == NULL || stmt->nspoid != nspoid ||
		stmt->generation != nsp_generation)
		prepare_statement(stmt, nspoid);

	Assert(stmt->path == OUTBOX_PLAN_ANY ||
		   (stmt->cursor_options & CURSOR_OPT_GENERIC_PLAN) != 0);
	if (stmt->path != OUTBOX_PLAN_ANY)
		pin_plan(stmt->plan, stmt->path);
	return stmt->plan;
}
