/*-------------------------------------------------------------------------
 *
 * kind_registry.h
 *	  The core's side of the destination kinds (kind_registry.c): the
 *	  kinds built in and how the core calls them. Kinds include
 *	  destination.h, never this.
 *
 * src/kind_registry.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_KIND_REGISTRY_H
#define OUTBOX_KIND_REGISTRY_H

#include "destination.h"

/* the list (src/kinds/registry.c) */
extern const OutboxDestinationKind *const *OutboxKindRegistry(int *n);
extern const OutboxKindLeftOut *const *OutboxKindsLeftOut(void);

/* the kinds built in, checked when the library loads */
/* exported (PGDLLEXPORT): a module loaded beside outbox may check a table */
extern PGDLLEXPORT void OutboxKindCheck(const OutboxDestinationKind *kind);
extern void OutboxKindsInit(void);
extern const OutboxDestinationKind *OutboxKindByName(const char *name);
extern bool OutboxKindHasFormat(const OutboxDestinationKind *kind, const char *format);
extern int	OutboxKindCount(void);
extern const OutboxDestinationKind *OutboxKindAt(int i);
extern void OutboxKindSigningCheck(const OutboxDestinationKind *kind);

/* a kind's options (kind_options.c) */
extern void OutboxKindOptionsDeclCheck(const OutboxDestinationKind *kind);
/* exported (PGDLLEXPORT): a module loaded beside outbox may test a list */
extern PGDLLEXPORT bool OutboxKindOptionsCheck(const OutboxDestinationKind *kind,
											   Jsonb *options, OutboxProblem *p);
extern PGDLLEXPORT bool OutboxKindTargetIsOption(const OutboxDestinationKind *kind);

/* a kind's callbacks, called with its state */
extern bool OutboxKindCheckDestination(const OutboxDestinationKind *kind,
									   const OutboxDestinationRow *row, OutboxProblem *p);
extern Size OutboxKindDecode(const OutboxDestinationRow *row, OutboxDestination *dest);
extern Size OutboxKindPrepare(OutboxEvent *ev);
extern void OutboxKindSend(OutboxEvent *ev);
extern void OutboxKindEnqueue(OutboxEvent *ev);
extern int	OutboxKindRoom(const OutboxEvent *ev);
extern void OutboxKindRecorded(const OutboxEvent *ev);
extern uint64 OutboxKindSockets(int i, const OutboxWaitSocket **socks, int *n);
extern long OutboxKindTimeoutMs(int i);
extern void OutboxKindSocketReady(int i, pgsocket fd, uint32 events);

/* over every OUTBOX_SEND_AFTER_COMMIT kind */
extern List *OutboxKindsCollect(void);
extern int	OutboxKindsPending(void);
extern bool OutboxKindsBusy(void);
extern void OutboxKindsSkip(List **full, List **saturated);
extern void OutboxKindsAbandon(void);
extern bool OutboxKindsCommitFull(int sqlerrcode);

#endif							/* OUTBOX_KIND_REGISTRY_H */
