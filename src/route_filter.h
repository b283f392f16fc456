/*-------------------------------------------------------------------------
 *
 * route_filter.h
 *	  The rules of a destination's filter (a jsonpath predicate).
 *
 * src/route_filter.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_ROUTE_FILTER_H
#define OUTBOX_ROUTE_FILTER_H

#include "utils/jsonpath.h"

#include "headers.h"

/* a filter runs for every event its destination's pattern matches */
#define OUTBOX_MAX_FILTER_BYTES 4096

extern bool OutboxFilterCheck(JsonPath *filter, OutboxProblem *p);

#endif
