/*-------------------------------------------------------------------------
 *
 * journal.h
 *	  The journal of events in flight (outbox_in_flight).
 *
 * src/journal.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_JOURNAL_H
#define OUTBOX_JOURNAL_H

#include "event.h"
#include "start_log.h"

extern void OutboxJournal(OutboxEvent **events, int n, int64 run, int64 claim, int relay);
extern void OutboxJournalDone(const int64 *claims, int n, int64 run);
/* A journal row: a relay's run and the claim's number in it. */
typedef struct OutboxJournalKey
{
	int64		run;
	int64		claim;
} OutboxJournalKey;

extern void OutboxReleaseJournal(const int64 *live, int nlive, const int64 *own, int nown,
								 const OutboxStartLogs *logs, const OutboxJournalKey *only,
								 uint64 *counted, uint64 *alone);
extern int	OutboxJournalKeys(const int64 *live, int nlive, const int64 *own, int nown,
							  OutboxJournalKey **keys);
extern void OutboxJournalDrop(const OutboxJournalKey *key);
extern void OutboxLockJournal(void);

#endif							/* OUTBOX_JOURNAL_H */
