/*-------------------------------------------------------------------------
 *
 * wait.h
 *	  The relay's one wait: its latch, the postmaster, and the sockets of
 *	  every destination kind.
 *
 * src/wait.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_WAIT_H
#define OUTBOX_WAIT_H

#include "event.h"

extern bool OutboxWait(long timeout_ms, uint32 wait_event);
extern void OutboxSendAndWait(OutboxEvent **events, int n);

#endif							/* OUTBOX_WAIT_H */
