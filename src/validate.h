/*-------------------------------------------------------------------------
 *
 * validate.h
 *	  The rules of events and destinations, enforced when they are written
 *	  (triggers); their size limits are in limits.h.
 *
 * src/validate.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_VALIDATE_H
#define OUTBOX_VALIDATE_H

#include "fmgr.h"
#include "utils/jsonb.h"

#include "headers.h"

extern Datum _outbox_check_event(PG_FUNCTION_ARGS);
extern Datum _outbox_check_destination(PG_FUNCTION_ARGS);

#endif							/* OUTBOX_VALIDATE_H */
