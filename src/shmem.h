/*-------------------------------------------------------------------------
 *
 * shmem.h
 *	  Shared state between backends, the launcher and the relays: the
 *	  relays' registry (shmem.c) and the in-flight sets (in_flight.c).
 *
 * src/shmem.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_SHMEM_H
#define OUTBOX_SHMEM_H

#include "datatype/timestamp.h"

/* At most this many databases can have running relays at once. */
#define OUTBOX_MAX_RELAYS 64
/* At most this many relays per database (outbox.relays_per_database). */
#define OUTBOX_MAX_RELAYS_PER_DATABASE 16
/*
 * At most this many events in flight per database, over all its relays
 * (16 bytes each in shared memory, per possible database; in_flight.c).
 */
#define OUTBOX_IN_FLIGHT_PER_DATABASE 4096
/* At most this many databases paused at once (dropdb_guard.c). */
#define OUTBOX_MAX_PAUSES OUTBOX_MAX_RELAYS

extern void OutboxShmemInit(void);

extern bool OutboxRelayAttach(Oid dboid, int relay_no);
extern pid_t OutboxRelayPid(Oid dboid, int relay_no);
extern void OutboxStopRelaysExcept(const Oid *keep, int n, int relays_per_database);
extern void OutboxWakeRelay(Oid dboid);
extern void OutboxPauseRelay(Oid dboid, int pause_ms);
extern void OutboxUnpauseRelays(Oid dboid);
extern bool OutboxRelayRunning(Oid dboid);
extern bool OutboxRelayPaused(Oid dboid);

extern int64 OutboxRelayRun(void);
extern int64 *OutboxRelayLiveRuns(Oid dboid, int *n, int *slot_no);

/* the in-flight sets (in_flight.c) */
extern void OutboxInFlightShmemInit(void);
extern int64 *OutboxInFlightIds(Oid dboid, bool live_only, int *n, int *room);
extern void OutboxInFlightClaim(Oid dboid, const int64 *ids, const bool *publish, int n,
								bool *keep);
extern void OutboxInFlightRemove(Oid dboid, const int64 *ids, int n);
extern int64 *OutboxRelayRuns(Oid dboid, int *n, int64 **dead, int *ndead);
extern void OutboxInFlightForget(Oid dboid, const int64 *runs, int n);

#endif							/* OUTBOX_SHMEM_H */
