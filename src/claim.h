/*-------------------------------------------------------------------------
 *
 * claim.h
 *	  The claim transaction that the relay worker and outbox_relay() share.
 *
 * src/claim.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_CLAIM_H
#define OUTBOX_CLAIM_H

#include "fmgr.h"
#include "nodes/pg_list.h"

#include "event.h"
#include "skip.h"

/* What to claim (OutboxDispatch). */
typedef struct OutboxClaimRequest
{
	int			batch_size;		/* at most this many events */
	OutboxSkip	skip;			/* destinations and kinds to leave out */
	int64		only_id;		/* not 0: that one event only (isolation) */
	bool		alone;			/* with only_id: an event to be sent alone */
	int64		run;			/* the relay's run; 0 in a backend */
	Size		held;			/* bytes of events the caller holds in flight */
	List	   *holding;		/* events whose outcome it holds unrecorded */
	int			relay;			/* the relay's number in its database */
	MemoryContext cxt;			/* where the events go; outlives the claim */
} OutboxClaimRequest;

/* What a claim did (OutboxDispatch). */
typedef struct OutboxDispatchResult
{
	bool		opened;			/* the extension was there to work on */
	int			claimed;		/* rows locked */
	int			asked;			/* at most: the batch size, cut to the set's room */
	int			delivered;		/* sent at COMMIT */
	int			failed;
	int			unroutable;
	int			held;			/* not their key's turn (ordered destinations) */
	bool		marks_short;	/* a mark changed fewer rows than it was given */
	bool		due_again;		/* events became due in the claim: claim again */
	bool		routing_locked; /* outbox_destinations cannot change until COMMIT */
	bool		room_limited;	/* fewer than asked: the in-flight set is full */
	bool		budget_limited; /* events left for the memory budget */
	bool		dest_limited;	/* events left: their destination had its share */
	bool		kind_limited;	/* events left: their kind had no more room */
	bool		alone_left;		/* an event to be sent alone was left out */
	OutboxEvent **in_flight;	/* to be sent after COMMIT */
	int			nin_flight;
	int64	   *published;		/* their ids, in the in-flight set */
	int			npublished;
	int64		claim;			/* their journal row's claim number, or 0 */
	Oid			extoid;			/* the extension they were claimed from */
} OutboxDispatchResult;

extern void OutboxDispatch(const OutboxClaimRequest *req, OutboxDispatchResult *d);
extern bool OutboxClaimCutSettled(const OutboxDispatchResult *d);
extern Datum outbox_relay(PG_FUNCTION_ARGS);

#endif							/* OUTBOX_CLAIM_H */
