/*-------------------------------------------------------------------------
 *
 * signature.c
 *	  Signing secrets and signatures of the Standard Webhooks specification
 *	  (https://www.standardwebhooks.com/), in one place: the trigger on
 *	  outbox_destinations checks a secret with OutboxSecretCheck, and the
 *	  kinds sign with the same decoding of the secret.
 *
 * A secret is either "whsec_" followed by the canonical base64 of the key,
 * or raw text whose bytes are the key. Raw text is printable ASCII only
 * (the official JavaScript library's raw mode takes UTF-16 code units, so a
 * non-ASCII raw key would sign differently there), without leading or
 * trailing spaces and without "whsec_" in any case anywhere in it (" whsec_",
 * "WHSEC_", "v1,whsec_", a quoted "whsec_..." are mistakes that would
 * otherwise be used as raw keys and never verify). Base64 must be
 * canonical (padded, no stray bits), so that every library decodes it to
 * the same key or refuses it. OutboxSecretCheck states the rules once. The signature of one
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
#include "utils/formatting.h"

#include "compat.h"
#include "event.h"
#include "signature.h"

PG_FUNCTION_INFO_V1(_outbox_valid_secret);

#define SECRET_PREFIX "whsec_"
#define SECRET_PREFIX_LEN 6

/*
 * True if s is canonical base64 (RFC 4648 sections 3.5 and 4): groups of
 * four characters of the standard alphabet, "=" padding only at the end,
 * and the bits that padding leaves over zero. pg_b64_decode alone would
 * also skip whitespace, and lenient decoders ignore stray bits that strict
 * ones refuse.
 */
static bool
strict_base64(const char *s, int len)
{
	static const char alphabet[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	int			pad = 0;
	const char *last;

	if (len == 0 || len % 4 != 0)
		return false;
	while (pad < 2 && s[len - 1 - pad] == '=')
		pad++;
	for (int i = 0; i < len - pad; i++)
		if (s[i] == '\0' || strchr(alphabet, s[i]) == NULL)
			return false;
	if (pad == 0)
		return true;
	/* one pad: the last character's 2 low bits are unused; two: 4 bits */
	last = strchr(alphabet, s[len - 1 - pad]);
	return ((last - alphabet) & (pad == 1 ? 0x03 : 0x0f)) == 0;
}

static bool
secret_problem(OutboxProblem *p, const char *message, const char *detail)
{
	p->sqlstate = ERRCODE_CHECK_VIOLATION;
	p->message = pstrdup(message);
	p->detail = detail ? pstrdup(detail) : NULL;
	return false;
}

/*
 * Checks a destination's secret against the rules in the file's header and
 * OUTBOX_MAX_SECRET_BYTES. Returns true, or false with *p filled (23514, or
 * 54000 for the size); the message never quotes the secret. Raises no
 * error of its own.
 */
bool
OutboxSecretCheck(const char *secret, OutboxProblem *p)
{
	size_t		len = strlen(secret);
	char	   *lower;

	if (len > OUTBOX_MAX_SECRET_BYTES)
	{
		p->sqlstate = ERRCODE_PROGRAM_LIMIT_EXCEEDED;
		p->message = psprintf("destination secret is longer than %d bytes", OUTBOX_MAX_SECRET_BYTES);
		p->detail = NULL;
		return false;
	}
	if (strncmp(secret, SECRET_PREFIX, SECRET_PREFIX_LEN) == 0)
	{
		if (!strict_base64(secret + SECRET_PREFIX_LEN, len - SECRET_PREFIX_LEN))
			return secret_problem(p, "destination secret is not valid",
								  "After the whsec_ prefix comes the canonical base64 of the key: padded with =, of at least one byte.");
		return true;
	}
	if (len == 0)
		return secret_problem(p, "destination secret must not be empty", NULL);
	for (size_t i = 0; i < len; i++)
		if ((unsigned char) secret[i] < 0x20 || (unsigned char) secret[i] > 0x7e)
			return secret_problem(p, "destination secret is not valid",
								  "A raw secret (without the whsec_ prefix) is printable ASCII.");
	if (secret[0] == ' ' || secret[len - 1] == ' ')
		return secret_problem(p, "destination secret is not valid",
							  "A secret does not start or end with a space.");
	lower = asc_tolower(secret, len);
	if (strstr(lower, SECRET_PREFIX) != NULL)
		return secret_problem(p, "destination secret is not valid",
							  "A secret that contains whsec_ must start with it, in lower case, followed by the base64 of the key.");
	return true;
}

/*
 * Returns the HMAC key of a secret, palloc'd, and its length in *keylen;
 * NULL if the secret breaks a rule of OutboxSecretCheck. Raises no error.
 */
static char *
secret_key(const char *secret, int *keylen)
{
	const char *b64;
	int			b64len;
	char	   *key;
	OutboxProblem p;

	if (!OutboxSecretCheck(secret, &p))
		return NULL;
	if (strncmp(secret, SECRET_PREFIX, SECRET_PREFIX_LEN) != 0)
	{
		*keylen = strlen(secret);
		return pstrdup(secret);
	}
	b64 = secret + SECRET_PREFIX_LEN;
	b64len = strlen(b64);
	key = palloc(pg_b64_dec_len(b64len) + 1);
	*keylen = pg_b64_decode(b64, b64len, OUTBOX_B64_BYTES(key), pg_b64_dec_len(b64len));
	return *keylen <= 0 ? NULL : key;
}

/*
 * Returns the signature ("v1,<base64>") of one message, palloc'd, or NULL
 * if the secret cannot be used (see secret_key). msg_id is the
 * webhook-id, timestamp the webhook-timestamp as sent. ERROR only if the
 * HMAC cannot be computed (out of memory).
 */
char *
OutboxSignature(const char *secret, const char *msg_id, const char *timestamp,
				const char *body, size_t bodylen)
{
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	int			keylen;
	char	   *key = secret_key(secret, &keylen);
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
 * SQL-callable, IMMUTABLE, internal (for outbox_admin): true for NULL or a
 * secret the relay can sign with (OutboxSecretCheck), the rule the trigger
 * on outbox_destinations applies. Raises no error of its own.
 */
Datum
_outbox_valid_secret(PG_FUNCTION_ARGS)
{
	int			keylen;

	if (PG_ARGISNULL(0))
		PG_RETURN_BOOL(true);
	PG_RETURN_BOOL(secret_key(text_to_cstring(PG_GETARG_TEXT_PP(0)), &keylen) != NULL);
}
