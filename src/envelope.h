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
#include "lib/stringinfo.h"
#include "utils/timestamp.h"

#include "event.h"

extern void OutboxAppendUtcTime(StringInfo buf, TimestampTz t);
extern Size OutboxEventEnvelopeBound(OutboxEvent *ev);
extern Size OutboxPrepareEnvelope(OutboxEvent *ev, bool with_payload);
extern Size OutboxBodyToUtf8(OutboxEvent *ev, Size cost);
extern char *OutboxBuildEnvelope(const OutboxEvent *ev, int attempt, bool with_payload);

extern Datum _outbox_envelope(PG_FUNCTION_ARGS);

#endif							/* OUTBOX_ENVELOPE_H */
