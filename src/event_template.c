/*-------------------------------------------------------------------------
 *
 * event_template.c
 *	  Templates of a kind's target built from an event's fields.
 *
 * A template is literal text with fields in braces: {event_type},
 * {aggregate_type}, {aggregate_id} (orders.{aggregate_id}). A kind checks
 * a template when its destination is written through a sample, where each
 * field stands for "x", against its own rules for the target; and builds
 * the target of each event, refusing one whose template names a field the
 * event does not have. Nothing here quotes a value: the writer chose it.
 *
 * src/event_template.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "event_template.h"

/* The fields of an event a template may name. */
static const char *const template_fields[] = {"event_type", "aggregate_type", "aggregate_id"};

typedef void (*template_emit) (void *arg, const char *literal, size_t len, int field);

/*
 * Walks template t: calls emit for each literal run and each {field},
 * field being the index in template_fields. Returns false with *why on a
 * brace that opens no known field or is not closed.
 */
static bool
template_walk(const char *t, template_emit emit, void *arg, const char **why)
{
	const char *p = t;

	while (*p != '\0')
	{
		const char *brace = strpbrk(p, "{}");
		int			field = -1;

		if (brace == NULL)
		{
			emit(arg, p, strlen(p), -1);
			break;
		}
		if (brace > p)
			emit(arg, p, brace - p, -1);
		if (*brace == '{')
			for (int i = 0; i < (int) lengthof(template_fields); i++)
			{
				size_t		n = strlen(template_fields[i]);

				if (strncmp(brace + 1, template_fields[i], n) == 0 && brace[1 + n] == '}')
				{
					field = i;
					p = brace + n + 2;
					break;
				}
			}
		if (field < 0)
		{
			*why = "a brace opens none of {event_type}, {aggregate_type}, {aggregate_id}, or is not closed";
			return false;
		}
		emit(arg, NULL, 0, field);
	}
	return true;
}

/* template_emit for a sample: each field stands for "x" */
static void
emit_sample(void *arg, const char *literal, size_t len, int field)
{
	if (field >= 0)
		appendStringInfoChar((StringInfo) arg, 'x');
	else
		appendBinaryStringInfo((StringInfo) arg, literal, len);
}

/*
 * Template t with each field standing for "x", appended to sample, for a
 * kind to check against its target's rules; false with *why if t is not a
 * template (see template_walk). Any process; no error.
 */
bool
OutboxTemplateSample(const char *t, StringInfo sample, const char **why)
{
	return template_walk(t, emit_sample, sample, why);
}

typedef struct BuildState
{
	StringInfoData buf;
	const OutboxEvent *ev;
	const char *missing;		/* a field the template names that is NULL */
} BuildState;

/* template_emit for building an event's target */
static void
emit_event(void *arg, const char *literal, size_t len, int field)
{
	BuildState *b = arg;
	const char *value = NULL;

	if (field < 0)
	{
		appendBinaryStringInfo(&b->buf, literal, len);
		return;
	}
	switch (field)
	{
		case 0:
			value = b->ev->event_type;
			break;
		case 1:
			value = b->ev->aggregate_type;
			break;
		case 2:
			value = b->ev->aggregate_id;
			break;
	}
	if (value == NULL || value[0] == '\0')
	{
		if (b->missing == NULL)
			b->missing = template_fields[field];
		return;
	}
	appendStringInfoString(&b->buf, value);
}

/*
 * Template t built from ev's fields, palloc'd; or NULL with *why (t is
 * not a template) or *missing (the first field t names that ev has NULL
 * or empty) set. The result is the kind's to check against its target's
 * rules. In the claim, any memory context; no error.
 */
char *
OutboxTemplateBuild(const char *t, const OutboxEvent *ev, const char **missing, const char **why)
{
	BuildState	b;

	initStringInfo(&b.buf);
	b.ev = ev;
	b.missing = NULL;
	*missing = NULL;
	*why = NULL;
	if (!template_walk(t, emit_event, &b, why))
		return NULL;
	if (b.missing != NULL)
	{
		*missing = b.missing;
		return NULL;
	}
	return b.buf.data;
}
