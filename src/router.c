/*-------------------------------------------------------------------------
 *
 * router.c
 *	  The claim's routing: the first destination that takes a row, and
 *	  whether another does, answered from the destinations held in memory.
 *
 * Routing's rule is _outbox_takes (SQL): a destination takes an event if
 * its pattern matches the type and its filter, if any, is true of the
 * envelope. The claim routes every row it reads, and routing each one in
 * SQL cost about 1.9 us with one destination and 10 us with 1,000 (each
 * row's index probes for the candidates found by key, each candidate's
 * filter evaluated with the envelope built again). This holds the
 * destinations in memory and answers each row from there:
 *   - a destination whose pattern has no '*' (route_type) is found by
 *     its type, and one whose filter has a key (route_path, route_value:
 *     src/route_key.c) by the key the event presents on that field, in
 *     one hash table; the rest are tested on every event, as in SQL;
 *   - a key is necessary, never sufficient: each candidate's pattern and
 *     filter are evaluated, in name order, with the same functions as
 *     _outbox_takes (jsonb_path_match, silent), on an envelope built once
 *     per row; so the answer is _outbox_takes' on every destination, which
 *     sql/route_keys.sql and sql/rules.sql compare.
 * The views that show routes to people (_outbox_routes) stay in SQL.
 *
 * The destinations read are kept in the backend (CacheMemoryContext) from
 * statement to statement, and checked at each new snapshot with a scan of
 * the table's row versions: with 1,000 destinations, a pass of
 * outbox_relay() that claims one event took 0.34 ms, as with one, where
 * reading and ranking them again at each statement made it 2.3 ms. They
 * are read with the table access method, not SPI, after the privilege
 * check a SELECT makes.
 *
 * src/router.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/varlena.h"

#include "compat.h"
#include "routing.h"

PG_FUNCTION_INFO_V1(_outbox_route_first);

/* what a key names: an exact type, an envelope field, a payload field */
#define KEY_TYPE 'T'
#define KEY_ENVELOPE 'E'
#define KEY_PAYLOAD 'P'
#define KEY_FIELD 'F'				/* a payload field some key names */

typedef struct RouteKey
{
	char		kind;
	int			flen;
	const char *field;			/* the type itself, for KEY_TYPE */
	JsonbValue	value;			/* a scalar; jbvNull for KEY_TYPE */
} RouteKey;

typedef struct RouteEntry
{
	RouteKey	key;			/* first: dynahash's key */
	List	   *dests;			/* indexes in RouteCache.dests, ascending */
} RouteEntry;

/* equality as jsonb's = on scalars, and jsonpath's ==: numbers by value */
static bool
scalar_equal(const JsonbValue *a, const JsonbValue *b)
{
	if (a->type != b->type)
		return false;
	switch (a->type)
	{
		case jbvNull:
			return true;
		case jbvBool:
			return a->val.boolean == b->val.boolean;
		case jbvString:
			return a->val.string.len == b->val.string.len &&
				memcmp(a->val.string.val, b->val.string.val, a->val.string.len) == 0;
		case jbvNumeric:
			return DatumGetBool(DirectFunctionCall2(numeric_eq,
													NumericGetDatum(a->val.numeric),
													NumericGetDatum(b->val.numeric)));
		default:
			return false;
	}
}

/* a hash that equal scalars share: jsonb's own, as its hash opclass */
static uint32
key_hash(const void *key, Size keysize pg_attribute_unused())
{
	const RouteKey *k = key;
	uint32		h = hash_bytes((const unsigned char *) k->field, k->flen) ^ (uint32) k->kind;

	JsonbHashScalarValue(&k->value, &h);
	return h;
}

/* dynahash's compare: 0 when equal */
static int
key_compare(const void *key1, const void *key2, Size keysize pg_attribute_unused())
{
	const RouteKey *a = key1;
	const RouteKey *b = key2;

	return !(a->kind == b->kind && a->flen == b->flen &&
			 memcmp(a->field, b->field, a->flen) == 0 && scalar_equal(&a->value, &b->value));
}

typedef struct RouteDest
{
	int64		id;
	const char *pattern;
	int			plen;
	Datum		filter;			/* jsonpath, or 0 for none */
	bool		key_decides;	/* found by key: its filter is true */
	Datum		row;			/* the outbox_destinations row */
} RouteDest;

typedef struct RouteId
{
	int64		id;
	int			index;
} RouteId;

/* a destination row version: the fingerprint of what a snapshot sees */
typedef struct RouteVersion
{
	ItemPointerData tid;
	TransactionId xmin;
} RouteVersion;

typedef struct RouteCache
{
	MemoryContext mcxt;			/* holds all of it */
	Oid			relid;			/* outbox_destinations */
	Oid			fn_oid;			/* the function whose result it builds */
	bool		stale;			/* a relcache invalidation named relid */
	/* the snapshot last checked with, in this (sub)transaction, by this role */
	bool		checked;
	Oid			userid;
	LocalTransactionId lxid;
	SubTransactionId subxid;
	SnapshotType snapshot_type;
	CommandId	curcid;
	TransactionId xmin;
	TransactionId xmax;
	bool		suboverflowed;
	bool		recovery;
	uint32		xcnt;
	int32		subxcnt;
	TransactionId *xip;			/* xcnt, then subxcnt of them */
	int			xip_size;
	/* what it was read from: the row versions, in the scan's order */
	RouteVersion *versions;
	TupleDesc	result;			/* (route, several) */
	bool		all;			/* 'all' routing: look for a second route */
	int			ndests;
	RouteDest  *dests;			/* in name order, as routing ranks them */
	RouteId    *by_id;			/* sorted by id */
	HTAB	   *keys;
	List	   *unkeyed;		/* tested on every event */
	List	   *payload_keyed;	/* candidates when a payload has too many keys */
	Datum	   *fields;			/* payload fields keyed on, distinct (text) */
	int			nfields;
	bool		envelope_keyed[3];	/* type, aggregate_type, aggregate_id */
	Datum		no_vars;		/* '{}', jsonb_path_match's vars */
	/* per row */
	int		   *cand;
	int			ncand;
	uint32	   *stamp;			/* dests[i] is a candidate if stamp[i] == row */
	uint32		row_no;
} RouteCache;

/* the backend's cache, for the schema the extension is in */
static RouteCache *route_cache = NULL;
static bool callback_registered = false;

/* the cache is taken as checked for the whole transaction (OutboxRouteWithinTransaction) */
static bool within_transaction = false;

static const char *const envelope_fields[3] = {"type", "aggregate_type", "aggregate_id"};

static void
add_key(RouteCache *cache, RouteKey *k, int index)
{
	bool		found;
	RouteEntry *e = hash_search(cache->keys, k, HASH_ENTER, &found);

	if (!found)
		e->dests = NIL;
	e->dests = lappend_int(e->dests, index);
}

/*
 * The key a destination's route_path and route_value make: fills k's
 * field (pointing into path, which the cache keeps) and value, and
 * returns the path's length, 1 (an envelope field) or 2 (payload.field),
 * or 0 if it is not a key _outbox_filter_key_path makes. What it reads the
 * path with goes in scratch.
 */
static int
key_of(RouteCache *cache, Datum path, Datum value, MemoryContext scratch, RouteKey *k)
{
	MemoryContext old = MemoryContextSwitchTo(scratch);
	Datum	   *names;
	bool	   *nulls;
	int			n;

	deconstruct_array(DatumGetArrayTypeP(path), TEXTOID, -1, false, TYPALIGN_INT,
					  &names, &nulls, &n);
	if (!JsonbExtractScalar(&DatumGetJsonbP(value)->root, &k->value) || n < 1 || n > 2 ||
		nulls[0] || (n == 2 && nulls[1]))
		n = 0;
	else if (n == 2 && strcmp(TextDatumGetCString(names[0]), "payload") != 0)
		n = 0;
	if (n == 1)
	{
		n = 0;
		for (int f = 0; f < 3; f++)
			if (strcmp(TextDatumGetCString(names[0]), envelope_fields[f]) == 0)
			{
				cache->envelope_keyed[f] = true;
				n = 1;
			}
	}
	if (n > 0)
	{
		k->field = VARDATA_ANY(DatumGetTextPP(names[n - 1]));
		k->flen = VARSIZE_ANY_EXHDR(DatumGetTextPP(names[n - 1]));
	}
	MemoryContextSwitchTo(old);
	return n;
}

/*
 * Files destination index under its key, or among those without one, in
 * the cache's context.
 */
static void
file_dest(RouteCache *cache, int index, Datum type, bool type_null,
		  Datum path, bool path_null, Datum value, bool value_null, MemoryContext scratch)
{
	RouteKey	k = {0};
	int			n;

	if (!type_null)
	{
		text	   *t = DatumGetTextPP(type);

		k.kind = KEY_TYPE;
		k.field = VARDATA_ANY(t);
		k.flen = VARSIZE_ANY_EXHDR(t);
		k.value.type = jbvNull;
		add_key(cache, &k, index);
		return;
	}
	if (path_null || value_null)
	{
		cache->unkeyed = lappend_int(cache->unkeyed, index);
		return;
	}
	n = key_of(cache, path, value, scratch, &k);
	if (n == 0)
	{
		/* not a key _outbox_filter_key_path makes: test it on every event */
		cache->unkeyed = lappend_int(cache->unkeyed, index);
		return;
	}
	if (n == 1)
	{
		/*
		 * The filter is one equality of an envelope field, always present
		 * in the envelope, a string or null, with a literal: true exactly
		 * when the key is equal (strings byte for byte, null == null; a
		 * string and a number or boolean compare as unknown), in lax mode
		 * and strict, and this destination is a candidate only then.
		 */
		cache->dests[index].key_decides = true;
		k.kind = KEY_ENVELOPE;
	}
	else
	{
		RouteKey	f = k;
		bool		known;
		RouteEntry *e;

		k.kind = KEY_PAYLOAD;
		cache->payload_keyed = lappend_int(cache->payload_keyed, index);
		/* each field once in fields: the keys hash knows those seen */
		f.kind = KEY_FIELD;
		f.value.type = jbvNull;
		e = hash_search(cache->keys, &f, HASH_ENTER, &known);
		if (!known)
		{
			e->dests = NIL;
			cache->fields[cache->nfields++] =
				PointerGetDatum(cstring_to_text_with_len(k.field, k.flen));
		}
	}
	add_key(cache, &k, index);
}

static int
id_cmp(const void *a, const void *b)
{
	int64		x = ((const RouteId *) a)->id;
	int64		y = ((const RouteId *) b)->id;

	return x < y ? -1 : x > y;
}

/* the columns of outbox_destinations that routing reads */
enum
{
	COL_NAME,
	COL_ID,
	COL_EVENT_TYPES,
	COL_FILTER,
	COL_ROUTE_TYPE,
	COL_ROUTE_PATH,
	COL_ROUTE_VALUE,
	NCOLS
};

static const char *const read_columns[NCOLS] =
{"name", "id", "event_types", "filter", "route_type", "route_path", "route_value"};

/* a destination as read, before it is ranked by name */
typedef struct ReadDest
{
	Datum		row;			/* the whole row */
	Datum		v[NCOLS];		/* its columns (COL_*) */
	bool		n[NCOLS];
} ReadDest;

/* ORDER BY d.name: the column's collation (*arg), as its index compares */
static int
name_cmp(const void *a, const void *b, void *arg)
{
	text	   *x = DatumGetTextPP(((const ReadDest *) a)->v[COL_NAME]);
	text	   *y = DatumGetTextPP(((const ReadDest *) b)->v[COL_NAME]);

	return varstr_cmp(VARDATA_ANY(x), VARSIZE_ANY_EXHDR(x),
					  VARDATA_ANY(y), VARSIZE_ANY_EXHDR(y), *(Oid *) arg);
}

/*
 * The relation the extension's schema names, opened with AccessShareLock
 * (the relay's claim holds a stronger one), after the privilege check a
 * SELECT would make; row level security, which a SELECT would apply and
 * this scan could not, is refused.
 */
static Relation
open_checked(Oid relid)
{
	Relation	rel = table_open(relid, AccessShareLock);
	AclResult	acl = pg_class_aclcheck(relid, GetUserId(), ACL_SELECT);

	if (acl != ACLCHECK_OK)
		aclcheck_error(acl, get_relkind_objtype(rel->rd_rel->relkind),
					   RelationGetRelationName(rel));
	if (check_enable_rls(relid, InvalidOid, false) == RLS_ENABLED)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("row level security on \"%s\" is not supported",
						RelationGetRelationName(rel)),
				 errdetail("Routing reads every destination.")));
	return rel;
}

/*
 * Calls fn(arg, tuple, rel) with each row of rel that snap sees, in the
 * scan's order.
 */
static void
scan_rows(Relation rel, Snapshot snap, void (*fn) (void *, HeapTuple, Relation), void *arg)
{
	/* never a synchronized scan: the versions are compared in scan order */
	TableScanDesc scan = table_beginscan_strat(rel, snap, 0, NULL, true, false);
	TupleTableSlot *slot = table_slot_create(rel, NULL);

	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		bool		should_free;
		HeapTuple	tuple = ExecFetchSlotHeapTuple(slot, false, &should_free);

		fn(arg, tuple, rel);
		if (should_free)
			heap_freetuple(tuple);
	}
	ExecDropSingleTupleTableSlot(slot);
	table_endscan(scan);
}

typedef struct Versions
{
	RouteVersion *v;
	int			n;
	int			size;
} Versions;

static void
add_version(void *arg, HeapTuple tuple, Relation rel pg_attribute_unused())
{
	Versions   *vs = arg;

	if (vs->n == vs->size)
	{
		vs->size = Max(16, vs->size * 2);
		vs->v = vs->v == NULL ? palloc(sizeof(RouteVersion) * vs->size)
			: repalloc(vs->v, sizeof(RouteVersion) * vs->size);
	}
	vs->v[vs->n].tid = tuple->t_self;
	vs->v[vs->n].xmin = HeapTupleHeaderGetRawXmin(tuple->t_data);
	vs->n++;
}

typedef struct Reading
{
	MemoryContext keep;			/* the cache's: what it keeps is copied there */
	ReadDest   *d;
	int			n;
	int			size;
	int			attnums[NCOLS];
} Reading;

static void
read_dest(void *arg, HeapTuple tuple, Relation rel)
{
	Reading    *r = arg;
	TupleDesc	desc = RelationGetDescr(rel);
	ReadDest   *d;
	MemoryContext old;

	if (r->n == r->size)
	{
		r->size = Max(16, r->size * 2);
		r->d = r->d == NULL ? palloc(sizeof(ReadDest) * r->size)
			: repalloc(r->d, sizeof(ReadDest) * r->size);
	}
	d = &r->d[r->n++];
	/* the name ranks the rows, and only while they are read */
	d->v[COL_NAME] = PointerGetDatum(PG_DETOAST_DATUM_COPY(heap_getattr(tuple, r->attnums[COL_NAME],
																	   desc, &d->n[COL_NAME])));
	old = MemoryContextSwitchTo(r->keep);

	/*
	 * As a whole-row reference gives it: external values inlined; a column
	 * added since the row was written reads as its default (the rowtype's
	 * descriptor has it)
	 */
	d->row = heap_copy_tuple_as_datum(tuple, desc);
	for (int c = COL_ID; c < NCOLS; c++)
	{
		Datum		v = heap_getattr(tuple, r->attnums[c], desc, &d->n[c]);

		if (d->n[c])
			d->v[c] = (Datum) 0;
		else if (c == COL_ID)
			d->v[c] = Int64GetDatum(DatumGetInt64(v));	/* by reference: into the page */
		else
			d->v[c] = PointerGetDatum(PG_DETOAST_DATUM_COPY(v));
	}
	MemoryContextSwitchTo(old);
}

static void
read_config(void *arg, HeapTuple tuple, Relation rel)
{
	bool	   *all = arg;
	bool		isnull;
	int			attnum = SPI_fnumber(RelationGetDescr(rel), "routing");
	Datum		routing;

	if (attnum <= 0)
		elog(ERROR, "outbox_config has no column \"routing\"");
	routing = heap_getattr(tuple, attnum, RelationGetDescr(rel), &isnull);
	*all = isnull || strcmp(TextDatumGetCString(routing), "all") == 0;
}

/*
 * Reads the destinations that snap sees from rel into a new cache, in a
 * context made a child of CacheMemoryContext once it is complete (an
 * error before leaves the caller's context to free it).
 */
static RouteCache *
load_destinations(FunctionCallInfo fcinfo, Relation rel, Snapshot snap, Versions *versions)
{
	MemoryContext mcxt = AllocSetContextCreate(CurrentMemoryContext, "outbox routes",
											   ALLOCSET_DEFAULT_SIZES);
	MemoryContext old;
	RouteCache *cache;
	TupleDesc	result;
	Reading		r = {0};
	HASHCTL		ctl = {0};
	Oid			collation;

	/* the rows are read in the caller's context, what is kept into mcxt */
	for (int c = 0; c < NCOLS; c++)
		if ((r.attnums[c] = SPI_fnumber(RelationGetDescr(rel), read_columns[c])) <= 0)
			elog(ERROR, "outbox_destinations has no column \"%s\"", read_columns[c]);
	r.keep = mcxt;
	scan_rows(rel, snap, read_dest, &r);
	collation = TupleDescAttr(RelationGetDescr(rel), r.attnums[COL_NAME] - 1)->attcollation;
	qsort_arg(r.d, r.n, sizeof(ReadDest), name_cmp, &collation);

	old = MemoryContextSwitchTo(mcxt);
	cache = palloc0(sizeof(RouteCache));
	cache->mcxt = mcxt;
	cache->relid = RelationGetRelid(rel);
	cache->fn_oid = fcinfo->flinfo->fn_oid;
	if (get_call_result_type(fcinfo, NULL, &result) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "_outbox_route_first must return a composite");
	cache->result = BlessTupleDesc(CreateTupleDescCopy(result));
	cache->no_vars = DirectFunctionCall1(jsonb_in, CStringGetDatum("{}"));

	cache->versions = versions->n > 0 ? palloc(sizeof(RouteVersion) * versions->n) : NULL;
	if (versions->n > 0)
		memcpy(cache->versions, versions->v, sizeof(RouteVersion) * versions->n);
	cache->ndests = r.n;
	cache->dests = palloc0(sizeof(RouteDest) * Max(r.n, 1));
	cache->by_id = palloc0(sizeof(RouteId) * Max(r.n, 1));
	cache->cand = palloc0(sizeof(int) * Max(r.n, 1));
	cache->stamp = palloc0(sizeof(uint32) * Max(r.n, 1));
	cache->fields = palloc0(sizeof(Datum) * Max(r.n, 1));
	ctl.keysize = sizeof(RouteKey);
	ctl.entrysize = sizeof(RouteEntry);
	ctl.hash = key_hash;
	ctl.match = key_compare;
	ctl.hcxt = mcxt;
	cache->keys = hash_create("outbox route keys", Max(r.n, 8), &ctl,
							  HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
	for (int i = 0; i < r.n; i++)
	{
		RouteDest  *d = &cache->dests[i];
		ReadDest   *rd = &r.d[i];

		d->row = rd->row;
		d->id = DatumGetInt64(rd->v[COL_ID]);
		d->pattern = VARDATA_ANY(DatumGetTextPP(rd->v[COL_EVENT_TYPES]));
		d->plen = VARSIZE_ANY_EXHDR(DatumGetTextPP(rd->v[COL_EVENT_TYPES]));
		d->filter = rd->v[COL_FILTER];
		cache->by_id[i].id = d->id;
		cache->by_id[i].index = i;
		file_dest(cache, i, rd->v[COL_ROUTE_TYPE], rd->n[COL_ROUTE_TYPE],
				  rd->v[COL_ROUTE_PATH], rd->n[COL_ROUTE_PATH],
				  rd->v[COL_ROUTE_VALUE], rd->n[COL_ROUTE_VALUE], old);
	}
	qsort(cache->by_id, cache->ndests, sizeof(RouteId), id_cmp);
	MemoryContextSwitchTo(old);
	MemoryContextSetParent(mcxt, CacheMemoryContext);
	return cache;
}

/* relcache invalidation: a change of outbox_destinations' definition */
static void
route_relcache_callback(Datum arg pg_attribute_unused(), Oid relid)
{
	if (route_cache != NULL && (relid == InvalidOid || relid == route_cache->relid))
		route_cache->stale = true;
}

/*
 * Whether snap is the snapshot the cache was last checked with, or one
 * that sees the same, for the same role (whose privileges were checked;
 * a GRANT or REVOKE on the table is a relcache invalidation): the same
 * transaction and subtransaction (whose own changes it sees by command
 * id), command id and running transactions.
 * A snapshot's snapXactCompletionCount cannot tell: an active snapshot is
 * a copy, whose count is 0.
 */
static bool
checked_with(const RouteCache *cache, Snapshot snap)
{
	return cache->userid == GetUserId() &&
		cache->lxid == OUTBOX_MY_LXID && cache->subxid == GetCurrentSubTransactionId() &&
		cache->snapshot_type == snap->snapshot_type &&
		cache->curcid == snap->curcid && cache->xmin == snap->xmin && cache->xmax == snap->xmax &&
		cache->suboverflowed == snap->suboverflowed &&
		cache->recovery == snap->takenDuringRecovery &&
		cache->xcnt == snap->xcnt && cache->subxcnt == snap->subxcnt &&
		(snap->xcnt == 0 ||
		 memcmp(cache->xip, snap->xip, sizeof(TransactionId) * snap->xcnt) == 0) &&
		(snap->subxcnt <= 0 ||
		 memcmp(cache->xip + snap->xcnt, snap->subxip, sizeof(TransactionId) * snap->subxcnt) == 0);
}

static void
remember_snapshot(RouteCache *cache, Snapshot snap)
{
	int			n = snap->xcnt + Max(snap->subxcnt, 0);

	if (cache->xip == NULL || n > cache->xip_size)
	{
		int			size = Max(Max(n, 16), 2 * cache->xip_size);

		/* the size once the memory is had: an error leaves both as they were */
		cache->xip = cache->xip == NULL
			? MemoryContextAlloc(cache->mcxt, sizeof(TransactionId) * size)
			: repalloc(cache->xip, sizeof(TransactionId) * size);
		cache->xip_size = size;
	}
	if (snap->xcnt > 0)
		memcpy(cache->xip, snap->xip, sizeof(TransactionId) * snap->xcnt);
	if (snap->subxcnt > 0)
		memcpy(cache->xip + snap->xcnt, snap->subxip, sizeof(TransactionId) * snap->subxcnt);
	cache->userid = GetUserId();
	cache->lxid = OUTBOX_MY_LXID;
	cache->subxid = GetCurrentSubTransactionId();
	cache->snapshot_type = snap->snapshot_type;
	cache->curcid = snap->curcid;
	cache->xmin = snap->xmin;
	cache->xmax = snap->xmax;
	cache->suboverflowed = snap->suboverflowed;
	cache->recovery = snap->takenDuringRecovery;
	cache->xcnt = snap->xcnt;
	cache->subxcnt = snap->subxcnt;
	cache->checked = true;
}

static bool
same_versions(const RouteCache *cache, const Versions *versions)
{
	if (cache->ndests != versions->n)
		return false;
	for (int i = 0; i < versions->n; i++)
		if (cache->versions[i].xmin != versions->v[i].xmin ||
			!ItemPointerEquals(&cache->versions[i].tid, &versions->v[i].tid))
			return false;
	return true;
}

/*
 * The cache, valid for the active snapshot: kept while that snapshot is
 * the one it was last checked with, and otherwise while the destination
 * row versions the snapshot sees are those it was read from (an UPDATE,
 * INSERT or DELETE changes a version's place or xmin, and a row version
 * is never rewritten in place with other contents), and no relcache
 * invalidation named the table (ALTER TABLE). Reads it again otherwise.
 */
static RouteCache *
valid_cache(FunctionCallInfo fcinfo)
{
	Snapshot	snap = GetActiveSnapshot();
	RouteCache *cache = route_cache;
	Oid			nspoid;
	Oid			relid;
	Oid			config_relid;
	Relation	rel;
	Relation	config;
	Versions	versions = {0};
	bool		all = true;

	if (cache != NULL && !cache->stale && cache->checked &&
		cache->fn_oid == fcinfo->flinfo->fn_oid &&
		(checked_with(cache, snap) ||
		 (within_transaction && cache->userid == GetUserId() &&
		  cache->lxid == OUTBOX_MY_LXID &&
		  cache->subxid == GetCurrentSubTransactionId())))
		return cache;

	nspoid = get_func_namespace(fcinfo->flinfo->fn_oid);
	relid = get_relname_relid("outbox_destinations", nspoid);
	config_relid = get_relname_relid("outbox_config", nspoid);
	if (!OidIsValid(relid) || !OidIsValid(config_relid))
		elog(ERROR, "outbox_destinations or outbox_config is missing");
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(route_relcache_callback, (Datum) 0);
		callback_registered = true;
	}
	rel = open_checked(relid);
	config = open_checked(config_relid);
	scan_rows(config, snap, read_config, &all);
	scan_rows(rel, snap, add_version, &versions);
	if (cache == NULL || cache->stale || cache->relid != relid ||
		cache->fn_oid != fcinfo->flinfo->fn_oid || !same_versions(cache, &versions))
	{
		RouteCache *fresh = load_destinations(fcinfo, rel, snap, &versions);

		if (route_cache != NULL)
			MemoryContextDelete(route_cache->mcxt);
		route_cache = cache = fresh;
	}
	/* held to the end of the transaction, as a SELECT holds it */
	table_close(config, NoLock);
	table_close(rel, NoLock);
	cache->all = all;
	remember_snapshot(cache, snap);
	return cache;
}

static void
add_candidates(RouteCache *cache, List *dests)
{
	ListCell   *lc;

	foreach(lc, dests)
	{
		int			i = lfirst_int(lc);

		if (cache->stamp[i] != cache->row_no)
		{
			cache->stamp[i] = cache->row_no;
			cache->cand[cache->ncand++] = i;
		}
	}
}

static void
probe(RouteCache *cache, char kind, const char *field, int flen, JsonbValue *value)
{
	RouteKey	k = {0};
	RouteEntry *e;

	k.kind = kind;
	k.field = field;
	k.flen = flen;
	k.value = *value;
	e = hash_search(cache->keys, &k, HASH_FIND, NULL);
	if (e != NULL)
		add_candidates(cache, e->dests);
}

/* OutboxRouteKeyFn: the destinations keyed on this payload key */
static void
probe_payload(void *arg, const char *field, int len, JsonbValue *value)
{
	probe((RouteCache *) arg, KEY_PAYLOAD, field, len, value);
}

static int
int_cmp(const void *a, const void *b)
{
	return *(const int *) a - *(const int *) b;
}

static void
string_value(JsonbValue *v, text *t)
{
	if (t == NULL)
		v->type = jbvNull;
	else
	{
		v->type = jbvString;
		v->val.string.val = VARDATA_ANY(t);
		v->val.string.len = VARSIZE_ANY_EXHDR(t);
	}
}

/*
 * The document a filter reads, as _outbox_takes builds it:
 * jsonb_build_object('type', ..., 'aggregate_type', ..., 'aggregate_id',
 * ..., 'payload', ...).
 */
static Datum
envelope(JsonbValue *fields, Jsonb *payload)
{
	static const char *const names[4] = {"type", "aggregate_type", "aggregate_id", "payload"};
	JsonbParseState *st = NULL;
	JsonbValue *res;

	pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	for (int f = 0; f < 4; f++)
	{
		JsonbValue	k;
		JsonbValue	v;

		k.type = jbvString;
		k.val.string.val = (char *) names[f];
		k.val.string.len = strlen(names[f]);
		pushJsonbValue(&st, WJB_KEY, &k);
		if (f < 3)
			v = fields[f];
		else if (payload == NULL)
			v.type = jbvNull;
		else if (JB_ROOT_IS_SCALAR(payload))
			JsonbExtractScalar(&payload->root, &v);
		else
		{
			v.type = jbvBinary;
			v.val.binary.data = &payload->root;
			v.val.binary.len = VARSIZE(payload) - VARHDRSZ;
		}
		pushJsonbValue(&st, WJB_VALUE, &v);
	}
	res = pushJsonbValue(&st, WJB_END_OBJECT, NULL);
	return JsonbPGetDatum(JsonbValueToJsonb(res));
}

/* jsonb_path_match(doc, filter, '{}', silent => true) IS TRUE */
static bool
filter_takes(RouteCache *cache, Datum doc, Datum filter)
{
	LOCAL_FCINFO(fc, 4);
	Datum		res;

	InitFunctionCallInfoData(*fc, NULL, 4, InvalidOid, NULL, NULL);
	fc->args[0].value = doc;
	fc->args[0].isnull = false;
	fc->args[1].value = filter;
	fc->args[1].isnull = false;
	fc->args[2].value = cache->no_vars;
	fc->args[2].isnull = false;
	fc->args[3].value = BoolGetDatum(true);
	fc->args[3].isnull = false;
	res = jsonb_path_match(fc);
	return !fc->isnull && DatumGetBool(res);
}

/*
 * OutboxRouteWithinTransaction(on): while on, _outbox_route_first takes
 * its destinations as checked for the rest of the (sub)transaction once
 * they have been in it, by the same role, whatever the snapshot: for a
 * writer's hold at emit (emit_hold.c), a shortcut that the claim tests
 * again, which would otherwise scan outbox_destinations' row versions at
 * each emit, every statement of a function having a snapshot of its own.
 * An insert or update of a destination is still seen once its relcache
 * invalidation is processed (the table's trigger sends one); a delete is
 * not, until the next subtransaction. The caller turns it off again, on
 * error too. Any backend, in a transaction.
 */
void
OutboxRouteWithinTransaction(bool on)
{
	within_transaction = on;
}

/*
 * _outbox_route_first(event_type text, aggregate_type text, aggregate_id
 * text, payload jsonb, destination_id bigint, OUT route
 * outbox_destinations, OUT several boolean) RETURNS record, STABLE: where
 * routing sends a row. For a row of a fanned-out event (destination_id
 * not NULL), that destination, enabled or not, and several false; NULL if
 * it is gone. For any other row, the first destination by name that takes
 * it (_outbox_takes), enabled or not, and, under 'all' routing, whether
 * another does too (the claim then fans the event out); NULL if none
 * does. Called through _outbox_route by the claim's view
 * (_outbox_pending), once per row read, in the relay and in any session
 * reading that view, in a transaction; reads outbox_config and checks the
 * destinations read (see the banner) once per snapshot. Raises ERROR
 * (42501) without SELECT on outbox_destinations or outbox_config, (0A000)
 * if row level security applies to either, or what jsonb_path_match
 * raises in silent mode (which the destinations' checks keep filters from
 * reaching: src/route_filter.c).
 */
Datum
_outbox_route_first(PG_FUNCTION_ARGS)
{
	RouteCache *cache = valid_cache(fcinfo);
	int			found[2];
	int			nfound = 0;
	Datum		values[2];
	bool		nulls[2] = {false, false};
	text	   *type;
	Jsonb	   *payload;
	JsonbValue	fields[3];
	Datum		doc = (Datum) 0;

	if (!PG_ARGISNULL(4))
	{
		RouteId		key = {.id = PG_GETARG_INT64(4)};
		RouteId    *hit = bsearch(&key, cache->by_id, cache->ndests, sizeof(RouteId), id_cmp);

		if (hit == NULL)
			PG_RETURN_NULL();
		values[0] = cache->dests[hit->index].row;
		values[1] = BoolGetDatum(false);
		PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(cache->result, values, nulls)));
	}
	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	type = PG_GETARG_TEXT_PP(0);
	string_value(&fields[0], type);
	string_value(&fields[1], PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1));
	string_value(&fields[2], PG_ARGISNULL(2) ? NULL : PG_GETARG_TEXT_PP(2));
	payload = PG_ARGISNULL(3) ? NULL : PG_GETARG_JSONB_P(3);

	/* the candidates: those found by key, and those without one */
	if (++cache->row_no == 0)
	{
		memset(cache->stamp, 0, sizeof(uint32) * cache->ndests);
		cache->row_no = 1;
	}
	cache->ncand = 0;
	{
		JsonbValue	none = {.type = jbvNull};

		probe(cache, KEY_TYPE, fields[0].val.string.val, fields[0].val.string.len, &none);
	}
	for (int f = 0; f < 3; f++)
		if (cache->envelope_keyed[f])
			probe(cache, KEY_ENVELOPE, envelope_fields[f], strlen(envelope_fields[f]), &fields[f]);
	if (cache->nfields > 0 && payload != NULL &&
		OutboxPayloadKeys(payload, cache->fields, cache->nfields, probe_payload, cache))
		add_candidates(cache, cache->payload_keyed);
	add_candidates(cache, cache->unkeyed);
	qsort(cache->cand, cache->ncand, sizeof(int), int_cmp);

	/* each candidate in name order: _outbox_takes */
	for (int c = 0; c < cache->ncand && nfound < (cache->all ? 2 : 1); c++)
	{
		RouteDest  *d = &cache->dests[cache->cand[c]];

		if (!OutboxTypeMatches(fields[0].val.string.val, fields[0].val.string.len,
							   d->pattern, d->plen))
			continue;
		if (d->filter != (Datum) 0 && !d->key_decides)
		{
			if (doc == (Datum) 0)
				doc = envelope(fields, payload);
			if (!filter_takes(cache, doc, d->filter))
				continue;
		}
		found[nfound++] = cache->cand[c];
	}
	if (nfound == 0)
		PG_RETURN_NULL();
	values[0] = cache->dests[found[0]].row;
	values[1] = BoolGetDatum(nfound > 1);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(cache->result, values, nulls)));
}
