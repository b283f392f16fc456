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
 * The command's own checks that come before its wait are made first, as
 * the command makes them (src/backend/commands/dbcommands.c): a command
 * that will fail for want of a privilege, for a name that is taken or a
 * tablespace that does not exist, or on the current database, does not
 * stop the relay (an owner repeating a doomed RENAME could otherwise keep
 * it down).
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

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "catalog/pg_tablespace.h"
#include "commands/tablespace.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "nodes/parsenodes.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/syscache.h"
#include "utils/varlena.h"

#include "compat.h"
#include "guc.h"
#include "shmem.h"
#include "dropdb_guard.h"
#include "start_log.h"

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

/*
 * Whether the current user may create databases, as CREATE DATABASE and
 * ALTER DATABASE ... RENAME require (have_createdb_privilege in
 * dbcommands.c, which is not exported).
 */
static bool
may_create_databases(void)
{
	HeapTuple	tup;
	bool		result = false;

	if (superuser())
		return true;
	tup = SearchSysCache1(AUTHOID, ObjectIdGetDatum(GetUserId()));
	if (HeapTupleIsValid(tup))
	{
		result = ((Form_pg_authid) GETSTRUCT(tup))->rolcreatedb;
		ReleaseSysCache(tup);
	}
	return result;
}

/* Whether a database called name exists. */
static bool
database_exists(const char *name)
{
	return name != NULL && OidIsValid(get_database_oid(name, true));
}

/* Whether dbname is the database this session is connected to. */
static bool
is_current_database(const char *dbname)
{
	return dbname != NULL && get_database_oid(dbname, true) == MyDatabaseId;
}

/*
 * Whether ALTER DATABASE ... SET TABLESPACE spcname would get past its
 * checks of the tablespace: it exists, and the user may create in it.
 */
static bool
tablespace_usable(const char *spcname)
{
	Oid			spcoid = get_tablespace_oid(spcname, true);

	return OidIsValid(spcoid) &&
		OutboxTablespaceAclcheck(spcoid, GetUserId(), ACL_CREATE) == ACLCHECK_OK;
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

/*
 * Pauses the relay of the database that the utility command node would
 * collide with, if any, and returns that database (InvalidOid if none);
 * sets *dropped to the database a DROP DATABASE drops. Raises what
 * PreventInTransactionBlock raises for a command in a transaction block.
 */
static Oid
pause_for(Node *node, bool top_level, Oid *dropped)
{
	switch (nodeTag(node))
	{
		case T_DropdbStmt:
			{
				DropdbStmt *stmt = (DropdbStmt *) node;

				PreventInTransactionBlock(top_level, "DROP DATABASE");
				*dropped = get_database_oid(stmt->dbname, true);
				if (!is_current_database(stmt->dbname))
					return pause_relay_of(stmt->dbname);
				return InvalidOid;
			}
		case T_AlterDatabaseStmt:
			{
				AlterDatabaseStmt *stmt = (AlterDatabaseStmt *) node;
				DefElem    *spc = option_named(stmt->options, "tablespace");

				if (spc == NULL)
					return InvalidOid;
				PreventInTransactionBlock(top_level, "ALTER DATABASE SET TABLESPACE");
				if (spc->arg != NULL && tablespace_usable(defGetString(spc)) &&
					!is_current_database(stmt->dbname))
					return pause_relay_of(stmt->dbname);
				return InvalidOid;
			}
		case T_RenameStmt:
			{
				RenameStmt *stmt = (RenameStmt *) node;

				if (stmt->renameType == OBJECT_DATABASE && may_create_databases() &&
					!database_exists(stmt->newname) && !is_current_database(stmt->subname))
					return pause_relay_of(stmt->subname);
				return InvalidOid;
			}
		case T_CreatedbStmt:
			{
				CreatedbStmt *stmt = (CreatedbStmt *) node;
				DefElem    *template = option_named(stmt->options, "template");

				if (template == NULL || template->arg == NULL)
					return InvalidOid;
				PreventInTransactionBlock(top_level, "CREATE DATABASE");
				if (may_create_databases() && !database_exists(stmt->dbname))
					return pause_relay_of(defGetString(template));
				return InvalidOid;
			}
		default:
			return InvalidOid;
	}
}

/* The hook: stops the relay a database command would collide with. */
static void
outbox_process_utility(PlannedStmt *pstmt, const char *queryString,
					   bool readOnlyTree, ProcessUtilityContext context,
					   ParamListInfo params, QueryEnvironment *queryEnv,
					   DestReceiver *dest, QueryCompletion *qc)
{
	Oid			dropping = InvalidOid;
	volatile Oid paused = pause_for(pstmt->utilityStmt,
									context == PROCESS_UTILITY_TOPLEVEL, &dropping);
	volatile Oid dropped = dropping;

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
	/* no release will read its relays' start logs now */
	if (OidIsValid(dropped))
		OutboxStartLogForget(dropped);
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
