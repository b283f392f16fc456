/*-------------------------------------------------------------------------
 *
 * emit_hold.c
 *	  Holding, as it is written, an event that an earlier event of the
 *	  same transaction keeps waiting at an ordered destination.
 *
 * A claim holds the events it meets that are not the head of their key
 * (ordering.c): one row update each. A transaction that writes a long run
 * of events of one aggregate (a bulk load, a replay, a batch job) made
 * claims walk and hold the whole run before they reached the events of
 * other aggregates written after it: with 100,000 events of one key, the
 * first of another key's was delivered after 2.4 s with one relay and 5 s
 * with four. An event written after another of its aggregate in the same
 * transaction cannot be its key's head while that one is undelivered, and
 * that one cannot be delivered before both commit. So when both go to
 * the same ordered destination, and only to it, the event is written held
 * already: held_by is the earlier event, and it is not due before that
 * one's delivery (or cancel, skip, fan-out, a change of destinations)
 * releases it, exactly as a claim would have held it. A release on
 * delivery cannot miss it: both become visible at one COMMIT, so the
 * release, which runs after the earlier one is seen, sees the later one
 * too. What can miss it is the release of every held event by a change
 * of destinations that commits while the writer's transaction runs (the
 * trigger's release runs in the changing transaction, which does not see
 * the writer's rows; the claim, which holds a SHARE lock on the
 * destinations for its long holds, has no such gap): such an event waits
 * for the event before it as routed before the change, or at most
 * HOLD_AT_EMIT_MS, as it does should a release be missed otherwise (the
 * earlier event deleted by hand); then the claim tests it as usual.
 *
 * Holding is a shortcut, as the claim's is: correctness rests on the
 * claim's test of every event it takes. So everything here may give up
 * and leave the event due, unheld: with no enabled ordered destination
 * (known without reading the table at each event: the trigger on
 * outbox_destinations sends a relcache invalidation), for an event given
 * a time to be due, a fan-out copy, an event without an aggregate, when
 * the transaction's list of keys is full, when the earlier event is no
 * longer pending as the transaction sees it now (rolled back with a
 * subtransaction, delivered by outbox_relay() or cancelled in the same
 * session), and in a SERIALIZABLE transaction (reading the destinations
 * there would take predicate locks that could fail the writer's COMMIT).
 *
 * The two events are routed with the relay's routing (_outbox_route_first,
 * router.c), only when a key comes back in a transaction: a writer pays a
 * copy of its transaction's first key, a hash lookup for each other
 * event, and nothing at all without an ordered destination. Routing reads
 * outbox_destinations and outbox_config, which writers may not SELECT: it
 * runs as the owner of outbox_destinations, in a restricted security
 * context, only if that role may read both (none is assumed ordered
 * otherwise, so that no error of routing fails the writer's INSERT) and
 * both can be locked at once (AccessShareLock, held to the end of the
 * transaction as a SELECT's: a writer never waits here), and its answer
 * never reaches the writer (it decides two columns the writer cannot
 * read).
 *
 * Runs in the trigger on outbox (validate.c), in any backend, inside the
 * writer's transaction.
 *
 * src/emit_hold.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_func.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "emit_hold.h"
#include "routing.h"

/* due anyway after this, should a release be missed: HOLD_MIN of ordering.c */
#define HOLD_AT_EMIT_MS (60 * 1000)
/* the transaction's keys stop growing at this much memory */
#define KEYS_MAX_BYTES (8 * 1024 * 1024)

/* what a backend knows of outbox_destinations, until a relcache invalidation */
typedef enum
{
	ORDERED_UNKNOWN,
	ORDERED_NONE,
	ORDERED_SOME
} OrderedState;

static OrderedState ordered = ORDERED_UNKNOWN;
static Oid	dest_relid = InvalidOid;
static Oid	config_relid = InvalidOid;
static Oid	dest_owner = InvalidOid;
static FmgrInfo route_fn;
static bool callback_registered = false;

/* the columns read, by number: outbox's, until a relcache invalidation */
typedef enum
{
	C_ID,
	C_EVENT_TYPE,
	C_AGGREGATE_TYPE,
	C_AGGREGATE_ID,
	C_PAYLOAD,
	C_DESTINATION_ID,
	C_ORIGIN_ID,
	C_NEXT_ATTEMPT_AT,
	C_HELD_BY,
	C_DELIVERED_AT,
	C_CANCELLED_AT,
	C_SKIPPED_AT,
	C_DEAD_AT,
	NCOLS
} Column;
static const char *const column_names[NCOLS] = {
	"id", "event_type", "aggregate_type", "aggregate_id", "payload", "destination_id",
	"origin_id", "next_attempt_at", "held_by", "delivered_at", "cancelled_at", "skipped_at",
	"dead_at"
};
static Oid	outbox_relid = InvalidOid;
static bool outbox_usable;		/* every column is there, and a primary key */
static int	att[NCOLS];
static Oid	outbox_pkey;

/* outbox_destinations' id, enabled and ordered: a route's row is one */
static int	dest_att_id;
static int	dest_att_enabled;
static int	dest_att_ordered;

/* a key: the aggregate type ('' for NULL, as the claim has it), NUL, the id */
typedef struct HoldKey
{
	const char *data;
	int			len;
} HoldKey;

/* an event of this transaction, and where it goes */
#define DEST_UNKNOWN (-1)		/* not routed yet */
typedef struct Written
{
	int64		id;				/* 0: none, or no longer pending */
	int64		dest;			/* its one ordered destination, 0, or DEST_UNKNOWN */
	uint32		epoch;			/* routing_epoch when dest was known */
} Written;

/*
 * A key's events in this transaction: the last, and the latest before it
 * that may go to an ordered destination (a run at an ordered destination
 * goes on across an event of the key that goes elsewhere).
 */
typedef struct HoldEntry
{
	HoldKey		key;
	Written		last;
	Written		ordered;
} HoldEntry;

/*
 * The transaction's first key is kept alone (most transactions write one
 * event), the table made at its second event. Both live in the
 * transaction's memory, and are forgotten with it (forget_transaction).
 */
static HoldEntry first;
static bool first_set = false;
static HTAB *keys = NULL;
static MemoryContext keys_cxt = NULL;
static Size keys_bytes = 0;

/* destinations changed (a relcache invalidation): what was routed is not known */
static uint32 routing_epoch = 0;

static uint32
key_hash(const void *key, Size keysize pg_attribute_unused())
{
	const HoldKey *k = key;

	return hash_bytes((const unsigned char *) k->data, k->len);
}

static int
key_match(const void *key1, const void *key2, Size keysize pg_attribute_unused())
{
	const HoldKey *a = key1;
	const HoldKey *b = key2;

	return a->len == b->len && memcmp(a->data, b->data, a->len) == 0 ? 0 : 1;
}

static void
relcache_callback(Datum arg pg_attribute_unused(), Oid relid)
{
	if (relid == InvalidOid || relid == dest_relid || relid == config_relid)
	{
		ordered = ORDERED_UNKNOWN;
		routing_epoch++;
	}
	if (relid == InvalidOid || relid == outbox_relid)
		outbox_relid = InvalidOid;
}

/* outbox's column numbers and primary key, read again after an invalidation */
static bool
outbox_columns(Relation rel)
{
	List	   *indexes;

	if (outbox_relid == RelationGetRelid(rel))
		return outbox_usable;
	outbox_usable = true;
	for (int c = 0; c < NCOLS; c++)
		if ((att[c] = SPI_fnumber(RelationGetDescr(rel), column_names[c])) <= 0)
			outbox_usable = false;
	indexes = RelationGetIndexList(rel);	/* sets rd_pkindex */
	list_free(indexes);
	outbox_pkey = rel->rd_pkindex;
	if (!OidIsValid(outbox_pkey))
		outbox_usable = false;
	outbox_relid = RelationGetRelid(rel);
	return outbox_usable;
}

/*
 * Whether routing can read outbox_destinations and outbox_config now,
 * without waiting: both are locked (AccessShareLock, to the end of the
 * transaction, as a SELECT would) if they can be at once. A writer never
 * waits for a lock here; the event is then not held.
 */
static bool
routing_readable(void)
{
	return ConditionalLockRelationOid(dest_relid, AccessShareLock) &&
		ConditionalLockRelationOid(config_relid, AccessShareLock);
}

/* Whether role may read relid as a SELECT would, with no row level security applying. */
static bool
readable_by(Oid relid, Oid role)
{
	return pg_class_aclcheck(relid, role, ACL_SELECT) == ACLCHECK_OK &&
		check_enable_rls(relid, role, true) != RLS_ENABLED;
}

/*
 * Whether an enabled ordered destination exists, read again after a
 * relcache invalidation of outbox_destinations or outbox_config (the
 * trigger on outbox_destinations sends one at each insert or update; DDL
 * and GRANT do too). None is assumed when routing could not read the
 * tables as their owner (a privilege revoked, row level security): its
 * errors would fail the writer's INSERT.
 */
static bool
ordered_destinations(Oid nspoid)
{
	Relation	rel;
	TableScanDesc scan;
	TupleTableSlot *slot;
	Snapshot	snap;
	Oid			argtypes[5] = {TEXTOID, TEXTOID, TEXTOID, JSONBOID, INT8OID};
	Oid			fn_oid;

	if (ordered != ORDERED_UNKNOWN)
		return ordered == ORDERED_SOME;
	dest_relid = get_relname_relid("outbox_destinations", nspoid);
	config_relid = get_relname_relid("outbox_config", nspoid);
	fn_oid = LookupFuncName(list_make2(makeString(get_namespace_name(nspoid)),
									   makeString("_outbox_route_first")),
							5, argtypes, true);
	if (!OidIsValid(dest_relid) || !OidIsValid(config_relid) || !OidIsValid(fn_oid))
	{
		/* an older version's schema: its update alters outbox_destinations */
		ordered = ORDERED_NONE;
		return false;
	}
	if (!routing_readable())
		return false;			/* asked again at the next event */
	fmgr_info_cxt(fn_oid, &route_fn, TopMemoryContext);

	rel = table_open(dest_relid, NoLock);
	dest_owner = rel->rd_rel->relowner;
	dest_att_id = SPI_fnumber(RelationGetDescr(rel), "id");
	dest_att_enabled = SPI_fnumber(RelationGetDescr(rel), "enabled");
	dest_att_ordered = SPI_fnumber(RelationGetDescr(rel), "ordered");
	ordered = ORDERED_NONE;
	if (readable_by(dest_relid, dest_owner) && readable_by(config_relid, dest_owner) &&
		dest_att_id > 0 && dest_att_enabled > 0 && dest_att_ordered > 0)
	{
		snap = RegisterSnapshot(GetLatestSnapshot());
		scan = table_beginscan(rel, snap, 0, NULL);
		slot = table_slot_create(rel, NULL);
		while (ordered == ORDERED_NONE &&
			   table_scan_getnextslot(scan, ForwardScanDirection, slot))
		{
			bool		en_null;
			bool		ord_null;
			Datum		en = slot_getattr(slot, dest_att_enabled, &en_null);
			Datum		ord = slot_getattr(slot, dest_att_ordered, &ord_null);

			if (!en_null && DatumGetBool(en) && !ord_null && DatumGetBool(ord))
				ordered = ORDERED_SOME;
		}
		ExecDropSingleTupleTableSlot(slot);
		table_endscan(scan);
		UnregisterSnapshot(snap);
	}
	table_close(rel, NoLock);
	return ordered == ORDERED_SOME;
}

/*
 * The one enabled ordered destination routing sends an event to, or 0
 * when it goes to none, to one that is not ordered, or to several (fan-out
 * makes a row per destination, and holds for it are the claim's). Routing
 * runs as the owner of outbox_destinations (see the banner).
 */
static int64
ordered_route(Datum type, Datum agg_type, bool agg_type_null, Datum agg_id, Jsonb *payload)
{
	LOCAL_FCINFO(fc, 5);
	Oid			saved_uid;
	int			saved_sec;
	volatile Datum res = (Datum) 0;
	HeapTupleHeader hdr;
	HeapTupleHeader route;
	bool		isnull;
	int64		dest;

	if (!routing_readable())
		return 0;
	InitFunctionCallInfoData(*fc, &route_fn, 5, InvalidOid, NULL, NULL);
	fc->args[0].value = type;
	fc->args[0].isnull = false;
	fc->args[1].value = agg_type;
	fc->args[1].isnull = agg_type_null;
	fc->args[2].value = agg_id;
	fc->args[2].isnull = false;
	fc->args[3].value = payload != NULL ? JsonbPGetDatum(payload) : (Datum) 0;
	fc->args[3].isnull = payload == NULL;
	fc->args[4].value = (Datum) 0;
	fc->args[4].isnull = true;

	GetUserIdAndSecContext(&saved_uid, &saved_sec);
	SetUserIdAndSecContext(dest_owner, saved_sec | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	OutboxRouteWithinTransaction(true);
	PG_TRY();
	{
		res = FunctionCallInvoke(fc);
	}
	PG_FINALLY();
	{
		OutboxRouteWithinTransaction(false);
		SetUserIdAndSecContext(saved_uid, saved_sec);
	}
	PG_END_TRY();
	if (fc->isnull)
		return 0;

	/* (route outbox_destinations, several boolean) */
	hdr = DatumGetHeapTupleHeader(res);
	if (DatumGetBool(GetAttributeByNum(hdr, 2, &isnull)) || isnull)
		return 0;
	res = GetAttributeByNum(hdr, 1, &isnull);
	if (isnull)
		return 0;
	route = DatumGetHeapTupleHeader(res);
	if (!DatumGetBool(GetAttributeByNum(route, dest_att_enabled, &isnull)) || isnull)
		return 0;
	if (!DatumGetBool(GetAttributeByNum(route, dest_att_ordered, &isnull)) || isnull)
		return 0;
	dest = DatumGetInt64(GetAttributeByNum(route, dest_att_id, &isnull));
	return isnull ? 0 : dest;
}

/*
 * The one enabled ordered destination of the event row tuple of outbox
 * (desc), or 0 (ordered_route); 0 for a fan-out copy or a row without a
 * type or aggregate id.
 */
static int64
route_row(TupleDesc desc, HeapTuple tuple)
{
	bool		type_null;
	bool		agg_type_null;
	bool		agg_id_null;
	bool		payload_null;
	Datum		type = heap_getattr(tuple, att[C_EVENT_TYPE], desc, &type_null);
	Datum		agg_type = heap_getattr(tuple, att[C_AGGREGATE_TYPE], desc, &agg_type_null);
	Datum		agg_id = heap_getattr(tuple, att[C_AGGREGATE_ID], desc, &agg_id_null);
	Datum		payload = heap_getattr(tuple, att[C_PAYLOAD], desc, &payload_null);

	if (type_null || agg_id_null || !heap_attisnull(tuple, att[C_DESTINATION_ID], desc))
		return 0;
	return ordered_route(type, agg_type, agg_type_null, agg_id,
						 payload_null ? NULL : DatumGetJsonbP(payload));
}

/*
 * The event with id in rel, as this transaction sees it now, its own
 * changes of the current command included (SnapshotSelf): NULL if it is
 * gone (rolled back with a subtransaction, deleted) or no longer pending
 * (delivered, cancelled, skipped or dead-lettered by this transaction: by
 * outbox_relay() or an admin's function in the writer's own session).
 */
static HeapTuple
pending_event(Relation rel, int64 id)
{
	Relation	idx = index_open(outbox_pkey, AccessShareLock);
	IndexScanDesc scan;
	ScanKeyData key;
	TupleTableSlot *slot;
	HeapTuple	found = NULL;
	static const Column done[] = {C_DELIVERED_AT, C_CANCELLED_AT, C_SKIPPED_AT, C_DEAD_AT};

	ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(id));
	scan = OutboxIndexBeginScan(rel, idx, SnapshotSelf, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);
	slot = table_slot_create(rel, NULL);
	if (index_getnext_slot(scan, ForwardScanDirection, slot))
		found = ExecCopySlotHeapTuple(slot);
	ExecDropSingleTupleTableSlot(slot);
	index_endscan(scan);
	index_close(idx, AccessShareLock);

	for (int i = 0; found != NULL && i < (int) lengthof(done); i++)
		if (!heap_attisnull(found, att[done[i]], RelationGetDescr(rel)))
			found = NULL;
	return found;
}

/*
 * The transaction's memory is gone: so are its first key and its table
 * (a callback of TopTransactionContext, reset or deleted at its end).
 */
static void
forget_transaction(void *arg pg_attribute_unused())
{
	first_set = false;
	keys = NULL;
	keys_cxt = NULL;
}

/* e, a key's entry: its key (data kept as is) and event id, not routed yet */
static void
init_entry(HoldEntry *e, const char *data, int len, int64 id)
{
	e->key.data = data;
	e->key.len = len;
	e->last.id = id;
	e->last.dest = DEST_UNKNOWN;
	e->last.epoch = routing_epoch;
	e->ordered.id = 0;
	e->ordered.dest = 0;
	e->ordered.epoch = routing_epoch;
}

/* Remembers the transaction's first key, k, and event id. */
static void
remember_first(const HoldKey *k, int64 id)
{
	MemoryContextCallback *cb = MemoryContextAlloc(TopTransactionContext,
												   sizeof(MemoryContextCallback));
	char	   *copy = MemoryContextAlloc(TopTransactionContext, k->len);

	memcpy(copy, k->data, k->len);
	init_entry(&first, copy, k->len, id);
	cb->func = forget_transaction;
	cb->arg = NULL;
	MemoryContextRegisterResetCallback(TopTransactionContext, cb);
	first_set = true;
}

/* The transaction's keys, made at its second event, with its first in. */
static HTAB *
transaction_keys(void)
{
	HASHCTL		ctl = {0};
	HoldEntry  *e;
	bool		found;

	if (keys != NULL)
		return keys;
	keys_cxt = AllocSetContextCreate(TopTransactionContext, "outbox keys of the transaction",
									 ALLOCSET_DEFAULT_SIZES);
	ctl.keysize = sizeof(HoldKey);
	ctl.entrysize = sizeof(HoldEntry);
	ctl.hash = key_hash;
	ctl.match = key_match;
	ctl.hcxt = keys_cxt;
	keys = hash_create("outbox keys of the transaction", 256, &ctl,
					   HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
	keys_bytes = first.key.len + 2 * sizeof(HoldEntry);
	e = hash_search(keys, &first.key, HASH_ENTER, &found);
	*e = first;
	return keys;
}

/*
 * Whether w, an earlier event of this transaction, goes to dest, the one
 * ordered destination of the event being written, and still waits: its
 * row is read again (pending_event), and routed with its own fields the
 * first time. w->id becomes 0 if it no longer waits.
 */
static bool
goes_to(Relation rel, Written *w, int64 dest)
{
	HeapTuple	before;

	if (w->id == 0 || (w->dest == 0 && w->epoch == routing_epoch))
		return false;
	if ((before = pending_event(rel, w->id)) == NULL)
	{
		w->id = 0;
		return false;
	}
	if (w->dest == DEST_UNKNOWN || w->epoch != routing_epoch)
	{
		w->dest = route_row(RelationGetDescr(rel), before);
		w->epoch = routing_epoch;
	}
	return w->dest == dest;
}

/*
 * The key of an aggregate (aggregate_type, NULL for '', and aggregate_id)
 * in k: in stack when it fits in size bytes, else allocated.
 */
static void
make_key(Datum agg_type, bool agg_type_null, Datum agg_id, char *stack, int size, HoldKey *k)
{
	text	   *t_type = agg_type_null ? NULL : DatumGetTextPP(agg_type);
	text	   *t_id = DatumGetTextPP(agg_id);
	int			tlen = t_type != NULL ? VARSIZE_ANY_EXHDR(t_type) : 0;
	int			ilen = VARSIZE_ANY_EXHDR(t_id);
	char	   *buf = tlen + 1 + ilen <= size ? stack : palloc(tlen + 1 + ilen);

	if (tlen > 0)
		memcpy(buf, VARDATA_ANY(t_type), tlen);
	buf[tlen] = '\0';
	memcpy(buf + tlen + 1, VARDATA_ANY(t_id), ilen);
	k->data = buf;
	k->len = tlen + 1 + ilen;
}

/*
 * The entry of the transaction's last event of key k, or NULL if k is met
 * for the first time: then event id is remembered as its last (not routed
 * yet), while there is room.
 */
static HoldEntry *
last_of_key(const HoldKey *k, int64 id)
{
	HoldEntry  *e;
	HoldKey		copy;
	bool		found;

	if (!first_set)
	{
		remember_first(k, id);
		return NULL;
	}
	e = hash_search(transaction_keys(), k, HASH_FIND, &found);
	if (found)
		return e;
	if (keys_bytes + k->len + 2 * sizeof(HoldEntry) > KEYS_MAX_BYTES)
		return NULL;
	/* the key copied first: an entry never points at the caller's buffer */
	copy.data = MemoryContextAlloc(keys_cxt, k->len);
	memcpy((char *) copy.data, k->data, k->len);
	copy.len = k->len;
	e = hash_search(keys, &copy, HASH_ENTER, &found);
	init_entry(e, copy.data, copy.len, id);
	keys_bytes += k->len + 2 * sizeof(HoldEntry);
	return NULL;
}

/*
 * OutboxEmitHold(rel, tuple) RETURNS HeapTuple
 *
 * rel is outbox, tuple an event being inserted, its rules checked. Returns
 * tuple, or a copy with held_by set to an earlier event of the same
 * aggregate (aggregate_type, NULL the same as '', and aggregate_id) in
 * this transaction, and next_attempt_at HOLD_AT_EMIT_MS from now, when
 * both go to the same enabled ordered destination and to no other, and
 * that one is still pending: the transaction's last event of the
 * aggregate, or the one before events of it that went elsewhere (see
 * HoldEntry), unless the transaction is SERIALIZABLE (see the
 * banner). Remembers the event as its key's last. Raises no error of its
 * own; routing raises what _outbox_route_first raises for a destination
 * it reads (filters are evaluated silently). Called from the BEFORE
 * INSERT trigger on outbox (_outbox_check_event), in the writer's
 * transaction, in any backend.
 */
HeapTuple
OutboxEmitHold(Relation rel, HeapTuple tuple)
{
	TupleDesc	desc = RelationGetDescr(rel);
	bool		isnull;
	bool		agg_type_null;
	Datum		agg_id;
	Datum		agg_type;
	Datum		next_at;
	int64		id;
	char		stack[256];
	HoldKey		k;
	HoldEntry  *e;
	int64		dest;
	int64		blocker;

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(relcache_callback, (Datum) 0);
		callback_registered = true;
	}
	if (IsolationIsSerializable() ||
		!ordered_destinations(RelationGetNamespace(rel)) || !outbox_columns(rel))
		return tuple;

	/* only an event as written: its aggregate set, due now, not a copy */
	agg_id = heap_getattr(tuple, att[C_AGGREGATE_ID], desc, &isnull);
	if (isnull ||
		!heap_attisnull(tuple, att[C_DESTINATION_ID], desc) ||
		!heap_attisnull(tuple, att[C_ORIGIN_ID], desc) ||
		!heap_attisnull(tuple, att[C_HELD_BY], desc))
		return tuple;
	next_at = heap_getattr(tuple, att[C_NEXT_ATTEMPT_AT], desc, &isnull);
	if (isnull || DatumGetTimestampTz(next_at) > GetCurrentTransactionStartTimestamp())
		return tuple;
	id = DatumGetInt64(heap_getattr(tuple, att[C_ID], desc, &isnull));
	if (isnull)
		return tuple;
	agg_type = heap_getattr(tuple, att[C_AGGREGATE_TYPE], desc, &agg_type_null);
	make_key(agg_type, agg_type_null, agg_id, stack, sizeof(stack), &k);
	if ((e = last_of_key(&k, id)) == NULL)
		return tuple;

	/* the key came back: where this event goes, and the one before */
	dest = route_row(desc, tuple);
	blocker = 0;
	if (dest != 0 && e->last.id < id && goes_to(rel, &e->last, dest))
		blocker = e->last.id;
	else if (dest != 0 && e->ordered.id < id && goes_to(rel, &e->ordered, dest))
		blocker = e->ordered.id;
	if (blocker != 0)
	{
		int			cols[2] = {att[C_HELD_BY], att[C_NEXT_ATTEMPT_AT]};
		Datum		values[2];
		bool		nulls[2] = {false, false};

		values[0] = Int64GetDatum(blocker);
		values[1] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
																	HOLD_AT_EMIT_MS));
		tuple = heap_modify_tuple_by_cols(tuple, desc, 2, cols, values, nulls);
	}
	if (e->last.id != 0 && e->last.dest != 0)
		e->ordered = e->last;
	e->last.id = id;
	e->last.dest = dest;
	e->last.epoch = routing_epoch;
	return tuple;
}
