/*-------------------------------------------------------------------------
 *
 * aggregate_key.c
 *	  The key of an event's aggregate as outbox_key_idx stores it: 64 bits
 *	  of a SHA-256, so that no writer can make many aggregates share one.
 *
 * Ordered delivery finds the event before another of its aggregate with a
 * backward probe of outbox_key_idx, and compares the full key on each
 * entry it reads. 1.1 keyed the index by hashtextextended, which is built
 * for speed, not against an adversary: a writer could make tens of
 * thousands of 24-byte aggregate ids with one hash value in seconds, each
 * probe then read every one of them, and claims took seconds. Finding two
 * keys with the same 64 bits of a SHA-256 takes about 2^32 hashes, and a
 * set of n such keys far more: a probe reads one entry, or a few.
 *
 * src/aggregate_key.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/cryptohash.h"
#include "common/sha2.h"
#include "fmgr.h"
#include "utils/builtins.h"

#include "compat.h"

PG_FUNCTION_INFO_V1(_outbox_aggregate_key);

/*
 * _outbox_aggregate_key(aggregate_type text, aggregate_id text) RETURNS
 * bigint, IMMUTABLE: the first 8 bytes of SHA-256 over the type's bytes (a
 * NULL type as an empty one), a zero byte (which no text holds, so the
 * split between the two is unambiguous) and the id's bytes, big-endian;
 * NULL for a NULL id (an event without an aggregate has no key). The
 * bytes are those of the database's encoding, which a database cannot
 * change. Called in outbox_key_idx's expression (any role that inserts an
 * event) and in the claim's probe. Raises an ERROR only if the hash cannot
 * be computed (out of memory, or OpenSSL refusing SHA-256).
 */
Datum
_outbox_aggregate_key(PG_FUNCTION_ARGS)
{
	text	   *type = PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0);
	text	   *id;
	pg_cryptohash_ctx *ctx;
	uint8		hash[PG_SHA256_DIGEST_LENGTH];
	const uint8 zero = 0;
	uint64		key = 0;
	bool		ok;

	if (PG_ARGISNULL(1))
		PG_RETURN_NULL();
	id = PG_GETARG_TEXT_PP(1);

	ctx = pg_cryptohash_create(PG_SHA256);
	ok = ctx != NULL && pg_cryptohash_init(ctx) == 0;
	if (ok && type != NULL)
		ok = pg_cryptohash_update(ctx, (const uint8 *) VARDATA_ANY(type), VARSIZE_ANY_EXHDR(type)) == 0;
	ok = ok && pg_cryptohash_update(ctx, &zero, 1) == 0;
	ok = ok && pg_cryptohash_update(ctx, (const uint8 *) VARDATA_ANY(id), VARSIZE_ANY_EXHDR(id)) == 0;
	ok = ok && pg_cryptohash_final(ctx, hash, sizeof(hash)) == 0;
	pg_cryptohash_free(ctx);
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not compute the SHA-256 of an aggregate key")));
	for (int i = 0; i < 8; i++)
		key = (key << 8) | hash[i];
	PG_RETURN_INT64((int64) key);
}
