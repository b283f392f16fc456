/*-------------------------------------------------------------------------
 *
 * bullmq_int.h
 *	  What the BullMQ kind's files share: a destination's decoded options
 *	  and the schema BullMQ's migrations installed (bullmq_schema.c).
 *
 * src/kinds/bullmq/bullmq_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_BULLMQ_INT_H
#define OUTBOX_BULLMQ_INT_H

#include "fmgr.h"
#include "utils/jsonb.h"

#include "headers.h"

/*
 * The BullMQ major whose PostgreSQL schema this kind calls: the ledger's
 * largest min_client_version must be this (BullMQ's own rule for its
 * clients, assertSchemaCompatibility in its migrator), and add_job must
 * have the arguments below. BULLMQ_KNOWN_SCHEMA_VERSIONS names the ledger
 * versions of the BullMQ release the tests pin (test/node/package.json),
 * for messages: a later minor of the same major may add versions, which
 * BullMQ's rule accepts, and so does this kind's.
 */
#define BULLMQ_MAJOR 6
#define BULLMQ_KNOWN_SCHEMA_VERSIONS "1 to 11 (BullMQ 6.7)"
#define BULLMQ_DEFAULT_SCHEMA "bullmq"

/* add_job's arguments, in order (BullMQ's migration 0002_functions) */
#define BULLMQ_ADD_JOB_NARGS 15

/* A destination's options, decoded (bullmq.c). */
typedef struct BullmqDestOptions
{
	char	   *schema;
	char	   *queue;			/* a name, or a template of one */
	char	   *queue_name;		/* the event's, built by prepare */
	char	   *job_name;		/* NULL: the event type */
	bool		envelope;		/* job data: the envelope, else the payload */
	int32		attempts;		/* BullMQ's attempts; 1 when unset */
	int32		priority;
	int64		delay_ms;
	Jsonb	   *opts;			/* the job options as BullMQ stores them */
	int			lock_timeout_ms;	/* add_job's lock_timeout: timeout_ms */
} BullmqDestOptions;

/*
 * A schema of BullMQ's, as found in this transaction: add_job, its owner,
 * and what its ledger says. NULL error: usable.
 */
typedef struct BullmqSchema
{
	Oid			nsp;
	Oid			add_job;
	Oid			owner;
	int			schema_version; /* max(version) of the ledger */
	int			client_major;	/* max(min_client_version) */
	OutboxProblem problem;		/* sqlstate 0: none */
	/* add_job's call info, kept for the transaction (BullmqSchemaForSend) */
	FmgrInfo	flinfo;
	bool		flinfo_set;
} BullmqSchema;

/* bullmq_schema.c */
extern bool BullmqSchemaCheck(const char *schema, bool for_write, BullmqSchema *out);
extern bool BullmqSchemaWriterCheck(BullmqSchema *s);
extern BullmqSchema *BullmqSchemaForSend(const char *schema);
extern Datum BullmqAddJob(BullmqSchema *s, NullableDatum *args, int lock_timeout_ms);

#endif							/* OUTBOX_BULLMQ_INT_H */
