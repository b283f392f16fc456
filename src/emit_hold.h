/*-------------------------------------------------------------------------
 *
 * emit_hold.h
 *	  Holding, as it is written, an event that an earlier event of the
 *	  same transaction keeps waiting at an ordered destination.
 *
 * src/emit_hold.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_EMIT_HOLD_H
#define OUTBOX_EMIT_HOLD_H

#include "access/htup.h"
#include "utils/relcache.h"

extern HeapTuple OutboxEmitHold(Relation rel, HeapTuple tuple);

#endif							/* OUTBOX_EMIT_HOLD_H */
