/*-------------------------------------------------------------------------
 *
 * dropdb_guard.c
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
 * cause this, and only for a database that has relays: one named in
 * outbox.databases or with a relay running (both set by a superuser).
 *
 * A pause lasts as long as the command's transaction: it ends when the
 * command fails (PG_CATCH), and at COMMIT or ABORT of that transaction
 * (ALTER DATABASE ... RENAME can run in a transaction block, and a later
 * statement can abort it); DATABASE_COMMAND_PAUSE_MS bounds it in any case.
 * The commands that cannot run in a transaction block are refused there
 * before the relay is stopped, with the error the command itself would
 * raise, so that a doomed command does not stop it.
 *
 * The hook runs in every backend that loaded the library.
 *
 * src/dropdb_guard.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "nodes/parsenodes.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/varlena.h"

#include "compat.h"
#include "guc.h"
#include "shmem.h"
#include "dropdb_guard.h"

/* the longest a pause lasts, should its transaction not end before */
#define DATABASE_COMMAND_PAUSE_MS 10000

static ProcessUtility_hook_type prev_process_utility = NULL;
static bool xact_callback_registered = false;
static bool paused_in_xact = false;

/* Ends this backend's pauses when its transaction ends, however it ends. */
static void
pause_xact_callback(XactEvent event, void *arg pg_attribute_unused())
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			if (paused_in_xact)
				OutboxUnpauseRelays(InvalidOid);
			paused_in_xact = false;
			break;
		default:
			break;
	}
}

/* True if dbname is named in outbox.databases (of this backend). */
static bool
listed_database(const char *dbname)
{
	char	   *raw = pstrdup(outbox_databases ? outbox_databases : "");
	List	   *names = NIL;
	ListCell   *lc;
	bool		found = false;

	if (SplitGUCList(raw, ',', &names))
	{
		foreach(lc, names)
			found = found || strcmp((char *) lfirst(lc), dbname) == 0;
	}
	list_free(names);
	pfree(raw);
	return found;
}

/*
 * Stops the relay of dbname and pauses it (OutboxPauseRelay), if the
 * current user owns that database (or is a superuser) and it is a database
 * with relays: only such a user can run the commands above, anyone else
 * must not be able to stop a relay by issuing a command doomed to fail, and
 * no one must be able to fill the pause table with databases of their own.
 * Returns the database paused, or InvalidOid.
 */
static Oid
pause_relay_of(const char *dbname)
{
	Oid			dboid;

	if (dbname == NULL)
		return InvalidOid;
	dboid = get_database_oid(dbname, true);
	if (!OidIsValid(dboid) || !OutboxDatabaseOwnercheck(dboid, GetUserId()))
		return InvalidOid;
	if (!listed_database(dbname) && !OutboxRelayRunning(dboid))
		return InvalidOid;
	if (!xact_callback_registered)
	{
		RegisterXactCallback(pause_xact_callback, NULL);
		xact_callback_registered = true;
	}
	paused_in_xact = true;
	OutboxPauseRelay(dboid, DATABASE_COMMAND_PAUSE_MS);
	return dboid;
}

/* Returns the option called name in a list of DefElem, or NULL. */
static DefElem *
option_named(List *options, const char *name)
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
	bool		top_level = context == PROCESS_UTILITY_TOPLEVEL;
	volatile Oid paused = InvalidOid;

	switch (nodeTag(node))
	{
		case T_DropdbStmt:
			PreventInTransactionBlock(top_level, "DROP DATABASE");
			paused = pause_relay_of(((DropdbStmt *) node)->dbname);
			break;
		case T_AlterDatabaseStmt:
			if (option_named(((AlterDatabaseStmt *) node)->options, "tablespace"))
			{
				PreventInTransactionBlock(top_level, "ALTER DATABASE SET TABLESPACE");
				paused = pause_relay_of(((AlterDatabaseStmt *) node)->dbname);
			}
			break;
		case T_RenameStmt:
			if (((RenameStmt *) node)->renameType == OBJECT_DATABASE)
				paused = pause_relay_of(((RenameStmt *) node)->subname);
			break;
		case T_CreatedbStmt:
			{
				DefElem    *template = option_named(((CreatedbStmt *) node)->options, "template");

				if (template != NULL && template->arg != NULL)
				{
					PreventInTransactionBlock(top_level, "CREATE DATABASE");
					paused = pause_relay_of(defGetString(template));
				}
				break;
			}
		default:
			break;
	}

	PG_TRY();
	{
		if (prev_process_utility)
			prev_process_utility(pstmt, queryString, readOnlyTree, context,
								 params, queryEnv, dest, qc);
		else
			standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
									params, queryEnv, dest, qc);
	}
	PG_CATCH();
	{
		/* a command that failed leaves no pause behind */
		if (OidIsValid(paused))
			OutboxUnpauseRelays(paused);
		PG_RE_THROW();
	}
	PG_END_TRY();
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
