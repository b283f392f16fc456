/*
 * kind_check.c - a test module for the destination-kind interface: loaded
 * into a backend of a server that preloads outbox (whose symbols are then
 * global), it hands outbox's OutboxKindCheck kind tables that lack one
 * callback or another, as a kind's author could write them, and returns
 * what the check says. Built by test/t/048_kind_interface.pl.
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"

#include "destination.h"
#include "kind_registry.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(kind_check);

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
