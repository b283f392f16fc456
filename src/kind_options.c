/*-------------------------------------------------------------------------
 *
 * kind_options.c
 *	  A destination kind's own settings in outbox_destinations.options: the
 *	  check of a kind's declaration when the library loads, the check of a
 *	  row's options when it is written, and the readers a kind decodes them
 *	  with (destination.h).
 *
 * As a foreign data wrapper's validator checks its OPTIONS against the
 * list it declares (file_fdw.c), the validation trigger checks a row's
 * options against its kind's list before the kind's own rules run, so a
 * kind never sees a key it did not declare or a value of another type.
 * The messages name the option and the kind, never a value: an option may
 * hold a credential. Why options are a jsonb object and not columns:
 * docs/kind-settings.md.
 *
 * src/kind_options.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "destination.h"
#include "kind_registry.h"

/* an option name as declared: 1 to 63 of [a-z0-9_], not starting with a digit */
static bool
option_name_valid(const char *name, size_t len)
{
	if (len == 0 || len >= NAMEDATALEN || (name[0] >= '0' && name[0] <= '9'))
		return false;
	for (size_t i = 0; i < len; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
			  name[i] == '_'))
			return false;
	return true;
}

/* kind's declared option of that name (len bytes), or NULL */
static const OutboxKindOption *
option_by_name(const OutboxDestinationKind *kind, const char *name, size_t len)
{
	if (kind->options == NULL)
		return NULL;
	for (const OutboxKindOption *o = kind->options; o->name != NULL; o++)
		if (strlen(o->name) == len && memcmp(o->name, name, len) == 0)
			return o;
	return NULL;
}

/*
 * Whether kind's target is one of its options rather than a column
 * (target_column in destination.h). Any process; no error.
 */
bool
OutboxKindTargetIsOption(const OutboxDestinationKind *kind)
{
	return option_by_name(kind, kind->target_column, strlen(kind->target_column)) != NULL;
}

/*
 * Checks a kind's option list, from OutboxKindCheck when the library loads:
 * names valid and distinct, bounds in order (a string's within
 * OUTBOX_MAX_OPTION_STRING_BYTES), and a target kept in an option
 * declared a required string. ERROR naming the kind and the option.
 */
void
OutboxKindOptionsDeclCheck(const OutboxDestinationKind *kind)
{
	if (kind->options == NULL)
		return;
	for (const OutboxKindOption *o = kind->options; o->name != NULL; o++)
	{
		if (!option_name_valid(o->name, strlen(o->name)))
			elog(ERROR, "outbox destination kind \"%s\" has an option named \"%s\", which is not lower case letters, digits and _",
				 kind->name, o->name);
		if (option_by_name(kind, o->name, strlen(o->name)) != o)
			elog(ERROR, "outbox destination kind \"%s\" declares option \"%s\" twice",
				 kind->name, o->name);
		if (o->type < OUTBOX_OPTION_STRING || o->type > OUTBOX_OPTION_STRINGS)
			elog(ERROR, "outbox destination kind \"%s\" declares option \"%s\" with no valid type",
				 kind->name, o->name);
		if (o->min > o->max ||
			(o->type == OUTBOX_OPTION_STRING &&
			 (o->min < 1 || o->max > OUTBOX_MAX_OPTION_STRING_BYTES)) ||
			(o->type == OUTBOX_OPTION_STRINGS && o->min < 0))
			elog(ERROR, "outbox destination kind \"%s\" declares option \"%s\" with bounds out of order",
				 kind->name, o->name);
	}
	if (OutboxKindTargetIsOption(kind))
	{
		const OutboxKindOption *t = option_by_name(kind, kind->target_column,
												   strlen(kind->target_column));

		if (!t->required || t->type != OUTBOX_OPTION_STRING)
			elog(ERROR, "outbox destination kind \"%s\" keeps its target in option \"%s\", which is not a required string",
				 kind->name, t->name);
	}
}

/* "A webhook has no options." or "The options of a webhook: a, b." */
static char *
options_detail(const OutboxDestinationKind *kind)
{
	StringInfoData s;

	initStringInfo(&s);
	if (kind->options == NULL || kind->options[0].name == NULL)
	{
		appendStringInfo(&s, "%s has no options.", kind->description);
		s.data[0] = pg_toupper((unsigned char) s.data[0]);
		return s.data;
	}
	appendStringInfo(&s, "The options of %s:", kind->description);
	for (const OutboxKindOption *o = kind->options; o->name != NULL; o++)
		appendStringInfo(&s, "%s %s", o == kind->options ? "" : ",", o->name);
	appendStringInfoChar(&s, '.');
	return s.data;
}

/* false with *p: option o of kind must be <what> (22023) */
static bool
wrong(OutboxProblem *p, const OutboxKindOption *o, const char *what)
{
	return OutboxProblemSet(p, ERRCODE_INVALID_PARAMETER_VALUE,
							psprintf("destination option \"%s\" must be %s", o->name, what),
							NULL);
}

/* A string value of o: its bytes within bounds, no control characters. */
static bool
check_string(const OutboxKindOption *o, const JsonbValue *v, int64 min, int64 max,
			 OutboxProblem *p)
{
	if (v->val.string.len > max)
		return OutboxProblemSet(p, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
								psprintf("destination option \"%s\" is longer than %lld bytes",
										 o->name, (long long) max),
								NULL);
	if (v->val.string.len < min)
		return wrong(p, o, min == 1 ? "a string that is not empty" :
					 psprintf("a string of at least %lld bytes", (long long) min));
	for (int i = 0; i < v->val.string.len; i++)
	{
		unsigned char c = (unsigned char) v->val.string.val[i];

		if (c < 0x20 || c == 0x7f)
			return wrong(p, o, "a string without control characters");
	}
	return true;
}

/*
 * The value of an integer option: a JSON number with no fraction, within
 * int64. Its text as numeric_out writes it (no exponent), as PostgreSQL's
 * own jsonb-to-bigint cast would read it but without an ERROR.
 */
static bool
integer_value(const JsonbValue *v, int64 *out)
{
	char	   *text;
	char	   *end;
	char	   *dot;

	if (v->type != jbvNumeric)
		return false;
	text = DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(v->val.numeric)));
	if ((dot = strchr(text, '.')) != NULL)
	{
		/* 5.0 is 5; 5.5 is not an integer */
		for (const char *c = dot + 1; *c; c++)
			if (*c != '0')
				return false;
		*dot = '\0';
	}
	errno = 0;
	*out = strtoi64(text, &end, 10);
	return errno == 0 && *end == '\0' && end != text;
}

/* One declared option's value. */
static bool
check_value(const OutboxKindOption *o, const JsonbValue *v, OutboxProblem *p)
{
	int64		n;

	switch (o->type)
	{
		case OUTBOX_OPTION_STRING:
			if (v->type != jbvString)
				return wrong(p, o, "a string");
			return check_string(o, v, o->min, o->max, p);
		case OUTBOX_OPTION_INTEGER:
			if (!integer_value(v, &n) || n < o->min || n > o->max)
				return wrong(p, o, psprintf("an integer from %lld to %lld",
											(long long) o->min, (long long) o->max));
			return true;
		case OUTBOX_OPTION_BOOLEAN:
			if (v->type != jbvBool)
				return wrong(p, o, "true or false");
			return true;
		case OUTBOX_OPTION_STRINGS:
			{
				JsonbIterator *it;
				JsonbValue	e;
				JsonbIteratorToken tok;
				int64		count = 0;
				char	   *what = psprintf("an array of %lld to %lld strings",
											(long long) o->min, (long long) o->max);

				if (v->type != jbvBinary || !JsonContainerIsArray(v->val.binary.data) ||
					JsonContainerIsScalar(v->val.binary.data))
					return wrong(p, o, what);
				it = JsonbIteratorInit(v->val.binary.data);
				while ((tok = JsonbIteratorNext(&it, &e, true)) != WJB_DONE)
				{
					if (tok != WJB_ELEM)
						continue;
					if (e.type != jbvString)
						return wrong(p, o, what);
					if (!check_string(o, &e, 1, OUTBOX_MAX_OPTION_STRING_BYTES, p))
						return false;
					count++;
				}
				if (count < o->min || count > o->max)
					return wrong(p, o, what);
				return true;
			}
	}
	return wrong(p, o, "valid");
}

/*
 * Checks a destination's options (the jsonb of outbox_destinations.options,
 * detoasted) against kind's list: a JSON object of at most
 * OUTBOX_MAX_OPTIONS_BYTES (54000), each key an option of kind (22023,
 * naming it if it is a valid name, with the kind's list in the detail),
 * each value of its type and bounds (22023; 54000 for a string over its
 * length), every required option present (23514). Returns true, or false
 * with *p; never quotes a value. From the validation trigger, in any
 * backend; exported for a module that tests a kind's list.
 */
bool
OutboxKindOptionsCheck(const OutboxDestinationKind *kind, Jsonb *options, OutboxProblem *p)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	const OutboxKindOption *o = NULL;

	if (!JB_ROOT_IS_OBJECT(options))
		return OutboxProblemSet(p, ERRCODE_INVALID_PARAMETER_VALUE,
								pstrdup("destination options must be a JSON object"),
								pstrdup("Write '{}' for none."));
	if (VARSIZE(options) > OUTBOX_MAX_OPTIONS_BYTES)
		return OutboxProblemSet(p, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
								psprintf("destination options are larger than %d bytes",
										 OUTBOX_MAX_OPTIONS_BYTES),
								NULL);
	it = JsonbIteratorInit(&options->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
		{
			o = option_by_name(kind, v.val.string.val, v.val.string.len);
			if (o != NULL)
				continue;
			if (option_name_valid(v.val.string.val, v.val.string.len))
				return OutboxProblemSet(p, ERRCODE_INVALID_PARAMETER_VALUE,
										psprintf("\"%.*s\" is not an option of %s",
												 v.val.string.len, v.val.string.val,
												 kind->description),
										options_detail(kind));
			return OutboxProblemSet(p, ERRCODE_INVALID_PARAMETER_VALUE,
									psprintf("destination options hold a key that is not an option of %s",
											 kind->description),
									options_detail(kind));
		}
		if (tok == WJB_VALUE && !check_value(o, &v, p))
			return false;
	}
	if (kind->options != NULL)
		for (o = kind->options; o->name != NULL; o++)
			if (o->required &&
				getKeyJsonValueFromContainer(&options->root, o->name, strlen(o->name), NULL) == NULL)
				return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
										psprintf("destination option \"%s\" is required for %s",
												 o->name, kind->description),
										NULL);
	return true;
}

/*
 * The options of a destination row, or NULL if the row type has none (a
 * 1.1 table under a 1.2 library, before the update).
 */
static Jsonb *
row_options(const OutboxDestinationRow *row)
{
	bool		isnull;
	Datum		d;

	if (SPI_fnumber(row->desc, "options") <= 0)
		return NULL;
	d = OutboxDestinationColumn(row, "options", &isnull);
	return isnull ? NULL : DatumGetJsonbP(d);
}

/* option name's value in row, of type want, or NULL */
static JsonbValue *
option_value(const OutboxDestinationRow *row, const char *name, enum jbvType want)
{
	Jsonb	   *options = row_options(row);
	JsonbValue *v;

	if (options == NULL || !JB_ROOT_IS_OBJECT(options))
		return NULL;
	v = getKeyJsonValueFromContainer(&options->root, name, strlen(name), NULL);
	return v != NULL && v->type == want ? v : NULL;
}

char *
OutboxDestinationOptionText(const OutboxDestinationRow *row, const char *name)
{
	JsonbValue *v = option_value(row, name, jbvString);

	return v ? pnstrdup(v->val.string.val, v->val.string.len) : NULL;
}

bool
OutboxDestinationOptionInt(const OutboxDestinationRow *row, const char *name, int64 *value)
{
	JsonbValue *v = option_value(row, name, jbvNumeric);

	return v != NULL && integer_value(v, value);
}

bool
OutboxDestinationOptionBool(const OutboxDestinationRow *row, const char *name, bool *value)
{
	JsonbValue *v = option_value(row, name, jbvBool);

	if (v != NULL)
		*value = v->val.boolean;
	return v != NULL;
}

bool
OutboxDestinationOptionStrings(const OutboxDestinationRow *row, const char *name,
							   char ***out, int *n)
{
	JsonbValue *v = option_value(row, name, jbvBinary);
	JsonbIterator *it;
	JsonbValue	e;
	JsonbIteratorToken tok;
	int			size;

	*out = NULL;
	*n = 0;
	if (v == NULL || !JsonContainerIsArray(v->val.binary.data) ||
		JsonContainerIsScalar(v->val.binary.data))
		return false;
	size = JsonContainerSize(v->val.binary.data);
	*out = palloc(sizeof(char *) * Max(size, 1));
	it = JsonbIteratorInit(v->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &e, true)) != WJB_DONE)
		if (tok == WJB_ELEM && e.type == jbvString && *n < size)
			(*out)[(*n)++] = pnstrdup(e.val.string.val, e.val.string.len);
	return true;
}

/*
 * Whether option name differs between row and the row before its UPDATE
 * (for OutboxDestinationColumnChanged): set or unset, or another value.
 */
bool
OutboxDestinationOptionChanged(const OutboxDestinationRow *row, const char *name)
{
	OutboxDestinationRow old = *row;
	Jsonb	   *now_opts = row_options(row);
	Jsonb	   *old_opts;
	JsonbValue *a = NULL;
	JsonbValue *b = NULL;

	old.tuple = row->old_tuple;
	old_opts = row_options(&old);
	if (now_opts != NULL && JB_ROOT_IS_OBJECT(now_opts))
		a = getKeyJsonValueFromContainer(&now_opts->root, name, strlen(name), NULL);
	if (old_opts != NULL && JB_ROOT_IS_OBJECT(old_opts))
		b = getKeyJsonValueFromContainer(&old_opts->root, name, strlen(name), NULL);
	if (a == NULL || b == NULL)
		return (a == NULL) != (b == NULL);
	return compareJsonbContainers(&JsonbValueToJsonb(a)->root,
								  &JsonbValueToJsonb(b)->root) != 0;
}
