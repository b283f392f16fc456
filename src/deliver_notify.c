/*-------------------------------------------------------------------------
 *
 * deliver_notify.c
 *	  Delivery of an event to a NOTIFY channel.
 *
 * The notification is queued in the relay's own transaction, the one that
 * marks the event delivered: PostgreSQL sends it at COMMIT and drops it at
 * ABORT, so a listener hears of the event exactly when it is marked.
 *
 * src/deliver_notify.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/async.h"

#include "deliver_notify.h"

/*
 * The NOTIFY payload must be shorter than this many bytes (PostgreSQL docs
 * for NOTIFY: "shorter than 8000 bytes" in the default configuration;
 * NOTIFY_PAYLOAD_MAX_LENGTH in src/backend/commands/async.c).
 */
#define OUTBOX_NOTIFY_PAYLOAD_LIMIT (BLCKSZ - NAMEDATALEN - 128)

/*
 * Queues the event's envelope as a notification on its channel and records
 * the outcome in the event. A payload of OUTBOX_NOTIFY_PAYLOAD_LIMIT bytes
 * or more cannot be sent; rather than cut it, the event fails permanently
 * (dead-lettered, with the size in last_error) and stays redeliverable, for
 * instance after routing its type to a webhook. Runs inside the relay pass's
 * transaction, in the relay worker or an outbox_relay() backend.
 */
void
OutboxDeliverNotify(OutboxEvent *event)
{
	size_t		len = strlen(event->body);

	if (len >= OUTBOX_NOTIFY_PAYLOAD_LIMIT)
	{
		event->ok = false;
		event->permanent = true;
		event->error = psprintf("payload of %zu bytes is too large for NOTIFY (limit: %d bytes)",
								len, OUTBOX_NOTIFY_PAYLOAD_LIMIT - 1);
		return;
	}
	Async_Notify(event->dest.channel, event->body);
	event->ok = true;
}
