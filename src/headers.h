/*-------------------------------------------------------------------------
 *
 * headers.h
 *	  What an HTTP header of an event or a destination may be.
 *
 * src/headers.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_HEADERS_H
#define OUTBOX_HEADERS_H

#include "fmgr.h"
#include "utils/jsonb.h"

/* One header of a headers object; name and value are NUL-terminated. */
typedef struct OutboxHeader
{
	char	   *name;
	char	   *value;
} OutboxHeader;

extern bool OutboxHeaderNameValid(const char *name, size_t len);
extern bool OutboxHeaderValueValid(const char *value, size_t len);
extern int	OutboxHeaderList(Jsonb *headers, OutboxHeader **list);

extern Datum _outbox_valid_headers(PG_FUNCTION_ARGS);

#endif							/* OUTBOX_HEADERS_H */
