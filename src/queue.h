/*-------------------------------------------------------------------------
 *
 * queue.h
 *	  The relay's statements that read the outbox table: claim due events,
 *	  mark those the claim delivers or parks, find the next due event.
 *	  The journal (journal.h) and the outcomes (outcome.h) have their own.
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
						int64 only_id, Size held, int per_dest, MemoryContext cxt,
						OutboxPrepareFn prepare, OutboxEvent **events, int *claimed,
						bool *budget_limited, bool *dest_limited);
extern void OutboxMarkDelivered(OutboxEvent **events, int n);
extern void OutboxMarkUnroutable(OutboxEvent **events, int n);
extern bool OutboxNextPending(List *skip, const int64 *exclude, int nexclude,
							  int64 *id, int32 *attempts);
extern double OutboxNextDueMs(void);
extern Datum OutboxInt8Array(const int64 *values, int n);
extern Datum OutboxTidArray(OutboxEvent **events, int n);
extern void OutboxCheckMarked(int n, bool delivered);

extern Datum _outbox_claim_query(PG_FUNCTION_ARGS);
extern Datum _outbox_unroutable_error(PG_FUNCTION_ARGS);

#endif							/* OUTBOX_QUEUE_H */
