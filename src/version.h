/*-------------------------------------------------------------------------
 *
 * version.h
 *	  The library's version against that of the extension's SQL objects.
 *
 * src/version.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_VERSION_H
#define OUTBOX_VERSION_H

#include "fmgr.h"

extern bool OutboxFindExtension(Oid *extoid, Oid *nspoid, char **version);
extern void OutboxReportVersionMismatch(int elevel, bool relay, const char *sql_version);
extern void OutboxRequireSqlVersion(void);

extern Datum outbox_library_version(PG_FUNCTION_ARGS);

#endif							/* OUTBOX_VERSION_H */
