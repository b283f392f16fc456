/*-------------------------------------------------------------------------
 *
 * destination.c
 *	  What the core offers a destination kind (destination.h): the
 *	  readers of a destination row that a kind's rules and decoding use,
 *	  and the rule for a file a destination names. The core's side of the
 *	  kinds (which are built in, how they are called) is kind_registry.c.
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
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/formatting.h"
#include "lib/stringinfo.h"

#include "destination.h"

/*
 * The number of column name in the row type of row (0 if it has none),
 * from the row's cache when it has one; a column found is cached, so that
 * each name costs one lookup per cache.
 */
static int
column_attnum(const OutboxDestinationRow *row, const char *name)
{
	OutboxColumnCache *cache = row->cache;
	int			attnum;

	if (cache != NULL)
		for (int i = 0; i < cache->n; i++)
			if (cache->names[i] == name)
				return cache->attnums[i];
	attnum = SPI_fnumber(row->desc, name);
	if (attnum <= 0)
		return 0;
	if (cache != NULL && cache->n < OUTBOX_COLUMN_CACHE_SIZE)
	{
		cache->names[cache->n] = name;
		cache->attnums[cache->n++] = attnum;
	}
	return attnum;
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
	int			attnum = column_attnum(row, name);

	if (attnum == 0)
		elog(ERROR, "outbox_destinations has no column \"%s\"", name);
	return heap_getattr(row->tuple, attnum, row->desc, isnull);
}

/*
 * Whether name is an option rather than a column of the row: the row type
 * has options and no column of that name.
 */
static bool
is_option(const OutboxDestinationRow *row, const char *name)
{
	return column_attnum(row, name) == 0 && column_attnum(row, "options") > 0;
}

/*
 * The value of text column name of a destination row, as a string in the
 * current memory context, or NULL; or of string option name when the row
 * has no such column (OutboxDestinationOptionText). As
 * OutboxDestinationColumn.
 */
char *
OutboxDestinationText(const OutboxDestinationRow *row, const char *name)
{
	bool		isnull;
	Datum		d;

	if (is_option(row, name))
		return OutboxDestinationOptionText(row, name);
	d = OutboxDestinationColumn(row, name, &isnull);

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
 * Whether column name (or option name, where the row has no such column)
 * is written with a new value: always on INSERT (or a row without
 * old_tuple), else when it differs from the row before the UPDATE (NULL
 * and a value differ, as unset and set). For a kind's check_destination: a rule
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
	if (is_option(row, name))
		return OutboxDestinationOptionChanged(row, name);
	old.tuple = row->old_tuple;
	d = OutboxDestinationColumn(row, name, &isnull);
	old_d = OutboxDestinationColumn(&old, name, &old_isnull);
	if (isnull || old_isnull)
		return isnull != old_isnull;
	attnum = column_attnum(row, name);
	return !datumIsEqual(d, old_d, TupleDescAttr(row->desc, attnum - 1)->attbyval,
						 TupleDescAttr(row->desc, attnum - 1)->attlen);
}

/*
 * Checks a column of a destination that names a file the relay reads as
 * the server's operating system user (a CA bundle, NATS credentials): NULL,
 * or an absolute path of at most MAXPGPATH - 1 bytes without control
 * characters, which only a role with the privileges of
 * pg_read_server_files may write; nor may another role change where a
 * destination that names a file connects (target_column, its kind's: the
 * servers that would get a creds file's identity and signatures). Checked
 * only when one of those changes, so that other roles may still change
 * the rest of the row. Returns true, or false with *p: 23514, 54000 for
 * the length, 42501 for the privilege; the message names the column,
 * never the path. For a kind's check_destination, in the validation
 * trigger.
 */
bool
OutboxDestinationFileCheck(const OutboxDestinationRow *row, const char *column,
						   const char *target_column, OutboxProblem *p)
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
	if (OutboxDestinationColumnChanged(row, target_column))
		return OutboxProblemSet(p, ERRCODE_INSUFFICIENT_PRIVILEGE,
								psprintf("permission denied to change the %s of a destination that names a file", target_column),
								psprintf("Only roles with the privileges of pg_read_server_files may change it while %s is set: what the relay reads from the file would go to the new target.", column));
	return true;
}
