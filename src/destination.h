/*-------------------------------------------------------------------------
 *
 * destination.h
 *	  The destination interface: what the relay asks of each kind of
 *	  destination (webhook, NOTIFY channel, ...), and the registry of kinds.
 *
 * Built as PostgreSQL's own pluggable APIs are (an archive module's
 * callbacks, an index AM's routine): each kind fills one const
 * OutboxDestinationKind in its folder under src/kinds/, and
 * src/kinds/registry.c lists them. The required callbacks are checked when
 * the library loads (OutboxKindCheck). The claim and the worker reach a
 * kind only through its table; nothing outside a kind's folder knows how it
 * sends. What the core offers a kind is declared at the end of this
 * header, and a kind's files include no other header of the worker's
 * (only this one, the shared rules of what is sent: format.h, envelope.h,
 * cloudevents.h, headers.h, signature.h, event_template.h,
 * trace_context.h; compat.h and log_limit.h).
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
#include <sys/stat.h>
#include <time.h>
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

/*
 * A kind's own setting kept in outbox_destinations.options (a jsonb object)
 * rather than in a column of its own: its key, its JSON type and bounds.
 * The validation trigger checks a row's options against its kind's list
 * before the kind's check_destination (kind_options.c), so that the kind
 * reads them with the readers below and trusts their types. Values are
 * never quoted in an error, a log line or last_error, whichever option
 * holds a credential. See docs/kind-settings.md.
 */
typedef enum OutboxOptionType
{
	OUTBOX_OPTION_STRING,		/* min..max bytes */
	OUTBOX_OPTION_INTEGER,		/* a JSON number with no fraction, min..max */
	OUTBOX_OPTION_BOOLEAN,		/* true or false */
	OUTBOX_OPTION_STRINGS		/* an array of min..max strings, each not empty */
} OutboxOptionType;

typedef struct OutboxKindOption
{
	const char *name;			/* lower case letters, digits and _ */
	OutboxOptionType type;
	bool		required;
	int64		min;
	int64		max;
} OutboxKindOption;

/* the bytes a destination's options may take, all of them (jsonb) */
#define OUTBOX_MAX_OPTIONS_BYTES (64 * 1024)
/* the bytes of one string an option holds, whatever its own max */
#define OUTBOX_MAX_OPTION_STRING_BYTES 8192

typedef struct OutboxDestinationKind
{
	/* its name in outbox_destinations.kind */
	const char *name;
	/* what a destination of the kind is, for messages: "a webhook" */
	const char *description;
	/*
	 * Where its target is: a column of outbox_destinations ("url"), or,
	 * for a kind that brings no column, one of its options, which it
	 * declares required. A destination whose target is an option is
	 * written with its kind named (a row without a kind takes the kind of
	 * the one target column it sets).
	 */
	const char *target_column;
	/*
	 * The columns only this kind reads, other than its target: the
	 * validation trigger refuses a value other than their unset one in a
	 * destination of another kind. Ends with a { NULL } entry.
	 */
	const OutboxKindColumn *own_columns;
	/*
	 * Its settings in outbox_destinations.options: NULL for none, else
	 * ends with a { NULL } entry. A destination of the kind may hold no
	 * other key, and of any other kind none of these.
	 */
	const OutboxKindOption *options;
	/*
	 * The formats (outbox_destinations.format) the kind can send, the first
	 * one the default; ends with NULL. The validation trigger refuses any
	 * other, and the claim fails an event whose destination has one.
	 */
	const char *const *formats;
	/*
	 * Its protocol's CloudEvents binding (cloudevents.h), under which the
	 * binary mode's attributes become headers: required if formats has a
	 * format whose attributes travel as headers; NULL otherwise.
	 */
	const struct OutboxCloudEventBinding *binding;
	OutboxSendPoint send_point;
	/*
	 * Whether what it sends is signed with the destination's secrets (the
	 * Standard Webhooks scheme, signature.c): a destination of a kind that
	 * does not sign may have no secret (OutboxKindSigningCheck).
	 */
	bool		signs;
	/*
	 * OUTBOX_SEND_AT_COMMIT: the SQLSTATE (an ERRCODE_* value) with which
	 * the claim's COMMIT fails when the kind's queue is full. Nothing was
	 * sent then, and the attempt is not counted: the event waits, with the
	 * reason. 0: none.
	 */
	int			commit_full_errcode;
	/*
	 * OUTBOX_SEND_AFTER_COMMIT with room: whether the receiver keeps every
	 * copy of a message sent twice (it does not deduplicate on the
	 * event_id), so that room is also the bound on the copies a crash
	 * makes. Outcomes commit without waiting for the WAL flush; for such a
	 * kind the worker flushes those that freed room before a claim hands it
	 * more events, so that a crash loses none whose room was used again.
	 */
	bool		room_bounds_copies;
	/*
	 * The size of the struct decode puts in dest->options. Set, a claim
	 * decodes each destination row once and gives every event of it a
	 * copy of that struct, whose pointers all copies share: prepare and
	 * later callbacks may set the struct's own fields for their event,
	 * never change what those point to. 0: decoded for every event.
	 */
	Size		options_size;

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
	 * kind (once per destination row and claim with options_size); the
	 * row passed the trigger's checks when it was written. The only code
	 * that reads the kind's columns in the relay. Required.
	 */
	Size		(*decode) (const OutboxDestinationRow *row, OutboxDestination *dest);
	/*
	 * Defines the kind's outbox.* settings. Called from _PG_init in every
	 * process that loads the library. Optional.
	 */
	void		(*init) (void);

	/*
	 * Creates the kind's state in this process: what it keeps between calls
	 * (its connections, its requests in flight), in place of file-level
	 * variables, as an archive module's private_data. Called once per
	 * process, before the first callback below, in TopMemoryContext; every
	 * callback below gets the pointer as its state argument. Optional:
	 * state is then NULL. A kind's SQL functions reach the same state with
	 * OutboxKindState.
	 */
	void	   *(*startup) (void);

	/*
	 * Builds what is sent for a claimed event that has a destination of
	 * this kind and no error: checks the kind's rules on the event, then
	 * sets ev->body; on a broken rule sets ev->error (and ev->permanent)
	 * instead. Returns the bytes that costs in the relay's memory. Called
	 * in the claim's transaction and memory context. Required.
	 */
	Size		(*prepare) (void *state, OutboxEvent *ev);

	/*
	 * OUTBOX_SEND_AT_COMMIT: queues the event in the current transaction
	 * and sets ev->ok, or ev->error (ev->permanent when retrying cannot
	 * help). Required for such a kind.
	 */
	void		(*send) (void *state, OutboxEvent *ev);

	/*
	 * OUTBOX_SEND_AFTER_COMMIT, all called with no transaction needed, and
	 * required for such a kind but saturated, room, and sockets with
	 * socket_ready (a kind woken only by its latch has no sockets):
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
	 * saturated: whether the claim should leave out every destination of
	 *	 the kind for now, those it has not met yet too: it holds as many
	 *	 events waiting as it can start before more could. Asked before
	 *	 each claim and as outcomes come back: it must be cheap. While it
	 *	 says so, full is not asked. Optional: never.
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
	void		(*enqueue) (void *state, OutboxEvent *ev);
	List	   *(*collect) (void *state);
	int			(*pending) (void *state);
	bool		(*busy) (void *state);
	List	   *(*full) (void *state);
	bool		(*saturated) (void *state);
	int			(*room) (void *state, const OutboxEvent *ev);
	uint64		(*sockets) (void *state, const OutboxWaitSocket **socks, int *n);
	long		(*timeout_ms) (void *state);
	void		(*socket_ready) (void *state, pgsocket fd, uint32 events);
	void		(*abandon) (void *state);
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
extern PGDLLEXPORT char *OutboxDestinationText(const OutboxDestinationRow *row, const char *name);
extern bool OutboxDestinationColumnChanged(const OutboxDestinationRow *row, const char *name);
/*
 * The options of a destination row (kind_options.c): the value of option
 * name, as the validation trigger checked it. Text: a string option
 * (palloc'd), or NULL when unset; Int and Bool: false when unset; Strings:
 * false when unset, else its entries palloc'd in *out. A value of another
 * type (a row written with the trigger off) reads as unset. Any process,
 * in a transaction. OutboxDestinationText reads an option too when name is
 * not a column, and OutboxDestinationColumnChanged compares one. Exported
 * (PGDLLEXPORT), as a kind built outside the library would need them.
 */
extern PGDLLEXPORT char *OutboxDestinationOptionText(const OutboxDestinationRow *row,
													 const char *name);
extern PGDLLEXPORT bool OutboxDestinationOptionInt(const OutboxDestinationRow *row,
												   const char *name, int64 *value);
extern PGDLLEXPORT bool OutboxDestinationOptionBool(const OutboxDestinationRow *row,
													const char *name, bool *value);
extern PGDLLEXPORT bool OutboxDestinationOptionStrings(const OutboxDestinationRow *row,
													   const char *name, char ***out, int *n);
extern bool OutboxDestinationOptionChanged(const OutboxDestinationRow *row, const char *name);
extern bool OutboxDestinationFileCheck(const OutboxDestinationRow *row, const char *column,
									   const char *target_column, OutboxProblem *p);
extern Size OutboxDestinationSharedOptions(const OutboxDestinationRow *row, int *timeout_ms,
										   Jsonb **headers);
extern bool OutboxDestinationEventHeaders(const OutboxDestinationRow *row, char ***patterns,
										  int *n, Size *bytes);

/*
 * A kind that this build left out (make with_<kind>=no), as its folder's
 * stub/ describes it: enough to refuse its destinations and its columns.
 */
typedef struct OutboxKindLeftOut
{
	const char *name;
	const char *description;
	const char *target_column;
	const OutboxKindColumn *own_columns;	/* ends with { NULL } */
} OutboxKindLeftOut;

/*
 * The kind's state in this process (see startup above), for a kind's SQL
 * functions, which get no state argument (kind_registry.c). Any process;
 * ERROR for a kind that is not registered, or what its startup raises.
 */
extern void *OutboxKindState(const OutboxDestinationKind *kind);

/*
 * What the core offers a kind (and nothing else of the worker's): its
 * services, declared here only.
 */

/*
 * start_log.c. Note: records that ev's request is about to start (before it
 * can reach the destination), in the relay's start log; Flush: writes the
 * notes out. A kind that sends after COMMIT calls Note for each request and
 * Flush before any of them goes out, in the relay's process, no
 * transaction needed; ERROR if the log cannot be written.
 */
extern void OutboxStartLogNote(OutboxEvent *ev);
extern void OutboxStartLogFlush(void);

/*
 * redact.c. Printable: a copy of len bytes of s with control characters
 * and invalid UTF-8 escaped (palloc'd); Redact: the same, with what looks
 * like a credential (a bearer token, a password in a URL, a long token)
 * masked: for text a destination sent back, before it goes into
 * last_error or the log. Any process; no error.
 */
extern char *OutboxPrintable(const char *s, size_t len);
extern char *OutboxRedact(const char *s, size_t len);

/*
 * files.c. ReadFile: reads a file a destination names (a CA bundle,
 * credentials) as the server's user, if it is a regular file of at most
 * OUTBOX_FILE_MAX_BYTES, before deadline; malloc'd *out, or false with a
 * message naming column (never the path) in error. Safe on a thread other
 * than the process's main one: no palloc, no ereport.
 *
 * The size limit: a creds file is a user JWT and an nkey seed, a few kB; a
 * CA file is a PEM bundle, and Debian's whole system bundle
 * (/etc/ssl/certs/ca-certificates.crt) is about 220 kB. 1 MB holds four of
 * those, and bounds what a relay or a check holds for a file an admin
 * names.
 */
#define OUTBOX_FILE_MAX_BYTES (1024 * 1024)
extern bool OutboxReadFile(const char *path, const char *column,
						   const struct timespec *deadline, char **out, size_t *len,
						   struct stat *st, char *error, size_t error_size);
extern struct timespec OutboxDeadlineIn(int timeout_ms);

/*
 * health.c: a warning about destination name, shown in
 * outbox_destination_stats until it is set again (NULL clears it). Any
 * process with the library preloaded; no error.
 */
extern void OutboxHealthDestinationWarning(const char *name, const char *text);

/*
 * outcome.c: the longest time, in milliseconds, from an event's first
 * attempt to its last under the retry schedule (outbox.max_attempts,
 * outbox.backoff_*), each attempt taking timeout_ms: for a kind that must
 * check a broker's deduplication window against it. Any process.
 */
extern double OutboxRetrySpanMs(int timeout_ms);

#endif							/* OUTBOX_DESTINATION_H */
