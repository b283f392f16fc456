/*-------------------------------------------------------------------------
 *
 * queue.h
 *	  The relay's statements against the outbox table: claim, mark, park,
 *	  find the next retry.
 *
 * src/queue.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_QUEUE_H
#define OUTBOX_QUEUE_H

#include "fmgr.h"

#include "event.h"

extern bool OutboxQueueOpen(void);
extern int	OutboxClaim(int batch_size, OutboxEvent **events, int *claimed);
extern void OutboxMarkDelivered(OutboxEvent **events, int n);
extern void OutboxMarkFailed(OutboxEvent **events, int n);
extern void OutboxMarkUnroutable(OutboxEvent **events, int n);
extern double OutboxNextDueMs(void);

extern Datum _outbox_claim_query(PG_FUNCTION_ARGS);
extern Datum _outbox_unroutable_error(PG_FUNCTION_ARGS);

#endif							/* OUTBOX_QUEUE_H */
