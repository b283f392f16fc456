/*-------------------------------------------------------------------------
 *
 * route_key.c
 *	  Routing by key: the destinations that may take an event, found by
 *	  index probes rather than by evaluating every destination's pattern
 *	  and filter on it.
 *
 * A destination whose filter is one equality of an envelope field with a
 * literal ($.aggregate_id == "c42", $.payload.tenant == 7, either side)
 * has a key: the field's path and the literal as jsonb
 * (_outbox_filter_key_path and _outbox_filter_key_value, which the
 * generated columns route_path and route_value of outbox_destinations
 * call). An event presents keys: its type, aggregate type and aggregate id
 * (probed by routing itself), and (_outbox_route_keys) the scalars its
 * payload gives each top-level field, as jsonpath's lax mode finds them:
 * a field of the payload object,
 * or of each object of a payload array, and each scalar element of a field
 * that is an array (lax mode unwraps one level of arrays on each side of
 * an accessor and of a comparison). The filter can only be true if one of
 * the event's keys equals the destination's, so routing probes the
 * destinations' key index with the event's keys and evaluates the pattern
 * and filter of those it finds, as it does for every destination without
 * a key. A key is a necessary condition, never a sufficient one: in strict
 * mode, say, it finds more than the filter takes, never less. Equality is
 * jsonb's: numbers by value (1 and 1.0), strings byte for byte, as
 * jsonpath's == compares them.
 *
 * An event whose payload presents more than OUTBOX_MAX_ROUTE_KEYS keys
 * presents the first of them and one row (NULL, NULL) for the rest:
 * routing then takes every destination keyed on a payload field as a
 * candidate, so a writer's large payload costs a scan of them, never a
 * probe per value.
 *
 * A filter whose literal and field name take more than
 * OUTBOX_MAX_KEY_BYTES has no key, and is evaluated on every event as any
 * filter without one: the key index holds both, and a btree entry is at
 * most about 2700 bytes (a third of a page), less than the 4096 a filter
 * may have (OUTBOX_MAX_FILTER_BYTES).
 *
 * src/route_key.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/jsonpath.h"
#include "utils/numeric.h"

#include "routing.h"

/* the most bytes of field names and literal a key indexes (see banner) */
#define OUTBOX_MAX_KEY_BYTES 1024

/* the envelope fields a key may name, besides payload's own fields */
static const char *const envelope_fields[] = {"type", "aggregate_type", "aggregate_id", NULL};

/*
 * The path of a key, from a jsonpath item chain: $ then one envelope field,
 * or $.payload and one field of it. Fills names[] and returns how many (1
 * or 2), or 0 if the chain is anything else.
 */
static int
key_path(JsonPathItem *item, char **names)
{
	JsonPathItem next;
	int			n = 0;

	if (item->type != jpiRoot)
		return 0;
	while (jspGetNext(item, &next))
	{
		int			len;

		if (next.type != jpiKey || n == 2)
			return 0;
		names[n] = jspGetString(&next, &len);
		names[n] = pnstrdup(names[n], len);
		n++;
		*item = next;
	}
	if (n == 1)
	{
		for (const char *const *f = envelope_fields; *f != NULL; f++)
			if (strcmp(names[0], *f) == 0)
				return 1;
		return 0;
	}
	return n == 2 && strcmp(names[0], "payload") == 0 ? 2 : 0;
}

/* The jsonb of a literal jsonpath item, or NULL if it is not one. */
static Jsonb *
literal_jsonb(JsonPathItem *item)
{
	JsonbValue	v;

	if (jspHasNext(item))
		return NULL;
	switch (item->type)
	{
		case jpiNull:
			v.type = jbvNull;
			break;
		case jpiBool:
			v.type = jbvBool;
			v.val.boolean = jspGetBool(item);
			break;
		case jpiNumeric:
			v.type = jbvNumeric;
			v.val.numeric = jspGetNumeric(item);
			break;
		case jpiString:
			v.type = jbvString;
			v.val.string.val = jspGetString(item, &v.val.string.len);
			break;
		default:
			return NULL;
	}
	return JsonbValueToJsonb(&v);
}

/*
 * The key of filter, if it is one equality of a path key_path accepts
 * with a literal, OUTBOX_MAX_KEY_BYTES at most: fills *path and *value
 * and returns true.
 */
static bool
filter_key(JsonPath *filter, ArrayType **path, Jsonb **value)
{
	JsonPathItem root;
	JsonPathItem sides[2];
	char	   *names[2];

	jspInit(&root, filter);
	if (root.type != jpiEqual || jspHasNext(&root))
		return false;
	jspGetLeftArg(&root, &sides[0]);
	jspGetRightArg(&root, &sides[1]);
	for (int s = 0; s < 2; s++)
	{
		JsonPathItem p = sides[s];
		JsonPathItem lit = sides[1 - s];
		int			n = key_path(&p, names);
		Datum		elems[2];

		if (n == 0 || (*value = literal_jsonb(&lit)) == NULL)
			continue;
		for (int i = 0; i < n; i++)
			elems[i] = CStringGetTextDatum(names[i]);
		*path = construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT);
		return VARSIZE(*path) + VARSIZE(*value) <= OUTBOX_MAX_KEY_BYTES;
	}
	return false;
}

/*
 * _outbox_filter_key_path(filter jsonpath) RETURNS text[] and
 * _outbox_filter_key_value(filter jsonpath) RETURNS jsonb: the key of a
 * destination's filter (see the banner), or NULL when it has none.
 * IMMUTABLE STRICT; the generated columns of outbox_destinations call
 * them as a row is written. Raise nothing.
 */
PG_FUNCTION_INFO_V1(_outbox_filter_key_path);
Datum
_outbox_filter_key_path(PG_FUNCTION_ARGS)
{
	ArrayType  *path;
	Jsonb	   *value;

	if (!filter_key(PG_GETARG_JSONPATH_P(0), &path, &value))
		PG_RETURN_NULL();
	PG_RETURN_ARRAYTYPE_P(path);
}

PG_FUNCTION_INFO_V1(_outbox_filter_key_value);
Datum
_outbox_filter_key_value(PG_FUNCTION_ARGS)
{
	ArrayType  *path;
	Jsonb	   *value;

	if (!filter_key(PG_GETARG_JSONPATH_P(0), &path, &value))
		PG_RETURN_NULL();
	PG_RETURN_JSONB_P(value);
}

typedef struct KeyOut
{
	OutboxRouteKeyFn emit;		/* called with each key */
	void	   *arg;
	Datum	   *fields;			/* the payload fields destinations use */
	int			nfields;		/* -1: every field */
	int			nkeys;			/* keys put so far */
	bool		too_many;
} KeyOut;

/* Whether a destination uses payload field name (len bytes). */
static bool
field_used(KeyOut *out, const char *name, int len)
{
	if (out->nfields < 0)
		return true;
	for (int i = 0; i < out->nfields; i++)
	{
		text	   *f = DatumGetTextPP(out->fields[i]);

		if ((int) VARSIZE_ANY_EXHDR(f) == len && memcmp(VARDATA_ANY(f), name, len) == 0)
			return true;
	}
	return false;
}

/* Puts the key (field, v), v a scalar, unless there are too many already. */
static void
put_key(KeyOut *out, JsonbValue *name, JsonbValue *v)
{
	if (out->too_many || ++out->nkeys > OUTBOX_MAX_ROUTE_KEYS)
	{
		out->too_many = true;
		return;
	}
	out->emit(out->arg, name->val.string.val, name->val.string.len, v);
}

/* The key of a scalar, or of each scalar element of an array, of one field. */
static void
put_field(KeyOut *out, JsonbValue *name, JsonbValue *v)
{
	JsonbIterator *it;
	JsonbValue	e;
	JsonbIteratorToken tok;

	if (!field_used(out, name->val.string.val, name->val.string.len))
		return;
	if (v->type != jbvBinary)
	{
		put_key(out, name, v);
		return;
	}
	if (!JsonContainerIsArray(v->val.binary.data))
		return;
	it = JsonbIteratorInit(v->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &e, true)) != WJB_DONE)
		if (tok == WJB_ELEM && e.type != jbvBinary)
			put_key(out, name, &e);
}

/* The keys of each field of an object container. */
static void
put_object(KeyOut *out, JsonbContainer *obj)
{
	JsonbIterator *it = JsonbIteratorInit(obj);
	JsonbValue	k;
	JsonbValue	v;
	JsonbIteratorToken tok;

	while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		if (tok != WJB_KEY)
			continue;
		tok = JsonbIteratorNext(&it, &v, true);
		put_field(out, &k, &v);
	}
}

/*
 * Calls emit(arg, field, field_len, value) with each key payload presents
 * (see the banner) on the nfields fields (text Datums; nfields -1: every
 * field), duplicates possible, in the payload's order, up to
 * OUTBOX_MAX_ROUTE_KEYS of them; returns true if there were more (the
 * caller then takes every destination keyed on a payload field as a
 * candidate). value is a scalar, valid during the call. Runs in any
 * backend that routes; raises nothing but out of memory.
 */
bool
OutboxPayloadKeys(Jsonb *payload, Datum *fields, int nfields,
				  OutboxRouteKeyFn emit, void *arg)
{
	KeyOut		out = {0};

	out.emit = emit;
	out.arg = arg;
	out.fields = fields;
	out.nfields = nfields;
	if (JB_ROOT_IS_OBJECT(payload))
		put_object(&out, &payload->root);
	else if (JB_ROOT_IS_ARRAY(payload) && !JB_ROOT_IS_SCALAR(payload))
	{
		JsonbIterator *it = JsonbIteratorInit(&payload->root);
		JsonbValue	e;
		JsonbIteratorToken tok;

		while ((tok = JsonbIteratorNext(&it, &e, true)) != WJB_DONE)
			if (tok == WJB_ELEM && e.type == jbvBinary &&
				JsonContainerIsObject(e.val.binary.data))
				put_object(&out, e.val.binary.data);
	}
	return out.too_many;
}

/* OutboxRouteKeyFn of _outbox_route_keys: a row of its result. */
static void
key_row(void *arg, const char *field, int len, JsonbValue *value)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) arg;
	Datum		values[2];
	bool		nulls[2] = {false, false};

	values[0] = PointerGetDatum(cstring_to_text_with_len(field, len));
	values[1] = JsonbPGetDatum(JsonbValueToJsonb(value));
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * _outbox_route_keys(payload jsonb, fields text[]) RETURNS TABLE (field
 * text, value jsonb): the keys an event's payload presents (see the
 * banner) on the fields that destinations use (NULL: every field),
 * duplicates possible; (NULL, NULL) for the rest when there are
 * more than OUTBOX_MAX_ROUTE_KEYS. The envelope fields' keys are the
 * fields themselves, which routing (_outbox_candidates) probes without
 * this. Called by routing in SQL (_outbox_routes), once per event routed
 * while a destination is keyed on a payload field. Raises nothing but out
 * of memory.
 */
PG_FUNCTION_INFO_V1(_outbox_route_keys);
Datum
_outbox_route_keys(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo;
	Datum	   *fields = NULL;
	int			nfields = -1;

	InitMaterializedSRF(fcinfo, 0);
	if (PG_ARGISNULL(0))
		return (Datum) 0;
	rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	if (!PG_ARGISNULL(1))
	{
		bool	   *nulls;
		int			n;

		deconstruct_array(PG_GETARG_ARRAYTYPE_P(1), TEXTOID, -1, false, TYPALIGN_INT,
						  &fields, &nulls, &n);
		nfields = 0;
		for (int i = 0; i < n; i++)
			if (!nulls[i])
				fields[nfields++] = fields[i];
	}
	if (OutboxPayloadKeys(PG_GETARG_JSONB_P(0), fields, nfields, key_row, rsinfo))
	{
		Datum		values[2] = {0, 0};
		bool		nulls[2] = {true, true};

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
