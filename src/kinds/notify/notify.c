/*-------------------------------------------------------------------------
 *
 * notify.c
 *	  The NOTIFY kind of destination: delivery of an event to a channel.
 *
 * The notification is queued in the relay's own transaction, the one that
 * marks the event delivered: PostgreSQL sends it at COMMIT and drops it at
 * ABORT, so a listener hears of the event exactly when it is marked.
 *
 * What is sent is the first of these forms that fits in NOTIFY's payload
 * limit: the full envelope (notify_mode 'full' only), the reference (the
 * envelope without its payload: envelope.c), the id form, {"id",
 * "created_at", "attempt"}, whose size does not depend on the event's
 * text (id_form). The id form always fits, so an
 * event is never dropped or cut for its size: a listener that gets no
 * "payload" reads it with outbox_catch_up(). Any role that can connect
 * may LISTEN, hence the reference mode; any role may NOTIFY too, hence the
 * signature: with a secret, the notification is
 *
 *	 {"webhook-id": <event_id>, "webhook-timestamp": <Unix seconds>,
 *	  "webhook-signature": "<one signature per secret, space-separated>",
 *	  "body": <form, as a JSON string>}
 *
 * signed as a webhook is (signature.c: "<id>.<timestamp>.<body>"), so that
 * the three fields are the Standard Webhooks headers and the body string
 * is the exact bytes signed, whatever JSON parser reads the outer object.
 * A destination has at most 11 secrets in use (its column and 10 rows of
 * outbox_destination_secrets, the table's trigger), about 1 kB of
 * signatures, so the id form still fits.
 *
 * Signed, the body is the form with one more key, last: "channel", the
 * channel it is sent on (bound_body). Any role may NOTIFY, so a signed
 * notification can be sent again on another channel; where that channel's
 * destination has the same secret the signature verifies there too, and
 * only the signed channel tells a consumer it was meant for another. The
 * signing scheme itself stays the Standard Webhooks one, so 1.1 consumers
 * and its libraries verify as before (docs/notify.md says what a consumer
 * must check).
 *
 * src/kinds/notify/notify.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <time.h>

#include "access/detoast.h"
#include "commands/async.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/json.h"

#include "destination.h"
#include "envelope.h"
#include "signature.h"

/*
 * The NOTIFY payload must be shorter than this many bytes (PostgreSQL docs
 * for NOTIFY: "shorter than 8000 bytes" in the default configuration;
 * NOTIFY_PAYLOAD_MAX_LENGTH in src/backend/commands/async.c).
 */
#define OUTBOX_NOTIFY_PAYLOAD_LIMIT (BLCKSZ - NAMEDATALEN - 128)

/* notify_mode: the envelope, or the reference form (no payload) */
#define NOTIFY_MODE_FULL "full"
#define NOTIFY_MODE_REFERENCE "reference"

/* A channel's own columns (OutboxDestination.options), from notify_decode. */
typedef struct NotifyDestOptions
{
	char	   *channel;
	bool		reference;		/* notify_mode 'reference' */
} NotifyDestOptions;

#define NOTIFY_OPTIONS(ev) ((const NotifyDestOptions *) (ev)->dest.options)

/* What a notification holds, largest first: send tries them in this order. */
typedef enum NotifyForm
{
	NOTIFY_FORM_FULL,			/* the envelope */
	NOTIFY_FORM_REFERENCE,		/* the envelope without its payload */
	NOTIFY_FORM_ID				/* id, created_at and attempt */
} NotifyForm;

/*
 * The id form of one attempt of ev, palloc'd: the envelope's "id",
 * "created_at" and "attempt" keys, as it writes them.
 */
static char *
id_form(const OutboxEvent *ev, int attempt)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"id\": \"%s\", \"created_at\": \"", ev->event_id);
	OutboxAppendUtcTime(&buf, ev->created_at);
	appendStringInfo(&buf, "\", \"attempt\": %d}", attempt);
	return buf.data;
}

/*
 * form (an envelope form: a JSON object) with "channel": channel added as
 * its last key, palloc'd: the body of a signed notification.
 */
static char *
bound_body(const char *form, const char *channel)
{
	size_t		len = strlen(form);
	StringInfoData buf;

	Assert(len > 0 && form[len - 1] == '}');
	initStringInfo(&buf);
	appendBinaryStringInfo(&buf, form, len - 1);
	appendStringInfoString(&buf, ", \"channel\": ");
	escape_json(&buf, channel);
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

/*
 * The signed notification of form (see the file's header), its body
 * bound to the channel, palloc'd; NULL if the destination's secret cannot
 * sign.
 */
static char *
signed_notification(const OutboxEvent *ev, const char *form, const char *timestamp)
{
	char	   *body = bound_body(form, NOTIFY_OPTIONS(ev)->channel);
	char	   *sig = OutboxSignatures(ev->dest.secrets, ev->dest.nsecrets, ev->event_id,
									   timestamp, body, strlen(body));
	StringInfoData buf;

	if (sig == NULL)
		return NULL;
	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"webhook-id\": \"%s\", \"webhook-timestamp\": \"%s\", "
					 "\"webhook-signature\": \"%s\", \"body\": ",
					 ev->event_id, timestamp, sig);
	escape_json(&buf, body);
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

/*
 * send: queues a notification of the event on its destination's channel, in the
 * first form that fits (see the file's header; ev->body is the envelope or,
 * in reference mode, the reference), signed if the destination has a
 * secret, and records the outcome in the event. Fails permanently only if
 * the secret cannot sign (the trigger on destinations refuses such
 * secrets) or, which the forms' sizes rule out, nothing fits. Runs inside
 * the claim's transaction, in the relay worker or an outbox_relay()
 * backend; the event's payload is no longer there, its other columns are.
 */
static void
notify_send(void *state pg_attribute_unused(), OutboxEvent *event)
{
	NotifyForm	first = NOTIFY_OPTIONS(event)->reference ?
		NOTIFY_FORM_REFERENCE : NOTIFY_FORM_FULL;
	char		timestamp[32];
	size_t		len = 0;

	snprintf(timestamp, sizeof(timestamp), "%lld", (long long) time(NULL));
	for (NotifyForm form = first; form <= NOTIFY_FORM_ID; form++)
	{
		/* the shorter forms are built only when needed */
		const char *text = form == first ? event->body :
			form == NOTIFY_FORM_REFERENCE ? OutboxBuildEnvelope(event, event->attempts + 1, false) :
			id_form(event, event->attempts + 1);

		/* signing only makes it longer: do not sign what cannot fit */
		len = strlen(text);
		if (len >= OUTBOX_NOTIFY_PAYLOAD_LIMIT)
			continue;
		if (event->dest.nsecrets > 0)
		{
			text = signed_notification(event, text, timestamp);
			if (text == NULL)
			{
				event->ok = false;
				event->permanent = true;
				event->error = pstrdup("the destination's secret cannot be used to sign (see the rules for secrets)");
				return;
			}
			len = strlen(text);
			if (len >= OUTBOX_NOTIFY_PAYLOAD_LIMIT)
				continue;
		}
		Async_Notify(NOTIFY_OPTIONS(event)->channel, text);
		event->ok = true;
		return;
	}
	event->ok = false;
	event->permanent = true;
	event->error = psprintf("payload of %zu bytes is too large for NOTIFY (limit: %d bytes)",
							len, OUTBOX_NOTIFY_PAYLOAD_LIMIT - 1);
}

/* check_destination: a channel's name has 1 to 63 bytes; notify_mode. */
static bool
notify_check_destination(const OutboxDestinationRow *row, OutboxProblem *p)
{
	bool		isnull;
	Datum		d = OutboxDestinationColumn(row, "channel", &isnull);
	char	   *mode = OutboxDestinationText(row, "notify_mode");

	if (VARSIZE_ANY_EXHDR(DatumGetPointer(d)) < 1 ||
		toast_raw_datum_size(d) - VARHDRSZ > NAMEDATALEN - 1)
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination channel is not valid"),
								psprintf("A channel name has 1 to %d bytes.", NAMEDATALEN - 1));
	if (strcmp(mode, NOTIFY_MODE_FULL) != 0 && strcmp(mode, NOTIFY_MODE_REFERENCE) != 0)
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination notify_mode is not valid"),
								pstrdup("It is full or reference."));
	return true;
}

/* decode: channel and notify_mode into a NotifyDestOptions. */
static Size
notify_decode(const OutboxDestinationRow *row, OutboxDestination *dest)
{
	NotifyDestOptions *o = palloc0(sizeof(NotifyDestOptions));
	char	   *mode = OutboxDestinationText(row, "notify_mode");

	o->channel = OutboxDestinationText(row, "channel");
	o->reference = mode != NULL && strcmp(mode, NOTIFY_MODE_REFERENCE) == 0;
	dest->options = o;
	return sizeof(NotifyDestOptions) + (o->channel ? strlen(o->channel) + 1 : 0);
}

/*
 * prepare: the body is the envelope or, for a destination in reference
 * mode, its reference form (the payload never goes on the channel).
 */
static Size
notify_prepare(void *state pg_attribute_unused(), OutboxEvent *ev)
{
	return OutboxPrepareEnvelope(ev, !NOTIFY_OPTIONS(ev)->reference);
}

/* The NOTIFY kind: sent in the claim's transaction, at its COMMIT. */
extern const OutboxDestinationKind OutboxNotifyKind;	/* src/kinds/registry.c */

const OutboxDestinationKind OutboxNotifyKind = {
	.name = "notify",
	.description = "a NOTIFY channel",
	.target_column = "channel",
	.own_columns = (const OutboxKindColumn[]) {
		{"notify_mode", NOTIFY_MODE_FULL},
		{NULL}
	},
	.formats = (const char *const[]) {OUTBOX_FORMAT_ENVELOPE, NULL},
	.send_point = OUTBOX_SEND_AT_COMMIT,
	.options_size = sizeof(NotifyDestOptions),
	.signs = true,
	/* a full notification queue fails COMMIT so (async.c, PreCommit_Notify) */
	.commit_full_errcode = ERRCODE_PROGRAM_LIMIT_EXCEEDED,
	.check_destination = notify_check_destination,
	.decode = notify_decode,
	.prepare = notify_prepare,
	.send = notify_send,
};
