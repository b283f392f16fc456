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

/*
 * What an envelope holds (see envelope.c), largest first: NOTIFY tries
 * them in this order.
 */
typedef enum OutboxEnvelopeForm
{
	OUTBOX_ENVELOPE_FULL,		/* every field and the payload */
	OUTBOX_ENVELOPE_REFERENCE,	/* every field but the payload */
	OUTBOX_ENVELOPE_ID			/* id, created_at and attempt */
} OutboxEnvelopeForm;

extern void OutboxAppendUtcTime(StringInfo buf, TimestampTz t);
extern Size OutboxEventEnvelopeBound(OutboxEvent *ev);
extern Size OutboxPrepareEnvelope(OutboxEvent *ev, OutboxEnvelopeForm form);
extern Size OutboxBodyToUtf8(OutboxEvent *ev, Size cost);
extern char *OutboxBuildEnvelopeForm(const OutboxEvent *ev, int attempt,
									 OutboxEnvelopeForm form);

extern Datum _outbox_envelope(PG_FUNCTION_ARGS);

#endif							/* OUTBOX_ENVELOPE_H */
