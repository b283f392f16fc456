/*-------------------------------------------------------------------------
 *
 * event_template.h
 *	  Templates of a kind's target built from an event's fields (a NATS
 *	  subject, a BullMQ queue name): literal text and {event_type},
 *	  {aggregate_type}, {aggregate_id} (event_template.c).
 *
 * src/event_template.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_EVENT_TEMPLATE_H
#define OUTBOX_EVENT_TEMPLATE_H

#include "lib/stringinfo.h"

#include "event.h"

extern bool OutboxTemplateSample(const char *t, StringInfo sample, const char **why);
extern char *OutboxTemplateBuild(const char *t, const OutboxEvent *ev, const char **missing,
								 const char **why);

#endif							/* OUTBOX_EVENT_TEMPLATE_H */
