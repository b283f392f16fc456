/*-------------------------------------------------------------------------
 *
 * envelope.h
 *	  The JSON envelope sent for an event.
 *
 * src/envelope.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_ENVELOPE_H
#define OUTBOX_ENVELOPE_H

#include "fmgr.h"

#include "event.h"

extern char *OutboxBuildEnvelope(const OutboxEvent *ev, int attempt);

extern Datum _outbox_envelope(PG_FUNCTION_ARGS);

#endif							/* OUTBOX_ENVELOPE_H */
