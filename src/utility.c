/*-------------------------------------------------------------------------
 *
 * utility.c
 *	  Keeps the relay from blocking commands that need a database to
 *	  themselves.
 *
 * DROP DATABASE, ALTER DATABASE ... RENAME / SET TABLESPACE and CREATE
 * DATABASE ... TEMPLATE fail while another session is connected to the
 * database, and a relay is such a session. Before running one of them, the
 * issuing backend stops the relay of that database and pauses the launcher
 * for it; the command's own wait for other sessions to leave (up to five
 * seconds: CountOtherDBBackends in src/backend/storage/ipc/procarray.c)
 * covers the relay's exit. Only the database's owner or a superuser can
 * cause this. If the command fails, the relay comes
 * back once the pause ends.
 *
 * The hook runs in every backend that loaded the library.
 *
 * src/utility.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "nodes/parsenodes.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/acl.h"

#include "compat.h"

#include "shmem.h"
#include "utility.h"

/* long enough for the command to finish; a failed command waits this long */
#define DATABASE_COMMAND_PAUSE_MS 10000

static ProcessUtility_hook_type prev_process_utility = NULL;

/*
 * Stops the relay of dbname, if the current user owns that database (or is a
 * superuser): only such a user can run the commands above, and anyone else
 * must not be able to stop a relay by issuing a command doomed to fail.
 */
static void
pause_relay_of(const char *dbname)
{
	Oid			dboid;

	if (dbname == NULL)
		return;
	dboid = get_database_oid(dbname, true);
	if (OidIsValid(dboid) && OutboxDatabaseOwnercheck(dboid, GetUserId()))
		OutboxPauseRelay(dboid, DATABASE_COMMAND_PAUSE_MS);
}

/* Returns the option called name in a list of DefElem, or NULL. */
static DefElem *
has_option(List *options, const char *name)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *opt = lfirst(lc);

		if (strcmp(opt->defname, name) == 0)
			return opt;
	}
	return NULL;
}

/* The hook: stops the relay a database command would collide with. */
static void
outbox_process_utility(PlannedStmt *pstmt, const char *queryString,
					   bool readOnlyTree, ProcessUtilityContext context,
					   ParamListInfo params, QueryEnvironment *queryEnv,
					   DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *node = pstmt->utilityStmt;

	switch (nodeTag(node))
	{
		case T_DropdbStmt:
			pause_relay_of(((DropdbStmt *) node)->dbname);
			break;
		case T_AlterDatabaseStmt:
			if (has_option(((AlterDatabaseStmt *) node)->options, "tablespace"))
				pause_relay_of(((AlterDatabaseStmt *) node)->dbname);
			break;
		case T_RenameStmt:
			if (((RenameStmt *) node)->renameType == OBJECT_DATABASE)
				pause_relay_of(((RenameStmt *) node)->subname);
			break;
		case T_CreatedbStmt:
			{
				DefElem    *template = has_option(((CreatedbStmt *) node)->options, "template");

				if (template != NULL && template->arg != NULL)
					pause_relay_of(defGetString(template));
				break;
			}
		default:
			break;
	}

	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context,
							 params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
}

/*
 * Installs the ProcessUtility hook, chaining any previous one. Called once
 * from _PG_init in the postmaster, when the library is preloaded; the hook
 * is then inherited by every backend.
 */
void
OutboxInstallUtilityHook(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = outbox_process_utility;
}
