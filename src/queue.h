/*-------------------------------------------------------------------------
 *
 * queue.h
 *	  The relay's statements against the outbox table: claim, lease, mark,
 *	  park, record outcomes, find the next due event.
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
extern int	OutboxClaim(int batch_size, List *skip, int64 only_id, MemoryContext cxt,
						OutboxPrepareFn prepare, OutboxEvent **events, int *claimed);
extern void OutboxMarkDelivered(OutboxEvent **events, int n);
extern void OutboxMarkFailed(OutboxEvent **events, int n);
extern void OutboxMarkUnroutable(OutboxEvent **events, int n);
extern void OutboxLease(OutboxEvent **events, int n, int relay, const double *lease_ms);
extern void OutboxRecordOutcomes(OutboxEvent **events, int n);
extern bool OutboxRecordFailure(OutboxEvent *ev, bool counted);
extern uint64 OutboxReleaseClaims(int relay);
extern bool OutboxNextPending(List *skip, int64 *id, int32 *attempts);
extern double OutboxNextDueMs(void);

extern Datum _outbox_claim_query(PG_FUNCTION_ARGS);
extern Datum _outbox_unroutable_error(PG_FUNCTION_ARGS);

#endif							/* OUTBOX_QUEUE_H */
