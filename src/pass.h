/*-------------------------------------------------------------------------
 *
 * pass.h
 *	  The extension's tables for a pass (a claim, the outcomes of events in
 *	  flight, a release of the journal, a purge), and what the statements
 *	  over them share: arrays of ids and TIDs, the destination a delivery
 *	  records, the check that a mark changed every row.
 *
 * src/pass.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_PASS_H
#define OUTBOX_PASS_H

#include "fmgr.h"

#include "event.h"

extern bool OutboxQueueOpen(void);
extern Oid	OutboxQueueSchema(void);
extern Oid	OutboxQueueExtension(void);

/*
 * Where a delivery is recorded, in an UPDATE of outbox over
 * unnest(..., $dest, $kind, $created) AS u(..., dest, kind, created) whose
 * arrays OutboxDeliveryDestinations fills: the destination's name only if
 * that name still stands for the destination the event was claimed for
 * (same kind, same creation), else NULL. A destination replaced while an
 * event was in flight (a webhook deleted, a NOTIFY channel created under
 * its name) must not have that event read as its own by outbox_catch_up.
 * dests is the statement's parameter holding $dest: the destinations
 * named are read once per statement, into a hashed subplan, rather than
 * probed once per row (about 1.5 us each).
 */
#define OUTBOX_DELIVERED_DESTINATION(dests) \
	"CASE WHEN (u.dest, u.kind, u.created) IN (" \
	"  SELECT d.name, d.kind, d.created_at FROM %1$s.outbox_destinations d" \
	"   WHERE d.name = ANY (" dests ")) THEN u.dest END"
extern void OutboxDeliveryDestinations(OutboxEvent **events, int n, Datum *values,
									   bool names_only);

extern Datum OutboxInt8Array(const int64 *values, int n);
extern Datum OutboxTidArray(OutboxEvent **events, int n);
extern bool OutboxCheckMarked(int n, bool delivered);

#endif							/* OUTBOX_PASS_H */
