/*-------------------------------------------------------------------------
 *
 * fan_out.h
 *	  An event that several destinations take, replaced by a row per
 *	  destination.
 *
 * src/fan_out.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_FAN_OUT_H
#define OUTBOX_FAN_OUT_H

#include "event.h"

extern void OutboxFanOut(OutboxEvent **events, int n);

#endif							/* OUTBOX_FAN_OUT_H */
