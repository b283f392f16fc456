/*-------------------------------------------------------------------------
 *
 * signature.c
 *	  Signing secrets and signatures of the Standard Webhooks specification
 *	  (https://www.standardwebhooks.com/), in one place: the check
 *	  constraint on outbox_destinations.secret calls _outbox_valid_secret(),
 *	  and the transports sign with the same decoding of the secret.
 *
 * A secret is either "whsec_" followed by the base64 of the key, or any
 * other non-empty text, whose bytes are the key. The signature of one
 * message is "v1," followed by the base64 HMAC-SHA256, under that key, of
 * "<msg_id>.<timestamp>.<body>".
 *
 * HMAC and base64 are PostgreSQL's own (common/hmac.h, common/base64.h),
 * which use OpenSSL when the server was built with it.
 *
 * src/signature.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/base64.h"
#include "common/hmac.h"
#include "common/sha2.h"
#include "utils/builtins.h"

#include "compat.h"
#include "signature.h"

PG_FUNCTION_INFO_V1(_outbox_valid_secret);

#define SECRET_PREFIX "whsec_"
#define SECRET_PREFIX_LEN 6

/*
 * True if s is canonical base64 (RFC 4648 section 4): groups of four
 * characters of the standard alphabet, "=" padding only at the end.
 * pg_b64_decode alone would also skip whitespace.
 */
static bool
strict_base64(const char *s, int len)
{
	int			pad = 0;

	if (len == 0 || len % 4 != 0)
		return false;
	while (pad < 2 && s[len - 1 - pad] == '=')
		pad++;
	for (int i = 0; i < len - pad; i++)
	{
		char		c = s[i];

		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			  (c >= '0' && c <= '9') || c == '+' || c == '/'))
			return false;
	}
	return true;
}

/*
 * Returns the HMAC key of a secret, palloc'd, and its length in *keylen;
 * NULL if the secret cannot be used: empty, or "whsec_" followed by text
 * that is not canonical base64 of at least one byte. Raises no error.
 */
char *
OutboxSecretKey(const char *secret, int *keylen)
{
	const char *b64;
	int			b64len;
	char	   *key;

	if (secret[0] == '\0')
		return NULL;
	if (strncmp(secret, SECRET_PREFIX, SECRET_PREFIX_LEN) != 0)
	{
		*keylen = strlen(secret);
		return pstrdup(secret);
	}
	b64 = secret + SECRET_PREFIX_LEN;
	b64len = strlen(b64);
	if (!strict_base64(b64, b64len))
		return NULL;
	key = palloc(pg_b64_dec_len(b64len) + 1);
	*keylen = pg_b64_decode(b64, b64len, OUTBOX_B64_BYTES(key), pg_b64_dec_len(b64len));
	return *keylen <= 0 ? NULL : key;
}

/*
 * Returns the signature ("v1,<base64>") of one message, palloc'd, or NULL
 * if the secret cannot be used (see OutboxSecretKey). msg_id is the
 * webhook-id, timestamp the webhook-timestamp as sent. ERROR only if the
 * HMAC cannot be computed (out of memory).
 */
char *
OutboxSignature(const char *secret, const char *msg_id, const char *timestamp,
				const char *body, size_t bodylen)
{
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	int			keylen;
	char	   *key = OutboxSecretKey(secret, &keylen);
	pg_hmac_ctx *ctx;
	char	   *b64;
	int			b64len;
	bool		failed;

	if (key == NULL)
		return NULL;
	ctx = pg_hmac_create(PG_SHA256);
	if (ctx == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	failed = pg_hmac_init(ctx, (const uint8 *) key, keylen) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) msg_id, strlen(msg_id)) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) ".", 1) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) timestamp, strlen(timestamp)) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) ".", 1) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) body, bodylen) < 0 ||
		pg_hmac_final(ctx, digest, sizeof(digest)) < 0;
	if (failed)
	{
		const char *msg = pg_hmac_error(ctx);

		pg_hmac_free(ctx);
		elog(ERROR, "could not compute the webhook signature: %s", msg);
	}
	pg_hmac_free(ctx);

	b64 = palloc(pg_b64_enc_len(sizeof(digest)) + 1);
	b64len = pg_b64_encode(OUTBOX_B64_BYTES(digest), sizeof(digest), b64,
						   pg_b64_enc_len(sizeof(digest)));
	if (b64len < 0)
		elog(ERROR, "could not encode the webhook signature");
	b64[b64len] = '\0';
	return psprintf("v1,%s", b64);
}

/*
 * _outbox_valid_secret(secret text) RETURNS boolean
 *
 * SQL-callable, IMMUTABLE; the check constraint of
 * outbox_destinations.secret: true for NULL or a secret the relay can sign
 * with (see OutboxSecretKey). Raises no error of its own.
 */
Datum
_outbox_valid_secret(PG_FUNCTION_ARGS)
{
	int			keylen;

	if (PG_ARGISNULL(0))
		PG_RETURN_BOOL(true);
	PG_RETURN_BOOL(OutboxSecretKey(text_to_cstring(PG_GETARG_TEXT_PP(0)), &keylen) != NULL);
}
