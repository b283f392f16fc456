/*-------------------------------------------------------------------------
 *
 * size_limits.h
 *	  The size limits of an event and of what is sent for it (size_limits.c).
 *
 * src/size_limits.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_SIZE_LIMITS_H
#define OUTBOX_SIZE_LIMITS_H

#include "fmgr.h"

#include "event.h"
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

extern Datum _outbox_payload_text_bytes(PG_FUNCTION_ARGS);

#endif							/* OUTBOX_SIZE_LIMITS_H */
