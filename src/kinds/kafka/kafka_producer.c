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
#include <unistd.h>

#include <openssl/crypto.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/memutils.h"

#include "kafka_int.h"
#include "log_limit.h"

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
 * The settings that make a producer, as one string: a destination whose
 * settings changed gets a new producer.
 */
static char *
fingerprint(const KafkaDestOptions *o)
{
	return psprintf("%s|%s|%s|%s|%s|%s|%s|" INT64_FORMAT "|" INT64_FORMAT "|" INT64_FORMAT "|%d|%d",
					o->servers, o->security_protocol ? o->security_protocol : "",
					o->sasl_mechanism ? o->sasl_mechanism : "",
					o->sasl_username ? o->sasl_username : "",
					o->sasl_password ? o->sasl_password : "",
					o->ca_file ? o->ca_file : "", o->compression ? o->compression : "",
					o->linger_ms, o->batch_bytes, o->max_message_bytes,
					o->timeout_ms, o->max_outstanding);
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
 * no topic made by producing to it, reports, errors and log lines as
 * events on the main queue. NULL with *failure set when one is refused or
 * tls_ca_file cannot be read.
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
 * p->failure says why: the events that wait fail with it.
 */
static void
make_producer(KafkaProducer *p, const KafkaDestOptions *o)
{
	char		err[512];
	rd_kafka_conf_t *conf = make_conf(o, &p->failure);

	if (conf == NULL)
		return;
	if (pipe(p->pipe_fds) != 0 ||
		fcntl(p->pipe_fds[0], F_SETFL, O_NONBLOCK) != 0 ||
		fcntl(p->pipe_fds[1], F_SETFL, O_NONBLOCK) != 0)
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
	(void) rd_kafka_set_log_queue(p->rk, NULL);
	p->queue = rd_kafka_queue_get_main(p->rk);
	rd_kafka_queue_io_event_enable(p->queue, p->pipe_fds[1], "1", 1);
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
	make_producer(p, o);
	MemoryContextSwitchTo(ks->cxt);
	ks->producers = lappend(ks->producers, p);
	ks->generation++;
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
		dlist_foreach_modify(iter, &p->waiting)
		{
			dlist_delete(iter.cur);
			finish(p, dlist_container(KafkaMessage, node, iter.cur),
				   pstrdup(p->failure ? p->failure : "the Kafka producer was replaced"), false, done);
		}
		p->nwaiting = 0;
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

/* What a delivery report with an error means, for last_error. */
static char *
report_error(const rd_kafka_message_t *msg, int timeout_ms)
{
	const char *maybe = rd_kafka_message_status(msg) == RD_KAFKA_MSG_STATUS_NOT_PERSISTED ? "" :
		" (the broker may have stored it: a retry can be a duplicate)";

	if (msg->err == RD_KAFKA_RESP_ERR__MSG_TIMED_OUT)
		return psprintf("Kafka did not acknowledge the message within the time limit of %d ms%s",
						timeout_ms, maybe);
	return psprintf("Kafka did not take the message: %s%s", rd_kafka_err2str(msg->err), maybe);
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
	OutboxLogLimit limit = {p->error_logged_at, p->errors_left_out};
	int			left_out = 0;

	if (fatal)
		p->retiring = true;
	if (!fatal && !OutboxLogLimitAllows(&limit, KAFKA_ERROR_LOG_MS, &left_out))
	{
		p->errors_left_out = limit.left_out;
		return;
	}
	p->error_logged_at = limit.logged_at;
	p->errors_left_out = limit.left_out;
	ereport(LOG,
			(errmsg("Kafka destination \"%s\": %s%s", p->name,
					fatal ? "the producer failed: " : "", OutboxRedact(text, strlen(text))),
			 left_out > 0 ? errdetail("%d more such errors were not logged.", left_out) : 0));
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
	int			timeout_ms = -1;

	if (p->rk == NULL)
		return;
	while (read(p->pipe_fds[0], drain, sizeof(drain)) > 0)
		;
	while ((rkev = rd_kafka_queue_poll(p->queue, 0)) != NULL)
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

					if (m->ev != NULL && timeout_ms < 0)
						timeout_ms = KAFKA_OPTIONS(m->ev)->timeout_ms;
					dlist_delete(&m->node);
					p->outstanding--;
					finish(p, m, msg->err == RD_KAFKA_RESP_ERR_NO_ERROR ? NULL :
						   report_error(msg, timeout_ms), err_permanent(msg->err), done);
				}
				break;
			case RD_KAFKA_EVENT_ERROR:
				report_client_error(p, rkev);
				break;
			case RD_KAFKA_EVENT_LOG:
				if (rd_kafka_event_log(rkev, &fac, &text, &level) == 0)
					ereport(DEBUG1, (errmsg_internal("Kafka destination \"%s\": librdkafka: %s: %s",
													 p->name, fac, text)));
				break;
			default:
				break;
		}
		rd_kafka_event_destroy(rkev);
	}
}

/*
 * Ends p's producer, once nothing of it is out (it then has nothing to
 * flush, and its threads end at once), and frees p.
 */
void
KafkaProducerFree(KafkaKindState *ks pg_attribute_unused(), KafkaProducer *p)
{
	if (p->rk != NULL)
	{
		rd_kafka_queue_destroy(p->queue);
		rd_kafka_destroy(p->rk);
		close(p->pipe_fds[0]);
		close(p->pipe_fds[1]);
	}
	MemoryContextDelete(p->cxt);
	pfree(p);
}

/* ---------------------------------------------------------------------
 * At exit
 * ---------------------------------------------------------------------
 */

/* the producers being ended at exit, on a thread: malloc'd */
typedef struct KafkaEnding
{
	pthread_mutex_t mu;
	bool		finished;
	bool		abandoned;		/* the process stopped waiting: the thread frees it */
	int			n;
	rd_kafka_t *rk[FLEXIBLE_ARRAY_MEMBER];
} KafkaEnding;

/* The thread that ends the producers: rd_kafka_destroy joins theirs. */
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
 * At the exit of a process that produced (a before_shmem_exit callback):
 * what librdkafka still holds is purged, not flushed (those events were
 * not recorded delivered and are sent again: flushing would only make
 * more duplicates), and the producers are ended on a thread, waited for
 * up to KAFKA_EXIT_WAIT_MS, so that a relay stops within a second
 * whatever the brokers do. Producers not ended in time are left, with a
 * LOG line; then the process skips the libraries' exit handlers
 * (kafka_atexit), as PostgreSQL's own quick exit does.
 */
static void
kafka_at_exit(int code, Datum arg)
{
	KafkaKindState *ks = (KafkaKindState *) DatumGetPointer(arg);
	KafkaEnding *e = malloc(offsetof(KafkaEnding, rk) +
							sizeof(rd_kafka_t *) * (list_length(ks->producers) + 1));
	pthread_t	thread;
	TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), KAFKA_EXIT_WAIT_MS);
	bool		finished = false;
	ListCell   *lc;

	exit_code = code;
	if (e == NULL)
		return;
	pthread_mutex_init(&e->mu, NULL);
	e->finished = e->abandoned = false;
	e->n = 0;
	foreach(lc, ks->producers)
	{
		KafkaProducer *p = lfirst(lc);

		if (p->rk == NULL)
			continue;
		rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT |
					   RD_KAFKA_PURGE_F_NON_BLOCKING);
		rd_kafka_queue_destroy(p->queue);
		e->rk[e->n++] = p->rk;
		p->rk = NULL;
	}
	if (e->n == 0 || pthread_create(&thread, NULL, end_producers, e) != 0)
	{
		threads_left = e->n > 0;
		free(e);
		return;
	}
	pthread_detach(thread);
	while (!finished && GetCurrentTimestamp() < until)
	{
		pg_usleep(2000L);
		pthread_mutex_lock(&e->mu);
		finished = e->finished;
		e->abandoned = !finished && GetCurrentTimestamp() >= until;
		pthread_mutex_unlock(&e->mu);
	}
	if (finished)
	{
		free(e);
		return;
	}
	threads_left = true;
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
