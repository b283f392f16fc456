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
#include "format.h"
#include "headers.h"

extern bool OutboxCloudEventSourceCheck(const char *source, OutboxProblem *p);
extern const char *OutboxCloudEventSource(const char *column);
extern Size OutboxPrepareCloudEvent(OutboxEvent *ev, const char *source,
									const OutboxCloudEventBinding *binary);

#endif							/* OUTBOX_CLOUDEVENTS_H */
