/*-------------------------------------------------------------------------
 *
 * registry.c
 *	  The destination kinds this library is built with.
 *
 * The one place that lists the kinds (destination.c reads the list through
 * OutboxKindRegistry). A kind that a build can leave out (make
 * with_<kind>=no, see the Makefile and src/kinds/kinds.list) is listed
 * under its OUTBOX_WITH_<KIND> macro, as libcurl lists each protocol's
 * handler under its CURL_DISABLE_* switch; a destination of a kind that is
 * not built is refused when it is written (validate.c).
 *
 * src/kinds/registry.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "destination.h"
#include "kind_registry.h"

extern const OutboxDestinationKind OutboxHttpKind;
extern const OutboxDestinationKind OutboxNotifyKind;
extern const OutboxDestinationKind OutboxBullmqKind;
#ifdef OUTBOX_WITH_JETSTREAM
extern const OutboxDestinationKind OutboxJetStreamKind;
#else
extern const OutboxKindLeftOut OutboxJetStreamLeftOut;
#endif
#ifdef OUTBOX_WITH_RABBITMQ
extern const OutboxDestinationKind OutboxRabbitmqKind;
#else
extern const OutboxKindLeftOut OutboxRabbitmqLeftOut;
#endif
#ifdef OUTBOX_WITH_KAFKA
extern const OutboxDestinationKind OutboxKafkaKind;
#else
extern const OutboxKindLeftOut OutboxKafkaLeftOut;
#endif

static const OutboxDestinationKind *const kinds[] = {
	&OutboxHttpKind,
	&OutboxNotifyKind,
#ifdef OUTBOX_WITH_JETSTREAM
	&OutboxJetStreamKind,
#endif
	&OutboxBullmqKind,
#ifdef OUTBOX_WITH_RABBITMQ
	&OutboxRabbitmqKind,
#endif
#ifdef OUTBOX_WITH_KAFKA
	&OutboxKafkaKind,
#endif
};

/*
 * The kinds this build left out, as their stubs describe them, so that a
 * destination of one, or a column of one, is refused with a message that
 * says so (validate.c). Ends with NULL.
 */
static const OutboxKindLeftOut *const left_out[] = {
#ifndef OUTBOX_WITH_JETSTREAM
	&OutboxJetStreamLeftOut,
#endif
#ifndef OUTBOX_WITH_RABBITMQ
	&OutboxRabbitmqLeftOut,
#endif
#ifndef OUTBOX_WITH_KAFKA
	&OutboxKafkaLeftOut,
#endif
	NULL
};

/*
 * The kinds built into this library, in a fixed order, and their number in
 * *n. Raises no error; any process.
 */
const OutboxDestinationKind *const *
OutboxKindRegistry(int *n)
{
	*n = lengthof(kinds);
	return kinds;
}

/*
 * The kinds this build left out (make with_<kind>=no), ending with NULL.
 * Raises no error; any process.
 */
const OutboxKindLeftOut *const *
OutboxKindsLeftOut(void)
{
	return left_out;
}
