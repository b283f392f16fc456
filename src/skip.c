/*-------------------------------------------------------------------------
 *
 * skip.c
 *	  What a claim leaves out for now (OutboxSkip), asked of the kinds
 *	  before each claim, and kept by the relay between claims to tell
 *	  whether anything left out has room again.
 *
 * The relay worker asks for it before every claim and compares it with
 * the last one's at every outcome: with a thousand destinations full at
 * once, a comparison name by name against name was a million string
 * comparisons per wait, so the names are sorted and merged instead.
 * Nothing here needs a transaction.
 *
 * src/skip.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "kind_registry.h"
#include "skip.h"

/*
 * Fills *skip with what the kinds ask the claim to leave out now: the
 * kinds that are saturated, and the destinations the others are full for
 * (those of a saturated kind are left out with it: named too, they would
 * make a claim look different, and walk its backlog, as one of them
 * stops being full). The names are the kinds' own (valid until their
 * next call), in lists in the current memory context.
 */
void
OutboxSkipNow(OutboxSkip *skip)
{
	OutboxKindsSkip(&skip->dests, &skip->kinds);
}

/* Whether skip leaves nothing out. */
bool
OutboxSkipNone(const OutboxSkip *skip)
{
	return skip->dests == NIL && skip->kinds == NIL;
}

/* list_sort's comparator for lists of names */
static int
name_cmp(const ListCell *a, const ListCell *b)
{
	return strcmp(lfirst(a), lfirst(b));
}

/*
 * Whether every name of sorted_sub (sorted with name_cmp) is in list:
 * O((m + n) log n), not O(m n).
 */
static bool
names_within(List *sorted_sub, List *list)
{
	List	   *sorted;
	int			j = 0;
	bool		within = true;
	ListCell   *lc;

	if (sorted_sub == NIL)
		return true;
	sorted = list_copy(list);
	list_sort(sorted, name_cmp);
	foreach(lc, sorted_sub)
	{
		int			c = 1;

		while (j < list_length(sorted) && (c = strcmp(list_nth(sorted, j), lfirst(lc))) < 0)
			j++;
		within = j < list_length(sorted) && c == 0;
		if (!within)
			break;
	}
	list_free(sorted);
	return within;
}

/*
 * Whether skip leaves out everything kept does (and perhaps more); kept
 * was made by OutboxSkipKeep, whose lists are sorted once, as kept.
 */
bool
OutboxSkipCovers(const OutboxSkip *skip, const OutboxSkip *kept)
{
	return names_within(kept->kinds, skip->kinds) && names_within(kept->dests, skip->dests);
}

/* A sorted copy of a list of names, in the current memory context. */
static List *
copy_names(List *names)
{
	List	   *copy = NIL;
	ListCell   *lc;

	foreach(lc, names)
		copy = lappend(copy, pstrdup(lfirst(lc)));
	list_sort(copy, name_cmp);
	return copy;
}

/*
 * Replaces *kept (NIL lists, or a copy this made) by a copy of skip in
 * TopMemoryContext, its names sorted, to be compared with later ones
 * (OutboxSkipCovers).
 */
void
OutboxSkipKeep(OutboxSkip *kept, const OutboxSkip *skip)
{
	MemoryContext old;

	list_free_deep(kept->dests);
	list_free_deep(kept->kinds);
	old = MemoryContextSwitchTo(TopMemoryContext);
	kept->dests = copy_names(skip->dests);
	kept->kinds = copy_names(skip->kinds);
	MemoryContextSwitchTo(old);
}

/* names (char *) as a text[] Datum, in the current memory context. */
Datum
OutboxSkipArray(List *names)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(list_length(names), 1));
	int			n = 0;
	ListCell   *lc;

	foreach(lc, names)
		elems[n++] = CStringGetTextDatum((char *) lfirst(lc));
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
}
