/*
 * kind_check.c - a test module for the destination-kind interface: loaded
 * into a backend of a server that preloads outbox (whose symbols are then
 * global), it hands outbox's OutboxKindCheck kind tables that lack one
 * callback or another, as a kind's author could write them, and returns
 * what the check says (test/t/048_kind_interface.pl). For a kind's
 * options, it declares the list a broker kind's author would write and
 * hands outbox's checks of a declaration (run when the library loads) and
 * of a row's options (run by the validation trigger) lists and values,
 * and reads a destination row's options with the readers a kind decodes
 * them with (test/t/100_kind_options.pl). Built by OutboxTest's
 * kind_check_module.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/typcache.h"

#include "destination.h"
#include "kind_registry.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(kind_check);
PG_FUNCTION_INFO_V1(kind_options_decl);
PG_FUNCTION_INFO_V1(kind_options_check);
PG_FUNCTION_INFO_V1(kind_options_read);

static bool
check(const OutboxDestinationRow *row pg_attribute_unused(), OutboxProblem *p pg_attribute_unused())
{
	return true;
}

static Size
decode(const OutboxDestinationRow *row pg_attribute_unused(), OutboxDestination *dest pg_attribute_unused())
{
	return 0;
}

static Size
prepare(void *state pg_attribute_unused(), OutboxEvent *ev pg_attribute_unused())
{
	return 0;
}

static void
send(void *state pg_attribute_unused(), OutboxEvent *ev pg_attribute_unused())
{
}

static void
enqueue(void *state pg_attribute_unused(), OutboxEvent *ev pg_attribute_unused())
{
}

static List *
collect(void *state pg_attribute_unused())
{
	return NIL;
}

static int
pending(void *state pg_attribute_unused())
{
	return 0;
}

static bool
busy(void *state pg_attribute_unused())
{
	return false;
}

static List *
full(void *state pg_attribute_unused())
{
	return NIL;
}

static uint64
sockets(void *state pg_attribute_unused(), const OutboxWaitSocket **socks, int *n)
{
	*socks = NULL;
	*n = 0;
	return 0;
}

static long
timeout_ms(void *state pg_attribute_unused())
{
	return -1;
}

static void
abandon(void *state pg_attribute_unused())
{
}

static void
socket_ready(void *state pg_attribute_unused(), pgsocket fd pg_attribute_unused(),
			 uint32 events pg_attribute_unused())
{
}

static const OutboxKindColumn no_columns[] = {{NULL}};
static const char *const formats[] = {"envelope", NULL};
static const char *const binary[] = {"envelope", "cloudevents-binary", NULL};
static const char *const unknown[] = {"envelope", "protobuf", NULL};

/*
 * kind_check(variant text) RETURNS text: 'ok' if OutboxKindCheck accepts
 * the table variant names, else its ERROR. Variants: after_commit and
 * at_commit (complete), without_<member> (one left out), sockets_only
 * (sockets without socket_ready), ready_only (the reverse),
 * binary_without_binding, unknown_format.
 */
Datum
kind_check(PG_FUNCTION_ARGS)
{
	char	   *variant = text_to_cstring(PG_GETARG_TEXT_PP(0));
	bool		at_commit = strcmp(variant, "at_commit") == 0 ||
		strcmp(variant, "without_send") == 0;
	OutboxDestinationKind k = {
		.name = "test",
		.description = "a test",
		.target_column = "url",
		.own_columns = no_columns,
		.formats = formats,
		.send_point = at_commit ? OUTBOX_SEND_AT_COMMIT : OUTBOX_SEND_AFTER_COMMIT,
		.check_destination = check,
		.decode = decode,
		.prepare = prepare,
		.send = at_commit ? send : NULL,
		.enqueue = at_commit ? NULL : enqueue,
		.collect = at_commit ? NULL : collect,
		.pending = at_commit ? NULL : pending,
		.busy = at_commit ? NULL : busy,
		.full = at_commit ? NULL : full,
		.timeout_ms = at_commit ? NULL : timeout_ms,
		.abandon = at_commit ? NULL : abandon,
	};

	if (strcmp(variant, "without_send") == 0)
		k.send = NULL;
	else if (strcmp(variant, "without_check_destination") == 0)
		k.check_destination = NULL;
	else if (strcmp(variant, "without_decode") == 0)
		k.decode = NULL;
	else if (strcmp(variant, "without_prepare") == 0)
		k.prepare = NULL;
	else if (strcmp(variant, "without_enqueue") == 0)
		k.enqueue = NULL;
	else if (strcmp(variant, "without_collect") == 0)
		k.collect = NULL;
	else if (strcmp(variant, "without_pending") == 0)
		k.pending = NULL;
	else if (strcmp(variant, "without_busy") == 0)
		k.busy = NULL;
	else if (strcmp(variant, "without_full") == 0)
		k.full = NULL;
	else if (strcmp(variant, "without_timeout_ms") == 0)
		k.timeout_ms = NULL;
	else if (strcmp(variant, "without_abandon") == 0)
		k.abandon = NULL;
	else if (strcmp(variant, "sockets_only") == 0)
		k.sockets = sockets;
	else if (strcmp(variant, "ready_only") == 0)
		k.socket_ready = socket_ready;
	else if (strcmp(variant, "without_formats") == 0)
		k.formats = NULL;
	else if (strcmp(variant, "without_description") == 0)
		k.description = NULL;
	else if (strcmp(variant, "without_target_column") == 0)
		k.target_column = NULL;
	else if (strcmp(variant, "binary_without_binding") == 0)
		k.formats = binary;
	else if (strcmp(variant, "unknown_format") == 0)
		k.formats = unknown;
	OutboxKindCheck(&k);
	PG_RETURN_TEXT_P(cstring_to_text("ok"));
}

/* a queue whose target is its option "queue", as a broker kind declares it */
static const OutboxKindOption queue_options[] = {
	{"queue", OUTBOX_OPTION_STRING, true, 1, 255},
	{"attempts", OUTBOX_OPTION_INTEGER, false, 1, 100},
	{"durable", OUTBOX_OPTION_BOOLEAN, false, 0, 0},
	{"brokers", OUTBOX_OPTION_STRINGS, false, 1, 3},
	{NULL}
};

static const OutboxKindOption bad_name[] = {{"Queue", OUTBOX_OPTION_STRING, true, 1, 9}, {NULL}};
static const OutboxKindOption twice[] = {
	{"queue", OUTBOX_OPTION_STRING, true, 1, 9},
	{"queue", OUTBOX_OPTION_INTEGER, false, 1, 9},
	{NULL}
};
static const OutboxKindOption bounds[] = {{"queue", OUTBOX_OPTION_INTEGER, true, 9, 1}, {NULL}};
static const OutboxKindOption empty_string[] = {{"queue", OUTBOX_OPTION_STRING, true, 0, 9}, {NULL}};
static const OutboxKindOption long_string[] = {{"queue", OUTBOX_OPTION_STRING, true, 1, 8193}, {NULL}};
static const OutboxKindOption optional_target[] = {{"queue", OUTBOX_OPTION_STRING, false, 1, 9}, {NULL}};
static const OutboxKindOption integer_target[] = {{"queue", OUTBOX_OPTION_INTEGER, true, 1, 9}, {NULL}};

static OutboxDestinationKind
test_kind(const OutboxKindOption *options)
{
	OutboxDestinationKind k = {
		.name = "test",
		.description = "a test queue",
		.target_column = "queue",
		.own_columns = no_columns,
		.options = options,
		.formats = formats,
		.send_point = OUTBOX_SEND_AT_COMMIT,
		.check_destination = check,
		.decode = decode,
		.prepare = prepare,
		.send = send,
	};

	return k;
}

/*
 * kind_options_decl(variant text) RETURNS text: 'ok' if OutboxKindCheck
 * accepts the test kind with the option list variant names, else its
 * ERROR.
 */
Datum
kind_options_decl(PG_FUNCTION_ARGS)
{
	char	   *variant = text_to_cstring(PG_GETARG_TEXT_PP(0));
	OutboxDestinationKind k = test_kind(queue_options);

	if (strcmp(variant, "bad_name") == 0)
		k.options = bad_name;
	else if (strcmp(variant, "twice") == 0)
		k.options = twice;
	else if (strcmp(variant, "bounds") == 0)
		k.options = bounds;
	else if (strcmp(variant, "empty_string") == 0)
		k.options = empty_string;
	else if (strcmp(variant, "long_string") == 0)
		k.options = long_string;
	else if (strcmp(variant, "optional_target") == 0)
		k.options = optional_target;
	else if (strcmp(variant, "integer_target") == 0)
		k.options = integer_target;
	else if (strcmp(variant, "none") == 0)
	{
		k.options = NULL;
		k.target_column = "url";
	}
	else if (strcmp(variant, "queue") != 0)
		elog(ERROR, "unknown variant \"%s\"", variant);
	OutboxKindCheck(&k);
	PG_RETURN_TEXT_P(cstring_to_text(OutboxKindTargetIsOption(&k) ? "ok, target in options" : "ok"));
}

/*
 * kind_options_check(options jsonb) RETURNS text: 'ok' if the test queue's
 * list takes options, else the problem as the trigger would raise it:
 * SQLSTATE, message and (detail).
 */
Datum
kind_options_check(PG_FUNCTION_ARGS)
{
	OutboxDestinationKind k = test_kind(queue_options);
	OutboxProblem p;

	if (OutboxKindOptionsCheck(&k, PG_GETARG_JSONB_P(0), &p))
		PG_RETURN_TEXT_P(cstring_to_text("ok"));
	PG_RETURN_TEXT_P(cstring_to_text(psprintf("%s: %s%s%s%s",
											  unpack_sql_state(p.sqlstate), p.message,
											  p.detail ? " (" : "", p.detail ? p.detail : "",
											  p.detail ? ")" : "")));
}

/*
 * kind_options_read(d outbox_destinations) RETURNS text: the test queue's
 * options of row d as the readers return them, and OutboxDestinationText
 * of "queue" (an option) and of "name" (a column).
 */
Datum
kind_options_read(PG_FUNCTION_ARGS)
{
	HeapTupleHeader th = PG_GETARG_HEAPTUPLEHEADER(0);
	HeapTupleData tuple;
	OutboxDestinationRow row = {0};
	StringInfoData s;
	char	   *text;
	int64		n;
	bool		b;
	char	  **list;
	int			count;

	tuple.t_len = HeapTupleHeaderGetDatumLength(th);
	ItemPointerSetInvalid(&tuple.t_self);
	tuple.t_tableOid = InvalidOid;
	tuple.t_data = th;
	row.desc = lookup_rowtype_tupdesc(HeapTupleHeaderGetTypeId(th), HeapTupleHeaderGetTypMod(th));
	row.tuple = &tuple;

	initStringInfo(&s);
	text = OutboxDestinationOptionText(&row, "queue");
	appendStringInfo(&s, "queue=%s", text ? text : "(unset)");
	if (OutboxDestinationOptionInt(&row, "attempts", &n))
		appendStringInfo(&s, " attempts=%lld", (long long) n);
	else
		appendStringInfoString(&s, " attempts=(unset)");
	if (OutboxDestinationOptionBool(&row, "durable", &b))
		appendStringInfo(&s, " durable=%s", b ? "true" : "false");
	else
		appendStringInfoString(&s, " durable=(unset)");
	if (OutboxDestinationOptionStrings(&row, "brokers", &list, &count))
	{
		appendStringInfoString(&s, " brokers=");
		for (int i = 0; i < count; i++)
			appendStringInfo(&s, "%s%s", i ? "," : "", list[i]);
	}
	else
		appendStringInfoString(&s, " brokers=(unset)");
	text = OutboxDestinationText(&row, "queue");
	appendStringInfo(&s, " text(queue)=%s", text ? text : "(unset)");
	appendStringInfo(&s, " text(name)=%s", OutboxDestinationText(&row, "name"));
	ReleaseTupleDesc(row.desc);
	PG_RETURN_TEXT_P(cstring_to_text(s.data));
}
