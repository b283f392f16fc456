/*-------------------------------------------------------------------------
 *
 * event.h
 *	  One event as the relay handles it, its destination, and the size
 *	  limits that apply to events.
 *
 * This is the common vocabulary of emit.c, queue.c, relay.c, envelope.c and
 * the destination kinds (deliver_*.c). It holds data only: who fills which
 * field is said next to it. An OutboxEvent lives in the memory context of
 * its claim (a relay's claim batch, or outbox_relay()'s SPI context).
 *
 * src/event.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_EVENT_H
#define OUTBOX_EVENT_H

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"
#include "storage/itemptr.h"
#include "utils/jsonb.h"

/*
 * Size limits of an event, in bytes unless said otherwise. They are enforced
 * when an event is written (validate.c: the trigger on outbox, which
 * outbox_emit's INSERT fires too) and again by the relay when it claims an
 * event, before it builds anything from it: an event that got in anyway (a
 * plain INSERT with triggers off, data from before 1.1) is dead-lettered on
 * its own with the reason, and never stops the relay. docs/security.md
 * ("Limits") lists them.
 */
/* event_type; also a destination's event_types pattern */
#define OUTBOX_MAX_TYPE_BYTES 1024
/* aggregate_type and aggregate_id, each */
#define OUTBOX_MAX_AGGREGATE_BYTES 1024
/*
 * The payload (jsonb, as stored). The envelope is one string in memory,
 * and PostgreSQL's allocations stop at 1 GB; see OUTBOX_MAX_ENVELOPE_BYTES.
 */
#define OUTBOX_MAX_PAYLOAD_BYTES (64 * 1024 * 1024)
/* headers of an event or a destination: count, name, value, whole object */
#define OUTBOX_MAX_HEADERS 64
#define OUTBOX_MAX_HEADER_NAME_BYTES 256
#define OUTBOX_MAX_HEADER_VALUE_BYTES 8192
#define OUTBOX_MAX_HEADERS_BYTES (64 * 1024)
/* entries of a destination's event_headers (names and prefix-* patterns) */
#define OUTBOX_MAX_EVENT_HEADER_ENTRIES 64
/*
 * The JSON envelope sent for an event (envelope.c). Escaping makes a
 * control character six bytes (\u0001), and a jsonb number of a few bytes
 * can print as a thousand digits (1e1000), so the text can be far larger
 * than the stored payload: it is measured (OutboxEnvelopeBound) before it
 * is built.
 */
#define OUTBOX_MAX_ENVELOPE_BYTES (128 * 1024 * 1024)
/* a request's time limit, outbox.http_timeout or a destination's timeout_ms, in ms */
#define OUTBOX_MAX_TIMEOUT_MS (600 * 1000)
/* a destination's signing secret */
#define OUTBOX_MAX_SECRET_BYTES 1024

/*
 * The relay's memory budget for events: what the events it holds cost,
 * their decoded columns and their envelope twice (the relay's copy, and
 * the transport's: libcurl's or the NOTIFY queue's). A claim takes no
 * event that would bring the events in flight (sent after COMMIT, held
 * until their outcome) past it, and no more than it in all (those sent at
 * COMMIT are let go with the claim). An event larger than the budget alone
 * is taken when nothing else is held, so that every event within the
 * limits above is sent: at most about 320 MB then (an envelope of 128 MB
 * twice, and a 64 MB payload).
 */
#define OUTBOX_RELAY_BYTES (256 * 1024 * 1024)

/*
 * An event whose attempts were cut off by its relay's end this many times
 * in a row is sent alone: in a claim of its own, with nothing else of its
 * relay in flight, so that if it is what ends the relay, it alone is
 * blamed (and dead-lettered: journal.c, release_stmt) and no other event
 * is cut off with it again.
 */
#define OUTBOX_ALONE_AFTER 2

/* outbox_destinations.format: what is sent for an event, the envelope */
#define OUTBOX_FORMAT_ENVELOPE "envelope"
/* CloudEvents 1.0, structured and binary content modes (format.c) */
#define OUTBOX_FORMAT_CLOUDEVENTS "cloudevents"
#define OUTBOX_FORMAT_CLOUDEVENTS_BINARY "cloudevents-binary"

struct OutboxDestinationKind;
struct OutboxFormat;
struct OutboxCloudEventBinding;

/*
 * Where an event goes: the row of outbox_destinations that routing chose
 * (_outbox_routes() in SQL). The claim decodes the columns every kind
 * reads; the kind's own (its target and options) are decoded by the kind
 * (destination.h, decode) into options, which only the kind reads.
 */
typedef struct OutboxDestination
{
	char	   *name;			/* NULL: no destination takes the event */
	const struct OutboxDestinationKind *kind;	/* set when name is */
	char	   *format;			/* what is sent: one of its kind's formats */
	const struct OutboxFormat *fmt; /* that format (format.c) */
	const struct OutboxCloudEventBinding *binding;	/* its kind's, or NULL */
	const char *ce_source;		/* CloudEvents formats: the source (the
								 * cloudevents_source column, or the
								 * database's) */
	char	  **secrets;		/* signing secrets: the secret column's,
								 * then outbox_destination_secrets' in use */
	int			nsecrets;		/* 0: messages are not signed */
	/*
	 * event_headers: when filtered, only the event headers it names (names
	 * and prefix-* patterns, in lower case) are forwarded; the claim drops
	 * the others from the event (OutboxForwardedEventHeaders). Not
	 * filtered (NULL, as in 1.1): every one the header rules allow.
	 */
	bool		event_headers_filtered;
	char	  **event_headers;
	int			nevent_headers;
	void	   *options;		/* the kind's own, from its decode */
	TimestampTz created_at;		/* the row's created_at: which destination
								 * of that name it was, when claimed */
} OutboxDestination;

/*
 * One claimed event and the outcome of this attempt. claim_decode.c fills
 * the event's columns and its destination, its kind's prepare the body,
 * and its kind the outcome. Its row keeps the claimed attempt count until the outcome,
 * which is recorded only against that count and adds this attempt.
 */
typedef struct OutboxEvent
{
	/* the row, as claimed */
	int64		id;
	ItemPointerData tid;		/* the claimed row version, locked by the pass */
	char	   *event_id;		/* uuid as text: the webhook-id */
	int32		attempts;		/* attempts before this one */
	int32		cut_off_attempts;	/* of those, cut off by a relay's end in
									 * a row (see OUTBOX_ALONE_AFTER) */
	char	   *event_type;
	char	   *aggregate_type; /* or NULL */
	char	   *aggregate_id;	/* or NULL */
	int64		blocked_by;		/* not the head of its key: the event before
								 * it, which it is held for; 0: none */
	bool		fan_out;		/* several destinations take it: the claim
								 * replaces its row by one per destination
								 * (fan_out.c) and sends nothing */
	TimestampTz created_at;
	Jsonb	   *payload;
	Jsonb	   *headers;		/* the event's own headers, or NULL */
	OutboxDestination dest;

	/* what is sent: the JSON envelope; NULL when it cannot be built */
	char	   *body;
	List	   *extra_headers;	/* header lines its kind's prepare built with
								 * the body (in the claim's transaction), or NIL */
	Size		cost;			/* bytes it holds in the relay (decoded, body
								 * twice): see OUTBOX_RELAY_BYTES */
	Size		envelope_bound; /* OutboxEventEnvelopeBound; 0: not yet */

	Oid			extoid;			/* the extension it was claimed from, once
								 * in flight; InvalidOid: the current one */
	void	   *owner;			/* the worker's bookkeeping (relay.c) */
	int			start_log;		/* its request started, noted in start log
								 * file start_log - 1 (start_log.c); 0: not */

	/* outcome */
	bool		ok;
	bool		duplicate;		/* ok, but the receiver already had it (a
								 * broker's deduplication): counted apart */
	bool		permanent;		/* dead-letter now, retrying cannot help */
	bool		dead_lettered;	/* the failure recorded dead-lettered it
								 * (statistics) */
	bool		not_sent;		/* nothing went out (a full NOTIFY queue): a
								 * failure, but no attempt is counted */
	char	   *error;			/* for last_error and the log: never a value */
	char	   *response;		/* the start of the endpoint's answer, credentials
								 * masked: for last_error only, or NULL */
	int64		retry_after_ms; /* the endpoint's Retry-After; -1: none */
	bool		jitter_set;		/* jitter is the kind's: events that failed
								 * in one request come back together */
	double		jitter;			/* then the random share of the backoff, in [0, 1) */
	char	   *gone_target;	/* the endpoint said it is gone for good: the
								 * target (the kind's target column) it was
								 * sent to, for which the destination is
								 * disabled; else NULL */
	const char *gone_answer;	/* then what it answered, for messages: "410
								 * Gone" (a static string) */
	bool		recorded;		/* the outcome changed the row */
} OutboxEvent;

#endif							/* OUTBOX_EVENT_H */
