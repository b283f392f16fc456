/*-------------------------------------------------------------------------
 *
 * relay.h
 *	  One relay pass and the relay worker.
 *
 * src/relay.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_RELAY_H
#define OUTBOX_RELAY_H

#include "fmgr.h"

#include "compat.h"

typedef struct OutboxPassResult
{
	int			claimed;
	int			delivered;
	int			failed;
	int			unroutable;
} OutboxPassResult;

extern void OutboxRelayPass(int batch_size, OutboxPassResult *result);
extern Datum outbox_relay(PG_FUNCTION_ARGS);
extern PGDLLEXPORT OUTBOX_NORETURN_PRE void OutboxRelayMain(Datum main_arg) OUTBOX_NORETURN_POST;

#endif							/* OUTBOX_RELAY_H */
