/*-------------------------------------------------------------------------
 *
 * session.c
 *	  The relay worker's session: it connects as the bootstrap superuser,
 *	  with settings that no database owner or role can change.
 *
 * src/session.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "compat.h"
#include "session.h"

/* A setting as the server's configuration had it before the worker connected. */
typedef struct ServerSetting
{
	char	   *name;
	char	   *value;
} ServerSetting;

static ServerSetting *server_settings = NULL;
static int	nserver_settings = 0;

/*
 * Remembers the value of every setting that ALTER DATABASE or ALTER ROLE
 * can change (user and superuser settings), as postgresql.conf and the
 * command line made it. Called by the worker before it connects, so that
 * drop_database_settings() can put them back.
 */
static void
save_server_settings(void)
{
	int			n;
	struct config_generic **vars = OutboxGucVariables(&n);

	server_settings = MemoryContextAlloc(TopMemoryContext, sizeof(ServerSetting) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		const char *value;

		if (vars[i]->context != PGC_USERSET && vars[i]->context != PGC_SUSET)
			continue;
		value = GetConfigOption(vars[i]->name, true, false);
		if (value == NULL)
			continue;
		server_settings[nserver_settings].name = MemoryContextStrdup(TopMemoryContext, vars[i]->name);
		server_settings[nserver_settings].value = MemoryContextStrdup(TopMemoryContext, value);
		nserver_settings++;
	}
}

/*
 * Undoes what ALTER DATABASE ... SET and ALTER ROLE ... SET applied when the
 * worker connected (BackgroundWorkerInitializeConnectionByOid applies them
 * like for any session): each such setting gets back the value that
 * save_server_settings() saw, with the priority of an override, so that no
 * later SET can change it either. The owner of a database can set any user
 * setting for it, and none of them must change what the relay's SQL means
 * or whether it succeeds: standard_conforming_strings changes how its
 * statements parse, role the user it runs as, exit_on_error makes every
 * caught error end it, TimeZone the envelope's created_at, and so on. The
 * server's own settings (postgresql.conf, ALTER SYSTEM) still apply, as
 * they were when the relay started. session_authorization has no saved
 * value (it is not set before connecting): it goes back to the bootstrap
 * superuser, the user the worker connects as. Called by the worker in a
 * transaction right after connecting.
 *
 * XXX: a setting of a library that is not loaded yet (plpgsql.*, say) is
 * only a placeholder here, without a server value to go back to; it is
 * left as it is.
 */
static void
drop_database_settings(void)
{
	int			n;
	struct config_generic **vars = OutboxGucVariables(&n);

	for (int i = 0; i < n; i++)
	{
		struct config_generic *var = vars[i];
		const char *value = NULL;

		if (var->source < PGC_S_GLOBAL || var->source > PGC_S_DATABASE_USER)
			continue;
		if (strcmp(var->name, "session_authorization") == 0)
			value = GetUserNameFromId(BOOTSTRAP_SUPERUSERID, false);
		for (int j = 0; value == NULL && j < nserver_settings; j++)
			if (strcmp(server_settings[j].name, var->name) == 0)
				value = server_settings[j].value;
		if (value == NULL)
			continue;
		(void) set_config_option(var->name, value, PGC_SUSET, PGC_S_OVERRIDE,
								 GUC_ACTION_SET, true, WARNING, false);
	}
}

/*
 * Settings from postgresql.conf or ALTER SYSTEM that would break a step
 * do not apply in the worker either: timeouts, a serializable or read-only
 * default, and a forced custom plan, which would be planned at each
 * execution without the access paths the relay's statements pin
 * (statements.c). The worker's queries name every object; user schemas
 * stay out.
 */
static void
override_server_settings(void)
{
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("lock_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("idle_in_transaction_session_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
#if PG_VERSION_NUM >= 170000
	SetConfigOption("transaction_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
#endif
	SetConfigOption("default_transaction_isolation", "read committed", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_read_only", "off", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("plan_cache_mode", "auto", PGC_SUSET, PGC_S_OVERRIDE);
}

/*
 * Connects the relay worker to database dboid as the bootstrap superuser
 * (FATAL if the database's or role's settings made it anyone else), with
 * the server's settings rather than the database's (drop_database_settings)
 * and the relay's own overrides. Called once, first thing, by the worker;
 * errors are FATAL there, and the launcher starts it again.
 */
void
OutboxWorkerConnect(Oid dboid)
{
	save_server_settings();
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	pgstat_report_appname("outbox relay " OUTBOX_VERSION);

	StartTransactionCommand();
	drop_database_settings();
	CommitTransactionCommand();
	override_server_settings();

	/* whatever the database's settings said, the relay is the superuser */
	if (GetSessionUserId() != BOOTSTRAP_SUPERUSERID || GetUserId() != BOOTSTRAP_SUPERUSERID)
		ereport(FATAL,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("outbox relay is not running as the bootstrap superuser")));
}
