/*-------------------------------------------------------------------------
 *
 * rabbitmq_stub.c
 *	  The RabbitMQ kind in a build without it (make with_rabbitmq=no): its
 *	  description for the validation trigger, which then refuses its
 *	  destinations. The kind has no column and no SQL function of its own.
 *
 * src/kinds/rabbitmq/stub/rabbitmq_stub.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "destination.h"

/* what the registry tells the validation trigger of the kind left out */
extern const OutboxKindLeftOut OutboxRabbitmqLeftOut;

const OutboxKindLeftOut OutboxRabbitmqLeftOut = {
	.name = "rabbitmq",
	.description = "a RabbitMQ exchange",
	.target_column = "urls",
	.own_columns = (const OutboxKindColumn[]) {{NULL}},
};
