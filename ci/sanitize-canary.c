/*
 * sanitize-canary.c
 *	  A function with two planted bugs, run once by ci/sanitize.sh in a
 *	  server started exactly like the test servers, to prove that the
 *	  sanitizers are active in it and that their reports reach the report
 *	  directory. A sanitizer job that silently checks nothing passes too.
 *
 * sanitize_canary(8) first shifts an int by 32 bits (UndefinedBehaviorSanitizer
 * reports it and lets the backend continue), then reads one byte past a
 * malloc'ed block (AddressSanitizer reports it and ends the backend). The
 * block is malloc'ed because palloc'ed chunks live inside larger malloc'ed
 * blocks, where AddressSanitizer cannot see an overflow.
 */
#include "postgres.h"

#include "fmgr.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(sanitize_canary);

Datum
sanitize_canary(PG_FUNCTION_ARGS)
{
	int32		n = PG_GETARG_INT32(0);
	int32		shifted;
	volatile char *block;
	char		c;

	shifted = 1 << (n + 24);	/* too large a shift for n >= 8 */
	block = malloc(n);
	if (block == NULL)
		elog(ERROR, "out of memory");
	c = block[n];				/* one past the end */
	free((void *) block);
	PG_RETURN_INT32(shifted + c);
}
