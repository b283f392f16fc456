/*-------------------------------------------------------------------------
 *
 * kafka_int.h
 *	  What the files of the Kafka kind share: a destination's options, a
 *	  producer (KafkaProducer) with the messages it holds, and the
 *	  functions the files call in one another.
 *
 *   kafka.c           the kind's table and options, the rules of a row
 *                     and of an event, the callbacks
 *   kafka_producer.c  a destination's librdkafka producer: made, fed,
 *                     its delivery reports read, ended
 *
 * librdkafka runs its own threads (one per broker, and more); none of them
 * ever calls into this code. Everything the relay learns (delivery
 * reports, errors, log lines) is an event on the producer's main queue,
 * which the relay polls on its own thread: the queue writes a byte to a
 * pipe when it gets an event, and the pipe's end is in the relay's one
 * wait (wait.c).
 *
 * src/kinds/kafka/kafka_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_KAFKA_INT_H
#define OUTBOX_KAFKA_INT_H

#include <librdkafka/rdkafka.h>

#include "lib/ilist.h"
#include "utils/timestamp.h"

#include "destination.h"
#include "log_limit.h"

/* brokers named in bootstrap_servers, at most */
#define KAFKA_MAX_SERVERS 16
/* a topic's name: Kafka's legal characters, at most 249 bytes (Topic.java) */
#define KAFKA_TOPIC_MAX 249
/* messages produced and not yet reported per destination: default, most */
#define KAFKA_DEFAULT_MAX_OUTSTANDING 10000
#define KAFKA_MAX_OUTSTANDING_LIMIT 100000
/* the delivery time limit by default (ms): message.timeout.ms */
#define KAFKA_DEFAULT_TIMEOUT_MS 30000
/* what a failure's text holds, at most */
#define KAFKA_ERROR_BYTES 512

/* A Kafka destination's options (OutboxDestination.options). */
typedef struct KafkaDestOptions
{
	char	   *servers;		/* bootstrap_servers */
	char	   *topic;			/* a name or a template */
	char	   *key;			/* a template, or NULL: the aggregate's */
	char	   *security_protocol;	/* librdkafka's words, or NULL */
	char	   *sasl_mechanism;
	char	   *sasl_username;
	char	   *sasl_password;
	char	   *ca_file;		/* tls_ca_file, or NULL */
	char	   *compression;	/* compression_type, or NULL */
	int64		linger_ms;		/* -1: librdkafka's default */
	int64		batch_bytes;	/* batch_size; -1: librdkafka's default */
	int64		max_message_bytes;	/* -1: librdkafka's default */
	int			max_outstanding;
	int			timeout_ms;
	Jsonb	   *headers;		/* the destination's own, or NULL */
	/* set by prepare for the event */
	char	   *topic_built;
	char	   *key_built;		/* or NULL: no key */
} KafkaDestOptions;

#define KAFKA_OPTIONS(ev) ((KafkaDestOptions *) (ev)->dest.options)

/*
 * An event taken: waiting to be produced (in waiting), then produced (in
 * in_flight, and the message's opaque) until its delivery report. ev is
 * NULL once the event was given up (abandon): the report is still awaited.
 */
typedef struct KafkaMessage
{
	dlist_node	node;			/* in waiting, in_flight, then reported */
	OutboxEvent *ev;
	/* its delivery report, once in reported */
	rd_kafka_resp_err_t err;
	rd_kafka_msg_status_t status;
} KafkaMessage;

/* A destination's producer, kept across claims. */
typedef struct KafkaProducer
{
	char	   *name;			/* the destination */
	char	   *fingerprint;	/* its settings as one string: a change makes a new one */
	MemoryContext cxt;
	bool		retiring;		/* superseded, unused, or failed fatally */
	rd_kafka_t *rk;				/* NULL: could not be made (why in failure) */
	rd_kafka_queue_t *queue;	/* its main queue: reports, errors, logs */
	int			pipe_fds[2];	/* the queue's wake-up: read end, write end */
	char	   *failure;		/* why it could not be made, or NULL */
	dlist_head	waiting;
	int			nwaiting;
	dlist_head	in_flight;
	int			outstanding;	/* produced, not reported (given-up ones too) */
	dlist_head	reported;		/* reported, outcome not made yet */
	int			live;			/* events taken, outcome not returned */
	int			cap;			/* max_outstanding */
	TimestampTz last_used;
	OutboxLogLimit error_log;	/* librdkafka's errors, logged once a minute */
} KafkaProducer;

/* The kind's state in a process, in TopMemoryContext. */
typedef struct KafkaKindState
{
	MemoryContext cxt;			/* of the producers; NULL until the first */
	List	   *producers;
	uint64		generation;		/* changes whenever the sockets do */
	OutboxWaitSocket *socks;
	int			nsocks;
} KafkaKindState;

/* kafka.c */
extern void KafkaFail(OutboxEvent *ev, char *error, bool permanent);
extern rd_kafka_headers_t *KafkaHeaders(const OutboxEvent *ev);

/* kafka_producer.c */
extern KafkaProducer *KafkaProducerFor(KafkaKindState *ks, OutboxEvent *ev);
extern void KafkaProduceWaiting(KafkaProducer *p, List **done);
extern void KafkaReadQueue(KafkaProducer *p, List **done);
extern void KafkaProducerFree(KafkaProducer *p);
extern void KafkaProducerPurge(KafkaProducer *p);

#endif							/* OUTBOX_KAFKA_INT_H */
