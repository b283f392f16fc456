/*-------------------------------------------------------------------------
 *
 * redact.h
 *	  Text for last_error: printable, credentials masked.
 *
 * src/redact.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_REDACT_H
#define OUTBOX_REDACT_H

extern char *OutboxPrintable(const char *s, size_t len);
extern char *OutboxRedact(const char *s, size_t len);

#endif							/* OUTBOX_REDACT_H */
