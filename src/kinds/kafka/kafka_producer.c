/*-------------------------------------------------------------------------
 *
 * kafka_producer.c
 *	  A Kafka destination's producer, as the relay drives it: made with
 *	  the destination's settings, fed the events that wait, its delivery
 *	  reports read into outcomes, ended.
 *
 * One librdkafka producer per destination, kept across claims and made
 * anew when the destination's settings change. librdkafka connects,
 * batches, retries and orders on its own threads; the relay only calls
 * rd_kafka_producev (which never blocks: the queue is bounded by
 * max_outstanding, below librdkafka's own limit) and polls the producer's
 * main queue, on its own thread, for the reports (the events API: no
 * callback of librdkafka ever runs this code).
 *
 * Runs in the relay worker, or in a backend running outbox_relay().
 *
 * src/kinds/kafka/kafka_producer.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/memutils.h"

#include "kafka_int.h"

/* at exit, how long the producers have to end (ms), threads included */
#define KAFKA_EXIT_WAIT_MS 500
/* a producer's broker errors are logged at most this often (ms) */
#define KAFKA_ERROR_LOG_MS 60000

static void kafka_at_exit(int code, Datum arg);
static void kafka_atexit(void);

/* what kafka_atexit reads: an atexit handler gets no argument */
static volatile bool threads_left = false;
static volatile int exit_code = 0;

/*
 * The settings that make a producer, as one string, each text with its
 * length before it (so that no two sets of settings give one string): a
 * destination whose settings changed gets a new producer.
 */
static char *
fingerprint(const KafkaDestOptions *o)
{
	const char *texts[] = {o->servers, o->security_protocol, o->sasl_mechanism, o->sasl_username,
	o->sasl_password, o->ca_file, o->compression};
	StringInfoData buf;

	initStringInfo(&buf);
	for (size_t i = 0; i < lengthof(texts); i++)
		appendStringInfo(&buf, "%zu:%s|", texts[i] ? strlen(texts[i]) : 0, texts[i] ? texts[i] : "");
	appendStringInfo(&buf, INT64_FORMAT "|" INT64_FORMAT "|" INT64_FORMAT "|%d|%d",
					 o->linger_ms, o->batch_bytes, o->max_message_bytes,
					 o->timeout_ms, o->max_outstanding);
	return buf.data;
}

/*
 * Sets property name of conf to value (if set); false with *failure set
 * (naming the property, never the value) when librdkafka refuses it.
 */
static bool
set(rd_kafka_conf_t *conf, const char *name, const char *value, char **failure)
{
	char		err[256];

	if (value == NULL)
		return true;
	if (rd_kafka_conf_set(conf, name, value, err, sizeof(err)) == RD_KAFKA_CONF_OK)
		return true;
	*failure = psprintf("librdkafka refused its setting %s", name);
	return false;
}

/* Sets an integer property, unless n is -1. */
static bool
set_int(rd_kafka_conf_t *conf, const char *name, int64 n, char **failure)
{
	char		buf[32];

	if (n < 0)
		return true;
	snprintf(buf, sizeof(buf), INT64_FORMAT, n);
	return set(conf, name, buf, failure);
}

/*
 * The producer's settings: the destination's, and the relay's own that no
 * destination changes: acknowledged by every in-sync replica, idempotent,
 * keys partitioned as the Java client does (murmur2), no topic made by
 * producing to it, reports, errors and log lines as events on the main
 * queue. NULL with *failure set when one is refused or tls_ca_file cannot
 * be read (within the destination's time limit, on the relay's thread: a
 * CA file is read when a producer is made, not again while it lives).
 */
static rd_kafka_conf_t *
make_conf(const KafkaDestOptions *o, char **failure)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	bool		ok;
	char		timeout[16];

	snprintf(timeout, sizeof(timeout), "%d", o->timeout_ms);
	ok = set(conf, "bootstrap.servers", o->servers, failure) &&
		set(conf, "client.id", "outbox", failure) &&
		set(conf, "acks", "all", failure) &&
		set(conf, "enable.idempotence", "true", failure) &&
		/* the Java client's: a key goes to the partition Java producers pick */
		set(conf, "partitioner", "murmur2_random", failure) &&
		set(conf, "message.timeout.ms", timeout, failure) &&
		set(conf, "allow.auto.create.topics", "false", failure) &&
		set(conf, "log.queue", "true", failure) &&
		set(conf, "security.protocol", o->security_protocol, failure) &&
		set(conf, "sasl.mechanisms", o->sasl_mechanism, failure) &&
		set(conf, "sasl.username", o->sasl_username, failure) &&
		set(conf, "sasl.password", o->sasl_password, failure) &&
		set(conf, "compression.type", o->compression, failure) &&
		set_int(conf, "linger.ms", o->linger_ms, failure) &&
		set_int(conf, "batch.size", o->batch_bytes, failure) &&
		set_int(conf, "message.max.bytes", o->max_message_bytes, failure);
	if (ok && o->ca_file != NULL)
	{
		struct timespec deadline = OutboxDeadlineIn(o->timeout_ms);
		char		error[256];
		char	   *pem;
		size_t		len;

		/* the file's contents, never its path: the relay reads it */
		ok = OutboxReadFile(o->ca_file, "tls_ca_file", &deadline, &pem, &len, NULL,
							error, sizeof(error));
		if (!ok)
			*failure = pstrdup(error);
		else
		{
			ok = set(conf, "ssl.ca.pem", pem, failure);
			free(pem);
		}
	}
	if (!ok)
	{
		rd_kafka_conf_destroy(conf);
		return NULL;
	}
	rd_kafka_conf_set_events(conf, RD_KAFKA_EVENT_DR | RD_KAFKA_EVENT_ERROR | RD_KAFKA_EVENT_LOG);
	return conf;
}

/*
 * The exit callbacks, registered before the process's first producer.
 * OpenSSL registers its atexit handler when first initialized: that is
 * done first, so that kafka_atexit, registered after it, runs before it.
 */
static void
setup_exit(KafkaKindState *ks)
{
	(void) OPENSSL_init_crypto(0, NULL);
	if (atexit(kafka_atexit) != 0)
		elog(ERROR, "could not register an exit handler for Kafka producers");
	before_shmem_exit(kafka_at_exit, PointerGetDatum(ks));
}

/*
 * Makes p's librdkafka producer, its main queue and the pipe that queue
 * writes to when an event arrives. On failure p->rk stays NULL and
 * p->failure says why: the events that wait fail with it, and the next
 * event makes a producer anew.
 */
static void
make_producer(KafkaProducer *p, const KafkaDestOptions *o)
{
	char		err[512];
	rd_kafka_conf_t *conf = make_conf(o, &p->failure);

	if (conf == NULL)
		return;
	if (pipe2(p->pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0)
	{
		p->failure = psprintf("could not make a pipe: %m");
		rd_kafka_conf_destroy(conf);
		return;
	}
	p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	if (p->rk == NULL)
	{
		p->failure = psprintf("could not make the Kafka producer: %s",
							  OutboxRedact(err, strlen(err)));
		rd_kafka_conf_destroy(conf);
		close(p->pipe_fds[0]);
		close(p->pipe_fds[1]);
		return;
	}
	/* the wake-up first: it is written only when the queue turns non-empty */
	p->queue = rd_kafka_queue_get_main(p->rk);
	rd_kafka_queue_io_event_enable(p->queue, p->pipe_fds[1], "1", 1);
	(void) rd_kafka_set_log_queue(p->rk, NULL);
}

/*
 * The producer of ev's destination with its current settings: an existing
 * one, or a new one (made now). Producers of that destination with other
 * settings are marked retiring, and ended once nothing of theirs is out.
 */
KafkaProducer *
KafkaProducerFor(KafkaKindState *ks, OutboxEvent *ev)
{
	const KafkaDestOptions *o = KAFKA_OPTIONS(ev);
	char	   *fp = fingerprint(o);
	KafkaProducer *p = NULL;
	ListCell   *lc;
	MemoryContext old;

	foreach(lc, ks->producers)
	{
		KafkaProducer *x = lfirst(lc);

		if (strcmp(x->name, ev->dest.name) != 0)
			continue;
		if (!x->retiring && strcmp(x->fingerprint, fp) == 0)
			p = x;
		else
			x->retiring = true;
	}
	if (p != NULL)
		return p;
	if (ks->cxt == NULL)
	{
		setup_exit(ks);
		ks->cxt = AllocSetContextCreate(TopMemoryContext, "outbox Kafka producers",
										ALLOCSET_SMALL_SIZES);
	}
	old = MemoryContextSwitchTo(ks->cxt);
	p = palloc0(sizeof(KafkaProducer));
	p->cxt = AllocSetContextCreate(ks->cxt, "outbox Kafka producer", ALLOCSET_SMALL_SIZES);
	MemoryContextSwitchTo(p->cxt);
	p->name = pstrdup(ev->dest.name);
	p->fingerprint = pstrdup(fp);
	p->cap = o->max_outstanding;
	p->pipe_fds[0] = p->pipe_fds[1] = -1;
	dlist_init(&p->waiting);
	dlist_init(&p->in_flight);
	dlist_init(&p->reported);
	/* listed first: a producer made is always one the exit callback ends */
	MemoryContextSwitchTo(ks->cxt);
	ks->producers = lappend(ks->producers, p);
	ks->generation++;
	MemoryContextSwitchTo(p->cxt);
	make_producer(p, o);
	MemoryContextSwitchTo(old);
	return p;
}

/* Whether retrying a message that failed with err cannot help. */
static bool
err_permanent(rd_kafka_resp_err_t err)
{
	return err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
		err == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE ||
		err == RD_KAFKA_RESP_ERR_INVALID_RECORD ||
		err == RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION ||
		err == RD_KAFKA_RESP_ERR__INVALID_ARG;
}

/* Ends m's event with its outcome (error NULL: delivered), into *done. */
static void
finish(KafkaProducer *p, KafkaMessage *m, char *error, bool permanent, List **done)
{
	if (m->ev != NULL)
	{
		if (error == NULL)
			m->ev->ok = true;
		else
			KafkaFail(m->ev, error, permanent);
		*done = lappend(*done, m->ev);
		p->live--;
	}
	pfree(m);
}

/*
 * Produces every event that waits on p, each noted in the start log
 * first. A producer that could not be made, or that failed fatally (its
 * idempotence state lost: librdkafka's words), fails them, to be retried
 * with backoff by a producer made anew.
 */
void
KafkaProduceWaiting(KafkaProducer *p, List **done)
{
	dlist_mutable_iter iter;
	dlist_iter	it;
	char		fatal[256];

	if (p->nwaiting == 0)
		return;
	if (p->rk != NULL && rd_kafka_fatal_error(p->rk, fatal, sizeof(fatal)) != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		p->retiring = true;
		if (p->failure == NULL)
			p->failure = MemoryContextStrdup(p->cxt, psprintf("the Kafka producer failed: %s",
															  OutboxRedact(fatal, strlen(fatal))));
	}
	if (p->rk == NULL || p->retiring)
	{
		/* a producer not made is not kept: the retry makes one anew */
		p->retiring = true;
		dlist_foreach_modify(iter, &p->waiting)
		{
			dlist_delete(iter.cur);
			p->nwaiting--;
			finish(p, dlist_container(KafkaMessage, node, iter.cur),
				   pstrdup(p->failure ? p->failure : "the Kafka producer was replaced"), false, done);
		}
		return;
	}
	dlist_foreach(it, &p->waiting)
		OutboxStartLogNote(dlist_container(KafkaMessage, node, it.cur)->ev);
	OutboxStartLogFlush();
	dlist_foreach_modify(iter, &p->waiting)
	{
		KafkaMessage *m = dlist_container(KafkaMessage, node, iter.cur);
		const KafkaDestOptions *o = KAFKA_OPTIONS(m->ev);
		rd_kafka_headers_t *h = KafkaHeaders(m->ev);
		rd_kafka_resp_err_t err;

		dlist_delete(iter.cur);
		p->nwaiting--;
		err = rd_kafka_producev(p->rk,
								RD_KAFKA_V_TOPIC(o->topic_built),
								RD_KAFKA_V_KEY(o->key_built, o->key_built ? strlen(o->key_built) : 0),
								RD_KAFKA_V_VALUE(m->ev->body, m->ev->body ? strlen(m->ev->body) : 0),
								RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
								RD_KAFKA_V_HEADERS(h),
								RD_KAFKA_V_OPAQUE(m),
								RD_KAFKA_V_END);
		if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
		{
			/* not taken: the headers are still the caller's */
			rd_kafka_headers_destroy(h);
			finish(p, m, psprintf("librdkafka did not take the message: %s",
								  rd_kafka_err2str(err)), err_permanent(err), done);
			continue;
		}
		dlist_push_tail(&p->in_flight, &m->node);
		p->outstanding++;
	}
}

/*
 * What a delivery report with an error means, for last_error. A producer
 * that failed fatally purges what it holds: those say why it failed.
 */
static char *
report_error(KafkaProducer *p, const KafkaMessage *m)
{
	const char *maybe = m->status == RD_KAFKA_MSG_STATUS_NOT_PERSISTED ? "" :
		" (the broker may have stored it: a retry can be a duplicate)";
	char		fatal[256];

	if ((m->err == RD_KAFKA_RESP_ERR__FATAL || m->err == RD_KAFKA_RESP_ERR__PURGE_QUEUE ||
		 m->err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT) && p->rk != NULL &&
		rd_kafka_fatal_error(p->rk, fatal, sizeof(fatal)) != RD_KAFKA_RESP_ERR_NO_ERROR)
		return psprintf("the Kafka producer failed: %s%s", OutboxRedact(fatal, strlen(fatal)), maybe);
	if (m->err == RD_KAFKA_RESP_ERR__MSG_TIMED_OUT)
		return psprintf("Kafka did not acknowledge the message within the time limit of %d ms%s",
						KAFKA_OPTIONS(m->ev)->timeout_ms, maybe);
	return psprintf("Kafka did not take the message: %s%s", rd_kafka_err2str(m->err), maybe);
}

/*
 * An error librdkafka reports (a broker down, authentication failed):
 * logged, at most once a minute per producer; a fatal one always, and it
 * ends the producer once nothing of it is out.
 */
static void
report_client_error(KafkaProducer *p, rd_kafka_event_t *rkev)
{
	bool		fatal = rd_kafka_event_error_is_fatal(rkev);
	const char *text = rd_kafka_event_error_string(rkev);
	int			left_out = 0;

	if (fatal)
		p->retiring = true;
	if (!fatal && !OutboxLogLimitAllows(&p->error_log, KAFKA_ERROR_LOG_MS, &left_out))
		return;
	ereport(LOG,
			(errmsg("Kafka destination \"%s\": %s%s", p->name,
					fatal ? "the producer failed: " : "", OutboxRedact(text, strlen(text))),
			 left_out > 0 ? errdetail("%d more such errors were not logged.", left_out) : 0));
}

/*
 * One event of p's main queue, destroyed here: a delivery report moves
 * its messages to p->reported, with nothing allocated (so that no ERROR
 * leaves the event undestroyed or a message counted outstanding); an
 * error is logged; a log line goes to DEBUG1.
 */
static void
read_event(KafkaProducer *p, rd_kafka_event_t *rkev)
{
	const rd_kafka_message_t *msg;
	const char *fac;
	const char *text;
	int			level;

	switch (rd_kafka_event_type(rkev))
	{
		case RD_KAFKA_EVENT_DR:
			while ((msg = rd_kafka_event_message_next(rkev)) != NULL)
			{
				KafkaMessage *m = msg->_private;

				m->err = msg->err;
				m->status = rd_kafka_message_status(msg);
				dlist_delete(&m->node);
				dlist_push_tail(&p->reported, &m->node);
				p->outstanding--;
			}
			break;
		case RD_KAFKA_EVENT_ERROR:
			PG_TRY();
			{
				report_client_error(p, rkev);
			}
			PG_CATCH();
			{
				rd_kafka_event_destroy(rkev);
				PG_RE_THROW();
			}
			PG_END_TRY();
			break;
		case RD_KAFKA_EVENT_LOG:
			if (rd_kafka_event_log(rkev, &fac, &text, &level) == 0)
				ereport(DEBUG1, (errmsg_internal("Kafka destination \"%s\": librdkafka: %s: %s",
												 p->name, fac, OutboxRedact(text, strlen(text)))));
			break;
		default:
			break;
	}
	rd_kafka_event_destroy(rkev);
}

/*
 * Reads everything on p's main queue, and the pipe that woke the relay:
 * delivery reports (each its event's outcome, into *done), errors and log
 * lines (librdkafka's, at DEBUG1).
 */
void
KafkaReadQueue(KafkaProducer *p, List **done)
{
	char		drain[64];
	rd_kafka_event_t *rkev;
	dlist_mutable_iter iter;

	if (p->rk != NULL)
	{
		while (read(p->pipe_fds[0], drain, sizeof(drain)) > 0)
			;
		while ((rkev = rd_kafka_queue_poll(p->queue, 0)) != NULL)
			read_event(p, rkev);
	}
	/* outcomes made apart from the events: an ERROR here loses no report */
	dlist_foreach_modify(iter, &p->reported)
	{
		KafkaMessage *m = dlist_container(KafkaMessage, node, iter.cur);

		dlist_delete(iter.cur);
		finish(p, m, m->ev == NULL || m->err == RD_KAFKA_RESP_ERR_NO_ERROR ? NULL :
			   report_error(p, m), err_permanent(m->err), done);
	}
}

/* ---------------------------------------------------------------------
 * Ending producers
 * ---------------------------------------------------------------------
 */

/*
 * Producers being ended on a thread of their own (rd_kafka_destroy joins
 * librdkafka's threads, which may wait on a name lookup): malloc'd, in the
 * process's list endings until finished.
 */
typedef struct KafkaEnding
{
	struct KafkaEnding *next;
	pthread_mutex_t mu;
	bool		finished;		/* under mu */
	bool		abandoned;		/* under mu: the process stopped waiting, the
								 * thread frees it */
	int			n;
	rd_kafka_t *rk[FLEXIBLE_ARRAY_MEMBER];
} KafkaEnding;

/* the endings started, in the process's main thread only */
static KafkaEnding *endings = NULL;

/* The thread that ends producers: librdkafka only, no PostgreSQL call. */
static void *
end_producers(void *arg)
{
	KafkaEnding *e = arg;
	bool		abandoned;

	for (int i = 0; i < e->n; i++)
		rd_kafka_destroy(e->rk[i]);
	pthread_mutex_lock(&e->mu);
	e->finished = true;
	abandoned = e->abandoned;
	pthread_mutex_unlock(&e->mu);
	if (abandoned)
		free(e);
	return NULL;
}

/*
 * Frees the endings that finished; returns how many still run. With
 * give_up, those still running are abandoned to their threads.
 */
static int
reap_endings(bool give_up)
{
	KafkaEnding **link = &endings;
	int			running = 0;

	while (*link != NULL)
	{
		KafkaEnding *e = *link;
		bool		finished;

		pthread_mutex_lock(&e->mu);
		finished = e->finished;
		if (!finished && give_up)
			e->abandoned = true;
		pthread_mutex_unlock(&e->mu);
		if (finished || give_up)
		{
			*link = e->next;
			if (finished)
				free(e);
			running += finished ? 0 : 1;
		}
		else
		{
			running++;
			link = &e->next;
		}
	}
	return running;
}

/*
 * Ends the n producers in rk on a thread, with every signal blocked so
 * that PostgreSQL's handlers never run on it; their queues' wake-ups must
 * be off. If no thread can be started, ends them here.
 */
static void
end_in_background(rd_kafka_t **rk, int n)
{
	KafkaEnding *e = malloc(offsetof(KafkaEnding, rk) + sizeof(rd_kafka_t *) * n);
	pthread_t	thread;
	sigset_t	all;
	sigset_t	old;
	int			rc = -1;

	if (e != NULL)
	{
		pthread_mutex_init(&e->mu, NULL);
		e->finished = e->abandoned = false;
		e->n = n;
		memcpy(e->rk, rk, sizeof(rd_kafka_t *) * n);
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		rc = pthread_create(&thread, NULL, end_producers, e);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	if (rc != 0)
	{
		free(e);
		for (int i = 0; i < n; i++)
			rd_kafka_destroy(rk[i]);
		return;
	}
	pthread_detach(thread);
	e->next = endings;
	endings = e;
}

/*
 * Takes p's librdkafka producer from it: its queue's wake-up off (so that
 * no thread writes to the pipe once closed), the queue released, the pipe
 * closed. Returns the handle, to be ended, or NULL if p had none.
 */
static rd_kafka_t *
detach(KafkaProducer *p)
{
	rd_kafka_t *rk = p->rk;

	if (rk == NULL)
		return NULL;
	rd_kafka_queue_io_event_enable(p->queue, -1, NULL, 0);
	rd_kafka_queue_destroy(p->queue);
	close(p->pipe_fds[0]);
	close(p->pipe_fds[1]);
	p->rk = NULL;
	return rk;
}

/*
 * Ends p's producer once nothing of it is out (it then has nothing to
 * flush), on a thread, and frees p; frees the endings that finished.
 */
void
KafkaProducerFree(KafkaProducer *p)
{
	rd_kafka_t *rk = detach(p);

	if (rk != NULL)
		end_in_background(&rk, 1);
	(void) reap_endings(false);
	MemoryContextDelete(p->cxt);
	pfree(p);
}

/*
 * Drops what p's producer has not sent yet (abandon: outbox_relay()
 * aborted, its events to be claimed again): their reports come, purged,
 * to no event. Raises no error.
 */
void
KafkaProducerPurge(KafkaProducer *p)
{
	if (p->rk != NULL && p->outstanding > 0)
		(void) rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_NON_BLOCKING);
}

/*
 * At the exit of a process that produced (a before_shmem_exit callback):
 * what librdkafka still holds is purged, not flushed (those events were
 * not recorded delivered and are sent again: flushing would only make
 * more duplicates), and the producers are ended on a thread. The process
 * waits up to KAFKA_EXIT_WAIT_MS (by the monotonic clock) for that and for
 * producers ended earlier, so that a relay stops within a second whatever
 * the brokers do. Producers not ended in time are left, with a LOG line;
 * then the process skips the libraries' exit handlers (kafka_atexit), as
 * PostgreSQL's own quick exit does.
 */
static void
kafka_at_exit(int code, Datum arg)
{
	KafkaKindState *ks = (KafkaKindState *) DatumGetPointer(arg);
	rd_kafka_t **rk = malloc(sizeof(rd_kafka_t *) * (list_length(ks->producers) + 1));
	int			n = 0;
	int			running;
	struct timespec now;
	struct timespec until;
	ListCell   *lc;

	exit_code = code;
	foreach(lc, ks->producers)
	{
		KafkaProducer *p = lfirst(lc);

		if (p->rk != NULL)
			rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT |
						   RD_KAFKA_PURGE_F_NON_BLOCKING);
		if (rk != NULL && p->rk != NULL)
			rk[n++] = detach(p);
		else if (p->rk != NULL)
			threads_left = true;	/* no memory to end it: its threads run on */
	}
	if (n > 0)
		end_in_background(rk, n);
	free(rk);
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_nsec += KAFKA_EXIT_WAIT_MS * 1000000L;
	until.tv_sec += until.tv_nsec / 1000000000L;
	until.tv_nsec %= 1000000000L;
	while ((running = reap_endings(false)) > 0)
	{
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > until.tv_sec || (now.tv_sec == until.tv_sec && now.tv_nsec >= until.tv_nsec))
			break;
		pg_usleep(2000L);
	}
	if (running == 0)
		return;
	running = reap_endings(true);
	threads_left = threads_left || running > 0;
	if (running > 0)
		ereport(LOG,
				(errmsg("Kafka producers did not end within %d ms of exit", KAFKA_EXIT_WAIT_MS),
				 errdetail("The process exits without the libraries' exit handlers, which would free what those producers use.")));
}

/*
 * An atexit handler, registered after OpenSSL's (setup_exit), so run
 * before it: when a producer's threads may still run, ends the process
 * at once with its exit code, every PostgreSQL exit callback done.
 */
static void
kafka_atexit(void)
{
	if (threads_left)
		_exit(exit_code);
}
