/*-------------------------------------------------------------------------
 *
 * http_targets.h
 *	  outbox.http_allowed_targets: where webhooks may connect.
 *
 * src/kinds/http/http_targets.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_HTTP_TARGETS_H
#define OUTBOX_HTTP_TARGETS_H

#include <sys/socket.h>

#include "utils/guc.h"

/* What the URL alone says about a target (OutboxTargetByName). */
typedef enum OutboxTargetVerdict
{
	OUTBOX_TARGET_ALLOWED,		/* a host entry matches: no address check */
	OUTBOX_TARGET_CHECK_ADDRESS,	/* address entries decide at connection */
	OUTBOX_TARGET_REFUSED		/* nothing can allow it */
} OutboxTargetVerdict;

extern char *outbox_http_allowed_targets;

extern bool OutboxTargetsCheckHook(char **newval, void **extra, GucSource source);
extern void OutboxTargetsAssignHook(const char *newval, void *extra);
extern uint64 OutboxTargetsGeneration(void);
extern OutboxTargetVerdict OutboxTargetByName(const char *host, int port);
extern bool OutboxTargetAddressAllowed(const struct sockaddr *addr);

#endif							/* OUTBOX_HTTP_TARGETS_H */
