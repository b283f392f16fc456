/*-------------------------------------------------------------------------
 *
 * signature.h
 *	  Standard Webhooks signing secrets and signatures.
 *
 * src/signature.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_SIGNATURE_H
#define OUTBOX_SIGNATURE_H

#include "fmgr.h"

#include "headers.h"

extern bool OutboxSecretCheck(const char *secret, OutboxProblem *problem);
extern char *OutboxSignature(const char *secret, const char *msg_id,
							 const char *timestamp, const char *body,
							 size_t bodylen);

extern Datum _outbox_valid_secret(PG_FUNCTION_ARGS);

#endif							/* OUTBOX_SIGNATURE_H */
