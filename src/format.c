/*-------------------------------------------------------------------------
 *
 * format.c
 *	  The formats of what is sent for an event, as a table any kind can
 *	  use: the envelope (envelope.c) and CloudEvents 1.0 in structured and
 *	  binary content mode (cloudevents.c).
 *
 * A destination is a kind, a target and a format (README.md), each its
 * own axis. The claim finds the destination's format here (ev->dest.fmt)
 * and its CloudEvents source (the shared cloudevents_source column); a
 * kind lists the formats it can carry (its formats), builds the body with
 * OutboxPrepareFormat, and labels it with the format's media type. A kind
 * carries the binary mode only if its protocol has headers, and then
 * names its CloudEvents protocol binding in its table (binding,
 * cloudevents.h); structured mode is
 * the same JSON event format in every binding (the NATS binding's only
 * mode: "the NATS message payload MUST be the JSON event format").
 *
 * src/format.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"

#include "cloudevents.h"
#include "envelope.h"
#include "format.h"

static Size
prepare_envelope(OutboxEvent *ev, const OutboxCloudEventBinding *binding pg_attribute_unused())
{
	return OutboxPrepareEnvelope(ev, true);
}

static Size
prepare_structured(OutboxEvent *ev, const OutboxCloudEventBinding *binding pg_attribute_unused())
{
	return OutboxPrepareCloudEvent(ev, ev->dest.ce_source, NULL);
}

/* the kind's binding: OutboxKindCheck makes sure a kind with this format has one */
static Size
prepare_binary(OutboxEvent *ev, const OutboxCloudEventBinding *binding)
{
	return OutboxPrepareCloudEvent(ev, ev->dest.ce_source, binding);
}

static const OutboxFormat formats[] = {
	{OUTBOX_FORMAT_ENVELOPE, "application/json", "application/json", false, false,
	prepare_envelope},
	{OUTBOX_FORMAT_CLOUDEVENTS, "application/cloudevents+json",
	"application/cloudevents-batch+json", false, true, prepare_structured},
	/* one event per message: the attributes are the message's headers */
	{OUTBOX_FORMAT_CLOUDEVENTS_BINARY, "application/json", NULL, true, true,
	prepare_binary},
};

/*
 * The body of a batch of n prepared events of one destination, whose
 * format has a batch (batch_content_type): a JSON array of their bodies,
 * in order; for structured CloudEvents, the CloudEvents JSON format's
 * batch. Palloc'd in the current memory context; no transaction needed.
 */
char *
OutboxBatchBody(OutboxEvent *const *events, int n)
{
	StringInfoData buf;

	Assert(n > 0 && events[0]->dest.fmt->batch_content_type != NULL);
	initStringInfo(&buf);
	appendStringInfoChar(&buf, '[');
	for (int i = 0; i < n; i++)
	{
		if (i > 0)
			appendStringInfoChar(&buf, ',');
		appendStringInfoString(&buf, events[i]->body);
	}
	appendStringInfoChar(&buf, ']');
	return buf.data;
}

/* The format called name, or NULL if this library has none. No error. */
const OutboxFormat *
OutboxFormatByName(const char *name)
{
	for (int i = 0; i < (int) lengthof(formats); i++)
		if (strcmp(formats[i].name, name) == 0)
			return &formats[i];
	return NULL;
}

/*
 * Builds a claimed event's body in its destination's format (ev->dest.fmt,
 * set by the claim), and for the binary mode its attributes as header
 * lines in ev->extra_headers under its kind's binding. Sets ev->error
 * (permanent) instead for an event too large. Returns the bytes it costs.
 * For a kind's prepare callback: in the claim's transaction and memory
 * context.
 */
Size
OutboxPrepareFormat(OutboxEvent *ev)
{
	Assert(ev->dest.fmt != NULL);
	return ev->dest.fmt->prepare(ev, ev->dest.binding);
}
