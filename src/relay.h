/*-------------------------------------------------------------------------
 *
 * relay.h
 *	  One relay pass, the relay worker and the launcher.
 *
 * src/relay.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_RELAY_H
#define OUTBOX_RELAY_H

#include "datatype/timestamp.h"
#include "storage/itemptr.h"
#include "fmgr.h"
#include "utils/jsonb.h"

#include "compat.h"

/*
 * One claimed event, its destination and the outcome of this attempt. Lives
 * in the pass's memory context.
 */
typedef struct OutboxEvent
{
	int64		id;
	ItemPointerData tid;		/* the claimed row version, locked by the pass */
	char	   *event_id;		/* uuid as text: the webhook-id */
	int32		attempts;		/* attempts before this one */
	char	   *body;			/* JSON envelope sent; NULL if it cannot be built */
	char	   *dest_name;
	char	   *url;			/* HTTP destination, or NULL */
	char	   *channel;		/* NOTIFY destination, or NULL */
	char	   *secret;			/* signing secret, or NULL */
	int			timeout_ms;
	int			nheaders;
	char	  **headers;		/* "name: value"; the destination's win */

	/* outcome */
	bool		ok;
	bool		permanent;		/* dead-letter now, retrying cannot help */
	char	   *error;
} OutboxEvent;

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

/* last_error of a parked event; outbox--*.sql's trigger matches it */
#define OUTBOX_UNROUTABLE_ERROR "no enabled destination matches the event type"

typedef struct OutboxPassResult
{
	int			claimed;
	int			delivered;
	int			failed;
	int			unroutable;
	double		next_due_ms;	/* ms until the next retry is due; <0: none */
} OutboxPassResult;

/* relay.c */
extern void OutboxRelayPass(int batch_size, bool want_next_due,
							OutboxPassResult *result);
extern Datum outbox_relay(PG_FUNCTION_ARGS);
extern PGDLLEXPORT OUTBOX_NORETURN_PRE void OutboxRelayMain(Datum main_arg) OUTBOX_NORETURN_POST;

/* launcher.c */
extern void OutboxRegisterLauncher(void);
extern PGDLLEXPORT OUTBOX_NORETURN_PRE void OutboxLauncherMain(Datum main_arg) OUTBOX_NORETURN_POST;

/* queue.c */
extern bool OutboxQueueOpen(void);
extern int	OutboxClaim(int batch_size, OutboxEvent **events, int *claimed);
extern void OutboxMarkDelivered(OutboxEvent **events, int n);
extern void OutboxMarkFailed(OutboxEvent **events, int n);
extern void OutboxMarkUnroutable(OutboxEvent **events, int n);
extern double OutboxNextDueMs(void);
extern Datum _outbox_claim_query(PG_FUNCTION_ARGS);

/* envelope.c */
extern char *OutboxBuildEnvelope(const char *event_id, const char *type,
								 const char *agg_type, const char *agg_id,
								 TimestampTz created_at, int attempt,
								 Jsonb *payload);
extern Datum _outbox_envelope(PG_FUNCTION_ARGS);

/* deliver_http.c */
extern void OutboxDeliverHttp(OutboxEvent **events, int n);

/* deliver_notify.c */
extern void OutboxDeliverNotify(OutboxEvent *event);

#endif							/* OUTBOX_RELAY_H */
