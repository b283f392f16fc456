/*-------------------------------------------------------------------------
 *
 * jetstream_publish.c
 *	  The relay's side of publishing through a JetStream connection: its
 *	  waiting events built into messages and queued for its thread, the
 *	  outcomes the threads recorded collected, and what a connection that
 *	  libnats closed for good leaves waiting for a PubAck taken back.
 *
 * Each message is entered in the connection's in-flight hash before its
 * thread can publish it, and leaves it with its outcome: the count of
 * messages outstanding (at most the connection's cap) is what bounds the
 * ring the threads record outcomes in.
 *
 * Runs on the relay's own thread; jetstream_conn.c decides when
 * (JetStreamServiceConn), jetstream_thread.c publishes.
 *
 * src/kinds/jetstream/jetstream_publish.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "destination.h"

#include "jetstream_int.h"

/*
 * Takes from c's waiting events, in order, those its room allows (c->cap
 * outstanding at most) whose time limit is not over (the caller fails
 * those, unpublished); returns them, or NIL.
 */
static List *
take_waiting(JsConn *c, TimestampTz now)
{
	List	   *batch = NIL;

	while (!dlist_is_empty(&c->waiting) && c->outstanding + list_length(batch) < c->cap &&
		   dlist_head_element(JsWaiting, node, &c->waiting)->deadline > now)
	{
		JsWaiting  *w = dlist_container(JsWaiting, node, dlist_pop_head_node(&c->waiting));

		c->nwaiting--;
		batch = lappend(batch, w);
	}
	return batch;
}

/*
 * The message for w's event, for c's thread to publish, entered in c's
 * in-flight hash; or NULL, the event's outcome set and the event in
 * *done, when its subject or its message cannot be built.
 */
static JsPublish *
message_for(JsConn *c, JsWaiting *w, TimestampTz now, List **done)
{
	OutboxEvent *ev = w->ev;
	char	   *error = NULL;
	char	   *subject = JetStreamEventSubject(ev, &error);
	natsMsg    *m;
	JsPublish  *p;
	JsInFlight *f;
	bool		found;

	if (subject == NULL)
	{
		JetStreamFail(ev, error, true);
		c->live--;
		*done = lappend(*done, ev);
		return NULL;
	}
	m = JetStreamBuildMessage(ev, subject);
	p = m != NULL ? malloc(sizeof(JsPublish)) : NULL;
	if (p == NULL)
	{
		if (m != NULL)
		{
			natsMsg_Destroy(m);
			JetStreamFail(ev, pstrdup("out of memory"), false);
		}
		pfree(subject);
		c->live--;
		*done = lappend(*done, ev);
		return NULL;
	}
	p->next = NULL;
	p->msg = m;
	/* at least 1 ms: libnats sets no limit at all for 0 */
	p->max_wait = Max((w->deadline - now + 999) / 1000, 1);
	strlcpy(p->msg_id, ev->event_id, sizeof(p->msg_id));
	f = hash_search(c->in_flight, &m, HASH_ENTER, &found);
	f->ev = ev;
	f->subject = MemoryContextStrdup(c->cxt, subject);
	c->outstanding++;
	pfree(subject);
	return p;
}

/* Appends the messages head..tail to c's queue, and wakes its thread. */
static void
queue_for_thread(JsConn *c, JsPublish *head, JsPublish *tail)
{
	pthread_mutex_lock(&c->mu);
	if (c->queue_tail != NULL)
		c->queue_tail->next = head;
	else
		c->queue = head;
	c->queue_tail = tail;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->mu);
}

/*
 * Queues c's waiting events for its thread while there is room: each
 * message is built here, noted in the start log, and entered in the
 * in-flight hash before the thread can publish it (its PubAck can come at
 * once). Events whose message cannot be built go to *done.
 */
void
JetStreamPublishWaiting(JsConn *c, List **done)
{
	TimestampTz now = GetCurrentTimestamp();
	List	   *batch = take_waiting(c, now);
	ListCell   *lc;
	JsPublish  *head = NULL;
	JsPublish  *tail = NULL;

	if (batch == NIL)
		return;
	foreach(lc, batch)
		OutboxStartLogNote(((JsWaiting *) lfirst(lc))->ev);
	OutboxStartLogFlush();

	foreach(lc, batch)
	{
		JsPublish  *p = message_for(c, lfirst(lc), now, done);

		if (p == NULL)
			continue;
		if (tail != NULL)
			tail->next = p;
		else
			head = p;
		tail = p;
	}
	list_free_deep(batch);
	if (head != NULL)
		queue_for_thread(c, head, tail);
}

/* Forgets in-flight entry f of c (found by key), its outcome collected. */
static void
forget_in_flight(JsConn *c, JsInFlight *f)
{
	natsMsg    *key = f->msg;

	c->outstanding--;
	pfree(f->subject);
	hash_search(c->in_flight, &key, HASH_REMOVE, NULL);
}

/* Collects the outcomes c's threads recorded; events with one go to *done. */
void
JetStreamCollectAcks(JsKindState *ks, JsConn *c, List **done)
{
	JsAck	   *copy;
	int			n;

	pthread_mutex_lock(&c->mu);
	n = c->nacks;
	if (n == 0)
	{
		pthread_mutex_unlock(&c->mu);
		return;
	}
	copy = palloc(sizeof(JsAck) * n);
	for (int i = 0; i < n; i++)
		copy[i] = c->acks[(c->ack_head + i) % c->cap];
	c->ack_head = (c->ack_head + n) % c->cap;
	c->nacks = 0;
	pthread_mutex_unlock(&c->mu);

	for (int i = 0; i < n; i++)
	{
		JsInFlight *f = hash_search(c->in_flight, &copy[i].msg, HASH_FIND, NULL);

		if (f != NULL)
		{
			if (f->ev != NULL)
			{
				JetStreamAckOutcome(ks, f->ev, &copy[i], f->subject, c);
				c->live--;
				*done = lappend(*done, f->ev);
			}
			forget_in_flight(c, f);
		}
		natsMsg_Destroy(copy[i].msg);
	}
	pfree(copy);
}

/*
 * Takes back from libnats the messages of c's closed connection that wait
 * for a PubAck, which will not come, and fails their events. (The ones
 * still queued for the thread fail when it publishes them.)
 */
void
JetStreamTakeBack(JsConn *c, List **done)
{
	natsMsgList pending;
	jsCtx	   *js;

	/* the thread keeps the context until the relay asks it to stop */
	pthread_mutex_lock(&c->mu);
	js = c->js;
	pthread_mutex_unlock(&c->mu);
	if (js == NULL || js_PublishAsyncGetPendingList(&pending, js) != NATS_OK)
		return;
	for (int i = 0; i < pending.Count; i++)
	{
		natsMsg    *key = pending.Msgs[i];
		JsInFlight *f = hash_search(c->in_flight, &key, HASH_FIND, NULL);

		if (f == NULL)
			continue;
		if (f->ev != NULL)
		{
			JetStreamFail(f->ev, psprintf("the connection to NATS at %s was closed before the PubAck came (the message may be stored: the retry carries the same Nats-Msg-Id)",
										  c->servers_text), false);
			c->live--;
			*done = lappend(*done, f->ev);
		}
		forget_in_flight(c, f);
	}
	natsMsgList_Destroy(&pending);
}
