/*-------------------------------------------------------------------------
 *
 * deliver_notify.h
 *	  The NOTIFY transport.
 *
 * src/deliver_notify.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_DELIVER_NOTIFY_H
#define OUTBOX_DELIVER_NOTIFY_H

#include "event.h"

extern void OutboxDeliverNotify(OutboxEvent *event);

#endif							/* OUTBOX_DELIVER_NOTIFY_H */
