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
#include "utils/array.h"
#include "utils/jsonb.h"

/* One header of a headers object; name and value are NUL-terminated. */
typedef struct OutboxHeader
{
	char	   *name;
	char	   *value;
} OutboxHeader;

/*
 * A rule that a value breaks: the SQLSTATE to raise and a message (and
 * optional detail) that name the field and the rule, never the value.
 * Filled by the checks of headers.c, signature.c and validate.c, raised by
 * the triggers and outbox_emit, and kept in last_error by the relay.
 */
typedef struct OutboxProblem
{
	int			sqlstate;
	char	   *message;
	char	   *detail;			/* or NULL */
} OutboxProblem;

extern bool OutboxProblemSet(OutboxProblem *p, int sqlstate, char *message,
							 char *detail);

extern bool OutboxHeaderNameValid(const char *name, size_t len);
extern bool OutboxHeaderValueValid(const char *value, size_t len);
extern bool OutboxHeaderReserved(const char *name);
extern bool OutboxEventHeaderAllowed(const char *name);
extern int	OutboxHeaderList(Jsonb *headers, OutboxHeader **list);
extern int	OutboxMergeHeaders(Jsonb *dest, Jsonb *event, OutboxHeader **out);
extern bool OutboxHeadersCheck(Jsonb *headers, bool event, OutboxProblem *problem);
extern bool OutboxEventHeadersListCheck(ArrayType *list, OutboxProblem *problem);
extern bool OutboxEventHeaderForwarded(const char *name, char *const *patterns, int n);
extern Jsonb *OutboxForwardedEventHeaders(Jsonb *headers, char *const *patterns, int n);
extern void OutboxRaiseProblem(const OutboxProblem *problem);

extern Datum _outbox_valid_headers(PG_FUNCTION_ARGS);

#endif							/* OUTBOX_HEADERS_H */
