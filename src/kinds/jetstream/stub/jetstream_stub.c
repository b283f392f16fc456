/*-------------------------------------------------------------------------
 *
 * jetstream_stub.c
 *	  The JetStream kind in a build without it (make with_jetstream=no):
 *	  its description for the validation trigger, which refuses its
 *	  destinations and columns, and its SQL functions, each raising an
 *	  error saying so.
 *
 * The extension's scripts create outbox_jetstream_check() whatever the
 * build, and CREATE FUNCTION needs its symbol, as libcurl keeps a stub
 * handler for a protocol compiled out.
 *
 * src/kinds/jetstream/stub/jetstream_stub.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"

#include "destination.h"

#include "../jetstream_columns.h"

/* what the registry tells the validation trigger of the kind left out */
extern const OutboxKindLeftOut OutboxJetStreamLeftOut;

const OutboxKindLeftOut OutboxJetStreamLeftOut = {
	.name = JETSTREAM_NAME,
	.description = JETSTREAM_DESCRIPTION,
	.target_column = JETSTREAM_TARGET_COLUMN,
	.own_columns = (const OutboxKindColumn[]) {JETSTREAM_OWN_COLUMNS},
};

PG_FUNCTION_INFO_V1(_outbox_jetstream_check);

/*
 * _outbox_jetstream_check(...): 0A000, feature_not_supported, in any
 * backend.
 */
Datum
_outbox_jetstream_check(PG_FUNCTION_ARGS)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("this build of outbox has no jetstream kind"),
			 errdetail("The library was built with make with_jetstream=no.")));
	PG_RETURN_NULL();
}
