/*-------------------------------------------------------------------------
 *
 * guc.c
 *	  Definitions of the relay's own outbox.* settings; each destination
 *	  kind defines its own in its folder (outbox.http_* in src/kinds/http/).
 *
 * Every setting is PGC_SIGHUP: the launcher and the relays re-read them on
 * reload, and none of them needs a restart. Times are in milliseconds with
 * a unit flag, so '5s' works too.
 *
 * src/guc.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "utils/guc.h"

#include "guc.h"
#include "shmem.h"

char	   *outbox_databases = NULL;
int			outbox_relays_per_database = 1;
int			outbox_max_destination_stats = 1024;
char	   *outbox_traceparent = NULL;
char	   *outbox_tracestate = NULL;
int			outbox_batch_size = 1000;
int			outbox_poll_interval = 1000;
int			outbox_max_attempts = 10;
int			outbox_backoff_base = 1000;
int			outbox_backoff_max = 3600 * 1000;
int			outbox_retention = 0;
int			outbox_horizon_warning = 60 * 1000;
int			outbox_inbox_retention = 0;
int			outbox_purge_batch_size = 1000;
int			outbox_purge_delay = 100;
int			outbox_purge_interval = 60 * 1000;

/*
 * Defines the relay's outbox.* settings. Called from _PG_init in any
 * process that loads the library (postmaster when preloaded, or a backend
 * on first use), before the preload check, so that SHOW works everywhere.
 */
void
OutboxDefineGucs(void)
{
	DefineCustomStringVariable("outbox.databases",
							   "Sets the databases in which a relay worker delivers events.",
							   "A comma-separated list of database names. The launcher starts and stops relays on reload.",
							   &outbox_databases,
							   "postgres",
							   PGC_SIGHUP,
							   GUC_LIST_INPUT,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.relays_per_database",
							"Sets the number of relay workers per database.",
							"Where one relay's core is not enough. FOR UPDATE SKIP LOCKED keeps each event with one relay at a time. The launcher starts and stops relays on reload.",
							&outbox_relays_per_database,
							1, 1, OUTBOX_MAX_RELAYS_PER_DATABASE,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.max_destination_stats",
							"Sets the number of destinations whose statistics are kept, all databases together.",
							"Each takes about 600 bytes of shared memory. Outcomes of destinations beyond it are counted in their database's overflow row of outbox_destination_stats, whose destination is NULL.",
							&outbox_max_destination_stats,
							1024, 16, OUTBOX_MAX_DESTINATION_STATS_LIMIT,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	/*
	 * Any value is taken: a malformed one is dropped when an event is
	 * written, with a WARNING, so that tracing never fails the writer's
	 * transaction (trace_context.c).
	 */
	DefineCustomStringVariable("outbox.traceparent",
							   "Sets the W3C traceparent that events written without one carry.",
							   "Set it for the transaction (SET LOCAL) to the trace context of the request that writes events: they carry it as their traceparent header, whoever writes them (triggers, procedures).",
							   &outbox_traceparent,
							   "",
							   PGC_USERSET,
							   GUC_NOT_IN_SAMPLE,
							   NULL, NULL, NULL);

	DefineCustomStringVariable("outbox.tracestate",
							   "Sets the W3C tracestate that events written without a traceparent carry with outbox.traceparent.",
							   NULL,
							   &outbox_tracestate,
							   "",
							   PGC_USERSET,
							   GUC_NOT_IN_SAMPLE,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.batch_size",
							"Sets the number of events claimed per relay pass.",
							"Each claim ends with a WAL flush that the relay waits for: larger claims keep a backlog's drain from being bound by the disk's flush time.",
							&outbox_batch_size,
							1000, 1, OUTBOX_MAX_BATCH_SIZE,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.poll_interval",
							"Sets the time a relay sleeps when it finds no work and is not woken by a commit.",
							NULL,
							&outbox_poll_interval,
							1000, 10, 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.max_attempts",
							"Sets the number of failed attempts after which an event is dead-lettered.",
							NULL,
							&outbox_max_attempts,
							10, 1, 10000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.backoff_base",
							"Sets the delay before the first retry of a failed event; each later retry doubles it.",
							NULL,
							&outbox_backoff_base,
							1000, 1, 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.backoff_max",
							"Sets the longest delay between two attempts of one event.",
							NULL,
							&outbox_backoff_max,
							3600 * 1000, 1, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	/*
	 * Retention is off by default: nothing is deleted unless asked for. In
	 * seconds, so '7d' works; a day is always 86400 s, whatever TimeZone.
	 */
	DefineCustomIntVariable("outbox.retention",
							"Sets how long delivered events are kept before the relay deletes them.",
							"0 keeps them. Counted from delivered_at in absolute time; pending and dead-lettered events are never deleted.",
							&outbox_retention,
							0, 0, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.inbox_retention",
							"Sets how long inbox rows are kept before the relay deletes them.",
							"0 keeps them. Counted from processed_at in absolute time. Keep it longer than any redelivery can take.",
							&outbox_inbox_retention,
							0, 0, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.purge_batch_size",
							"Sets the number of rows the relay deletes per purge transaction.",
							NULL,
							&outbox_purge_batch_size,
							1000, 1, 100000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.purge_delay",
							"Sets the pause between two purge transactions while more rows are due.",
							NULL,
							&outbox_purge_delay,
							100, 0, 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.horizon_warning",
							"Sets how old a transaction may hold back the removal of old row versions before the relay names it.",
							"Claims read every version of the outbox's rows that such a transaction still keeps. 0 turns the check off.",
							&outbox_horizon_warning,
							60 * 1000, 0, 24 * 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.purge_interval",
							"Sets how often the relay looks for rows to purge once none were left.",
							NULL,
							&outbox_purge_interval,
							60 * 1000, 100, 24 * 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

}
