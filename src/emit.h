/*-------------------------------------------------------------------------
 *
 * emit.h
 *	  outbox_emit() and the wake-up of the relay at COMMIT.
 *
 * src/emit.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_EMIT_H
#define OUTBOX_EMIT_H

#include "fmgr.h"

extern Datum outbox_emit(PG_FUNCTION_ARGS);

#endif							/* OUTBOX_EMIT_H */
