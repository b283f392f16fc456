/*-------------------------------------------------------------------------
 *
 * rabbitmq_conn.c
 *	  A RabbitMQ destination's connection, as the relay drives it: made,
 *	  its frames read, messages published, time limits kept, closed.
 *
 * One connection per destination, one channel in confirm mode on it. A
 * connection is made on a thread of its own (rabbitmq_thread.c), then is
 * the relay's alone: its socket is in the relay's one wait, and its frames
 * are read without waiting (amqp_simple_wait_frame_noblock with a zero
 * timeout, which also sends and checks heartbeats), so that nothing the
 * broker does or fails to do holds the relay. rabbitmq-c's publish waits
 * until the message is written: a message is published only when the
 * socket's send buffer has room for it, and nothing while the broker has
 * blocked the connection (connection.blocked, which the relay asks for).
 * A message larger than the room goes out alone once the buffer is empty,
 * under a guard that cuts the write at SIGTERM, a cancel or the event's
 * time limit (guarded_publish).
 *
 * Confirms come in the order of the delivery tags, which the channel
 * counts from 1 for each publish (RabbitMQ's publisher confirms); a
 * basic.return for a mandatory message nobody took comes before that
 * message's basic.ack, and names it by its message_id in the content
 * header that follows it.
 *
 * Relay thread only; no transaction needed.
 *
 * src/kinds/rabbitmq/rabbitmq_conn.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#ifdef __linux__
#include <linux/sockios.h>
#endif

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timeout.h"

#include "rabbitmq_int.h"

/* the retries of a failed connection: 0.5 s, doubled up to 30 s */
#define RMQ_RETRY_MIN_MS 500
#define RMQ_RETRY_MAX_MS 30000
/* events published in one go, between start log flushes */
#define RMQ_PUBLISH_BATCH 64
/* frames read in one go; more are read at the next collect, at once */
#define RMQ_FRAMES_PER_READ 1000

/* The broker's code and words, for messages: "404 NOT_FOUND - no exchange..." */
static char *
broker_words(uint16_t code, amqp_bytes_t text)
{
	return psprintf("%u %s", code, OutboxRedact(text.bytes, text.len));
}

/* Hands ev back with its outcome set, in done. */
static void
hand_back(RmqConn *c, OutboxEvent *ev, List **done)
{
	*done = lappend(*done, ev);
	c->live--;
}

/* Hands back the event of w, a waiting entry of c (its outcome set), and frees w. */
static void
hand_back_waiting(RmqConn *c, RmqWaiting *w, List **done)
{
	hand_back(c, w->ev, done);
	dlist_delete(&w->node);
	c->nwaiting--;
	pfree(w);
}

/* Fails every waiting event of c with error, and hands them back. */
static void
fail_waiting(RmqConn *c, const char *error, List **done)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &c->waiting)
	{
		RmqWaiting *w = dlist_container(RmqWaiting, node, iter.cur);

		RabbitmqFail(w->ev, pstrdup(error), false);
		hand_back_waiting(c, w, done);
	}
}

/*
 * The number in text right after prefix, or -1: decimal digits only, at
 * most PG_INT64_MAX (a broker's words are not trusted to be in range).
 */
static int64
number_after(const char *text, const char *prefix)
{
	const char *p = strstr(text, prefix);
	char	   *end;
	int64		v;

	if (p == NULL)
		return -1;
	p += strlen(prefix);
	/* strtoi64 would take a sign or spaces first */
	if (*p < '0' || *p > '9')
		return -1;
	errno = 0;
	v = strtoi64(p, &end, 10);
	return errno == 0 ? v : -1;
}

/*
 * A channel closed with code and text: if it is RabbitMQ's 406 for a
 * message over its max_message_size ("message size N is larger than
 * configured max size M", rabbit_channel's check of each publish, 3.10
 * and 4.x), notes M, so that the events over it are dead-lettered
 * (too_large) rather than retried into the same close.
 */
static void
note_broker_max_size(RmqConn *c, uint16_t code, amqp_bytes_t text)
{
	char	   *words;
	int64		max;

	if (code != AMQP_PRECONDITION_FAILED)
		return;
	words = pnstrdup(text.bytes, text.len);
	max = number_after(words, "is larger than configured max size ");
	if (max > 0 && number_after(words, "message size ") > max)
	{
		c->broker_max_size = max;
		if (c->broker_max_words != NULL)
			pfree(c->broker_max_words);
		c->broker_max_words = MemoryContextStrdup(c->cxt, broker_words(code, text));
		c->size_check = true;
	}
	pfree(words);
}

/*
 * Whether ev's message is over the broker's max_message_size as c knows
 * it; if so, fails ev for good, with the broker's words: no retry can
 * help, and each would close the channel again.
 */
static bool
too_large(RmqConn *c, OutboxEvent *ev)
{
	size_t		len;

	if (c->broker_max_size <= 0)
		return false;
	len = strlen(ev->body);
	if ((int64) len <= c->broker_max_size)
		return false;
	RabbitmqFail(ev, psprintf("the message of %zu bytes is larger than RabbitMQ's max_message_size (" INT64_FORMAT "), which the broker gave when it closed the channel: %s",
							  len, c->broker_max_size, c->broker_max_words), true);
	return true;
}

/* Frees u and the text it holds. */
static void
free_unconfirmed(RmqUnconfirmed *u)
{
	if (u->return_text != NULL)
		pfree(u->return_text);
	pfree(u);
}

/*
 * Ends c's connection. why NULL: a polite close (connection.close, its
 * answer not waited for), for an idle connection;
 * otherwise the connection failed: its socket is closed at once, every
 * unconfirmed event fails with why (the broker may have stored it: the
 * retry carries the same message_id), and a new attempt waits.
 */
void
RabbitmqClose(RmqConn *c, const char *why, List **done)
{
	dlist_mutable_iter iter;

	if (c->phase == RMQ_CONNECTING)
	{
		RabbitmqConnectAbandon(c->connect);
		c->connect = NULL;
	}
	if (c->phase == RMQ_READY)
	{
		if (why == NULL)
		{
			/* said, not waited for: the broker ends it on its side */
			amqp_connection_close_t m;

			memset(&m, 0, sizeof(m));
			m.reply_code = AMQP_REPLY_SUCCESS;
			m.reply_text = amqp_cstring_bytes("closed by the relay");
			(void) amqp_send_method(c->amqp, 0, AMQP_CONNECTION_CLOSE_METHOD, &m);
		}
		amqp_destroy_connection(c->amqp);
		c->amqp = NULL;
		c->ks->generation++;
	}
	dlist_foreach_modify(iter, &c->unconfirmed)
	{
		RmqUnconfirmed *u = dlist_container(RmqUnconfirmed, node, iter.cur);

		if (u->ev != NULL)
		{
			if (!too_large(c, u->ev))
				RabbitmqFail(u->ev, psprintf("%s, before RabbitMQ confirmed the message (it may be stored: the retry carries the same message_id)",
											 why ? why : "the connection was closed"), false);
			hand_back(c, u->ev, done);
		}
		dlist_delete(iter.cur);
		free_unconfirmed(u);
	}
	c->nunconfirmed = 0;
	c->in_return = false;
	c->blocked = false;
	c->want_write = false;
	if (why == NULL)
		c->phase = RMQ_IDLE;
	else
	{
		if (c->phase == RMQ_READY)
			ereport(LOG,
					(errmsg("outbox destination \"%s\": the connection to RabbitMQ ended: %s",
							c->name, why)));
		c->failures++;
		c->phase = RMQ_BACKING_OFF;
		c->retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												  Min(RMQ_RETRY_MIN_MS << Min(c->failures - 1, 10),
													  RMQ_RETRY_MAX_MS));
		if (c->last_failure != NULL)
			pfree(c->last_failure);
		c->last_failure = MemoryContextStrdup(c->cxt, why);
	}
}

/*
 * A confirm for tag (and every earlier one if multiple): ack, or nack.
 * An acked message that came back with a basic.return was routed to no
 * queue: that is a failure too.
 */
static void
confirm(RmqConn *c, uint64 tag, bool multiple, bool ack, List **done)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &c->unconfirmed)
	{
		RmqUnconfirmed *u = dlist_container(RmqUnconfirmed, node, iter.cur);

		if (u->tag > tag)
			break;
		if (u->tag < tag && !multiple)
			continue;
		if (u->ev != NULL)
		{
			const RmqDestOptions *o = RMQ_OPTIONS(u->ev);

			if (ack && !u->returned)
				u->ev->ok = true;
			else if (u->returned)
				RabbitmqFail(u->ev, psprintf("RabbitMQ returned the message: no queue is bound to exchange \"%s\" for routing key \"%s\" (%s)",
											 c->exchange[0] ? c->exchange : "(the default exchange)",
											 OutboxPrintable(o->key, strlen(o->key)), u->return_text), false);
			else
				RabbitmqFail(u->ev, psprintf("RabbitMQ refused the message (basic.nack) for exchange \"%s\" and routing key \"%s\": a queue may be at its max-length with overflow reject-publish",
											 c->exchange[0] ? c->exchange : "(the default exchange)",
											 OutboxPrintable(o->key, strlen(o->key))), false);
			hand_back(c, u->ev, done);
		}
		dlist_delete(iter.cur);
		c->nunconfirmed--;
		free_unconfirmed(u);
	}
}

/* The content header of a returned message: marks its event by message_id. */
static void
returned_header(RmqConn *c, amqp_frame_t *f)
{
	amqp_basic_properties_t *p = f->payload.properties.decoded;
	dlist_iter	it;

	c->return_body_left = f->payload.properties.body_size;
	if (c->return_body_left == 0)
		c->in_return = false;
	if (p == NULL || !(p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG))
		return;
	dlist_foreach(it, &c->unconfirmed)
	{
		RmqUnconfirmed *u = dlist_container(RmqUnconfirmed, node, it.cur);

		/* the oldest with that id: a given-up copy is returned first */
		if (!u->returned && strlen(u->message_id) == p->message_id.len &&
			memcmp(u->message_id, p->message_id.bytes, p->message_id.len) == 0)
		{
			u->returned = true;
			u->return_text = MemoryContextStrdup(c->cxt, c->return_text);
			return;
		}
	}
}

/*
 * A method frame from the broker. Returns false if it ended the
 * connection (RabbitmqClose done).
 */
static bool
method_frame(RmqConn *c, amqp_frame_t *f, List **done)
{
	amqp_method_t *m = &f->payload.method;

	switch (m->id)
	{
		case AMQP_BASIC_ACK_METHOD:
			{
				amqp_basic_ack_t *a = m->decoded;

				confirm(c, a->delivery_tag, a->multiple, true, done);
				break;
			}
		case AMQP_BASIC_NACK_METHOD:
			{
				amqp_basic_nack_t *n = m->decoded;

				confirm(c, n->delivery_tag, n->multiple, false, done);
				break;
			}
		case AMQP_BASIC_RETURN_METHOD:
			{
				amqp_basic_return_t *r = m->decoded;

				c->in_return = true;
				if (c->return_text != NULL)
					pfree(c->return_text);
				c->return_text = MemoryContextStrdup(c->cxt,
													 broker_words(r->reply_code, r->reply_text));
				break;
			}
		case AMQP_CONNECTION_BLOCKED_METHOD:
			c->blocked = true;
			break;
		case AMQP_CONNECTION_UNBLOCKED_METHOD:
			c->blocked = false;
			break;
		case AMQP_CHANNEL_CLOSE_METHOD:
			{
				amqp_channel_close_t *cl = m->decoded;
				amqp_channel_close_ok_t ok;

				(void) amqp_send_method(c->amqp, 1, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
				note_broker_max_size(c, cl->reply_code, cl->reply_text);
				RabbitmqClose(c, psprintf("RabbitMQ closed the channel: %s",
										  broker_words(cl->reply_code, cl->reply_text)), done);
				return false;
			}
		case AMQP_CONNECTION_CLOSE_METHOD:
			{
				amqp_connection_close_t *cl = m->decoded;
				amqp_connection_close_ok_t ok;

				(void) amqp_send_method(c->amqp, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
				RabbitmqClose(c, psprintf("RabbitMQ closed the connection: %s",
										  broker_words(cl->reply_code, cl->reply_text)), done);
				return false;
			}
		default:
			break;
	}
	return true;
}

/*
 * Reads the frames that are there, without waiting, RMQ_FRAMES_PER_READ
 * at most (c->more then: the rest may be in rabbitmq-c's buffer, where no
 * socket event tells of it): confirms, returns, closes, blocks. rabbitmq-c
 * refuses a frame over the negotiated frame_max, sends a heartbeat when
 * one is due, and ends the connection when the broker's are missing.
 */
void
RabbitmqReadFrames(RmqConn *c, List **done)
{
	struct timeval zero = {0, 0};

	c->last_io = GetCurrentTimestamp();
	c->more = false;
	for (int n = 0;; n++)
	{
		amqp_frame_t f;
		int			status;

		/* a broker that never stops sending does not keep the relay here */
		if (n == RMQ_FRAMES_PER_READ)
		{
			c->more = true;
			break;
		}
		status = amqp_simple_wait_frame_noblock(c->amqp, &f, &zero);
		if (status == AMQP_STATUS_TIMEOUT)
			break;
		if (status != AMQP_STATUS_OK)
		{
			RabbitmqClose(c, psprintf("the connection was lost: %s", amqp_error_string2(status)), done);
			return;
		}
		if (f.frame_type == AMQP_FRAME_METHOD)
		{
			if (!method_frame(c, &f, done))
				return;
		}
		else if (f.frame_type == AMQP_FRAME_HEADER && c->in_return)
			returned_header(c, &f);
		else if (f.frame_type == AMQP_FRAME_BODY && c->in_return)
		{
			c->return_body_left -= Min(c->return_body_left, f.payload.body_fragment.len);
			if (c->return_body_left == 0)
				c->in_return = false;
		}
	}
	if (!amqp_frames_enqueued(c->amqp))
		amqp_maybe_release_buffers(c->amqp);
}

/*
 * How many bytes more can be written to c's socket without waiting: what
 * half its send buffer has left beside what is queued there (*empty: none
 * is, so that a message larger than that may go out alone). Linux's
 * SIOCOUTQ; no limit where there is none.
 */
static size_t
send_room(RmqConn *c, bool *empty)
{
#ifdef SIOCOUTQ
	int			queued;
	int			sndbuf;
	socklen_t	len = sizeof(sndbuf);

	*empty = true;
	if (ioctl(c->fd, SIOCOUTQ, &queued) != 0 ||
		getsockopt(c->fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &len) != 0)
		return SIZE_MAX;
	*empty = queued == 0;
	return queued < sndbuf / 2 ? (size_t) (sndbuf / 2 - queued) : 0;
#else
	*empty = true;
	return SIZE_MAX;
#endif
}

/*
 * Corks c's socket while a batch is written (on), uncorks it after (off):
 * rabbitmq-c sends each message's frames with MSG_MORE but its body
 * without, a packet per message, and a broker woken for each reads
 * fewer messages per wake-up. Corked, the kernel sends full segments, and
 * what is left when the cork is taken out (Linux's TCP_CORK). Nothing if
 * the connection has no socket any more or where there is no TCP_CORK.
 */
static void
cork(RmqConn *c, bool on)
{
#ifdef TCP_CORK
	int			v = on ? 1 : 0;

	if (c->phase == RMQ_READY && c->fd != PGINVALID_SOCKET)
		(void) setsockopt(c->fd, IPPROTO_TCP, TCP_CORK, &v, sizeof(v));
#endif
}

/*
 * The guard of a publish that may wait. rabbitmq-c writes a message whole
 * before it returns, with no time limit, and polls again when a signal
 * interrupts it: while a broker stops reading in the middle of a large
 * message (flow control, an alarm, a frozen process), neither SIGTERM nor
 * the event's time limit would end the wait. For as long as such a
 * publish lasts, a timer looks every RMQ_GUARD_TICK_MS whether the relay
 * is to stop (die() or a cancel set their flag) or the limit has passed,
 * and then shuts the socket down, in the SIGALRM handler (shutdown(2) is
 * async-signal-safe, POSIX): the write fails and the connection ends as
 * any broken one does.
 */
#define RMQ_GUARD_TICK_MS 100
static volatile sig_atomic_t guarded_fd = -1;
static volatile sig_atomic_t guard_cut = false;
static TimestampTz guard_deadline;
static TimeoutId guard_timeout = MAX_TIMEOUTS;

/* The timer's handler: runs in the SIGALRM handler. */
static void
guard_tick(void)
{
	int			fd = guarded_fd;

	if (fd >= 0 && !guard_cut &&
		(ProcDiePending || QueryCancelPending || GetCurrentTimestamp() >= guard_deadline))
	{
		guard_cut = true;
		(void) shutdown(fd, SHUT_RDWR);
	}
}

/*
 * RabbitmqPublish under the guard above, cut after timeout_ms at most (ms).
 * Sets *cut when the guard ended the write on its time limit. Relay
 * thread (or a backend's outbox_relay()), with PostgreSQL's timeouts set
 * up, as in any process that ran InitPostgres.
 */
static int
guarded_publish(RmqConn *c, OutboxEvent *ev, char **problem, bool *cut)
{
	volatile int status = AMQP_STATUS_OK;

	if (guard_timeout == MAX_TIMEOUTS)
		guard_timeout = RegisterTimeout(USER_TIMEOUT, guard_tick);
	guard_deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), c->timeout_ms);
	guard_cut = false;
	guarded_fd = c->fd;
	enable_timeout_every(guard_timeout,
						 TimestampTzPlusMilliseconds(GetCurrentTimestamp(), RMQ_GUARD_TICK_MS),
						 RMQ_GUARD_TICK_MS);
	PG_TRY();
	{
		status = RabbitmqPublish(c, ev, problem);
	}
	PG_FINALLY();
	{
		disable_timeout(guard_timeout, false);
		guarded_fd = -1;
	}
	PG_END_TRY();
	*cut = guard_cut && !ProcDiePending && !QueryCancelPending;
	return status;
}

/*
 * Picks the next events of c to publish into batch (RMQ_PUBLISH_BATCH at
 * most), in order, while the unconfirmed messages stay under the cap and
 * the socket has room; returns how many. *room: false when one was left
 * for lack of room; *alone: batch[0] is larger than the room, and goes
 * out alone (the socket's buffer is empty). Each is sized by the bound of
 * its frames taken when it came (RmqWaiting.size).
 */
static int
pick_batch(RmqConn *c, RmqWaiting **batch, bool *room, bool *alone)
{
	int			n = 0;
	size_t		bytes = 0;
	dlist_iter	it;
	bool		empty;
	size_t		free_bytes = send_room(c, &empty);

	*room = true;
	*alone = false;
	dlist_foreach(it, &c->waiting)
	{
		RmqWaiting *w = dlist_container(RmqWaiting, node, it.cur);

		if (n == RMQ_PUBLISH_BATCH || c->nunconfirmed + n >= c->cap)
			break;
		if (bytes + w->size > free_bytes && !(n == 0 && empty))
		{
			*room = false;
			break;
		}
		bytes += w->size;
		batch[n++] = w;
		if (bytes > free_bytes)
		{
			*alone = true;
			break;
		}
	}
	return n;
}

/*
 * Fails for good, and hands back, the waiting events of c over the
 * broker's max_message_size (too_large): once when the broker has given
 * it, and once after an event over it is taken (c->size_check), whatever
 * the connection's state, so that none is noted as sent or waits to time
 * out as if it could go.
 */
static void
drop_too_large(RmqConn *c, List **done)
{
	dlist_mutable_iter iter;

	c->size_check = false;
	dlist_foreach_modify(iter, &c->waiting)
	{
		RmqWaiting *w = dlist_container(RmqWaiting, node, iter.cur);

		if (too_large(c, w->ev))
			hand_back_waiting(c, w, done);
	}
}

/*
 * Publishes what waits, while the destination's unconfirmed messages are
 * under its cap, the broker has not blocked the connection and the
 * socket has room: notes each in the start log before any goes out.
 */
static void
publish_waiting(RmqConn *c, List **done)
{
	if (c->blocked)
		c->want_write = false;	/* connection.unblocked wakes the relay */
	while (c->phase == RMQ_READY && c->nwaiting > 0 && !c->blocked)
	{
		RmqWaiting *batch[RMQ_PUBLISH_BATCH];
		bool		room;
		bool		alone;
		int			n = pick_batch(c, batch, &room, &alone);

		c->want_write = !room && n == 0;
		if (n == 0)
			return;
		for (int i = 0; i < n; i++)
			OutboxStartLogNote(batch[i]->ev);
		OutboxStartLogFlush();
		if (n > 1)
			cork(c, true);
		for (int i = 0; i < n && c->phase == RMQ_READY; i++)
		{
			OutboxEvent *ev = batch[i]->ev;
			RmqUnconfirmed *u;
			char	   *problem;
			int			status;
			bool		cut = false;

			dlist_delete(&batch[i]->node);
			c->nwaiting--;
			pfree(batch[i]);
			status = alone ? guarded_publish(c, ev, &problem, &cut) :
				RabbitmqPublish(c, ev, &problem);
			if (problem != NULL)
			{
				/* not sent: rabbitmq-c would end the connection; this one fails alone */
				RabbitmqFail(ev, problem, false);
				hand_back(c, ev, done);
				continue;
			}
			/* a failed publish fails it with the rest, in RabbitmqClose below */
			u = MemoryContextAllocZero(c->cxt, sizeof(RmqUnconfirmed));
			u->tag = c->next_tag++;
			u->ev = ev;
			strlcpy(u->message_id, ev->event_id, sizeof(u->message_id));
			/* its confirm has the whole time limit, whatever it waited */
			u->deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), c->timeout_ms);
			dlist_push_tail(&c->unconfirmed, &u->node);
			c->nunconfirmed++;
			if (cut)
				RabbitmqClose(c, psprintf("RabbitMQ did not read a message of %zu bytes within %d ms",
										  strlen(ev->body), c->timeout_ms), done);
			else if (status != AMQP_STATUS_OK)
				RabbitmqClose(c, psprintf("cannot publish: %s", amqp_error_string2(status)), done);
		}
		if (n > 1)
			cork(c, false);
		c->last_io = GetCurrentTimestamp();
		/* frames a publish read into rabbitmq-c's buffer: no socket event tells */
		if (c->phase == RMQ_READY &&
			(amqp_frames_enqueued(c->amqp) || amqp_data_in_buffer(c->amqp)))
			c->more = true;
	}
}

/*
 * Ends what is past its time limit: an unconfirmed message ends the
 * connection (a broker that confirms nothing in time is not waited on
 * further, and its window is freed); a waiting event fails with why it
 * could not be published.
 */
static void
expire(RmqConn *c, TimestampTz now, List **done)
{
	if (c->nunconfirmed > 0 &&
		dlist_head_element(RmqUnconfirmed, node, &c->unconfirmed)->deadline <= now)
		RabbitmqClose(c, psprintf("no confirm from RabbitMQ within %d ms", c->timeout_ms), done);
	while (c->nwaiting > 0)
	{
		RmqWaiting *w = dlist_head_element(RmqWaiting, node, &c->waiting);

		if (w->deadline > now)
			break;
		RabbitmqFail(w->ev,
					 c->phase == RMQ_CONNECTING ?
					 psprintf("not connected to RabbitMQ within %d ms: the connection is still being made",
							  c->timeout_ms) :
					 c->phase != RMQ_READY ?
					 psprintf("not connected to RabbitMQ within %d ms: %s", c->timeout_ms,
							  c->last_failure ? c->last_failure : "no attempt yet") :
					 c->blocked ?
					 psprintf("RabbitMQ blocked the connection (a resource alarm) for %d ms", c->timeout_ms) :
					 psprintf("not published within %d ms: the connection's send buffer stayed full",
							  c->timeout_ms), false);
		hand_back_waiting(c, w, done);
	}
}

/* c's connection is made: conn, on which the relay publishes. */
static void
connected(RmqConn *c, amqp_connection_state_t conn, TimestampTz now)
{
	if (c->failures > 0)
		ereport(LOG,
				(errmsg("outbox destination \"%s\": connected to RabbitMQ again", c->name)));
	c->amqp = conn;
	c->fd = amqp_get_sockfd(conn);
	c->phase = RMQ_READY;
	c->failures = 0;
	c->next_tag = 1;
	c->last_io = now;
	c->heartbeat_ms = amqp_get_heartbeat(conn) * 1000;
	c->ks->generation++;
}

/* c's connection could not be made: its waiting events fail at once with why. */
static void
connect_failed(RmqConn *c, char *error, List **done)
{
	c->phase = RMQ_IDLE;
	RabbitmqClose(c, error, done);
	fail_waiting(c, psprintf("cannot connect to RabbitMQ: %s", error), done);
}

/*
 * Moves c along: reads what came, ends what is late, starts a connection
 * if events wait, takes it once made (failing the waiting events at once
 * if it could not be), publishes.
 */
void
RabbitmqService(RmqConn *c, List **done)
{
	TimestampTz now = GetCurrentTimestamp();

	if (c->phase == RMQ_READY)
		RabbitmqReadFrames(c, done);
	if (c->size_check)
		drop_too_large(c, done);
	expire(c, now, done);
	if (c->nwaiting > 0 &&
		(c->phase == RMQ_IDLE || (c->phase == RMQ_BACKING_OFF && now >= c->retry_at)))
	{
		const char *why;

		c->connect = RabbitmqConnectStart(c, &why);
		if (c->connect != NULL)
			c->phase = RMQ_CONNECTING;
		else
			connect_failed(c, pstrdup(why), done);
	}
	if (c->phase == RMQ_CONNECTING)
	{
		amqp_connection_state_t conn;
		char	   *error;

		if (RabbitmqConnectDone(c->connect, &conn, &error))
		{
			c->connect = NULL;
			if (conn != NULL)
				connected(c, conn, now);
			else
				connect_failed(c, error, done);
		}
	}
	publish_waiting(c, done);
}

/*
 * A string of the options that decide a connection: a change makes a new
 * one (max_message_bytes too: changing it forgets the broker's limit).
 */
static char *
fingerprint(const RmqDestOptions *o)
{
	return psprintf("%s\n%s\n%s\n%s\n%s\n%d\n%d\n%s\n" INT64_FORMAT, o->urls, o->vhost, o->user,
					o->password, o->exchange, o->max_unconfirmed, o->timeout_ms,
					o->ca_file ? o->ca_file : "", o->max_message_bytes);
}

/*
 * The connection for ev's destination, made (not connected) if it has
 * none with its options; an older one of the destination is retired.
 */
RmqConn *
RabbitmqConnFor(RmqKindState *ks, OutboxEvent *ev)
{
	const RmqDestOptions *o = RMQ_OPTIONS(ev);
	char	   *fp = fingerprint(o);
	RmqConn    *c = NULL;
	ListCell   *lc;
	MemoryContext old;
	const char *why;
	char	  **urls;

	foreach(lc, ks->conns)
	{
		RmqConn    *x = lfirst(lc);

		if (strcmp(x->name, ev->dest.name) != 0)
			continue;
		if (!x->retiring && strcmp(x->fingerprint, fp) == 0)
			c = x;
		else
			x->retiring = true;
	}
	if (c != NULL)
		return c;
	if (ks->cxt == NULL)
		ks->cxt = AllocSetContextCreate(TopMemoryContext, "outbox RabbitMQ connections",
										ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(ks->cxt);
	c = palloc0(sizeof(RmqConn));
	c->ks = ks;
	c->cxt = AllocSetContextCreate(ks->cxt, "outbox RabbitMQ connection", ALLOCSET_SMALL_SIZES);
	MemoryContextSwitchTo(c->cxt);
	c->name = pstrdup(ev->dest.name);
	c->fingerprint = pstrdup(fp);
	c->phase = RMQ_IDLE;
	c->fd = PGINVALID_SOCKET;
	dlist_init(&c->waiting);
	dlist_init(&c->unconfirmed);
	/* checked when the destination was written */
	urls = RabbitmqSplitUrls(o->urls, &c->nurls, &why);
	c->urls = urls;
	if (urls == NULL)
		c->nurls = 0;
	c->vhost = pstrdup(o->vhost);
	c->user = pstrdup(o->user);
	c->password = pstrdup(o->password);
	c->ca_file = o->ca_file ? pstrdup(o->ca_file) : NULL;
	c->exchange = pstrdup(o->exchange);
	c->cap = o->max_unconfirmed;
	c->timeout_ms = o->timeout_ms;
	MemoryContextSwitchTo(ks->cxt);
	ks->conns = lappend(ks->conns, c);
	MemoryContextSwitchTo(old);
	return c;
}

/* Frees c (closed, nothing held). */
void
RabbitmqFreeConn(RmqConn *c)
{
	Assert(c->amqp == NULL && c->nunconfirmed == 0 && c->nwaiting == 0);
	MemoryContextDelete(c->cxt);
	pfree(c);
}
