/*-------------------------------------------------------------------------
 *
 * admission.h
 *	  Which claimed events a claim takes: the relay's memory budget, one
 *	  destination's share, the room its kind has, the events sent alone.
 *
 * src/admission.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_ADMISSION_H
#define OUTBOX_ADMISSION_H

#include "executor/spi.h"
#include "nodes/pg_list.h"

#include "event.h"

struct OutboxClaimSecrets;

/* Builds what will be sent for a claimed event; returns the bytes it took. */
typedef Size (*OutboxPrepareFn) (OutboxEvent *ev);

/*
 * What the claim admits so far, against the limits of OutboxClaim. The
 * claim sets held, per_dest, holding, leave_alone and secrets, zeroes the
 * rest, and reads the flags after OutboxAdmit.
 */
typedef struct OutboxAdmission
{
	Size		held;			/* in flight, the events admitted included */
	int			per_dest;		/* 0: no share per destination */
	Size		bytes;			/* the claim's own cost so far */
	List	   *taken;			/* per destination (admission.c) */
	List	   *holding;		/* see OutboxClaimLimits */
	bool		leave_alone;	/* leave out events to be sent alone */
	bool		budget_limited;
	bool		dest_limited;
	bool		kind_limited;
	bool		alone_left;		/* one such event was left out */
	const struct OutboxClaimSecrets *secrets;
} OutboxAdmission;

extern int	OutboxAdmit(SPITupleTable *tt, OutboxEvent *ev, int nrows,
						OutboxPrepareFn prepare, OutboxAdmission *adm);

#endif							/* OUTBOX_ADMISSION_H */
