/*-------------------------------------------------------------------------
 *
 * claim_decode.h
 *	  A claimed row decoded into an OutboxEvent, its destination and that
 *	  destination's signing secrets.
 *
 * src/claim_decode.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_CLAIM_DECODE_H
#define OUTBOX_CLAIM_DECODE_H

#include "access/htup.h"
#include "access/tupdesc.h"

#include "destination.h"
#include "event.h"

/*
 * The claim's select list (the claim statement is in queue.c) and the
 * numbers its columns are decoded by: change both together.
 */
#define OUTBOX_CLAIM_COLUMNS \
	"p.id, p.tid, p.event_id::text, p.attempts, p.event_type," \
	"       p.aggregate_type, p.aggregate_id, p.created_at, p.payload, p.headers," \
	"       p.dest_name, p.dest, p.cut_off_attempts, p.blocked_by, p.fan_out"
enum
{
	Anum_claim_id = 1,
	Anum_claim_ctid,
	Anum_claim_event_id,
	Anum_claim_attempts,
	Anum_claim_event_type,
	Anum_claim_aggregate_type,
	Anum_claim_aggregate_id,
	Anum_claim_created_at,
	Anum_claim_payload,
	Anum_claim_headers,
	Anum_claim_dest_name,
	Anum_claim_dest,
	Anum_claim_cut_off_attempts,
	Anum_claim_blocked_by,
	Anum_claim_fan_out,
	Natts_claim = Anum_claim_fan_out
};

/*
 * The secrets of outbox_destination_secrets in use (not retired), read
 * once per claim, before it (OutboxLoadSecrets): by destination, oldest
 * first.
 */
typedef struct OutboxClaimSecrets
{
	int			n;
	char	  **dest;
	char	  **secret;
} OutboxClaimSecrets;

/*
 * What the claim keeps while it decodes destinations: the row type's
 * descriptor (pinned; NULL until the first), its column numbers, and
 * the destination rows decoded so far, whose next events get a copy (see
 * options_size in destination.h). Set desc and decoded to NULL and
 * secrets before the first row, and end with OutboxDecodingEnd.
 */
typedef struct OutboxDecoding
{
	TupleDesc	desc;
	OutboxColumnCache cache;
	const OutboxClaimSecrets *secrets;	/* outbox_destination_secrets */
	struct HTAB *decoded;		/* destination rows decoded, or NULL */
} OutboxDecoding;

extern void OutboxLoadSecrets(OutboxClaimSecrets *cs);
extern Size OutboxDecodeEvent(HeapTuple tuple, TupleDesc desc, OutboxEvent *ev,
							  OutboxDecoding *dd);
extern void OutboxDecodingEnd(OutboxDecoding *dd);

#endif							/* OUTBOX_CLAIM_DECODE_H */
