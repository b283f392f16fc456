/*-------------------------------------------------------------------------
 *
 * shmem.h
 *	  Shared state between backends, the launcher and the relays.
 *
 * src/shmem.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_SHMEM_H
#define OUTBOX_SHMEM_H

#include "datatype/timestamp.h"

/* At most this many databases can have a running relay at once. */
#define OUTBOX_MAX_RELAYS 64

extern void OutboxShmemInit(void);

extern bool OutboxRelayAttach(Oid dboid);
extern pid_t OutboxRelayPid(Oid dboid);
extern void OutboxStopRelaysExcept(const Oid *keep, int n);
extern void OutboxWakeRelay(Oid dboid);
extern void OutboxPauseRelay(Oid dboid, int pause_ms);
extern bool OutboxRelayPaused(Oid dboid);

#endif							/* OUTBOX_SHMEM_H */
