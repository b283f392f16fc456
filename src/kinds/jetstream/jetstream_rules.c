/*-------------------------------------------------------------------------
 *
 * jetstream_rules.c
 *	  The rules of the JetStream kind: what a destination row may hold
 *	  (its servers, subject or subject template, stream and credentials),
 *	  what a subject may be, the subject built for an event, the blocks of
 *	  a creds file, and whether a stream's duplicate window covers the
 *	  retry schedule.
 *
 * Nothing here calls libnats or starts a thread: the validation trigger
 * on outbox_destinations runs these rules in any backend (check_destination),
 * the claim decodes a row with them (decode), and the relay and
 * outbox_jetstream_check() judge a stream's window with them.
 *
 * src/kinds/jetstream/jetstream_rules.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/jsonb.h"

#include "destination.h"
#include "event_template.h"
#include "headers.h"

#include "jetstream_columns.h"
#include "jetstream_int.h"

/* the longest nats_servers, nats_subject, stream name, file path */
#define JS_SERVERS_MAX_BYTES 8192
#define JS_SUBJECT_MAX_BYTES 1024
/* nats-server's max_control_line is 4096: room for HPUB's reply and sizes */
#define JS_BUILT_SUBJECT_MAX_BYTES 3840
#define JS_STREAM_MAX_BYTES 255
#define JS_PATH_MAX_BYTES 1024


/* ---------------------------------------------------------------------
 * Subjects
 * ---------------------------------------------------------------------
 */

/*
 * Whether s[0..len) is a subject the relay may publish to: tokens
 * separated by dots, none empty, no whitespace or control character, no
 * wildcard (* or >), and a first token that is not a broker's own: $
 * (JetStream's API, $JS.API.STREAM.DELETE..., and the system account's)
 * or _INBOX (other clients' replies). Sets *why when it is not. NATS
 * subjects are case-sensitive UTF-8; bytes over 0x7f are allowed (NATS
 * subject naming rules, docs.nats.io "Subject-Based Messaging").
 */
static bool
subject_valid(const char *s, size_t len, const char **why)
{
	size_t		token_start = 0;

	if (len == 0)
	{
		*why = "it is empty";
		return false;
	}
	if (s[0] == '$' || (len >= 6 && strncmp(s, "_INBOX", 6) == 0 && (len == 6 || s[6] == '.')))
	{
		*why = "it begins with $ or _INBOX, which are the broker's own";
		return false;
	}
	for (size_t i = 0; i <= len; i++)
	{
		unsigned char c = i < len ? (unsigned char) s[i] : '.';

		if (c == '.')
		{
			if (i == token_start)
			{
				*why = "it has an empty token (a dot at either end, or two in a row)";
				return false;
			}
			token_start = i + 1;
		}
		else if (c <= 0x20 || c == 0x7f)
		{
			*why = "it has a space or a control character";
			return false;
		}
		else if (c == '*' || c == '>')
		{
			*why = "it has a wildcard (* or >)";
			return false;
		}
	}
	return true;
}

/*
 * The subject ev is published to, palloc'd; or NULL with *error set (for
 * last_error: it names the field, and quotes no value, which the writer
 * chose) when the template names an empty field or the result is not a
 * valid subject (subject_valid).
 */
char *
JetStreamEventSubject(const OutboxEvent *ev, char **error)
{
	const char *why = NULL;
	const char *missing = NULL;
	char	   *subject = OutboxTemplateBuild(JS_OPTIONS(ev)->subject, ev, &missing, &why);
	size_t		len;

	if (why != NULL)
	{
		*error = psprintf("destination nats_subject is not valid: %s", why);
		return NULL;
	}
	if (missing != NULL)
	{
		*error = psprintf("the subject template uses %s, which the event does not have", missing);
		return NULL;
	}
	len = strlen(subject);
	if (len > JS_BUILT_SUBJECT_MAX_BYTES)
	{
		*error = psprintf("the subject built for the event is longer than %d bytes",
						  JS_BUILT_SUBJECT_MAX_BYTES);
		return NULL;
	}
	if (!subject_valid(subject, len, &why))
	{
		*error = psprintf("the subject built from the event's fields is not a valid NATS subject: %s", why);
		return NULL;
	}
	return subject;
}

/* ---------------------------------------------------------------------
 * Destination rows
 * ---------------------------------------------------------------------
 */

/*
 * Splits a comma-separated list into trimmed, non-empty items: at most
 * JS_MAX_SERVERS in the list, *n of them; *total counts them all.
 */
char **
JetStreamSplitServers(const char *servers, int *n, int *total)
{
	char	   *copy = pstrdup(servers);
	char	  **list = palloc(sizeof(char *) * (JS_MAX_SERVERS + 1));
	char	   *save = NULL;

	*n = 0;
	*total = 0;
	for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save))
	{
		while (*tok == ' ')
			tok++;
		for (char *e = tok + strlen(tok); e > tok && e[-1] == ' '; e--)
			e[-1] = '\0';
		if (*tok == '\0')
			continue;
		(*total)++;
		if (*n < JS_MAX_SERVERS)
			list[(*n)++] = tok;
	}
	return list;
}

/*
 * Whether s holds "nats-" in any case. nats-server finds each of its own
 * headers (Nats-Msg-Id, Nats-Expected-Stream, Nats-Rollup...) at the first
 * occurrence of its name anywhere in the header block, and takes it as
 * absent when that occurrence does not start a line; libnats writes the
 * headers in hash order. So a name or a value that holds such a name,
 * wherever it comes, could hide the relay's own header: none but the
 * relay's may hold the prefix of that family.
 */
bool
JetStreamHoldsNatsPrefix(const char *s)
{
	for (const char *p = s; *p != '\0'; p++)
		if (pg_strncasecmp(p, "nats-", 5) == 0)
			return true;
	return false;
}

/* Column c of row as text, or NULL; its size must be at most max bytes. */
static bool
column_text(const OutboxDestinationRow *row, const char *name, int max,
			char **value, OutboxProblem *p)
{
	*value = OutboxDestinationText(row, name);
	if (*value != NULL && strlen(*value) > (size_t) max)
		return OutboxProblemSet(p, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
								psprintf("destination %s is longer than %d bytes", name, max), NULL);
	return true;
}

/*
 * One server URL: nats:// or tls://, a host, an optional port from 1 to
 * 65535, nothing after it, and no user or password in it (those have
 * columns of their own, kept from messages).
 */
static bool
server_url_valid(const char *u, const char **why)
{
	const char *host;
	const char *colon;

	if (pg_strncasecmp(u, "nats://", 7) == 0)
		host = u + 7;
	else if (pg_strncasecmp(u, "tls://", 6) == 0)
		host = u + 6;
	else
	{
		*why = "Each server is a nats:// or tls:// URL.";
		return false;
	}
	if (strchr(host, '@') != NULL)
	{
		*why = "A server URL has no user or password: they go in nats_user and nats_password, or nats_token.";
		return false;
	}
	if (strpbrk(host, "/?#") != NULL)
	{
		*why = "A server URL is a scheme, a host and a port, with nothing after them.";
		return false;
	}
	colon = host[0] == '[' ? strstr(host, "]:") : strrchr(host, ':');
	if (colon != NULL && host[0] == '[')
		colon++;
	if ((colon != NULL ? colon - host : (ptrdiff_t) strlen(host)) == 0)
	{
		*why = "A server URL names a host.";
		return false;
	}
	if (colon != NULL)
	{
		char	   *end;
		long		port = strtol(colon + 1, &end, 10);

		if (colon[1] == '\0' || *end != '\0' || port < 1 || port > 65535)
		{
			*why = "The port must be a number between 1 and 65535.";
			return false;
		}
	}
	return true;
}

/* A stream name: 1 to 255 bytes, none of space, control, . * > / \ (nats-server). */
static bool
stream_name_valid(const char *s)
{
	if (s[0] == '\0')
		return false;
	for (const char *c = s; *c; c++)
		if ((unsigned char) *c <= 0x20 || *c == 0x7f || strchr(".*>/\\", *c) != NULL)
			return false;
	return true;
}

/*
 * The destination's headers (valid: the shared rules ran first) hold no
 * name or value that nats-server could read as its own header
 * (JetStreamHoldsNatsPrefix). Never quotes a value.
 */
static bool
headers_check(const OutboxDestinationRow *row, OutboxProblem *p)
{
	bool		isnull;
	Datum		d = OutboxDestinationColumn(row, "headers", &isnull);
	OutboxHeader *list;
	int			n;
	const char *detail = "A JetStream destination's header names and values may not contain \"nats-\" in any case: nats-server could take it for one of its own headers (Nats-Msg-Id, Nats-Expected-Stream, ...), which only the relay sets.";

	if (isnull)
		return true;
	n = OutboxHeaderList(DatumGetJsonbP(d), &list);
	for (int i = 0; i < n; i++)
	{
		if (JetStreamHoldsNatsPrefix(list[i].name))
			return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
									psprintf("destination header \"%s\" is not allowed for a JetStream destination",
											 list[i].name),
									pstrdup(detail));
		if (list[i].value != NULL && JetStreamHoldsNatsPrefix(list[i].value))
			return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
									psprintf("value of destination header \"%s\" is not allowed for a JetStream destination",
											 list[i].name),
									pstrdup(detail));
	}
	return true;
}

/*
 * nats_servers: 1 to JS_MAX_SERVERS valid server URLs (server_url_valid),
 * all nats:// or all tls://, no control character.
 */
static bool
servers_check(const char *servers, OutboxProblem *p)
{
	char	  **list;
	int			n;
	int			total;
	int			tls = 0;
	const char *why = NULL;

	for (const char *c = servers; *c; c++)
		if ((unsigned char) *c < 0x20 || *c == 0x7f)
			return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
									pstrdup("destination nats_servers is not valid"),
									pstrdup("It has a control character."));
	list = JetStreamSplitServers(servers, &n, &total);
	if (n == 0)
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination nats_servers is not valid"),
								psprintf("It is a comma-separated list of 1 to %d nats:// or tls:// URLs.",
										 JS_MAX_SERVERS));
	if (total > JS_MAX_SERVERS)
		return OutboxProblemSet(p, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
								psprintf("destination nats_servers has more than %d servers",
										 JS_MAX_SERVERS), NULL);
	for (int i = 0; i < n; i++)
	{
		if (!server_url_valid(list[i], &why))
			return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
									pstrdup("destination nats_servers is not valid"),
									pstrdup(why));
		tls += pg_strncasecmp(list[i], "tls://", 6) == 0;
	}
	/* libnats has one TLS setting per connection */
	if (tls > 0 && tls < n)
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination nats_servers is not valid"),
								pstrdup("Its servers are all nats:// or all tls://."));
	return true;
}

/*
 * nats_subject and nats_stream: present, the subject (or the template,
 * each field standing for a token) a valid subject, the stream a valid
 * name.
 */
static bool
subject_stream_check(const char *subject, const char *stream, OutboxProblem *p)
{
	const char *why = NULL;
	StringInfoData sample;

	if (subject == NULL)
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination nats_subject is missing"),
								pstrdup("A JetStream destination has a subject, or a template of one such as orders.{aggregate_id}."));
	initStringInfo(&sample);
	if (!OutboxTemplateSample(subject, &sample, &why) ||
		!subject_valid(sample.data, sample.len, &why))
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination nats_subject is not valid"),
								psprintf("As a subject, %s.", why));

	if (stream == NULL)
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination nats_stream is missing"),
								pstrdup("A JetStream destination names the stream that stores its subject."));
	if (!stream_name_valid(stream))
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination nats_stream is not valid"),
								pstrdup("A stream name has no spaces, control characters, or any of . * > / \\."));
	return true;
}

/*
 * The credentials: printable ASCII; user and password together, or a
 * token, or a creds file, one way only; the files (creds and CA) under
 * the rules every kind's files follow (OutboxDestinationFileCheck).
 */
static bool
credentials_check(const OutboxDestinationRow *row, const char *user, const char *password,
				  const char *token, const char *creds, OutboxProblem *p)
{
	for (int i = 0; i < 3; i++)
	{
		const char *v = i == 0 ? user : i == 1 ? password : token;

		for (const char *c = v; c != NULL && *c; c++)
			if (*c < 0x20 || *c > 0x7e)
				return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
										psprintf("destination %s is not valid",
												 i == 0 ? "nats_user" : i == 1 ? "nats_password" : "nats_token"),
										pstrdup("NATS credentials are printable ASCII."));
	}
	if ((user == NULL) != (password == NULL))
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination nats_user and nats_password go together"), NULL);
	if ((user != NULL) + (token != NULL) + (creds != NULL) > 1)
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination has more than one kind of NATS credentials"),
								pstrdup("It has nats_user and nats_password, or nats_token, or nats_creds_file."));
	return OutboxDestinationFileCheck(row, "nats_creds_file", JETSTREAM_TARGET_COLUMN, p) &&
		OutboxDestinationFileCheck(row, "nats_ca_file", JETSTREAM_TARGET_COLUMN, p);
}

/*
 * check_destination: nats_servers, nats_subject (a subject or a template
 * of one), nats_stream, and the credentials: user and password together,
 * or a token, or a creds file, one way only; files named by absolute path,
 * which only a role with the privileges of pg_read_server_files may write
 * (the relay reads them as the server's OS user). No secret: messages are
 * not signed, the broker authenticates the relay. Headers that nats-server
 * could read as its own (headers_check).
 */
bool
JetStreamCheckDestination(const OutboxDestinationRow *row, OutboxProblem *p)
{
	char	   *servers,
			   *subject,
			   *stream,
			   *user,
			   *password,
			   *token,
			   *creds,
			   *ca;

	if (!column_text(row, "nats_servers", JS_SERVERS_MAX_BYTES, &servers, p) ||
		!column_text(row, "nats_subject", JS_SUBJECT_MAX_BYTES, &subject, p) ||
		!column_text(row, "nats_stream", JS_STREAM_MAX_BYTES, &stream, p) ||
		!column_text(row, "nats_user", 1024, &user, p) ||
		!column_text(row, "nats_password", 1024, &password, p) ||
		!column_text(row, "nats_token", 1024, &token, p) ||
		!column_text(row, "nats_creds_file", JS_PATH_MAX_BYTES, &creds, p) ||
		!column_text(row, "nats_ca_file", JS_PATH_MAX_BYTES, &ca, p))
		return false;
	return servers_check(servers, p) &&
		subject_stream_check(subject, stream, p) &&
		credentials_check(row, user, password, token, creds, p) &&
		headers_check(row, p);
}

/* decode: the nats_* columns, timeout_ms and headers into a JsDestOptions. */
Size
JetStreamDecode(const OutboxDestinationRow *row, OutboxDestination *dest)
{
	JsDestOptions *o = palloc0(sizeof(JsDestOptions));
	Size		bytes = sizeof(JsDestOptions);
	char	  **texts[] = {&o->servers, &o->subject, &o->stream, &o->user, &o->password,
	&o->token, &o->creds_file, &o->ca_file};
	const char *names[] = {"nats_servers", "nats_subject", "nats_stream", "nats_user",
	"nats_password", "nats_token", "nats_creds_file", "nats_ca_file"};

	for (int i = 0; i < (int) lengthof(names); i++)
	{
		*texts[i] = OutboxDestinationText(row, names[i]);
		bytes += *texts[i] ? strlen(*texts[i]) + 1 : 0;
	}
	bytes += OutboxDestinationSharedOptions(row, &o->timeout_ms, &o->headers);
	dest->options = o;
	return bytes;
}

/* ---------------------------------------------------------------------
 * Credentials files
 * ---------------------------------------------------------------------
 */

/* Whether the line text[0..len) is a creds file's fence: -----BEGIN ...----- */
static bool
creds_fence(const char *line, size_t len)
{
	return len >= 6 && strncmp(line, "---", 3) == 0 && strncmp(line + len - 3, "---", 3) == 0;
}

/*
 * Finds block `which` (0: the user JWT, 1: the nkey seed) of a creds file
 * as nsc writes it: a fence line, the value on one line, a fence line.
 * Sets *value and *vlen (within text); false if there is no such block or
 * its value holds a character neither base64url nor base32 has. Safe on
 * any thread (it allocates nothing and raises nothing): the connection's
 * thread and libnats's callbacks read the file (creds_read, in
 * jetstream_thread.c).
 */
bool
JetStreamCredsBlock(const char *text, size_t len, int which, const char **value, size_t *vlen)
{
	const char *p = text;
	const char *end = text + len;
	int			found = 0;
	int			state = 0;		/* 0: outside, 1: after a fence, 2: after the value */
	const char *v = NULL;
	size_t		vl = 0;

	while (p < end)
	{
		const char *nl = memchr(p, '\n', end - p);
		const char *e = nl != NULL ? nl : end;
		const char *next = nl != NULL ? nl + 1 : end;

		/* trim the line */
		while (p < e && (*p == ' ' || *p == '\t'))
			p++;
		while (e > p && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
			e--;
		if (e > p)
		{
			bool		fence = creds_fence(p, e - p);

			if (state == 0 && fence)
				state = 1;
			else if (state == 1 && !fence)
			{
				v = p;
				vl = e - p;
				state = 2;
			}
			else if (state == 2 && fence)
			{
				if (found++ == which)
				{
					for (size_t i = 0; i < vl; i++)
						if (!((v[i] >= 'a' && v[i] <= 'z') || (v[i] >= 'A' && v[i] <= 'Z') ||
							  (v[i] >= '0' && v[i] <= '9') || (v[i] != '\0' && strchr("-_.=", v[i]) != NULL)))
							return false;
					*value = v;
					*vlen = vl;
					return true;
				}
				state = 0;
			}
			else
				state = fence ? 1 : 0;
		}
		p = next;
	}
	return false;
}

/* ---------------------------------------------------------------------
 * The stream's deduplication window
 * ---------------------------------------------------------------------
 */

/* Human units for a duration in ms: "2 min", "90 s", "1.5 h". */
char *
JetStreamDurationText(double ms)
{
	if (ms >= 2 * 3600 * 1000.0)
		return psprintf("%.1f h", ms / 3600000.0);
	if (ms >= 120 * 1000.0)
		return psprintf("%.0f min", ms / 60000.0);
	return psprintf("%.0f s", ms / 1000.0);
}

/*
 * What is wrong with c's stream's deduplication, palloc'd, or NULL: the
 * window (duplicates_ns, or max_age_ns when shorter: a message gone is an
 * id forgotten) is shorter than the retry span. Sets *window_ms and
 * *span_ms.
 */
char *
JetStreamWindowProblem(const JsConn *c, int64 duplicates_ns, int64 max_age_ns,
					   double *window_ms, double *span_ms)
{
	*window_ms = duplicates_ns / 1000000.0;
	if (max_age_ns > 0 && max_age_ns < duplicates_ns)
		*window_ms = max_age_ns / 1000000.0;
	*span_ms = OutboxRetrySpanMs(c->timeout_ms);
	if (*span_ms <= *window_ms)
		return NULL;
	return psprintf("stream \"%s\" deduplicates for %s, but a resend can come up to %s after the first attempt: past the window, consumers must deduplicate by event_id",
					c->stream, JetStreamDurationText(*window_ms), JetStreamDurationText(*span_ms));
}
