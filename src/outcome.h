/*-------------------------------------------------------------------------
 *
 * outcome.h
 *	  Recording the outcomes of attempts, and the retry policy.
 *
 * src/outcome.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_OUTCOME_H
#define OUTBOX_OUTCOME_H

#include "event.h"

extern bool OutboxMarkFailed(OutboxEvent **events, int n);
extern int	OutboxRecordOutcomes(OutboxEvent **events, int n);
extern bool OutboxRecordFailure(OutboxEvent *ev);

#endif							/* OUTBOX_OUTCOME_H */
