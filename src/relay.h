/*-------------------------------------------------------------------------
 *
 * relay.h
 *	  The relay worker.
 *
 * src/relay.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_RELAY_H
#define OUTBOX_RELAY_H

#include "fmgr.h"

#include "compat.h"

extern PGDLLEXPORT OUTBOX_NORETURN_PRE void OutboxRelayMain(Datum main_arg) OUTBOX_NORETURN_POST;

#endif							/* OUTBOX_RELAY_H */
