/*-------------------------------------------------------------------------
 *
 * purge.h
 *	  The relay's purge of delivered events and old inbox rows.
 *
 * src/purge.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_PURGE_H
#define OUTBOX_PURGE_H

extern bool OutboxPurgeDue(void);
extern void OutboxPurgeStep(void *arg);
extern void OutboxPurgeDone(bool ok);
extern long OutboxPurgeWaitMs(void);

#endif							/* OUTBOX_PURGE_H */
