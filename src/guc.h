/*-------------------------------------------------------------------------
 *
 * guc.h
 *	  The relay's outbox.* settings (each destination kind defines its own,
 *	  in its file).
 *
 * src/guc.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_GUC_H
#define OUTBOX_GUC_H

extern char *outbox_databases;
extern int	outbox_relays_per_database;
extern int	outbox_max_destination_stats;
extern char *outbox_traceparent;
extern char *outbox_tracestate;
extern int	outbox_batch_size;

/* the largest outbox.batch_size, and outbox_relay()'s batch_size */
/*
 * The largest outbox.max_destination_stats: rows of about 600 bytes each
 * (health.c), so 60 MB of shared memory at most.
 */
#define OUTBOX_MAX_DESTINATION_STATS_LIMIT 100000
#define OUTBOX_MAX_BATCH_SIZE 10000
extern int	outbox_poll_interval;
extern int	outbox_max_attempts;
extern int	outbox_backoff_base;
extern int	outbox_backoff_max;
extern int	outbox_retention;
extern int	outbox_inbox_retention;
extern int	outbox_purge_batch_size;
extern int	outbox_purge_delay;
extern int	outbox_horizon_warning;
extern int	outbox_purge_interval;

extern void OutboxDefineGucs(void);

#endif							/* OUTBOX_GUC_H */
