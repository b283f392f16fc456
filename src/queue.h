/*-------------------------------------------------------------------------
 *
 * queue.h
 *	  The relay's statements against the outbox table: claim, journal the
 *	  events in flight, mark, park, record outcomes, release the journal of
 *	  relays that are gone, find the next due event.
 *
 * src/queue.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_QUEUE_H
#define OUTBOX_QUEUE_H

#include "fmgr.h"
#include "nodes/pg_list.h"

#include "event.h"

/* Builds what will be sent for a claimed event; returns the bytes it took. */
typedef Size (*OutboxPrepareFn) (OutboxEvent *ev);

extern bool OutboxQueueOpen(void);
extern Oid	OutboxQueueSchema(void);
extern Oid	OutboxQueueExtension(void);
extern int	OutboxClaim(int batch_size, List *skip, const int64 *exclude, int nexclude,
						int64 only_id, MemoryContext cxt,
						OutboxPrepareFn prepare, OutboxEvent **events, int *claimed);
extern void OutboxMarkDelivered(OutboxEvent **events, int n);
extern void OutboxMarkFailed(OutboxEvent **events, int n);
extern void OutboxMarkUnroutable(OutboxEvent **events, int n);
extern void OutboxJournal(OutboxEvent **events, int n, int64 run, int64 claim, int relay);
extern void OutboxJournalDone(const int64 *claims, int n, int64 run);
extern void OutboxRecordOutcomes(OutboxEvent **events, int n);
extern bool OutboxRecordFailure(OutboxEvent *ev);
extern uint64 OutboxReleaseJournal(const int64 *live, int nlive, const int64 *own, int nown);
extern void OutboxLockJournal(void);
extern bool OutboxNextPending(List *skip, const int64 *exclude, int nexclude,
							  int64 *id, int32 *attempts);
extern double OutboxNextDueMs(void);

extern Datum _outbox_claim_query(PG_FUNCTION_ARGS);
extern Datum _outbox_unroutable_error(PG_FUNCTION_ARGS);

#endif							/* OUTBOX_QUEUE_H */
