/*-------------------------------------------------------------------------
 *
 * redact.c
 *	  Text from an endpoint or a network library, made safe for last_error:
 *	  printable ASCII only, and credentials masked.
 *
 * An endpoint can echo a request's headers back in its answer, and a
 * library's error text can quote a URL with its user:password: neither may
 * reach last_error (readable by outbox_admin) as it came. Any destination
 * kind that keeps an answer or an error text for last_error passes it
 * through OutboxRedact.
 *
 * src/redact.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/formatting.h"

#include "destination.h"

/*
 * s[0..len) with printable ASCII only (anything else becomes a space), so
 * that the text is valid in any server encoding; palloc'd.
 */
char *
OutboxPrintable(const char *s, size_t len)
{
	char	   *out = palloc(len + 1);

	for (size_t i = 0; i < len; i++)
		out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : ' ';
	out[len] = '\0';
	return out;
}

/*
 * Words after which a line of an answer or error text is masked: a header
 * or field that holds a credential, echoed back by the endpoint. Lower
 * case; matched without case.
 */
static const char *const credential_words[] = {
	"authorization", "cookie", "token", "secret", "password", "passwd",
	"api-key", "apikey", "api_key", "bearer ", "basic ", "whsec_",
	"credential", "session", "signature"
};

/*
 * Returns text s[0..len) as printable ASCII (palloc'd) with credentials
 * masked: after any of credential_words, the rest of that line becomes
 * "[redacted]", and the user:password of a URL ("scheme://user:pw@host")
 * too. Linear in len. Calls palloc: never from a library's callback.
 */
char *
OutboxRedact(const char *s, size_t len)
{
	char	   *text = OutboxPrintable(s, len);
	char	   *lower = asc_tolower(text, len);
	StringInfoData out;
	size_t		i = 0;

	initStringInfo(&out);
	while (i < len)
	{
		bool		masked = false;

		if (strncmp(lower + i, "://", 3) == 0)
		{
			size_t		j = i + 3;

			while (j < len && strchr("/@ \t\r\n?#\"'", s[j]) == NULL)
				j++;
			if (j < len && s[j] == '@')
			{
				appendStringInfoString(&out, "://[redacted]@");
				i = j + 1;
				continue;
			}
		}
		for (size_t w = 0; w < lengthof(credential_words) && !masked; w++)
		{
			size_t		wl = strlen(credential_words[w]);

			if (strncmp(lower + i, credential_words[w], wl) == 0)
			{
				appendBinaryStringInfo(&out, text + i, wl);
				appendStringInfoString(&out, "[redacted]");
				i += wl;
				/* to the end of the line, as the endpoint wrote it */
				while (i < len && s[i] != '\n' && s[i] != '\r')
					i++;
				masked = true;
			}
		}
		if (!masked)
			appendStringInfoChar(&out, text[i++]);
	}
	return out.data;
}
