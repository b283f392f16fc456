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
 * Runs in any backend or worker, with SPI connected.
 *
 * src/statements.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
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
 * Returns the kept plan of stmt for the extension's schema nspoid,
 * preparing it if this process has none yet or it is stale. Caller has SPI
 * connected. Errors: those of parse analysis (a missing table or function,
 * for instance), raised as ERROR.
 */
SPIPlanPtr
OutboxStatementPlan(OutboxStatement *stmt, Oid nspoid)
{
	SPIPlanPtr	plan;
	char	   *sql;
	uint64		generation;

	if (!callback_registered)
	{
		CacheRegisterSyscacheCallback(NAMESPACEOID, nsp_changed, (Datum) 0);
		callback_registered = true;
	}
	if (stmt->plan != NULL && stmt->nspoid == nspoid &&
		stmt->generation == nsp_generation)
		return stmt->plan;

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
	return plan;
}
