/*-------------------------------------------------------------------------
 *
 * steps.h
 *	  The relay worker's steps, each in a transaction of its own.
 *
 * src/steps.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_STEPS_H
#define OUTBOX_STEPS_H

#include "nodes/pg_list.h"

#include "claim.h"
#include "event.h"
#include "journal.h"
#include "start_log.h"

/* A step: runs inside a transaction with SPI connected. */
typedef void (*OutboxStepFn) (void *arg);

extern bool OutboxRunStep(const char *what, OutboxStepFn fn, void *arg, char **error);
extern bool OutboxRunStepPart(const char *what, OutboxStepFn fn, void *arg, char **error);

/* OutboxNextPendingStep, OutboxNextAloneStep and OutboxClaimStep */
typedef struct OutboxClaimStepArgs
{
	/* in */
	int			batch_size;
	OutboxSkip	skip;			/* destinations and kinds to leave out */
	int			relay;			/* this relay's number */
	MemoryContext cxt;			/* where the claimed events go */
	Size		held;			/* bytes of the events in flight (OUTBOX_RELAY_BYTES) */
	List	   *holding;		/* outcomes in hand, not recorded yet */
	bool		alone;			/* only_id is to be sent alone */
	/* in for OutboxClaimStep, out of OutboxNext*Step */
	int64		only_id;		/* one event at a time: its id, or 0 */
	int32		only_attempts;	/* and its attempts, when it was found */
	/* out of OutboxClaimStep */
	OutboxDispatchResult d;
} OutboxClaimStepArgs;

/* OutboxReleaseStep */
typedef struct OutboxReleaseStepArgs
{
	/* in */
	int64	   *own;			/* this relay's claims whose rows to release */
	int			nown;
	Oid			own_extoid;		/* the extension they were claimed from */
	bool		replica;		/* user triggers off */
	MemoryContext cxt;			/* where dead goes: it outlives the step */
	const OutboxJournalKey *only;	/* not NULL: that row only */
	/* out */
	bool		opened;			/* the extension was there */
	int64	   *dead;			/* runs gone, their entries to forget */
	int			ndead;
	uint64		counted;		/* cut-off attempts counted */
	uint64		alone;			/* events now to be sent alone */
	OutboxStartLogs logs;		/* read: remove once committed */
	OutboxJournalKey *keys;		/* OutboxJournalKeysStep: the rows, in cxt */
	int			nkeys;
} OutboxReleaseStepArgs;

/* OutboxJournalDoneStep (in only) */
typedef struct OutboxJournalDoneStepArgs
{
	int64	   *claims;			/* claims whose outcomes are all recorded */
	int			n;
	Oid			extoid;			/* the extension they were claimed from */
} OutboxJournalDoneStepArgs;

/* OutboxRecordStep */
typedef struct OutboxRecordStepArgs
{
	/* in */
	OutboxEvent **events;
	int			n;
	bool		single_failure; /* record events[0] as failed */
	bool		replica;		/* with single_failure: user triggers off */
	/* out */
	bool		recorded;		/* single_failure: the row was changed */
	double		next_due_ms;	/* after a failure: the next due time, else -1 */
} OutboxRecordStepArgs;

extern void OutboxNextPendingStep(void *arg);
extern void OutboxNextAloneStep(void *arg);
extern void OutboxJournalKeysStep(void *arg);
extern void OutboxJournalDropStep(void *arg);
extern bool OutboxStepSuperuser(void);
extern int	OutboxStepErrcode(void);
extern bool OutboxStepFailedAtCommit(void);
extern void OutboxClaimStep(void *arg);
extern void OutboxReleaseStep(void *arg);
extern bool OutboxReleaseAll(OutboxReleaseStepArgs *r);
extern void OutboxJournalDoneStep(void *arg);
extern void OutboxNextDueStep(void *arg);
extern void OutboxRecordStep(void *arg);
extern bool OutboxRecordIsolatedFailure(OutboxEvent *ev, const char *what, const char *error);

#endif							/* OUTBOX_STEPS_H */
