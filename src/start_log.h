/*-------------------------------------------------------------------------
 *
 * start_log.h
 *	  Which events in flight a relay had started sending, kept in files
 *	  that outlive the relay (see start_log.c).
 *
 * src/start_log.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_START_LOG_H
#define OUTBOX_START_LOG_H

#include "event.h"

/* What a release read of the start logs of relays that are gone. */
typedef struct OutboxStartLogs
{
	int64	   *runs;			/* runs whose log was read */
	int			nruns;
	int64	   *ids;			/* events they started ... */
	int32	   *attempts;		/* ... at these attempt counts */
	int			n;
	char	  **files;			/* the files read, to remove after the release */
	int			nfiles;
	int64	   *stopped;		/* runs that ended when asked to stop */
	int			nstopped;
} OutboxStartLogs;

extern void OutboxStartLogBegin(Oid dboid, int64 run);
extern void OutboxStartLogEnded(OutboxEvent *ev);
extern void OutboxStartLogStopped(void);
extern void OutboxStartLogRead(Oid dboid, const int64 *live, int nlive, OutboxStartLogs *logs);
extern void OutboxStartLogRemove(const OutboxStartLogs *logs);
extern void OutboxStartLogForget(Oid dboid);

#endif							/* OUTBOX_START_LOG_H */
