/*-------------------------------------------------------------------------
 *
 * version.c
 *	  Which version of the extension's SQL objects is installed in this
 *	  database, against the version of this library (OUTBOX_VERSION, from
 *	  outbox.control at build time).
 *
 * A server keeps the library it loaded at startup (shared_preload_libraries)
 * until it restarts, whatever is installed on disk meanwhile, so the two
 * differ for as long as an upgrade is half done. Code that depends on the
 * SQL objects (the relay, outbox_relay()) checks first and, on a mismatch,
 * says which step is missing: ALTER EXTENSION outbox UPDATE when the SQL
 * objects are the older, a restart when the library is. outbox_emit() and
 * the triggers work with the SQL objects of 1.0 and later and do not check.
 *
 * An upgrade script that adds C functions must not run while an older
 * library is loaded: its CREATE FUNCTION would fail with "could not find
 * function". outbox--1.0--1.1.sql guards against that by creating
 * outbox_library_version() first (a 1.0 library lacks it); later scripts
 * call it and compare.
 *
 * src/version.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdlib.h>

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"

#include "version.h"

PG_FUNCTION_INFO_V1(outbox_library_version);

/*
 * Finds the extension: its OID, schema and installed version (palloc'd),
 * or false when it is not installed in this database. Caller has a
 * transaction open.
 */
bool
OutboxFindExtension(Oid *extoid, Oid *nspoid, char **version)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	bool		found = false;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("outbox"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		Form_pg_extension ext = (Form_pg_extension) GETSTRUCT(tup);
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		*extoid = ext->oid;
		*nspoid = ext->extnamespace;
		*version = isnull ? pstrdup("") : TextDatumGetCString(d);
		found = true;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * Compares two versions made of dot-separated numbers ("1.10" is later
 * than "1.9"): <0, 0 or >0. Sets *comparable to false when either is not
 * of that form.
 */
static int
compare_versions(const char *a, const char *b, bool *comparable)
{
	*comparable = true;
	while (*a != '\0' || *b != '\0')
	{
		char	   *end_a;
		char	   *end_b;
		long		na = 0;
		long		nb = 0;

		if (*a != '\0')
		{
			na = strtol(a, &end_a, 10);
			if (end_a == a || (*end_a != '.' && *end_a != '\0'))
				break;
			a = *end_a == '.' ? end_a + 1 : end_a;
		}
		if (*b != '\0')
		{
			nb = strtol(b, &end_b, 10);
			if (end_b == b || (*end_b != '.' && *end_b != '\0'))
				break;
			b = *end_b == '.' ? end_b + 1 : end_b;
		}
		if (na != nb)
			return na < nb ? -1 : 1;
	}
	if (*a != '\0' || *b != '\0')
		*comparable = false;
	return 0;
}

/*
 * Reports at elevel that the SQL objects are version sql_version, not the
 * library's, with the step that fixes it as the hint: when the SQL
 * objects are older, ALTER EXTENSION outbox UPDATE (the restart is done);
 * when they are newer, a restart (the server still runs the library it
 * loaded before the new one was installed). relay: the message is the
 * relay's, which pauses until then. Returns only if elevel < ERROR.
 */
void
OutboxReportVersionMismatch(int elevel, bool relay, const char *sql_version)
{
	bool		comparable;
	int			cmp = compare_versions(sql_version, OUTBOX_VERSION, &comparable);
	const char *prefix = relay ? "outbox relay paused: " : "";

	ereport(elevel,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("%sthe extension's SQL objects are version %s, the library is version %s",
					prefix, sql_version, OUTBOX_VERSION),
			 !comparable ?
			 errhint("Install the files of one version, restart the server, then run ALTER EXTENSION outbox UPDATE in this database.") :
			 cmp < 0 ?
			 errhint("Run ALTER EXTENSION outbox UPDATE in this database.") :
			 errhint("Restart the server: it still runs the library it loaded at startup, older than the SQL objects.")));
}

/*
 * Raises an ERROR (55000, see OutboxReportVersionMismatch) unless the
 * extension is installed in this database with this library's version.
 * For SQL-callable functions that depend on the SQL objects; caller has a
 * transaction open.
 */
void
OutboxRequireSqlVersion(void)
{
	Oid			extoid;
	Oid			nspoid;
	char	   *version;

	if (!OutboxFindExtension(&extoid, &nspoid, &version))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"outbox\" is not installed in this database")));
	if (strcmp(version, OUTBOX_VERSION) != 0)
		OutboxReportVersionMismatch(ERROR, false, version);
}

/*
 * outbox_library_version() RETURNS text
 *
 * SQL-callable: the version of the library this backend runs (the one the
 * server loaded at startup when preloaded), to compare with the extension's
 * extversion. The 1.0 library has no such function: the 1.0--1.1 upgrade
 * script creates it first, and fails there, with a hint to restart, when
 * the library loaded is still 1.0's.
 */
Datum
outbox_library_version(PG_FUNCTION_ARGS pg_attribute_unused())
{
	PG_RETURN_TEXT_P(cstring_to_text(OUTBOX_VERSION));
}
