/*-------------------------------------------------------------------------
 *
 * routing.h
 *	  Routing: which destinations take an event. Patterns
 *	  (route_pattern.c), the keys an event presents to filters of one
 *	  equality (route_key.c), and the claim's router (router.c).
 *
 * src/routing.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_ROUTING_H
#define OUTBOX_ROUTING_H

#include "utils/jsonb.h"

/* payload keys an event presents before it presents "all of them" */
#define OUTBOX_MAX_ROUTE_KEYS 256

/* one key: a top-level field's name (len bytes, not terminated), a scalar */
typedef void (*OutboxRouteKeyFn) (void *arg, const char *field, int len, JsonbValue *value);

extern void OutboxRouteWithinTransaction(bool on);
extern bool OutboxTypeMatches(const char *type, int tlen, const char *pattern, int plen);
extern bool OutboxPayloadKeys(Jsonb *payload, Datum *fields, int nfields,
							  OutboxRouteKeyFn emit, void *arg);

#endif							/* OUTBOX_ROUTING_H */
