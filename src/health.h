/*-------------------------------------------------------------------------
 *
 * health.h
 *	  Relay and destination health in shared memory, and the SQL functions
 *	  that read and reset it.
 *
 * src/health.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_HEALTH_H
#define OUTBOX_HEALTH_H

#include "fmgr.h"
#include "nodes/pg_list.h"

#include "event.h"

/* Bytes of a destination's name that identify its row (longer ones share). */
#define OUTBOX_HEALTH_NAME_BYTES 128
/* Bytes of an error text kept. */
#define OUTBOX_HEALTH_ERROR_BYTES 256

/* What the launcher knows of a relay that is not running. */
typedef enum OutboxLaunchState
{
	OUTBOX_LAUNCH_STARTING,		/* registered, not attached yet */
	OUTBOX_LAUNCH_RESTARTING,	/* exited, started again at next_start */
	OUTBOX_LAUNCH_NOT_STARTED	/* held back, for the reason given */
} OutboxLaunchState;

extern void OutboxHealthShmemInit(void);

/* the launcher */
extern void OutboxHealthLaunch(Oid dboid, int relay_no, const char *dbname,
							   OutboxLaunchState state, TimestampTz next_start,
							   const char *reason);
extern void OutboxHealthSweep(const Oid *keep, int n, int relays_per_database);
extern void OutboxHealthMissing(List *names);

/* a relay */
extern void OutboxHealthRelayStarted(Oid dboid, int relay_no);
extern void OutboxHealthRelayIdle(bool idle);
extern void OutboxHealthRelayPass(bool budget_limited, Size held_bytes);
extern void OutboxHealthRelayError(const char *what, const char *message);
extern void OutboxHealthRelayStepOk(void);
extern void OutboxHealthRelayHorizon(int pid, TimestampTz since);

/* any process that records outcomes (queue.c) */
extern void OutboxHealthNote(const OutboxEvent *ev, const char *error);

extern Datum outbox_relay_stats(PG_FUNCTION_ARGS);
extern Datum outbox_destination_stats(PG_FUNCTION_ARGS);
extern Datum outbox_destination_stats_1_2(PG_FUNCTION_ARGS);
extern Datum outbox_destination_latency(PG_FUNCTION_ARGS);
extern Datum outbox_stats_reset(PG_FUNCTION_ARGS);

#endif							/* OUTBOX_HEALTH_H */
