/*-------------------------------------------------------------------------
 *
 * sorted_ids.h
 *	  Arrays of event ids sorted with qsort, and the test whether one
 *	  holds an id, shared by the in-flight set (in_flight.c) and the holds
 *	  of ordered destinations (ordering.c). PostgreSQL 17's pg_cmp_s64
 *	  takes values, not pointers, and 15 has none.
 *
 * src/sorted_ids.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_SORTED_IDS_H
#define OUTBOX_SORTED_IDS_H

/* qsort's and bsearch's comparator for int64 values: -1, 0 or 1. */
static inline int
OutboxCmpInt64(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return x < y ? -1 : x > y ? 1 : 0;
}

/* Whether id is among the n values of sorted (in OutboxCmpInt64's order). */
static inline bool
OutboxSortedHas(const int64 *sorted, int n, int64 id)
{
	return n > 0 && bsearch(&id, sorted, n, sizeof(int64), OutboxCmpInt64) != NULL;
}

#endif							/* OUTBOX_SORTED_IDS_H */
