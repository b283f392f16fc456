/*-------------------------------------------------------------------------
 *
 * destination.h
 *	  The destination interface: what the relay asks of each kind of
 *	  destination (webhook, NOTIFY channel, ...), and the registry of kinds.
 *
 * Built as PostgreSQL's own pluggable APIs are (an archive module's
 * callbacks, an index AM's routine): each kind fills one static const
 * OutboxDestinationKind in its own file, and destination.c lists them. The
 * claim and the worker reach a kind only through its table; nothing outside
 * a kind's file knows how it sends.
 *
 * A kind sends at one of two points:
 *
 *	 OUTBOX_SEND_AT_COMMIT: queued inside the claim's transaction, which
 *		also marks the event delivered, so it goes out exactly at COMMIT
 *		and not at all on ABORT (NOTIFY). Only send is called.
 *	 OUTBOX_SEND_AFTER_COMMIT: handed over after the claim commits, with the
 *		event in the in-flight set and its journal; the outcome comes back
 *		later from collect and is recorded in a transaction of its own
 *		(HTTP). Its network work is done without a transaction open, moved
 *		along by the worker's loop, which waits on the kind's sockets
 *		together with its latch and the postmaster (wait.c).
 *
 * Callbacks run in the relay worker or in a backend running outbox_relay();
 * which ones need a transaction is said at each.
 *
 * src/destination.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_DESTINATION_H
#define OUTBOX_DESTINATION_H

#include "access/htup.h"
#include "nodes/pg_list.h"
#include "port.h"
#include "utils/relcache.h"

#include "event.h"
#include "headers.h"

typedef enum OutboxSendPoint
{
	OUTBOX_SEND_AT_COMMIT,		/* in the claim's transaction */
	OUTBOX_SEND_AFTER_COMMIT	/* after it, outcome recorded later */
} OutboxSendPoint;

/* A socket a kind waits on, and for what (WL_SOCKET_READABLE/WRITEABLE). */
typedef struct OutboxWaitSocket
{
	pgsocket	fd;
	uint32		events;
} OutboxWaitSocket;

/*
 * A row of outbox_destinations: as its validation trigger has it (the
 * table's descriptor), or as the claim reads it (the composite column
 * dest of _outbox_pending, the table's row type).
 */
typedef struct OutboxDestinationRow
{
	TupleDesc	desc;
	HeapTuple	tuple;
	HeapTuple	old_tuple;		/* the trigger's: the row before an UPDATE, or NULL */
	struct OutboxColumnCache *cache;	/* or NULL; see OutboxColumnCache */
} OutboxDestinationRow;

/*
 * Column numbers found by name, kept by the claim for all the rows it
 * decodes (same descriptor): names are the kinds' string constants, so
 * they are matched by address.
 */
#define OUTBOX_COLUMN_CACHE_SIZE 16
typedef struct OutboxColumnCache
{
	int			n;
	const char *names[OUTBOX_COLUMN_CACHE_SIZE];
	int			attnums[OUTBOX_COLUMN_CACHE_SIZE];
} OutboxColumnCache;

/*
 * A column of outbox_destinations that only one kind reads, and its value
 * in a destination of any other kind: unset is NULL for a column that
 * must be NULL there, or the text of the column's default (which a row
 * gets by leaving the column out), as its type's output function writes it.
 */
typedef struct OutboxKindColumn
{
	const char *name;
	const char *unset;
} OutboxKindColumn;

typedef struct OutboxDestinationKind
{
	/* its name in outbox_destinations.kind */
	const char *name;
	/* what a destination of the kind is, for messages: "a webhook" */
	const char *description;
	/* the column of outbox_destinations that holds its target: "url" */
	const char *target_column;
	/*
	 * The columns only this kind reads, other than its target: the
	 * validation trigger refuses a value other than their unset one in a
	 * destination of another kind. Ends with a { NULL } entry.
	 */
	const OutboxKindColumn *own_columns;
	/*
	 * The formats (outbox_destinations.format) the kind can send, the first
	 * one the default; ends with NULL. The validation trigger refuses any
	 * other, and the claim fails an event whose destination has one.
	 */
	const char *const *formats;
	OutboxSendPoint send_point;

	/*
	 * Checks a destination row under the kind's own rules (its target and
	 * its options), from the BEFORE trigger on outbox_destinations, after
	 * the rules every kind shares. Returns false with *p set (23514, or
	 * 54000 for a size over a limit), never quoting a value: a row can
	 * hold credentials. Required.
	 */
	bool		(*check_destination) (const OutboxDestinationRow *row, OutboxProblem *p);

	/*
	 * Reads the kind's own columns of a destination row (its target and
	 * options) into dest->options, allocated in the current memory
	 * context, and returns the bytes they take there. Called by the claim,
	 * in its transaction, for every event routed to a destination of the
	 * kind; the row passed the trigger's checks when it was written. The
	 * only code that reads the kind's columns in the relay. Required.
	 */
	Size		(*decode) (const OutboxDestinationRow *row, OutboxDestination *dest);
	/*
	 * Defines the kind's outbox.* settings. Called from _PG_init in every
	 * process that loads the library. Optional.
	 */
	void		(*init) (void);

	/*
	 * Builds what is sent for a claimed event that has a destination of
	 * this kind and no error: checks the kind's rules on the event, then
	 * sets ev->body; on a broken rule sets ev->error (and ev->permanent)
	 * instead. Returns the bytes that costs in the relay's memory. Called
	 * in the claim's transaction and memory context. Required.
	 */
	Size		(*prepare) (OutboxEvent *ev);

	/*
	 * OUTBOX_SEND_AT_COMMIT: queues the event in the current transaction
	 * and sets ev->ok, or ev->error (ev->permanent when retrying cannot
	 * help).
	 */
	void		(*send) (OutboxEvent *ev);

	/*
	 * OUTBOX_SEND_AFTER_COMMIT, all called with no transaction needed:
	 *
	 * enqueue: takes the event; it stays valid until collect returns it.
	 *	 The kind notes each request it starts before it goes out
	 *	 (OutboxStartLogNote, then OutboxStartLogFlush: start_log.c).
	 * collect: moves the kind's work along without waiting and returns the
	 *	 events whose outcome is now set (a List in the current memory
	 *	 context, NIL if none).
	 * pending: events taken whose outcome is not returned yet.
	 * busy: pending, or network work left (the end of an answer).
	 * full: names of destinations the claim should leave out for now.
 * room: how many more events of ev's destination (a claimed event, its
 *	 destination decoded) the kind can take now; -1: no limit. The claim
 *	 takes no more than that, so that nothing it hands over waits in the
 *	 kind for room, its time limit running. Asked in the claim's
 *	 transaction, once per destination and claim. Optional: no limit.
	 * sockets: the sockets to wait on, in *socks (the kind's memory, valid
	 *	 until its next call); returns a number that changes whenever the
	 *	 list does.
	 * timeout_ms: how soon collect must run even if no socket is ready;
	 *	 -1: no limit. Asked before each wait: a kind's time limits should
	 *	 not count the time since it last ran (the worker was in a step).
	 * socket_ready: a socket of the list is ready for events.
	 * abandon: forgets every event taken and ends their transfers: the
	 *	 transaction that owned them (an outbox_relay() call) was aborted,
	 *	 and their memory is gone with it.
	 */
	void		(*enqueue) (OutboxEvent *ev);
	List	   *(*collect) (void);
	int			(*pending) (void);
	bool		(*busy) (void);
	List	   *(*full) (void);
	int			(*room) (const OutboxEvent *ev);
	uint64		(*sockets) (const OutboxWaitSocket **socks, int *n);
	long		(*timeout_ms) (void);
	void		(*socket_ready) (pgsocket fd, uint32 events);
	void		(*abandon) (void);
} OutboxDestinationKind;

/* Whether a claimed event is to be sent after COMMIT (put in flight). */
static inline bool
OutboxEventGoesInFlight(const OutboxEvent *ev)
{
	return ev->error == NULL && ev->dest.name != NULL && ev->body != NULL &&
		ev->dest.kind->send_point == OUTBOX_SEND_AFTER_COMMIT;
}

extern Datum OutboxDestinationColumn(const OutboxDestinationRow *row, const char *name,
									 bool *isnull);
extern char *OutboxDestinationText(const OutboxDestinationRow *row, const char *name);
extern bool OutboxDestinationColumnChanged(const OutboxDestinationRow *row, const char *name);
extern bool OutboxDestinationFileCheck(const OutboxDestinationRow *row, const char *column,
									   OutboxProblem *p);
extern Size OutboxDestinationSharedOptions(const OutboxDestinationRow *row, int *timeout_ms,
										   Jsonb **headers);
extern bool OutboxDestinationEventHeaders(const OutboxDestinationRow *row, char ***patterns,
										  int *n, Size *bytes);

extern void OutboxKindsInit(void);
extern const OutboxDestinationKind *OutboxKindByName(const char *name);
extern bool OutboxKindHasFormat(const OutboxDestinationKind *kind, const char *format);
extern int	OutboxKindCount(void);
extern const OutboxDestinationKind *OutboxKindAt(int i);

/* Over every OUTBOX_SEND_AFTER_COMMIT kind */
extern List *OutboxKindsCollect(void);
extern int	OutboxKindsPending(void);
extern bool OutboxKindsBusy(void);
extern List *OutboxKindsFull(void);
extern void OutboxSendAndWait(OutboxEvent **events, int n);

/* the kinds, each in its own file */
extern const OutboxDestinationKind OutboxHttpKind;
extern const OutboxDestinationKind OutboxNotifyKind;
extern const OutboxDestinationKind OutboxJetStreamKind;

#endif							/* OUTBOX_DESTINATION_H */
