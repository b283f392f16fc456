/*-------------------------------------------------------------------------
 *
 * statements.h
 *	  Statements prepared once per process that name the extension's schema.
 *
 * src/statements.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_STATEMENTS_H
#define OUTBOX_STATEMENTS_H

#include "executor/spi.h"

/*
 * A statement whose text names the extension's schema as %1$s. Declare one
 * as a static variable with the first four fields set; the rest is the
 * per-process cache that OutboxStatementPlan keeps.
 */
typedef struct OutboxStatement
{
	const char *sql;			/* %1$s: the schema, quoted */
	int			nargs;
	const Oid  *argtypes;
	int			cursor_options; /* for SPI_prepare_cursor */

	/* cache */
	SPIPlanPtr	plan;
	Oid			nspoid;			/* schema the plan was prepared for */
	uint64		generation;		/* of namespace changes, when prepared */
} OutboxStatement;

extern SPIPlanPtr OutboxStatementPlan(OutboxStatement *stmt, Oid nspoid);
extern char *OutboxStatementText(const OutboxStatement *stmt, Oid nspoid);

#endif							/* OUTBOX_STATEMENTS_H */
