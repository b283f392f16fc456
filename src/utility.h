/*-------------------------------------------------------------------------
 *
 * utility.h
 *	  The ProcessUtility hook that stops a relay before DROP DATABASE.
 *
 * src/utility.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_UTILITY_H
#define OUTBOX_UTILITY_H

extern void OutboxInstallUtilityHook(void);

#endif							/* OUTBOX_UTILITY_H */
