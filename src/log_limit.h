/*-------------------------------------------------------------------------
 *
 * log_limit.h
 *	  At most one log line of a kind per interval, counting the ones left
 *	  out, so that a fault met on every pass cannot flood the server log.
 *
 * src/log_limit.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_LOG_LIMIT_H
#define OUTBOX_LOG_LIMIT_H

#include "utils/timestamp.h"

typedef struct OutboxLogLimit
{
	TimestampTz logged_at;		/* the last line logged; 0: none yet */
	int			left_out;		/* lines left out since */
} OutboxLogLimit;

/*
 * Whether a line may be logged now, interval_ms after the last one; if
 * not, counts it as left out. When it returns true, *left_out is how many
 * were left out before it (for the line's detail), and the count starts
 * again. Process-local; no error.
 */
static inline bool
OutboxLogLimitAllows(OutboxLogLimit *l, int interval_ms, int *left_out)
{
	TimestampTz now = GetCurrentTimestamp();

	if (l->logged_at != 0 && !TimestampDifferenceExceeds(l->logged_at, now, interval_ms))
	{
		l->left_out++;
		return false;
	}
	*left_out = l->left_out;
	l->logged_at = now;
	l->left_out = 0;
	return true;
}

#endif							/* OUTBOX_LOG_LIMIT_H */
