/*-------------------------------------------------------------------------
 *
 * format.h
 *	  The formats a destination's events are sent in
 *	  (outbox_destinations.format), independent of the kind that carries
 *	  them.
 *
 * src/format.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_FORMAT_H
#define OUTBOX_FORMAT_H

#include "cloudevents.h"
#include "event.h"


/*
 * A format: its name in outbox_destinations.format, the media type of one
 * event's body and of a batch (a JSON array of them; NULL: the format has
 * no batch), whether attributes travel as headers (the CloudEvents binary
 * mode: only for a kind whose protocol has headers, through its binding),
 * whether it is a CloudEvent, and what builds a claimed event's body.
 */
typedef struct OutboxFormat
{
	const char *name;
	const char *content_type;
	const char *batch_content_type;
	bool		attributes_in_headers;
	bool		cloudevents;	/* a CloudEvents format: it has a source */
	Size		(*prepare) (OutboxEvent *ev, const OutboxCloudEventBinding *binding);
} OutboxFormat;

extern const OutboxFormat *OutboxFormatByName(const char *name);
extern Size OutboxPrepareFormat(OutboxEvent *ev);
extern char *OutboxBatchBody(OutboxEvent *const *events, int n);

#endif							/* OUTBOX_FORMAT_H */
