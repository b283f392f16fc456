/*-------------------------------------------------------------------------
 *
 * trace_context.h
 *	  The W3C Trace Context an event carries (trace_context.c).
 *
 * src/trace_context.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_TRACE_CONTEXT_H
#define OUTBOX_TRACE_CONTEXT_H

#include "utils/jsonb.h"

extern bool OutboxTraceparentValid(const char *s, size_t len);
extern bool OutboxTracestateValid(const char *s, size_t len);
extern Jsonb *OutboxTraceContextSettle(Jsonb *headers);
extern void OutboxTraceContextOf(Jsonb *headers, char **traceparent, char **tracestate);

#endif							/* OUTBOX_TRACE_CONTEXT_H */
