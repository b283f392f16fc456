/*-------------------------------------------------------------------------
 *
 * claim_decode.c
 *	  A claimed row as the relay handles it: its columns decoded into an
 *	  OutboxEvent, its destination (a row of outbox_destinations) into the
 *	  columns every kind reads and, through its kind, the kind's own, and
 *	  the destination's signing secrets, from its secret column and from
 *	  outbox_destination_secrets.
 *
 * Decoding checks before it copies: the sizes of an event's columns are
 * read from their headers (or TOAST pointers) and checked against the
 * limits first (validate.c), so that an event that got past the trigger
 * is dead-lettered with the reason before anything large is copied or
 * built from it. A destination of a kind or a format this library does not
 * have is retried, not failed: a newer library may be on its way.
 *
 * Every function here runs in a claim's transaction with SPI connected and
 * OutboxQueueOpen() done, in the relay worker or a backend calling
 * outbox_relay(). What it decodes is copied out of the rows: the events
 * outlive the claim's transaction.
 *
 * src/claim_decode.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/htup_details.h"
#include "executor/spi.h"
#include "common/hashfn.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

#include "claim_decode.h"
#include "cloudevents.h"
#include "destination.h"
#include "kind_registry.h"
#include "format.h"
#include "headers.h"
#include "pass.h"
#include "statements.h"
#include "size_limits.h"

/* The text in column col, or NULL. */
static char *
text_or_null(HeapTuple tuple, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tuple, desc, col, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

/* A copy of the jsonb in column col, detoasted, or NULL. */
static Jsonb *
jsonb_or_null(HeapTuple tuple, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tuple, desc, col, &isnull);

	return isnull ? NULL : DatumGetJsonbPCopy(d);
}

/*
 * The size of the value in column col, detoasted, without its varlena
 * header; 0 for NULL. Reads only the value's header (or TOAST pointer).
 */
static Size
value_size(HeapTuple tuple, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tuple, desc, col, &isnull);

	return isnull ? 0 : toast_raw_datum_size(d) - VARHDRSZ;
}

static OutboxStatement secrets_stmt = {
	.sql =
		"SELECT destination, secret FROM %1$s.outbox_destination_secrets"
		" WHERE retire_at IS NULL OR retire_at > now()"
		" ORDER BY destination, added_at, secret",
	.nargs = 0,
	.argtypes = NULL,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN
};

/*
 * Reads the secrets in use into cs, in the current memory context, in the
 * claim's transaction, after the claim and with a snapshot of its own
 * (not read-only): it sees every secret the claim's snapshot saw, so that
 * a rotation that commits meanwhile (a secret moved from the secret column
 * to the table, a destination created with its secrets) never leaves a
 * claimed event without one; a secret it sees twice signs twice. Caller is
 * the claim, with SPI connected; raises ERROR only if SPI fails.
 */
void
OutboxLoadSecrets(OutboxClaimSecrets *cs)
{
	int			rc = SPI_execute_plan(OutboxStatementPlan(&secrets_stmt, OutboxQueueSchema()),
									  NULL, NULL, false, 0);

	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read the destinations' secrets: %s", SPI_result_code_string(rc));
	cs->n = (int) SPI_processed;
	cs->dest = palloc(sizeof(char *) * Max(cs->n, 1));
	cs->secret = palloc(sizeof(char *) * Max(cs->n, 1));
	for (int i = 0; i < cs->n; i++)
	{
		cs->dest[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		cs->secret[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
	}
}

/*
 * The signing secrets of a destination into dest->secrets: its secret
 * column's (may be NULL), then those of outbox_destination_secrets in use,
 * copied into the current memory context. Returns the bytes they take.
 */
static Size
attach_secrets(OutboxDestination *dest, char *column, const OutboxClaimSecrets *cs)
{
	Size		bytes = 0;
	int			n = column != NULL ? 1 : 0;

	for (int i = 0; cs != NULL && i < cs->n; i++)
		if (strcmp(cs->dest[i], dest->name) == 0)
			n++;
	dest->nsecrets = 0;
	dest->secrets = NULL;
	if (n == 0)
		return 0;
	dest->secrets = palloc(sizeof(char *) * n);
	if (column != NULL)
	{
		dest->secrets[dest->nsecrets++] = column;
		bytes += strlen(column) + 1;
	}
	for (int i = 0; cs != NULL && i < cs->n; i++)
	{
		if (strcmp(cs->dest[i], dest->name) != 0)
			continue;
		dest->secrets[dest->nsecrets++] = pstrdup(cs->secret[i]);
		bytes += strlen(cs->secret[i]) + 1;
	}
	return bytes + sizeof(char *) * n;
}

/*
 * Decodes destination row h (the composite column dest of a claimed row,
 * a row of outbox_destinations) into ev->dest: the columns every kind
 * reads here, the kind's own through its decode. Returns the bytes that
 * takes. A kind or format this library does not have (a newer version's,
 * whose library the server has not loaded) sets ev->error instead: the
 * event is retried, and goes once the library is there.
 */
static Size
decode_row(HeapTupleHeader h, OutboxEvent *ev, OutboxDecoding *dd)
{
	bool		isnull;
	Datum		d;
	HeapTupleData row_tuple;
	OutboxDestinationRow row;
	char	   *kind;
	Size		bytes;

	bytes = HeapTupleHeaderGetDatumLength(h);
	row_tuple.t_len = HeapTupleHeaderGetDatumLength(h);
	ItemPointerSetInvalid(&row_tuple.t_self);
	row_tuple.t_tableOid = InvalidOid;
	row_tuple.t_data = h;
	if (dd->desc == NULL || dd->desc->tdtypeid != HeapTupleHeaderGetTypeId(h) ||
		dd->desc->tdtypmod != HeapTupleHeaderGetTypMod(h))
	{
		if (dd->desc != NULL)
			ReleaseTupleDesc(dd->desc);
		dd->desc = NULL;
		dd->cache.n = 0;
		dd->desc = lookup_rowtype_tupdesc(HeapTupleHeaderGetTypeId(h),
										  HeapTupleHeaderGetTypMod(h));
	}
	row.tuple = &row_tuple;
	row.desc = dd->desc;
	row.old_tuple = NULL;
	row.cache = &dd->cache;

	kind = OutboxDestinationText(&row, "kind");
	ev->dest.format = OutboxDestinationText(&row, "format");
	d = OutboxDestinationColumn(&row, "created_at", &isnull);
	ev->dest.created_at = isnull ? 0 : DatumGetTimestampTz(d);
	ev->dest.event_headers_filtered =
		OutboxDestinationEventHeaders(&row, &ev->dest.event_headers,
									  &ev->dest.nevent_headers, &bytes);
	bytes += attach_secrets(&ev->dest, OutboxDestinationText(&row, "secret"), dd->secrets);
	ev->dest.kind = kind != NULL ? OutboxKindByName(kind) : NULL;
	if (ev->dest.kind == NULL)
		ev->error = psprintf("destination \"%s\" is of a kind this library does not have (%s)",
							 ev->dest.name, kind ? kind : "null");
	else if (ev->dest.format == NULL ||
			 !OutboxKindHasFormat(ev->dest.kind, ev->dest.format) ||
			 (ev->dest.fmt = OutboxFormatByName(ev->dest.format)) == NULL)
		ev->error = psprintf("destination \"%s\" has a format this library does not have (%s)",
							 ev->dest.name, ev->dest.format ? ev->dest.format : "null");
	else
	{
		ev->dest.binding = ev->dest.kind->binding;
		if (ev->dest.fmt->cloudevents)
		{
			ev->dest.ce_source =
				OutboxCloudEventSource(OutboxDestinationText(&row, "cloudevents_source"));
			bytes += strlen(ev->dest.ce_source) + 1;
		}
		bytes += OutboxKindDecode(&row, &ev->dest);
	}
	return bytes;
}

/*
 * A destination row decoded in this claim, for its next events: the
 * composite as read (in the claim's tuple table, or detoasted in the
 * claim's memory context), and what decoding it gave, the kind's options
 * as decode left them.
 */
typedef struct DecodedDest
{
	HeapTupleHeader row;
	uint32		len;
	OutboxDestination dest;
	char	   *error;
	Size		bytes;
} DecodedDest;

/* An entry of dd->decoded: the rows whose bytes hash to hash. */
typedef struct DecodedBucket
{
	uint32		hash;
	List	   *rows;
} DecodedBucket;

/* A copy of dest's kind options struct, its pointers shared. */
static void *
copy_options(const OutboxDestination *dest)
{
	void	   *o = palloc(dest->kind->options_size);

	memcpy(o, dest->options, dest->kind->options_size);
	return o;
}

/*
 * Decodes the destination of a claimed row into ev->dest (see
 * decode_row), once per destination row and claim: an event of a row
 * decoded before gets what that gave, the kind's options as a copy of
 * their struct (options_size in destination.h), and the same bytes. A row
 * is the same if its bytes are: within one statement's snapshot, every
 * event of a destination has the same row.
 */
static Size
decode_destination(HeapTuple tuple, TupleDesc desc, OutboxEvent *ev, OutboxDecoding *dd)
{
	bool		isnull;
	HeapTupleHeader h = DatumGetHeapTupleHeader(SPI_getbinval(tuple, desc, Anum_claim_dest,
															   &isnull));
	uint32		len = HeapTupleHeaderGetDatumLength(h);
	uint32		hash = hash_bytes((const unsigned char *) h, len);
	DecodedBucket *b;
	DecodedDest *dec;
	ListCell   *lc;
	bool		found;
	Size		bytes;
	char	   *name = ev->dest.name;

	Assert(!isnull);
	if (dd->decoded == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(uint32);
		ctl.entrysize = sizeof(DecodedBucket);
		ctl.hcxt = CurrentMemoryContext;
		dd->decoded = hash_create("outbox destinations decoded", 16, &ctl,
								  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	b = hash_search(dd->decoded, &hash, HASH_ENTER, &found);
	if (!found)
		b->rows = NIL;
	foreach(lc, b->rows)
	{
		dec = lfirst(lc);
		if (dec->len != len || memcmp(dec->row, h, len) != 0)
			continue;
		ev->dest = dec->dest;
		ev->dest.name = name;
		if (dec->error != NULL)
			ev->error = pstrdup(dec->error);
		else if (dec->dest.options != NULL)
			ev->dest.options = copy_options(&dec->dest);
		return dec->bytes;
	}
	bytes = decode_row(h, ev, dd);
	if (ev->error == NULL && ev->dest.kind->options_size == 0)
		return bytes;			/* the kind decodes for every event */
	dec = palloc(sizeof(DecodedDest));
	dec->bytes = bytes;
	dec->row = h;
	dec->len = len;
	dec->dest = ev->dest;
	dec->error = ev->error != NULL ? pstrdup(ev->error) : NULL;
	/* as decode left them: prepare may set fields of the event's copy */
	if (ev->error == NULL && ev->dest.options != NULL)
		dec->dest.options = copy_options(&ev->dest);
	b->rows = lappend(b->rows, dec);
	return dec->bytes;
}

/*
 * Decodes one row of the claim (tuple, of the claim's descriptor desc)
 * into ev (zeroed by the caller), copied into the current memory context,
 * and returns the bytes its columns take in memory. The sizes of the
 * event's own columns are checked first, as stored
 * (OutboxEventSizesCheck): an event over a limit is not read further, and
 * gets a permanent failure with the reason in ev->error, so nothing large
 * is ever copied or built from it. dd is the claim's decoding state (see
 * OutboxDecoding). Caller is the claim, in its transaction with SPI
 * connected; an event that cannot be sent gets ev->error, not an ERROR.
 */
Size
OutboxDecodeEvent(HeapTuple tuple, TupleDesc desc, OutboxEvent *ev, OutboxDecoding *dd)
{
	bool		isnull;
	OutboxEventSizes sizes;
	OutboxProblem p;
	Size		bytes = sizeof(OutboxEvent);

	ev->id = DatumGetInt64(SPI_getbinval(tuple, desc, Anum_claim_id, &isnull));
	ev->tid = *(ItemPointer) DatumGetPointer(SPI_getbinval(tuple, desc, Anum_claim_ctid, &isnull));
	ev->event_id = text_or_null(tuple, desc, Anum_claim_event_id);
	ev->attempts = DatumGetInt32(SPI_getbinval(tuple, desc, Anum_claim_attempts, &isnull));
	ev->cut_off_attempts = DatumGetInt32(SPI_getbinval(tuple, desc, Anum_claim_cut_off_attempts,
													   &isnull));
	ev->created_at = DatumGetTimestampTz(SPI_getbinval(tuple, desc, Anum_claim_created_at, &isnull));
	ev->retry_after_ms = -1;
	ev->blocked_by = DatumGetInt64(SPI_getbinval(tuple, desc, Anum_claim_blocked_by, &isnull));
	if (isnull)
		ev->blocked_by = 0;

	ev->fan_out = DatumGetBool(SPI_getbinval(tuple, desc, Anum_claim_fan_out, &isnull));
	if (isnull)
		ev->fan_out = false;

	ev->dest.name = text_or_null(tuple, desc, Anum_claim_dest_name);
	if (ev->dest.name != NULL && !ev->fan_out)
		bytes += decode_destination(tuple, desc, ev, dd);

	sizes.event_type = value_size(tuple, desc, Anum_claim_event_type);
	sizes.aggregate_type = value_size(tuple, desc, Anum_claim_aggregate_type);
	sizes.aggregate_id = value_size(tuple, desc, Anum_claim_aggregate_id);
	sizes.payload = value_size(tuple, desc, Anum_claim_payload);
	sizes.headers = value_size(tuple, desc, Anum_claim_headers);
	if (!OutboxEventSizesCheck(&sizes, &p))
	{
		/* dead-lettered as it is, at every destination: nothing is copied */
		ev->fan_out = false;
		ev->permanent = true;
		ev->error = p.detail ? psprintf("%s (%s)", p.message, p.detail) : p.message;
		return bytes;
	}
	if (ev->fan_out)
		return bytes;			/* replaced by its rows (fan_out.c): nothing read */
	ev->event_type = text_or_null(tuple, desc, Anum_claim_event_type);
	ev->aggregate_type = text_or_null(tuple, desc, Anum_claim_aggregate_type);
	ev->aggregate_id = text_or_null(tuple, desc, Anum_claim_aggregate_id);
	ev->payload = jsonb_or_null(tuple, desc, Anum_claim_payload);
	ev->headers = jsonb_or_null(tuple, desc, Anum_claim_headers);
	/* only the headers its destination forwards, whatever the kind */
	if (ev->headers != NULL && ev->dest.name != NULL && ev->dest.event_headers_filtered)
		ev->headers = OutboxForwardedEventHeaders(ev->headers, ev->dest.event_headers,
												  ev->dest.nevent_headers);
	return bytes + sizes.event_type + sizes.aggregate_type + sizes.aggregate_id +
		sizes.payload + sizes.headers;
}

/*
 * Ends the decoding of a claim's rows: releases the row type's descriptor
 * that OutboxDecodeEvent pinned, if any. Call once, in the transaction
 * that decoded; dd is not to be used after.
 */
void
OutboxDecodingEnd(OutboxDecoding *dd)
{
	if (dd->desc != NULL)
		ReleaseTupleDesc(dd->desc);
	if (dd->decoded != NULL)
		hash_destroy(dd->decoded);
}
