/*-------------------------------------------------------------------------
 *
 * cloudevents.h
 *	  Events as CloudEvents 1.0 (structured and binary content modes).
 *
 * src/cloudevents.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_CLOUDEVENTS_H
#define OUTBOX_CLOUDEVENTS_H

#include "nodes/pg_list.h"

#include "event.h"
#include "headers.h"

/*
 * How a CloudEvents protocol binding carries the attributes in binary
 * content mode: each becomes a header (or property) named prefix + the
 * attribute's name, its value percent-encoded where the binding says so.
 * HTTP binding (section 3.1.3): "ce-", percent-encoded; Kafka binding
 * (3.2.3): "ce_", as is; AMQP binding (3.1.4): "cloudEvents:" (or
 * "cloudEvents_"), as is. A kind names the one of its protocol.
 */
typedef struct OutboxCloudEventBinding
{
	const char *prefix;
	bool		percent_encode;
} OutboxCloudEventBinding;

extern const OutboxCloudEventBinding OutboxCloudEventsBindingHTTP;

extern bool OutboxCloudEventSourceCheck(const char *source, OutboxProblem *p);
extern const char *OutboxCloudEventSource(const char *column);
extern char *OutboxCloudEventPartitionKey(const OutboxEvent *ev);
extern Size OutboxPrepareCloudEvent(OutboxEvent *ev, const char *source,
									const OutboxCloudEventBinding *binary);

#endif							/* OUTBOX_CLOUDEVENTS_H */
