/*-------------------------------------------------------------------------
 *
 * horizon.h
 *	  The relay's check for a transaction that holds back the removal of
 *	  old row versions (horizon.c).
 *
 * src/horizon.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_HORIZON_H
#define OUTBOX_HORIZON_H

extern bool OutboxHorizonDue(void);
extern void OutboxHorizonStep(void *arg);

#endif							/* OUTBOX_HORIZON_H */
