/*-------------------------------------------------------------------------
 *
 * destination.c
 *	  The registry of destination kinds, and what the relay asks of all the
 *	  kinds that send after COMMIT at once.
 *
 * Adding a kind: its own file with one OutboxDestinationKind (see
 * destination.h), one line in kinds[] below and its extern in
 * destination.h, and its columns in the schema
 * (docs/adding-a-destination-kind.md).
 *
 * src/destination.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/formatting.h"
#include "storage/latch.h"
#include "utils/wait_event.h"

#include "destination.h"
#include "wait.h"

static const OutboxDestinationKind *const kinds[] = {
	&OutboxHttpKind,
	&OutboxNotifyKind,
	&OutboxJetStreamKind,
};

#define NKINDS ((int) lengthof(kinds))

/* Defines every kind's settings; from _PG_init, in any process. */
void
OutboxKindsInit(void)
{
	for (int i = 0; i < NKINDS; i++)
		if (kinds[i]->init != NULL)
			kinds[i]->init();
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

/*
 * The value of column name of a destination row (for a kind's
 * check_destination and decode), or *isnull set. Runs in any process, in a
 * transaction. ERROR if the row type has no such column: a kind named a
 * column its version of the schema does not have.
 */
Datum
OutboxDestinationColumn(const OutboxDestinationRow *row, const char *name, bool *isnull)
{
	OutboxColumnCache *cache = row->cache;
	int			attnum = 0;

	if (cache != NULL)
		for (int i = 0; i < cache->n; i++)
			if (cache->names[i] == name)
				attnum = cache->attnums[i];
	if (attnum == 0)
	{
		attnum = SPI_fnumber(row->desc, name);
		if (attnum <= 0)
			elog(ERROR, "outbox_destinations has no column \"%s\"", name);
		if (cache != NULL && cache->n < OUTBOX_COLUMN_CACHE_SIZE)
		{
			cache->names[cache->n] = name;
			cache->attnums[cache->n++] = attnum;
		}
	}
	return heap_getattr(row->tuple, attnum, row->desc, isnull);
}

/*
 * The value of text column name of a destination row, as a string in the
 * current memory context, or NULL. As OutboxDestinationColumn.
 */
char *
OutboxDestinationText(const OutboxDestinationRow *row, const char *name)
{
	bool		isnull;
	Datum		d = OutboxDestinationColumn(row, name, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

/*
 * The columns every kind may have and some kinds read: timeout_ms (-1 when
 * NULL) and headers (a copy in the current memory context, or NULL).
 * Returns the bytes the copy takes. For a kind's decode.
 */
Size
OutboxDestinationSharedOptions(const OutboxDestinationRow *row, int *timeout_ms, Jsonb **headers)
{
	bool		isnull;
	Datum		d = OutboxDestinationColumn(row, "timeout_ms", &isnull);

	*timeout_ms = isnull ? -1 : DatumGetInt32(d);
	d = OutboxDestinationColumn(row, "headers", &isnull);
	*headers = isnull ? NULL : DatumGetJsonbPCopy(d);
	return *headers ? VARSIZE(*headers) : 0;
}

/*
 * The event_headers column of a destination row, for the claim (which
 * filters each event's headers with it, for every kind): false if it is
 * NULL, when every event header the header rules allow is forwarded (as
 * in 1.1); else true, with its n entries in *patterns, in lower case,
 * palloc'd in the current memory context (*bytes adds what they take).
 * The row passed the trigger's checks (OutboxEventHeadersListCheck); a
 * NULL entry, which only a row written with the trigger off can have,
 * matches nothing. In a transaction; ERROR if the row type has no such
 * column (the relay runs against 1.2's objects only).
 */
bool
OutboxDestinationEventHeaders(const OutboxDestinationRow *row, char ***patterns, int *n,
							  Size *bytes)
{
	bool		isnull;
	Datum		d = OutboxDestinationColumn(row, "event_headers", &isnull);
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;

	*patterns = NULL;
	*n = 0;
	if (isnull)
		return false;
	deconstruct_array(DatumGetArrayTypeP(d), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &nelems);
	*patterns = palloc(sizeof(char *) * Max(nelems, 1));
	for (int i = 0; i < nelems; i++)
	{
		if (nulls[i])
			continue;
		(*patterns)[*n] = asc_tolower(VARDATA_ANY(DatumGetTextPP(elems[i])),
									  VARSIZE_ANY_EXHDR(DatumGetTextPP(elems[i])));
		*bytes += strlen((*patterns)[*n]) + 1 + sizeof(char *);
		(*n)++;
	}
	return true;
}

/*
 * Whether column name is written with a new value: always on INSERT (or a
 * row without old_tuple), else when it differs from the row before the
 * UPDATE (NULL and a value differ). For a kind's check_destination: a rule
 * about who may set a value need not stop other changes to the row.
 */
bool
OutboxDestinationColumnChanged(const OutboxDestinationRow *row, const char *name)
{
	OutboxDestinationRow old = *row;
	bool		isnull;
	bool		old_isnull;
	Datum		d;
	Datum		old_d;
	int			attnum;

	if (row->old_tuple == NULL)
		return true;
	old.tuple = row->old_tuple;
	d = OutboxDestinationColumn(row, name, &isnull);
	old_d = OutboxDestinationColumn(&old, name, &old_isnull);
	if (isnull || old_isnull)
		return isnull != old_isnull;
	attnum = SPI_fnumber(row->desc, name);
	return !datumIsEqual(d, old_d, TupleDescAttr(row->desc, attnum - 1)->attbyval,
						 TupleDescAttr(row->desc, attnum - 1)->attlen);
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
			done = list_concat(done, kinds[i]->collect());
	return done;
}

/* Events handed to the kinds whose outcome is not returned yet. */
int
OutboxKindsPending(void)
{
	int			n = 0;

	for (int i = 0; i < NKINDS; i++)
		if (after_commit(i))
			n += kinds[i]->pending();
	return n;
}

/* Whether any kind has events or network work (see busy). */
bool
OutboxKindsBusy(void)
{
	for (int i = 0; i < NKINDS; i++)
		if (after_commit(i) && kinds[i]->busy())
			return true;
	return false;
}

/* The destinations that any kind asks the claim to leave out for now. */
List *
OutboxKindsFull(void)
{
	List	   *full = NIL;

	for (int i = 0; i < NKINDS; i++)
		if (after_commit(i))
			full = list_concat(full, kinds[i]->full());
	return full;
}

/*
 * Sends n events of OUTBOX_SEND_AFTER_COMMIT kinds and returns once every
 * outcome is in its event: the synchronous form, for outbox_relay(), which
 * runs in the caller's transaction. Waits as the worker does (OutboxWait),
 * on the latch and the kinds' sockets. Interruptible: on ERROR (a cancel,
 * a statement_timeout) the kinds abandon the events, which die with the
 * transaction, before the error goes on.
 */
void
OutboxSendAndWait(OutboxEvent **events, int n)
{
	PG_TRY();
	{
		int			pending = n;

		for (int i = 0; i < n; i++)
			events[i]->dest.kind->enqueue(events[i]);
		for (;;)
		{
			List	   *done = OutboxKindsCollect();

			pending -= list_length(done);
			list_free(done);
			/* and the rest of the answers, which keeps connections alive */
			if (pending <= 0 && !OutboxKindsBusy())
				break;
			if (OutboxWait(1000, PG_WAIT_EXTENSION))
				ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_CATCH();
	{
		for (int i = 0; i < NKINDS; i++)
			if (after_commit(i))
				kinds[i]->abandon();
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/*
 * Checks a column of a destination that names a file the relay reads as
 * the server's operating system user (a CA bundle, NATS credentials): NULL,
 * or an absolute path of at most MAXPGPATH - 1 bytes without control
 * characters, which only a role with the privileges of
 * pg_read_server_files may write; nor may another role change where a
 * destination that names a file connects (its kind's target column: the
 * servers that would get a creds file's identity and signatures). Checked
 * only when one of those changes, so that other roles may still change
 * the rest of the row. Returns true, or false with *p: 23514, 54000 for
 * the length, 42501 for the privilege; the message names the column,
 * never the path. For a kind's check_destination, in the validation
 * trigger.
 */
bool
OutboxDestinationFileCheck(const OutboxDestinationRow *row, const char *column, OutboxProblem *p)
{
	char	   *path = OutboxDestinationText(row, column);

	if (path == NULL)
		return true;
	if (strlen(path) >= MAXPGPATH)
		return OutboxProblemSet(p, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
								psprintf("destination %s is longer than %d bytes", column, MAXPGPATH - 1),
								NULL);
	for (const char *c = path; *c; c++)
		if ((unsigned char) *c < 0x20 || *c == 0x7f)
			return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
									psprintf("destination %s is not valid", column),
									pstrdup("It is an absolute path."));
	if (!is_absolute_path(path))
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								psprintf("destination %s is not valid", column),
								pstrdup("It is an absolute path."));
	if (has_privs_of_role(GetUserId(), ROLE_PG_READ_SERVER_FILES))
		return true;
	if (OutboxDestinationColumnChanged(row, column))
		return OutboxProblemSet(p, ERRCODE_INSUFFICIENT_PRIVILEGE,
								pstrdup("permission denied to name a file in a destination"),
								psprintf("Only roles with the privileges of pg_read_server_files may set %s: the relay reads the file as the server's operating system user.", column));
	{
		char	   *kind_name = OutboxDestinationText(row, "kind");
		const OutboxDestinationKind *kind = kind_name ? OutboxKindByName(kind_name) : NULL;

		if (kind != NULL && OutboxDestinationColumnChanged(row, kind->target_column))
			return OutboxProblemSet(p, ERRCODE_INSUFFICIENT_PRIVILEGE,
									psprintf("permission denied to change the %s of a destination that names a file", kind->target_column),
									psprintf("Only roles with the privileges of pg_read_server_files may change it while %s is set: what the relay reads from the file would go to the new target.", column));
	}
	return true;
}
