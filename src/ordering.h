/*-------------------------------------------------------------------------
 *
 * ordering.h
 *	  Ordered destinations: holds, releases, and the routing lock.
 *
 * src/ordering.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_ORDERING_H
#define OUTBOX_ORDERING_H

#include "event.h"

extern int	OutboxHold(OutboxEvent **held, int n, int64 *mine, int nmine,
					   bool lock_others, bool trust_mine);
extern int	OutboxReleaseHeld(OutboxEvent **events, int n);
extern bool OutboxLockRouting(void);

#endif							/* OUTBOX_ORDERING_H */
