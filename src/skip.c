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

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

/* The names of list, sorted, in a palloc'd array of list_length(list). */
static char **
sorted_names(List *list)
{
	char	  **names = palloc(sizeof(char *) * Max(list_length(list), 1));
	int			n = 0;
	ListCell   *lc;

	foreach(lc, list)
		names[n++] = lfirst(lc);
	qsort(names, n, sizeof(char *), name_cmp);
	return names;
}

/* Whether every name of sub is in list: O((m + n) log n), not O(m n). */
static bool
names_within(List *sub, List *list)
{
	char	  **a;
	char	  **b;
	int			na = list_length(sub);
	int			nb = list_length(list);
	int			j = 0;
	bool		within = true;

	if (na == 0)
		return true;
	a = sorted_names(sub);
	b = sorted_names(list);
	for (int i = 0; i < na && within; i++)
	{
		int			c = 1;

		while (j < nb && (c = strcmp(b[j], a[i])) < 0)
			j++;
		within = j < nb && c == 0;
	}
	pfree(a);
	pfree(b);
	return within;
}

/* Whether skip leaves out everything sub does (and perhaps more). */
bool
OutboxSkipCovers(const OutboxSkip *skip, const OutboxSkip *sub)
{
	return names_within(sub->kinds, skip->kinds) && names_within(sub->dests, skip->dests);
}

static List *
copy_names(List *names)
{
	List	   *copy = NIL;
	ListCell   *lc;

	foreach(lc, names)
		copy = lappend(copy, pstrdup(lfirst(lc)));
	return copy;
}

/*
 * Replaces *kept (NIL lists, or a copy this made) by a copy of skip in
 * TopMemoryContext, to be compared with later ones.
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
