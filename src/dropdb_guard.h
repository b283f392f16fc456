/*-------------------------------------------------------------------------
 *
 * dropdb_guard.h
 *	  The ProcessUtility hook that stops a relay before DROP DATABASE.
 *
 * src/dropdb_guard.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_DROPDB_GUARD_H
#define OUTBOX_DROPDB_GUARD_H

extern void OutboxInstallUtilityHook(void);

#endif							/* OUTBOX_DROPDB_GUARD_H */
