/*-------------------------------------------------------------------------
 *
 * kafka_stub.c
 *	  The Kafka kind in a build without it (make with_kafka=no): its
 *	  description for the validation trigger, which then refuses its
 *	  destinations. The kind has no column and no SQL function of its own.
 *
 * src/kinds/kafka/stub/kafka_stub.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "destination.h"

/* what the registry tells the validation trigger of the kind left out */
extern const OutboxKindLeftOut OutboxKafkaLeftOut;

const OutboxKindLeftOut OutboxKafkaLeftOut = {
	.name = "kafka",
	.description = "a Kafka topic",
	.target_column = "bootstrap_servers",
	.own_columns = (const OutboxKindColumn[]) {{NULL}},
};
