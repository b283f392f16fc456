/*-------------------------------------------------------------------------
 *
 * signature.c
 *	  Signing secrets and signatures of the Standard Webhooks specification
 *	  (https://www.standardwebhooks.com/), in one place: the trigger on
 *	  outbox_destinations checks a secret with OutboxSecretCheck, and the
 *	  kinds sign with the same decoding of the secret.
 *
 * A secret is one of:
 *   - "whsec_" followed by the canonical base64 of an HMAC key: signatures
 *     "v1,<base64 of HMAC-SHA256>";
 *   - "whsk_" followed by the canonical base64 of an ed25519 secret key:
 *     signatures "v1a,<base64 of the 64-byte ed25519 signature>". The
 *     specification leaves the key's length open; this library makes and
 *     prefers the 32-byte seed (RFC 8032's private key, as Go's
 *     ed25519.NewKeyFromSeed takes it), and also takes the 64-byte form of
 *     libsodium and Go's ed25519.PrivateKey (seed, then public key), whose
 *     second half must be the seed's public key. Receivers verify with the
 *     public key, "whpk_" and the base64 of its 32 bytes (OutboxPublicKey);
 *   - raw text whose bytes are an HMAC key (v1). Raw text is printable
 *     ASCII only (the official JavaScript library's raw mode takes UTF-16
 *     code units, so a non-ASCII raw key would sign differently there),
 *     without leading or trailing spaces and without "whsec_", "whsk_" or
 *     "whpk_" in any case anywhere in it (" whsec_", "WHSEC_",
 *     "v1,whsec_", a quoted "whsec_..." are mistakes that would otherwise
 *     be used as raw keys and never verify).
 * Base64 must be canonical (padded, no stray bits), so that every library
 * decodes it to the same key or refuses it. OutboxSecretCheck states the
 * rules once. Either signature covers "<msg_id>.<timestamp>.<body>".
 *
 * A destination may have several secrets (key rotation): each message is
 * signed with each, and the signatures are sent space-separated in one
 * webhook-signature value, each verifiable alone (the specification's
 * "Signature scheme" section).
 *
 * HMAC and base64 are PostgreSQL's own (common/hmac.h, common/base64.h),
 * which use OpenSSL when the server was built with it; ed25519 is
 * OpenSSL's (1.1.1 or later), linked as pgcrypto links it.
 *
 * src/signature.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <openssl/evp.h>

#include "common/base64.h"
#include "common/hmac.h"
#include "common/sha2.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/formatting.h"

#include "compat.h"
#include "event.h"
#include "signature.h"

PG_FUNCTION_INFO_V1(_outbox_valid_secret);
PG_FUNCTION_INFO_V1(_outbox_new_secret);
PG_FUNCTION_INFO_V1(outbox_public_key);

#define SECRET_PREFIX "whsec_"
#define SECRET_PREFIX_LEN 6
#define SIGNING_KEY_PREFIX "whsk_"
#define PUBLIC_KEY_PREFIX "whpk_"
#define KEY_PREFIX_LEN 5

/* ed25519 sizes (RFC 8032): seed (the private key), public key, signature */
#define ED25519_SEED_BYTES 32
#define ED25519_PUBLIC_BYTES 32
#define ED25519_SIG_BYTES 64

/* the size of the secrets outbox_add_secret() makes */
#define NEW_HMAC_KEY_BYTES 32

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

/* base64 of n bytes, palloc'd and terminated */
static char *
b64_text(const uint8 *bytes, int n)
{
	char	   *b64 = palloc(pg_b64_enc_len(n) + 1);
	int			len = pg_b64_encode(OUTBOX_B64_BYTES(bytes), n, b64, pg_b64_enc_len(n));

	if (len < 0)
		elog(ERROR, "could not encode base64");
	b64[len] = '\0';
	return b64;
}

/*
 * The bytes of canonical base64 text b64 (strict_base64 checked), palloc'd;
 * their number in *n.
 */
static uint8 *
b64_bytes(const char *b64, int *n)
{
	int			len = strlen(b64);
	uint8	   *bytes = palloc(pg_b64_dec_len(len) + 1);

	*n = pg_b64_decode(b64, len, OUTBOX_B64_BYTES(bytes), pg_b64_dec_len(len));
	return bytes;
}

/*
 * The ed25519 public key of a 32-byte seed, into pub; false if OpenSSL
 * cannot make the key. Calls no PostgreSQL function between OpenSSL's
 * allocation and its release.
 */
static bool
ed25519_public(const uint8 *seed, uint8 *pub)
{
	EVP_PKEY   *pkey = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed,
													ED25519_SEED_BYTES);
	size_t		len = ED25519_PUBLIC_BYTES;
	bool		ok;

	if (pkey == NULL)
		return false;
	ok = EVP_PKEY_get_raw_public_key(pkey, pub, &len) == 1 && len == ED25519_PUBLIC_BYTES;
	EVP_PKEY_free(pkey);
	return ok;
}

/*
 * The seed of a "whsk_" secret (the checks of OutboxSecretCheck passed or
 * not), into seed; NULL detail on success, else why it is not a key.
 */
static const char *
signing_key_seed(const char *secret, uint8 *seed)
{
	const char *b64 = secret + KEY_PREFIX_LEN;
	uint8	   *bytes;
	int			n;
	uint8		pub[ED25519_PUBLIC_BYTES];
	const char *why = NULL;

	if (!strict_base64(b64, strlen(b64)))
		return "After the whsk_ prefix comes the canonical base64 of an ed25519 secret key, padded with =.";
	bytes = b64_bytes(b64, &n);
	if (n != ED25519_SEED_BYTES && n != ED25519_SEED_BYTES + ED25519_PUBLIC_BYTES)
		why = "An ed25519 secret key is 32 bytes (its seed), or 64 (the seed, then its public key).";
	else
	{
		memcpy(seed, bytes, ED25519_SEED_BYTES);
		if (!ed25519_public(seed, pub))
			why = "OpenSSL cannot make an ed25519 key of it.";
		else if (n == ED25519_SEED_BYTES + ED25519_PUBLIC_BYTES &&
				 memcmp(bytes + ED25519_SEED_BYTES, pub, ED25519_PUBLIC_BYTES) != 0)
			why = "The second half of a 64-byte ed25519 secret key is the public key of the first, and it is not.";
	}
	/* key material does not stay in freed memory */
	explicit_bzero(bytes, Max(n, 0));
	pfree(bytes);
	return why;
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
	if (strncmp(secret, SIGNING_KEY_PREFIX, KEY_PREFIX_LEN) == 0)
	{
		uint8		seed[ED25519_SEED_BYTES];
		const char *why = signing_key_seed(secret, seed);

		explicit_bzero(seed, sizeof(seed));
		return why == NULL ? true : secret_problem(p, "destination secret is not valid", why);
	}
	if (strncmp(secret, PUBLIC_KEY_PREFIX, KEY_PREFIX_LEN) == 0)
		return secret_problem(p, "destination secret is not valid",
							  "A whpk_ key is a public key, for receivers to verify with: the destination signs with the secret key, whsk_.");
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
	if (strstr(lower, SIGNING_KEY_PREFIX) != NULL || strstr(lower, PUBLIC_KEY_PREFIX) != NULL)
		return secret_problem(p, "destination secret is not valid",
							  "A secret that contains whsk_ or whpk_ is an ed25519 secret key: whsk_, in lower case, then the base64 of the key.");
	return true;
}

/*
 * Returns the HMAC key of a v1 secret, palloc'd, and its length in
 * *keylen; NULL if the secret breaks a rule of OutboxSecretCheck or is an
 * ed25519 key. Raises no error.
 */
static char *
secret_key(const char *secret, int *keylen)
{
	OutboxProblem p;
	uint8	   *key;

	if (!OutboxSecretCheck(secret, &p) || strncmp(secret, SIGNING_KEY_PREFIX, KEY_PREFIX_LEN) == 0)
		return NULL;
	if (strncmp(secret, SECRET_PREFIX, SECRET_PREFIX_LEN) != 0)
	{
		*keylen = strlen(secret);
		return pstrdup(secret);
	}
	key = b64_bytes(secret + SECRET_PREFIX_LEN, keylen);
	return *keylen <= 0 ? NULL : (char *) key;
}

/* "v1,<base64 HMAC-SHA256>" of the signed content under key */
static char *
sign_v1(const char *key, int keylen, const char *content, size_t len)
{
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	pg_hmac_ctx *ctx = pg_hmac_create(PG_SHA256);
	bool		failed;

	if (ctx == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	failed = pg_hmac_init(ctx, (const uint8 *) key, keylen) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) content, len) < 0 ||
		pg_hmac_final(ctx, digest, sizeof(digest)) < 0;
	if (failed)
	{
		const char *msg = pg_hmac_error(ctx);

		pg_hmac_free(ctx);
		elog(ERROR, "could not compute the webhook signature: %s", msg);
	}
	pg_hmac_free(ctx);
	return psprintf("v1,%s", b64_text(digest, sizeof(digest)));
}

/*
 * "v1a,<base64 ed25519 signature>" of the signed content under the key of
 * seed, with OpenSSL's one-shot EVP_DigestSign (ed25519 takes no digest);
 * NULL if OpenSSL fails. No PostgreSQL function is called while OpenSSL's
 * objects exist.
 */
static char *
sign_v1a(const uint8 *seed, const char *content, size_t len)
{
	uint8		sig[ED25519_SIG_BYTES];
	size_t		siglen = sizeof(sig);
	EVP_PKEY   *pkey = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed,
													ED25519_SEED_BYTES);
	EVP_MD_CTX *md = pkey ? EVP_MD_CTX_new() : NULL;
	bool		ok;

	ok = md != NULL &&
		EVP_DigestSignInit(md, NULL, NULL, NULL, pkey) == 1 &&
		EVP_DigestSign(md, sig, &siglen, (const unsigned char *) content, len) == 1 &&
		siglen == ED25519_SIG_BYTES;
	EVP_MD_CTX_free(md);
	EVP_PKEY_free(pkey);
	if (!ok)
		return NULL;
	return psprintf("v1a,%s", b64_text(sig, sizeof(sig)));
}

/*
 * Returns the webhook-signature value of one message, palloc'd: one
 * signature per secret (v1 or v1a, by its form), in the order given,
 * separated by single spaces; NULL if a secret cannot sign (see
 * OutboxSecretCheck). msg_id is the webhook-id, timestamp the
 * webhook-timestamp as sent, body the bytes sent. ERROR only if a
 * signature cannot be computed (out of memory). Any process, with or
 * without a transaction.
 */
char *
OutboxSignatures(char *const *secrets, int nsecrets, const char *msg_id,
				 const char *timestamp, const char *body, size_t bodylen)
{
	StringInfoData content;
	StringInfoData out;

	Assert(nsecrets > 0);
	/* the signed content, once for every secret */
	initStringInfo(&content);
	appendStringInfo(&content, "%s.%s.", msg_id, timestamp);
	appendBinaryStringInfo(&content, body, bodylen);
	initStringInfo(&out);
	for (int i = 0; i < nsecrets; i++)
	{
		char	   *sig;

		if (strncmp(secrets[i], SIGNING_KEY_PREFIX, KEY_PREFIX_LEN) == 0)
		{
			uint8		seed[ED25519_SEED_BYTES];

			sig = signing_key_seed(secrets[i], seed) == NULL
				? sign_v1a(seed, content.data, content.len) : NULL;
			explicit_bzero(seed, sizeof(seed));
		}
		else
		{
			int			keylen;
			char	   *key = secret_key(secrets[i], &keylen);

			sig = key ? sign_v1(key, keylen, content.data, content.len) : NULL;
			if (key != NULL)
			{
				explicit_bzero(key, keylen);
				pfree(key);
			}
		}
		if (sig == NULL)
		{
			pfree(content.data);
			pfree(out.data);
			return NULL;
		}
		if (i > 0)
			appendStringInfoChar(&out, ' ');
		appendStringInfoString(&out, sig);
	}
	pfree(content.data);
	return out.data;
}

/*
 * The public key ("whpk_<base64>") of an ed25519 secret, palloc'd; NULL
 * for any other secret, or one that breaks the rules. Raises no error of
 * its own.
 */
char *
OutboxPublicKey(const char *secret)
{
	uint8		seed[ED25519_SEED_BYTES];
	uint8		pub[ED25519_PUBLIC_BYTES];
	bool		ok;

	if (strncmp(secret, SIGNING_KEY_PREFIX, KEY_PREFIX_LEN) != 0 ||
		strlen(secret) > OUTBOX_MAX_SECRET_BYTES ||
		signing_key_seed(secret, seed) != NULL)
		return NULL;
	ok = ed25519_public(seed, pub);
	explicit_bzero(seed, sizeof(seed));
	return ok ? psprintf("%s%s", PUBLIC_KEY_PREFIX, b64_text(pub, sizeof(pub))) : NULL;
}

/*
 * _outbox_new_secret(scheme text) RETURNS text
 *
 * SQL-callable, VOLATILE, internal (for outbox_add_secret): a new secret
 * from pg_strong_random, for scheme 'v1' a "whsec_" HMAC key of 32 bytes,
 * for 'v1a' a "whsk_" ed25519 key as its 32-byte seed. ERROR 22023 for
 * another scheme, 58000 if no strong random bytes can be had.
 */
Datum
_outbox_new_secret(PG_FUNCTION_ARGS)
{
	char	   *scheme = text_to_cstring(PG_GETARG_TEXT_PP(0));
	uint8		bytes[Max(NEW_HMAC_KEY_BYTES, ED25519_SEED_BYTES)];
	bool		v1a = strcmp(scheme, "v1a") == 0;
	int			n = v1a ? ED25519_SEED_BYTES : NEW_HMAC_KEY_BYTES;
	char	   *secret;

	if (!v1a && strcmp(scheme, "v1") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("signature scheme must be v1 or v1a")));
	if (!pg_strong_random(bytes, n))
		ereport(ERROR,
				(errcode(ERRCODE_SYSTEM_ERROR),
				 errmsg("could not generate random bytes for a secret")));
	secret = psprintf("%s%s", v1a ? SIGNING_KEY_PREFIX : SECRET_PREFIX, b64_text(bytes, n));
	explicit_bzero(bytes, sizeof(bytes));
	PG_RETURN_TEXT_P(cstring_to_text(secret));
}

/*
 * outbox_public_key(secret text) RETURNS text
 *
 * SQL-callable, IMMUTABLE STRICT, for outbox_admin: the public key
 * ("whpk_<base64>") that receivers verify v1a signatures with, of an
 * ed25519 secret ("whsk_"); NULL for a v1 secret. ERROR 23514 if the
 * secret breaks the rules (OutboxSecretCheck), without quoting it.
 */
Datum
outbox_public_key(PG_FUNCTION_ARGS)
{
	char	   *secret = text_to_cstring(PG_GETARG_TEXT_PP(0));
	OutboxProblem p;
	char	   *pub;

	if (!OutboxSecretCheck(secret, &p))
		ereport(ERROR,
				(errcode(p.sqlstate),
				 errmsg("%s", p.message),
				 p.detail ? errdetail("%s", p.detail) : 0));
	pub = OutboxPublicKey(secret);
	if (pub == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(pub));
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
	OutboxProblem p;

	if (PG_ARGISNULL(0))
		PG_RETURN_BOOL(true);
	PG_RETURN_BOOL(OutboxSecretCheck(text_to_cstring(PG_GETARG_TEXT_PP(0)), &p));
}
