/*-------------------------------------------------------------------------
 *
 * validate.h
 *	  The rules and limits of events and destinations, enforced when they
 *	  are written (triggers) and when the relay claims them.
 *
 * src/validate.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_VALIDATE_H
#define OUTBOX_VALIDATE_H

#include "fmgr.h"
#include "utils/jsonb.h"

#include "headers.h"

/* The stored sizes of an event's columns, in bytes (0 for NULL). */
typedef struct OutboxEventSizes
{
	Size		event_type;
	Size		aggregate_type;
	Size		aggregate_id;
	Size		payload;
	Size		headers;
} OutboxEventSizes;

extern bool OutboxEventSizesCheck(const OutboxEventSizes *sizes, OutboxProblem *problem);
extern Size OutboxEnvelopeBound(const OutboxEventSizes *sizes, Datum payload);
extern bool OutboxEnvelopeCheck(Size bound, OutboxProblem *problem);

extern Datum _outbox_check_event(PG_FUNCTION_ARGS);
extern Datum _outbox_check_destination(PG_FUNCTION_ARGS);
extern Datum _outbox_payload_text_bytes(PG_FUNCTION_ARGS);

#endif							/* OUTBOX_VALIDATE_H */
