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

#include "event.h"

extern void OutboxDeliverHttp(OutboxEvent **events, int n);

#endif							/* OUTBOX_DELIVER_HTTP_H */
