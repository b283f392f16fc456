/*-------------------------------------------------------------------------
 *
 * admission.c
 *	  Which claimed events a claim takes: the relay's memory budget
 *	  (OUTBOX_RELAY_BYTES), one destination's share of the in-flight set,
 *	  the room its kind has, and the events to be sent alone.
 *
 * The claim locks its rows (queue.c), decodes them one by one
 * (claim_decode.c), and decides here whether each is taken: within the
 * relay's memory budget, within one destination's share of the in-flight
 * set and the room its kind has, and not with others if it is to be sent
 * alone (OutboxClaim says what each limit means). Events left out are
 * freed at once and stay pending, unchanged: their rows are unlocked when
 * the claim's transaction ends. The limits that need no body are applied
 * before prepare builds one, which may take 128 MB: a body is not built
 * only to be thrown away.
 *
 * Everything here runs in the claim's transaction with SPI connected, in
 * the relay worker or a backend calling outbox_relay(), in the memory
 * context the events are claimed into.
 *
 * src/admission.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"

#include "admission.h"
#include "claim_decode.h"
#include "destination.h"
#include "kind_registry.h"
#include "envelope.h"

/*
 * How many events of one destination a claim put in flight, and how many
 * its kind had room for when the claim first met it.
 */
typedef struct DestTaken
{
	const char *name;
	int			n;
	int			room;			/* -1: no limit */
} DestTaken;

/*
 * The entry of ev's destination in *taken (a List of DestTaken), made at
 * the first event of it: its room is what its kind can take now (room,
 * see destination.h), less the events of it in holding, whose outcome the
 * caller holds unrecorded: they are still in flight.
 */
static DestTaken *
dest_entry(List **taken, const OutboxEvent *ev, List *holding)
{
	ListCell   *lc;
	DestTaken  *t;

	foreach(lc, *taken)
	{
		t = lfirst(lc);
		if (strcmp(t->name, ev->dest.name) == 0)
			return t;
	}
	t = palloc(sizeof(DestTaken));
	t->name = ev->dest.name;
	t->n = 0;
	t->room = OutboxKindRoom(ev);
	if (t->room >= 0)
	{
		foreach(lc, holding)
		{
			const OutboxEvent *h = lfirst(lc);

			if (h->dest.name != NULL && strcmp(h->dest.name, t->name) == 0)
				t->room--;
		}
		t->room = Max(t->room, 0);
	}
	*taken = lappend(*taken, t);
	return t;
}

/*
 * Whether decoded event ev, which would go in flight, may fit the relay's
 * memory budget with used bytes already taken, before its body is built:
 * false only if the largest its envelope can be (OutboxEnvelopeBound),
 * twice, does not fit. An event that will not go in flight (no
 * destination, an error, a kind that sends at COMMIT, an envelope over
 * its limit) always may.
 */
static bool
fits_before_prepare(OutboxEvent *ev, Size used)
{
	Size		bound;

	if (ev->error != NULL || ev->dest.name == NULL || ev->payload == NULL ||
		ev->dest.kind->send_point != OUTBOX_SEND_AFTER_COMMIT)
		return true;
	/* kept in the event: prepare checks the limit with it, without a second walk */
	bound = OutboxEventEnvelopeBound(ev);
	/* over the limit: prepare dead-letters it, without building anything */
	return bound > OUTBOX_MAX_ENVELOPE_BYTES ||
		used + 2 * bound <= OUTBOX_RELAY_BYTES;
}

/* Frees what a decoded event left out of the claim holds, and zeroes it. */
static void
leave_out(OutboxEvent *e)
{
	if (e->body != NULL)
		pfree(e->body);
	if (e->payload != NULL)
		pfree(e->payload);
	memset(e, 0, sizeof(OutboxEvent));
}

/*
 * Whether decoded event e, whose columns take cost bytes, may be prepared by
 * the limits that need no body: to be sent alone, its kind's room, its
 * destination's share, the memory budget by the bound of its envelope.
 * If not, sets the flag of the limit in adm. If so, sets *t to the entry
 * of its destination when it would go in flight, else to NULL.
 */
static bool
may_prepare(OutboxEvent *e, Size cost, OutboxAdmission *adm, DestTaken **t)
{
	DestTaken  *dt = NULL;

	if (adm->leave_alone && e->cut_off_attempts >= OUTBOX_ALONE_AFTER &&
		e->error == NULL && e->dest.name != NULL &&
		e->dest.kind->send_point == OUTBOX_SEND_AFTER_COMMIT)
	{
		/* sent in a claim of its own, with nothing else in flight */
		adm->alone_left = true;
		return false;
	}
	if (e->error == NULL && e->dest.name != NULL &&
		e->dest.kind->send_point == OUTBOX_SEND_AFTER_COMMIT)
		dt = dest_entry(&adm->taken, e, adm->holding);
	if (dt != NULL && dt->room >= 0 && dt->n >= dt->room)
	{
		/* its kind could not start it: it would wait there, its clock running */
		adm->kind_limited = true;
		return false;
	}
	if (dt != NULL && adm->per_dest > 0 && dt->n >= adm->per_dest)
	{
		/* the rest of this destination's backlog waits for the next claim */
		adm->dest_limited = true;
		return false;
	}
	if (adm->held > 0 && !fits_before_prepare(e, adm->held + cost))
	{
		/* not built only to be thrown away: it is left until room is made */
		adm->budget_limited = true;
		return false;
	}
	*t = dt;
	return true;
}

/*
 * Whether prepared event e, whose columns and body take cost bytes, fits
 * the memory budget: one that goes in flight only if the events in flight
 * then cost no more than OUTBOX_RELAY_BYTES, or none is held; any event
 * but the claim's first only if the claim's own cost stays within it.
 */
static bool
fits_after_prepare(const OutboxEvent *e, Size cost, const OutboxAdmission *adm, bool first)
{
	bool		fits = true;

	if (OutboxEventGoesInFlight(e))
		fits = adm->held + cost <= OUTBOX_RELAY_BYTES || adm->held == 0;
	if (fits && !first && adm->bytes + cost > OUTBOX_RELAY_BYTES)
		fits = false;
	return fits;
}

/* What admission made of one decoded event. */
typedef enum AdmitResult
{
	ADMIT_TAKEN,				/* in the claim, with its cost */
	ADMIT_LEFT,					/* left out and freed: it stays pending */
	ADMIT_FULL					/* left out, and the claim's own cost has
								 * reached the budget: no more events */
} AdmitResult;

/*
 * Takes decoded event e, whose columns take cost bytes, into the claim, or
 * leaves it out (see OutboxClaim). An event to be fanned out is taken as
 * it is, to be replaced by its rows; one that is not its key's turn is
 * taken without a body, to be held; one the limits admit is prepared and
 * counted against them. first: it would be the claim's first event.
 */
static AdmitResult
admit_one(OutboxEvent *e, Size cost, OutboxPrepareFn prepare, OutboxAdmission *adm,
		  bool first)
{
	DestTaken  *t = NULL;

	if (e->fan_out)
	{
		/* replaced by its rows, which later claims take (fan_out.c) */
		e->cost = 0;
		return ADMIT_TAKEN;
	}
	if (e->blocked_by != 0)
	{
		/* not its key's turn: held, nothing built (OutboxHold) */
		if (e->payload != NULL)
			pfree(e->payload);
		e->payload = NULL;
		e->cost = 0;
		return ADMIT_TAKEN;
	}
	if (!may_prepare(e, cost, adm, &t))
	{
		leave_out(e);
		return ADMIT_LEFT;
	}
	cost += prepare(e);
	if (!fits_after_prepare(e, cost, adm, first))
	{
		/* its body alone can be 128 MB: gone now, not with the claim */
		adm->budget_limited = true;
		leave_out(e);
		return adm->bytes >= OUTBOX_RELAY_BYTES ? ADMIT_FULL : ADMIT_LEFT;
	}
	e->cost = cost;
	adm->bytes += cost;
	if (OutboxEventGoesInFlight(e))
	{
		adm->held += cost;
		Assert(t != NULL);
		t->n++;
	}
	return ADMIT_TAKEN;
}

/*
 * Decodes the nrows claimed rows in tt and prepares those the limits
 * admit (see OutboxClaim) into ev[0..] (nrows zeroed entries), in the
 * current memory context; returns how many, and sets adm's flags for the
 * limits that left events out. prepare builds an event's body and returns
 * its bytes. Interruptible between events. Caller is the claim
 * (OutboxClaim), in its transaction with SPI connected, with tt its
 * claimed rows; an ERROR in decoding or in prepare aborts the claim.
 */
int
OutboxAdmit(SPITupleTable *tt, OutboxEvent *ev, int nrows, OutboxPrepareFn prepare,
			OutboxAdmission *adm)
{
	TupleDesc	desc = tt->tupdesc;
	OutboxDecoding dd = {.desc = NULL, .secrets = adm->secrets, .decoded = NULL};
	int			n = 0;

	for (int i = 0; i < nrows; i++)
	{
		OutboxEvent *e = &ev[n];
		Size		cost;
		AdmitResult r;

		CHECK_FOR_INTERRUPTS();
		cost = OutboxDecodeEvent(tt->vals[i], desc, e, &dd);
		r = admit_one(e, cost, prepare, adm, n == 0);
		if (r == ADMIT_TAKEN)
			n++;
		else if (r == ADMIT_FULL)
			break;
	}
	OutboxDecodingEnd(&dd);
	return n;
}
