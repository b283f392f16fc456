/*-------------------------------------------------------------------------
 *
 * queue.h
 *	  The relay's statements that read the outbox table: claim due events,
 *	  mark those the claim delivers or parks, find the next due event.
 *	  The journal (journal.h), the outcomes (outcome.h) and the holds of
 *	  ordered destinations (ordering.h) have their own; opening the tables
 *	  for a pass is in pass.h.
 *
 * src/queue.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_QUEUE_H
#define OUTBOX_QUEUE_H

#include "fmgr.h"
#include "nodes/pg_list.h"

#include "admission.h"
#include "event.h"
#include "skip.h"

/* What a claim may take (OutboxClaim says what each means). */
typedef struct OutboxClaimLimits
{
	int			batch_size;
	OutboxSkip	skip;			/* destinations and kinds to leave out */
	const int64 *exclude;		/* ids of events in flight */
	int			nexclude;
	int64		only_id;		/* not 0: that event only */
	Size		held;			/* bytes of events in flight */
	int			per_dest;		/* 0: no share per destination */
	List	   *holding;		/* events the caller holds whose outcome is
								 * not recorded (OutboxEvent *): they count
								 * against their destination's room */
	bool		leave_alone;	/* leave out events to be sent alone */
} OutboxClaimLimits;

/* What a claim locked, and what it left out for which limit. */
typedef struct OutboxClaimLeft
{
	int			claimed;		/* rows locked */
	bool		budget_limited; /* the memory budget */
	bool		dest_limited;	/* a destination's share */
	bool		kind_limited;	/* the room its kind has for a destination */
	bool		alone;			/* an event to be sent alone */
} OutboxClaimLeft;

extern int	OutboxClaim(const OutboxClaimLimits *lim, MemoryContext cxt,
						OutboxPrepareFn prepare, OutboxEvent **events, OutboxClaimLeft *left);
extern bool OutboxNextAlone(const int64 *exclude, int nexclude, int64 *id, int32 *attempts);
extern int	OutboxMarkDelivered(OutboxEvent **events, int n, bool routing_locked,
								bool *all_marked);
extern void OutboxMarkUnroutable(OutboxEvent **events, int n);
extern bool OutboxNextPending(const OutboxSkip *skip, const int64 *exclude, int nexclude,
							  int64 *id, int32 *attempts);
extern double OutboxNextDueMs(void);

extern Datum _outbox_claim_query(PG_FUNCTION_ARGS);
extern Datum _outbox_unroutable_error(PG_FUNCTION_ARGS);

#endif							/* OUTBOX_QUEUE_H */
