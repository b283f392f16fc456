/*-------------------------------------------------------------------------
 *
 * deliver_http.h
 *	  The webhook transport.
 *
 * src/deliver_http.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_DELIVER_HTTP_H
#define OUTBOX_DELIVER_HTTP_H

#include "nodes/pg_list.h"

#include "event.h"

extern void OutboxHttpEnqueue(OutboxEvent *ev);
extern List *OutboxHttpRun(long wait_ms);
extern int	OutboxHttpPending(void);
extern bool OutboxHttpBusy(void);
extern int	OutboxHttpQueued(const char *name);
extern List *OutboxHttpFull(void);
extern void OutboxDeliverHttp(OutboxEvent **events, int n);

#endif							/* OUTBOX_DELIVER_HTTP_H */
