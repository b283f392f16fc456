/*-------------------------------------------------------------------------
 *
 * jetstream_columns.h
 *	  The JetStream kind's name, description and columns: written once, for
 *	  the kind's table (jetstream.c) and for a build without the kind
 *	  (stub/jetstream_stub.c), which must still refuse them.
 *
 * src/kinds/jetstream/jetstream_columns.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_JETSTREAM_COLUMNS_H
#define OUTBOX_JETSTREAM_COLUMNS_H

#define JETSTREAM_NAME "jetstream"
#define JETSTREAM_DESCRIPTION "a JetStream stream"
#define JETSTREAM_TARGET_COLUMN "nats_servers"
/* its own columns, each NULL in a destination of another kind */
#define JETSTREAM_OWN_COLUMNS \
	{"nats_subject", NULL}, \
	{"nats_stream", NULL}, \
	{"nats_user", NULL}, \
	{"nats_password", NULL}, \
	{"nats_token", NULL}, \
	{"nats_creds_file", NULL}, \
	{"nats_ca_file", NULL}, \
	{NULL}

#endif							/* OUTBOX_JETSTREAM_COLUMNS_H */
