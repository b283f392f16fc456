/*-------------------------------------------------------------------------
 *
 * kind_registry.c
 *	  The core's side of the destination kinds: the kinds built in, each
 *	  checked when the library loads (OutboxKindCheck), its state in this
 *	  process, the wrappers through which the claim, the worker and the
 *	  wait call a kind, and what the relay asks of all the kinds that send
 *	  after COMMIT at once.
 *
 * As PostgreSQL keeps logical.c (which calls output plugins) apart from
 * output_plugin.h (what a plugin sees): a kind sees destination.h only;
 * the core includes kind_registry.h.
 *
 * Adding a kind: its own folder under src/kinds/ with one
 * OutboxDestinationKind (see destination.h) and one line in
 * src/kinds/registry.c (docs/adding-a-destination-kind.md).
 *
 * src/kind_registry.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "format.h"
#include "kind_registry.h"

static const OutboxDestinationKind *const *kinds = NULL;
static int	NKINDS = 0;

/* each kind's state in this process (its startup's), once created */
#define MAX_KINDS 16
static void *states[MAX_KINDS];
static bool started[MAX_KINDS];

/* A required member that a kind's table leaves NULL is an ERROR. */
#define REQUIRE(kind, member) \
	do { \
		if ((kind)->member == NULL) \
			elog(ERROR, "outbox destination kind \"%s\" has no %s%s", (kind)->name, #member, \
				 strcmp(#member, "description") == 0 || strcmp(#member, "target_column") == 0 || \
				 strcmp(#member, "own_columns") == 0 ? "" : " callback"); \
	} while (0)

/*
 * Checks the callbacks a kind must have for its send point, as PostgreSQL
 * checks an output plugin's (logical.c: "output plugins have to register a
 * begin callback") and a table AM's (GetTableAmRoutine). ERROR naming the
 * kind and the callback: a build with an incomplete kind must not load.
 */
void
OutboxKindCheck(const OutboxDestinationKind *kind)
{
	const char *name = kind->name ? kind->name : "(unnamed)";

	if (kind->name == NULL)
		elog(ERROR, "an outbox destination kind has no name");
	REQUIRE(kind, description);
	REQUIRE(kind, target_column);
	REQUIRE(kind, own_columns);
	OutboxKindOptionsDeclCheck(kind);
	if (kind->formats == NULL || kind->formats[0] == NULL)
		elog(ERROR, "outbox destination kind \"%s\" has no formats", name);
	for (const char *const *f = kind->formats; *f != NULL; f++)
	{
		const OutboxFormat *fmt = OutboxFormatByName(*f);

		if (fmt == NULL)
			elog(ERROR, "outbox destination kind \"%s\" lists format \"%s\", which this library does not have",
				 name, *f);
		if (fmt->attributes_in_headers && kind->binding == NULL)
			elog(ERROR, "outbox destination kind \"%s\" lists format \"%s\" but has no binding for its headers",
				 name, *f);
	}
	REQUIRE(kind, check_destination);
	REQUIRE(kind, decode);
	REQUIRE(kind, prepare);
	if (kind->send_point == OUTBOX_SEND_AT_COMMIT)
		REQUIRE(kind, send);
	else
	{
		REQUIRE(kind, enqueue);
		REQUIRE(kind, collect);
		REQUIRE(kind, pending);
		REQUIRE(kind, busy);
		REQUIRE(kind, full);
		REQUIRE(kind, timeout_ms);
		REQUIRE(kind, abandon);
		/* optional (a kind woken by its latch), but not one without the other */
		if (kind->sockets != NULL)
			REQUIRE(kind, socket_ready);
		if (kind->socket_ready != NULL)
			REQUIRE(kind, sockets);
	}
}

/*
 * Checks every kind built in, then defines their settings; from _PG_init,
 * in any process. ERROR on a kind without a required callback.
 */
void
OutboxKindsInit(void)
{
	kinds = OutboxKindRegistry(&NKINDS);
	if (NKINDS > MAX_KINDS)
		elog(ERROR, "outbox is built with %d destination kinds, more than %d", NKINDS, MAX_KINDS);
	for (int i = 0; i < NKINDS; i++)
		OutboxKindCheck(kinds[i]);
	for (int i = 0; i < NKINDS; i++)
		if (kinds[i]->init != NULL)
			kinds[i]->init();
}

/*
 * The state of the i-th kind in this process, created by its startup
 * callback on first use (in TopMemoryContext); NULL for a kind without
 * one.
 */
static void *
state_at(int i)
{
	if (!started[i])
	{
		if (kinds[i]->startup != NULL)
		{
			MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

			states[i] = kinds[i]->startup();
			MemoryContextSwitchTo(old);
		}
		started[i] = true;
	}
	return states[i];
}

static int
kind_index(const OutboxDestinationKind *kind)
{
	for (int i = 0; i < NKINDS; i++)
		if (kinds[i] == kind)
			return i;
	elog(ERROR, "outbox destination kind \"%s\" is not registered", kind->name);
	return -1;					/* keep the compiler quiet */
}

/*
 * The state of kind in this process (see startup in destination.h): for a
 * kind's SQL functions, which get no state argument. Any process; ERROR
 * for a kind that is not registered, or what its startup raises.
 */
void *
OutboxKindState(const OutboxDestinationKind *kind)
{
	return state_at(kind_index(kind));
}

/*
 * Calls of a kind's per-event and per-wait callbacks with its state, as
 * tableam.h's table_* wrappers: the claim and the wait call these, never
 * the pointers. Each runs where its callback says (destination.h).
 */
bool
OutboxKindCheckDestination(const OutboxDestinationKind *kind, const OutboxDestinationRow *row,
						   OutboxProblem *p)
{
	return kind->check_destination(row, p);
}

Size
OutboxKindDecode(const OutboxDestinationRow *row, OutboxDestination *dest)
{
	return dest->kind->decode(row, dest);
}

Size
OutboxKindPrepare(OutboxEvent *ev)
{
	return ev->dest.kind->prepare(OutboxKindState(ev->dest.kind), ev);
}

void
OutboxKindSend(OutboxEvent *ev)
{
	ev->dest.kind->send(OutboxKindState(ev->dest.kind), ev);
}

/*
 * The end of the commit that recorded outcomes of kinds whose room bounds
 * the copies a crash makes (room_bounds_copies), until it is flushed.
 */
static XLogRecPtr copies_lsn = InvalidXLogRecPtr;

/*
 * Hands ev to its kind after its claim's COMMIT. For a kind whose room
 * bounds the copies, the outcomes noted by OutboxKindRecorded since the
 * last flush are flushed first, with the claim (XactLastCommitEnd): their
 * events freed the room ev takes, and a crash must not lose them once
 * it is used again, or the copies would exceed the room. (In an
 * outbox_relay() call nothing was noted.)
 */
void
OutboxKindEnqueue(OutboxEvent *ev)
{
	if (!XLogRecPtrIsInvalid(copies_lsn) && ev->dest.kind->room_bounds_copies)
	{
		XLogFlush(Max(copies_lsn, XactLastCommitEnd));
		copies_lsn = InvalidXLogRecPtr;
	}
	ev->dest.kind->enqueue(OutboxKindState(ev->dest.kind), ev);
}

/* room, or -1 (no limit) for a kind without the callback */
int
OutboxKindRoom(const OutboxEvent *ev)
{
	if (ev->dest.kind->room == NULL)
		return -1;
	return ev->dest.kind->room(OutboxKindState(ev->dest.kind), ev);
}

/*
 * Notes that ev's outcome, if recorded, committed with this process's last
 * commit (XactLastCommitEnd): the relay worker calls this for each outcome
 * after the step that recorded it, with no transaction open. No error.
 */
void
OutboxKindRecorded(const OutboxEvent *ev)
{
	if (ev->recorded && ev->dest.kind != NULL && ev->dest.kind->room_bounds_copies)
		copies_lsn = XactLastCommitEnd;
}

/* sockets of the i-th kind; 0 and none for a kind without the callback */
uint64
OutboxKindSockets(int i, const OutboxWaitSocket **socks, int *n)
{
	Assert(i >= 0 && i < NKINDS);
	if (kinds[i]->sockets == NULL)
	{
		*socks = NULL;
		*n = 0;
		return 0;
	}
	return kinds[i]->sockets(state_at(i), socks, n);
}

/* timeout_ms of the i-th kind; -1 (no limit) for one that sends at COMMIT */
long
OutboxKindTimeoutMs(int i)
{
	Assert(i >= 0 && i < NKINDS);
	if (kinds[i]->timeout_ms == NULL)
		return -1;
	return kinds[i]->timeout_ms(state_at(i));
}

void
OutboxKindSocketReady(int i, pgsocket fd, uint32 events)
{
	Assert(i >= 0 && i < NKINDS && kinds[i]->socket_ready != NULL);
	kinds[i]->socket_ready(state_at(i), fd, events);
}

/* The kind called name, or NULL if this library has none of that name. */
const OutboxDestinationKind *
OutboxKindByName(const char *name)
{
	for (int i = 0; i < NKINDS; i++)
		if (strcmp(kinds[i]->name, name) == 0)
			return kinds[i];
	return NULL;
}

/* Whether kind can send format (its formats list). Raises no error. */
bool
OutboxKindHasFormat(const OutboxDestinationKind *kind, const char *format)
{
	for (const char *const *f = kind->formats; *f != NULL; f++)
		if (strcmp(*f, format) == 0)
			return true;
	return false;
}

/* The number of kinds, and the i-th (0-based), for iterating. */
int
OutboxKindCount(void)
{
	return NKINDS;
}

const OutboxDestinationKind *
OutboxKindAt(int i)
{
	Assert(i >= 0 && i < NKINDS);
	return kinds[i];
}

/* The i-th kind if it sends after COMMIT, else NULL. */
static inline const OutboxDestinationKind *
after_commit(int i)
{
	return kinds[i]->send_point == OUTBOX_SEND_AFTER_COMMIT ? kinds[i] : NULL;
}

/*
 * The outcomes every kind has now (see collect in destination.h), in one
 * List in the current memory context.
 */
List *
OutboxKindsCollect(void)
{
	List	   *done = NIL;

	for (int i = 0; i < NKINDS; i++)
		if (after_commit(i))
			done = list_concat(done, kinds[i]->collect(state_at(i)));
	return done;
}

/* Events handed to the kinds whose outcome is not returned yet. */
int
OutboxKindsPending(void)
{
	int			n = 0;

	for (int i = 0; i < NKINDS; i++)
		if (after_commit(i))
			n += kinds[i]->pending(state_at(i));
	return n;
}

/* Whether any kind has events or network work (see busy). */
bool
OutboxKindsBusy(void)
{
	for (int i = 0; i < NKINDS; i++)
		if (after_commit(i) && kinds[i]->busy(state_at(i)))
			return true;
	return false;
}

/*
 * What the kinds ask the claim to leave out for now: in *saturated the
 * names of the kinds that are (every destination of theirs), in *full the
 * destinations the other kinds are full for.
 */
void
OutboxKindsSkip(List **full, List **saturated)
{
	*full = NIL;
	*saturated = NIL;
	for (int i = 0; i < NKINDS; i++)
	{
		if (!after_commit(i))
			continue;
		if (kinds[i]->saturated != NULL && kinds[i]->saturated(state_at(i)))
			*saturated = lappend(*saturated, unconstify(char *, kinds[i]->name));
		else
			*full = list_concat(*full, kinds[i]->full(state_at(i)));
	}
}

/*
 * Whether sqlerrcode, from a claim's failed COMMIT, says that the queue of
 * a kind that sends at COMMIT was full (commit_full_errcode): nothing was
 * sent.
 */
bool
OutboxKindsCommitFull(int sqlerrcode)
{
	for (int i = 0; i < NKINDS; i++)
		if (kinds[i]->send_point == OUTBOX_SEND_AT_COMMIT &&
			kinds[i]->commit_full_errcode != 0 &&
			kinds[i]->commit_full_errcode == sqlerrcode)
			return true;
	return false;
}

/*
 * Raises 23514 if kind (NULL: one this library does not have) does not
 * sign what it sends, naming the kinds that do: a secret, in the
 * destination's column or in outbox_destination_secrets, is only for
 * those. In a transaction, from the triggers on both tables.
 */
void
OutboxKindSigningCheck(const OutboxDestinationKind *kind)
{
	StringInfoData which;
	int			n = 0;

	if (kind != NULL && kind->signs)
		return;
	initStringInfo(&which);
	for (int i = 0; i < NKINDS; i++)
		if (kinds[i]->signs)
			n++;
	for (int i = 0, k = 0; i < NKINDS; i++)
		if (kinds[i]->signs)
			appendStringInfo(&which, "%s%s", k++ == 0 ? "" : k == n ? " or " : ", ",
							 kinds[i]->description);
	ereport(ERROR,
			(errcode(ERRCODE_CHECK_VIOLATION),
			 errmsg("destination secret is for %s", which.data),
			 kind != NULL ?
			 errhint("Messages to %s are not signed.", kind->description) : 0));
}

PG_FUNCTION_INFO_V1(_outbox_check_signing_kind);

/*
 * _outbox_check_signing_kind(kind text) RETURNS void
 *
 * SQL-callable, internal: OutboxKindSigningCheck for the kind of that name
 * (23514 unless it signs), for the trigger on outbox_destination_secrets.
 * Strict.
 */
Datum
_outbox_check_signing_kind(PG_FUNCTION_ARGS)
{
	OutboxKindSigningCheck(OutboxKindByName(text_to_cstring(PG_GETARG_TEXT_PP(0))));
	PG_RETURN_VOID();
}

/*
 * Tells every kind that sends after COMMIT to forget what it was given.
 * Called while an error is handled (OutboxSendAndWait): a kind whose state
 * was never made in this process was given nothing, and its startup is
 * not run now.
 */
void
OutboxKindsAbandon(void)
{
	for (int i = 0; i < NKINDS; i++)
		if (after_commit(i) && started[i])
			kinds[i]->abandon(states[i]);
}
