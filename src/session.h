/*-------------------------------------------------------------------------
 *
 * session.h
 *	  The relay worker's session.
 *
 * src/session.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_SESSION_H
#define OUTBOX_SESSION_H

extern void OutboxWorkerConnect(Oid dboid);

#endif							/* OUTBOX_SESSION_H */
