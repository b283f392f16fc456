/*-------------------------------------------------------------------------
 *
 * event.h
 *	  One event as the relay handles it, its destination, and the size
 *	  limits that apply to events.
 *
 * This is the common vocabulary of emit.c, queue.c, relay.c, envelope.c and
 * the transports (deliver_*.c). It holds data only: who fills which field is
 * said next to it. An OutboxEvent lives in the relay pass's memory context.
 *
 * src/event.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_EVENT_H
#define OUTBOX_EVENT_H

#include "datatype/timestamp.h"
#include "storage/itemptr.h"
#include "utils/jsonb.h"

/*
 * The largest payload (jsonb, in bytes) an event may have. The envelope is
 * one string in memory, and PostgreSQL's allocations stop at 1 GB; escaping
 * can make JSON text six times its characters (\u0001), so 64 MB keeps the
 * worst case well inside that.
 */
#define OUTBOX_MAX_PAYLOAD_BYTES (64 * 1024 * 1024)

/*
 * A pass stops taking events once their payloads add up to this much, so
 * that a batch of large events cannot exhaust the relay's memory.
 */
#define OUTBOX_PASS_PAYLOAD_BYTES (256 * 1024 * 1024)

/*
 * Where an event goes: the row of outbox_destinations that routing chose
 * (_outbox_route() in SQL). Exactly one of url and channel is set.
 */
typedef struct OutboxDestination
{
	char	   *name;			/* NULL: no destination takes the event */
	char	   *url;			/* HTTP destination, or NULL */
	char	   *channel;		/* NOTIFY destination, or NULL */
	char	   *secret;			/* signing secret, or NULL */
	int			timeout_ms;		/* -1: the transport's default */
	Jsonb	   *headers;		/* the destination's headers, or NULL */
	bool		retry_client_errors;	/* retry 4xx answers like 5xx */
} OutboxDestination;

/*
 * One claimed event and the outcome of this attempt. queue.c fills the
 * event's columns and its destination, relay.c the body, and the transport
 * the outcome. Once the event is leased (OutboxLease), its row's attempts
 * is attempts + 1: this attempt is counted before it starts, and outcomes
 * are recorded only against that count.
 */
typedef struct OutboxEvent
{
	/* the row, as claimed */
	int64		id;
	ItemPointerData tid;		/* the claimed row version, locked by the pass */
	char	   *event_id;		/* uuid as text: the webhook-id */
	int32		attempts;		/* attempts before this one */
	char	   *event_type;
	char	   *aggregate_type; /* or NULL */
	char	   *aggregate_id;	/* or NULL */
	TimestampTz created_at;
	Jsonb	   *payload;
	Jsonb	   *headers;		/* the event's own headers, or NULL */
	OutboxDestination dest;

	/* what is sent: the JSON envelope; NULL when it cannot be built */
	char	   *body;

	void	   *owner;			/* the claimer's bookkeeping (relay.c) */

	/* outcome */
	bool		ok;
	bool		permanent;		/* dead-letter now, retrying cannot help */
	char	   *error;
	int64		retry_after_ms; /* the endpoint's Retry-After; -1: none */
} OutboxEvent;

#endif							/* OUTBOX_EVENT_H */
