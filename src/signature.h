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
extern char *OutboxSignatures(char *const *secrets, int nsecrets,
							  const char *msg_id, const char *timestamp,
							  const char *body, size_t bodylen);
extern char *OutboxPublicKey(const char *secret);

extern Datum _outbox_valid_secret(PG_FUNCTION_ARGS);
extern Datum _outbox_new_secret(PG_FUNCTION_ARGS);
extern Datum outbox_public_key(PG_FUNCTION_ARGS);

#endif							/* OUTBOX_SIGNATURE_H */
