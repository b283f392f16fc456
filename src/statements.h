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
 * How the rows of a statement may be reached, whatever the statistics say
 * (see OutboxStatementPlan). The planner's choice, or:
 *   OUTBOX_PLAN_KEYED   no sequential or bitmap scan and no sort: rows are
 *                       found by TID or by an index, in its order
 *   OUTBOX_PLAN_BY_TID  by TID only, not by an index either, and all in
 *                       one TID scan: a statement that joins its rows to
 *                       a batch's values (unnest of arrays) also names the
 *                       TIDs as "ctid = ANY (array)", and the join is a
 *                       hash join, not a nested loop of one TID scan per
 *                       row (each such scan asks the kernel for the
 *                       table's size, an lseek per row). A subquery
 *                       that yields the TIDs in an index's order, with
 *                       a LIMIT, still walks that index: every way is
 *                       disabled then, and the planner takes the one
 *                       with the fewest disabled steps (a scan would
 *                       need a sort besides)
 */
typedef enum OutboxPlanPath
{
	OUTBOX_PLAN_ANY = 0,
	OUTBOX_PLAN_KEYED,
	OUTBOX_PLAN_BY_TID
} OutboxPlanPath;

/*
 * A statement whose text names the extension's schema as %1$s. Declare one
 * as a static variable with the first fields set (path: OUTBOX_PLAN_ANY if
 * left out); the rest is the per-process cache that OutboxStatementPlan
 * keeps.
 */
typedef struct OutboxStatement
{
	const char *sql;			/* %1$s: the schema, quoted */
	int			nargs;
	const Oid  *argtypes;
	int			cursor_options; /* for SPI_prepare_cursor */
	OutboxPlanPath path;		/* needs CURSOR_OPT_GENERIC_PLAN unless ANY */

	/* cache */
	SPIPlanPtr	plan;
	Oid			nspoid;			/* schema the plan was prepared for */
	uint64		generation;		/* of namespace changes, when prepared */
} OutboxStatement;

extern SPIPlanPtr OutboxStatementPlan(OutboxStatement *stmt, Oid nspoid);
extern char *OutboxStatementText(const OutboxStatement *stmt, Oid nspoid);

#endif							/* OUTBOX_STATEMENTS_H */
