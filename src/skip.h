/*-------------------------------------------------------------------------
 *
 * skip.h
 *	  What a claim leaves out for now: destinations whose kind holds as
 *	  many of their events as it can start soon (full), by name, and whole
 *	  kinds that hold as many events as they can start at all (saturated).
 *
 * src/skip.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_SKIP_H
#define OUTBOX_SKIP_H

#include "fmgr.h"
#include "nodes/pg_list.h"

typedef struct OutboxSkip
{
	List	   *dests;			/* destination names (char *) */
	List	   *kinds;			/* kind names (char *) */
} OutboxSkip;

extern void OutboxSkipNow(OutboxSkip *skip);
extern bool OutboxSkipNone(const OutboxSkip *skip);
extern bool OutboxSkipCovers(const OutboxSkip *skip, const OutboxSkip *kept);
extern void OutboxSkipKeep(OutboxSkip *kept, const OutboxSkip *skip);
extern Datum OutboxSkipArray(List *names);

#endif							/* OUTBOX_SKIP_H */
