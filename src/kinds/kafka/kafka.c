/*-------------------------------------------------------------------------
 *
 * kafka.c
 *	  The Kafka kind of destination: each event produced to a Kafka topic
 *	  with librdkafka's idempotent producer, counted delivered only once
 *	  the partition's leader acknowledges it with every in-sync replica
 *	  (acks=all).
 *
 * The idempotent producer numbers its messages per partition, so that the
 * broker drops the copies librdkafka's own retries send and keeps a
 * partition's messages in the order produced, within one producer session.
 * Across sessions (a relay restarted, a producer made anew) a message whose
 * report was lost is produced again: consumers deduplicate on the
 * outbox-event-id header (the inbox table, docs/kafka.md).
 *
 * The message key is the event's aggregate (its aggregate_id, or
 * CloudEvents' partitionkey in those formats), so that one aggregate's
 * events share a partition, or a template of the event's fields. Headers
 * never steer the client or the broker (Kafka reads none), but the names
 * the relay sets, and the CloudEvents binding's ce_*, are refused on a
 * destination and not sent from an event.
 *
 * This file holds the kind's table, its rules and its callbacks;
 * kafka_producer.c drives the producers.
 *
 * Runs in the relay worker, or in a backend running outbox_relay().
 *
 * src/kinds/kafka/kafka.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/memutils.h"

#include "cloudevents.h"
#include "envelope.h"
#include "event_template.h"
#include "format.h"
#include "headers.h"
#include "kafka_int.h"

/* bootstrap_servers, as one string, at most */
#define KAFKA_MAX_SERVERS_BYTES 4096
/* producers unused this long are ended (a destination deleted, renamed) */
#define KAFKA_IDLE_CLOSE_MS (5 * 60 * 1000)
/* while messages are out, the queue is read at least this often */
#define KAFKA_POLL_MS 1000

/*
 * CloudEvents' Kafka protocol binding (section 3.2.3): in binary mode each
 * attribute is a header named "ce_" and the attribute, its value as is.
 */
static const OutboxCloudEventBinding kafka_ce_binding = {"ce_", false};

static const OutboxKindOption kafka_options[] = {
	{"bootstrap_servers", OUTBOX_OPTION_STRING, true, 1, KAFKA_MAX_SERVERS_BYTES},
	{"topic", OUTBOX_OPTION_STRING, true, 1, 1024},
	{"key", OUTBOX_OPTION_STRING, false, 1, 1024},
	{"security_protocol", OUTBOX_OPTION_STRING, false, 1, 32},
	{"sasl_mechanism", OUTBOX_OPTION_STRING, false, 1, 32},
	{"sasl_username", OUTBOX_OPTION_STRING, false, 1, 1024},
	{"sasl_password", OUTBOX_OPTION_STRING, false, 1, 1024},
	{"tls_ca_file", OUTBOX_OPTION_STRING, false, 1, MAXPGPATH - 1},
	{"compression_type", OUTBOX_OPTION_STRING, false, 1, 32},
	/* librdkafka's bounds */
	{"linger_ms", OUTBOX_OPTION_INTEGER, false, 0, 900000},
	{"batch_size", OUTBOX_OPTION_INTEGER, false, 1, 2147483647},
	{"max_message_bytes", OUTBOX_OPTION_INTEGER, false, 1000, 1000000000},
	{"max_outstanding", OUTBOX_OPTION_INTEGER, false, 1, KAFKA_MAX_OUTSTANDING_LIMIT},
	{NULL}
};

/* values of the options that take one of a few words */
static const char *const security_protocols[] = {"plaintext", "ssl", "sasl_plaintext", "sasl_ssl", NULL};
static const char *const sasl_mechanisms[] = {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", NULL};
static const char *const compression_types[] = {"none", "gzip", "snappy", "lz4", "zstd", NULL};

/* ---------------------------------------------------------------------
 * The rules
 * ---------------------------------------------------------------------
 */

/*
 * Whether a header named name stands for what the relay sets: outbox-*,
 * content-type and the CloudEvents binding's ce_*.
 */
static bool
header_reserved(const char *name)
{
	return pg_strncasecmp(name, "outbox-", 7) == 0 ||
		pg_strcasecmp(name, "content-type") == 0 || pg_strncasecmp(name, "ce_", 3) == 0;
}

/* Whether value is one of words (NULL-ended). */
static bool
one_of(const char *value, const char *const *words)
{
	for (; *words; words++)
		if (strcmp(value, *words) == 0)
			return true;
	return false;
}

/*
 * Whether servers is a list of host:port, at most KAFKA_MAX_SERVERS, each
 * a host name, an IPv4 address or a bracketed IPv6 one, and a port;
 * else false with *why set. No scheme: security_protocol says how to talk.
 */
static bool
servers_valid(const char *servers, const char **why)
{
	char	   *copy = pstrdup(servers);
	char	   *save = NULL;
	int			n = 0;

	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
	{
		char	   *colon;
		char	   *end;
		long		port;

		while (*tok == ' ')
			tok++;
		for (end = tok + strlen(tok); end > tok && end[-1] == ' '; end--)
			end[-1] = '\0';
		if (++n > KAFKA_MAX_SERVERS)
			return (*why = "more than 16 servers", false);
		colon = strrchr(tok, ':');
		if (colon == NULL || colon == tok)
			return (*why = "each server is host:port", false);
		if (strstr(tok, "://") != NULL)
			return (*why = "a server has no scheme: set the option security_protocol", false);
		errno = 0;
		port = strtol(colon + 1, &end, 10);
		if (errno != 0 || *end != '\0' || end == colon + 1 || port < 1 || port > 65535)
			return (*why = "a server's port is not a number from 1 to 65535", false);
		if (tok[0] == '[' ? colon[-1] != ']' || strspn(tok + 1, "0123456789abcdefABCDEF:.") != (size_t) (colon - tok - 2) :
			strspn(tok, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") != (size_t) (colon - tok))
			return (*why = "a server's host is not a host name or an IP address", false);
	}
	if (n == 0)
		return (*why = "no server", false);
	return true;
}

/*
 * Whether s (len bytes) is a topic's name the relay produces to: Kafka's
 * rule (ASCII letters, digits, ".", "_" and "-", at most 249, not "." or
 * "..", Topic.java), and not one of Kafka's internal topics, which start
 * with "__" (__consumer_offsets, __transaction_state): no template fed an
 * event's fields can reach those.
 */
static bool
topic_valid(const char *s, size_t len)
{
	if (len == 0 || len > KAFKA_TOPIC_MAX || strncmp(s, "__", 2) == 0 ||
		(len == 1 && s[0] == '.') || (len == 2 && strncmp(s, "..", 2) == 0))
		return false;
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
			  (s[i] >= '0' && s[i] <= '9') || strchr("._-", s[i]) != NULL))
			return false;
	return true;
}

/* A word option's value, if set, is one of words; else a problem. */
static bool
word_option(const OutboxDestinationRow *row, const char *name,
			const char *const *words, const char *list, OutboxProblem *p)
{
	char	   *value = OutboxDestinationOptionText(row, name);

	if (value == NULL || one_of(value, words))
		return true;
	return OutboxProblemSet(p, ERRCODE_INVALID_PARAMETER_VALUE,
							psprintf("destination option \"%s\" is not valid", name),
							psprintf("It is one of %s.", list));
}

/* The SASL options: a mechanism with a SASL protocol, the pair of credentials. */
static bool
check_security(const OutboxDestinationRow *row, OutboxProblem *p)
{
	char	   *protocol = OutboxDestinationOptionText(row, "security_protocol");
	bool		sasl = protocol != NULL && strncmp(protocol, "sasl_", 5) == 0;
	bool		mechanism = OutboxDestinationOptionText(row, "sasl_mechanism") != NULL;
	bool		user = OutboxDestinationOptionText(row, "sasl_username") != NULL;
	bool		password = OutboxDestinationOptionText(row, "sasl_password") != NULL;

	if (!word_option(row, "security_protocol", security_protocols,
					 "plaintext, ssl, sasl_plaintext and sasl_ssl", p) ||
		!word_option(row, "sasl_mechanism", sasl_mechanisms,
					 "PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512", p) ||
		!word_option(row, "compression_type", compression_types,
					 "none, gzip, snappy, lz4 and zstd", p))
		return false;
	if (sasl != (mechanism && user && password) || (!sasl && (mechanism || user || password)))
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("a Kafka destination's SASL options go together"),
								pstrdup("With security_protocol sasl_plaintext or sasl_ssl, set sasl_mechanism, sasl_username and sasl_password; without, none of them."));
	if (OutboxDestinationOptionText(row, "tls_ca_file") != NULL &&
		(protocol == NULL || strcmp(protocol, "ssl") != 0) &&
		(protocol == NULL || strcmp(protocol, "sasl_ssl") != 0))
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination option \"tls_ca_file\" needs security_protocol ssl or sasl_ssl"),
								NULL);
	return true;
}

/* A template option, if set: its sample built, checked by check (or NULL). */
static bool
check_template(const OutboxDestinationRow *row, const char *name, OutboxProblem *p,
			   bool is_topic)
{
	char	   *t = OutboxDestinationOptionText(row, name);
	StringInfoData sample;
	const char *why = NULL;

	if (t == NULL)
		return true;
	initStringInfo(&sample);
	if (!OutboxTemplateSample(t, &sample, &why))
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								psprintf("destination option \"%s\" is not valid", name),
								psprintf("As a template, %s.", why));
	if (is_topic && !topic_valid(sample.data, sample.len))
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination option \"topic\" is not a Kafka topic name"),
								psprintf("A topic's name has at most %d letters, digits, \".\", \"_\" and \"-\", and does not start with \"__\" (Kafka's internal topics).",
										 KAFKA_TOPIC_MAX));
	return true;
}

/*
 * check_destination: the servers, the topic and key (or their templates),
 * the security options, the time limit against linger_ms and the
 * destination's headers. From the BEFORE trigger on outbox_destinations,
 * in the writer's transaction; never quotes a value.
 */
static bool
kafka_check_destination(const OutboxDestinationRow *row, OutboxProblem *p)
{
	const char *why = NULL;
	int			timeout_ms;
	int64		linger;
	Jsonb	   *headers;

	if (!servers_valid(OutboxDestinationOptionText(row, "bootstrap_servers"), &why))
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination option \"bootstrap_servers\" is not valid"),
								psprintf("%c%s.", pg_toupper(why[0]), why + 1));
	if (!check_template(row, "topic", p, true) || !check_template(row, "key", p, false) ||
		!check_security(row, p))
		return false;
	/* the file's rule, as for a webhook's ca_file */
	if (!OutboxDestinationFileCheck(row, "tls_ca_file", "bootstrap_servers", p))
		return false;
	(void) OutboxDestinationSharedOptions(row, &timeout_ms, &headers);
	if (timeout_ms < 0)
		timeout_ms = KAFKA_DEFAULT_TIMEOUT_MS;
	/* librdkafka: message.timeout.ms must be greater than linger.ms */
	if (OutboxDestinationOptionInt(row, "linger_ms", &linger) && linger >= timeout_ms)
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination option \"linger_ms\" is not below the destination's time limit"),
								pstrdup("A message waits at most linger_ms before it is sent, and must be delivered within timeout_ms."));
	if (headers != NULL)
	{
		OutboxHeader *list;
		int			nh = OutboxHeaderList(headers, &list);

		for (int i = 0; i < nh; i++)
			if (header_reserved(list[i].name))
				return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
										pstrdup("a Kafka destination's headers may not be named outbox-*, content-type or ce_*"),
										pstrdup("The relay sets those."));
	}
	return true;
}

/* An integer option, or -1 when not set. */
static int64
int_option(const OutboxDestinationRow *row, const char *name)
{
	int64		n;

	return OutboxDestinationOptionInt(row, name, &n) ? n : -1;
}

/* decode: the options into a KafkaDestOptions. */
static Size
kafka_decode(const OutboxDestinationRow *row, OutboxDestination *dest)
{
	KafkaDestOptions *o = palloc0(sizeof(KafkaDestOptions));
	Size		size;
	const char *texts[8];

	o->servers = OutboxDestinationOptionText(row, "bootstrap_servers");
	o->topic = OutboxDestinationOptionText(row, "topic");
	o->key = OutboxDestinationOptionText(row, "key");
	o->security_protocol = OutboxDestinationOptionText(row, "security_protocol");
	o->sasl_mechanism = OutboxDestinationOptionText(row, "sasl_mechanism");
	o->sasl_username = OutboxDestinationOptionText(row, "sasl_username");
	o->sasl_password = OutboxDestinationOptionText(row, "sasl_password");
	o->ca_file = OutboxDestinationOptionText(row, "tls_ca_file");
	o->compression = OutboxDestinationOptionText(row, "compression_type");
	o->linger_ms = int_option(row, "linger_ms");
	o->batch_bytes = int_option(row, "batch_size");
	o->max_message_bytes = int_option(row, "max_message_bytes");
	o->max_outstanding = (int) int_option(row, "max_outstanding");
	if (o->max_outstanding < 0)
		o->max_outstanding = KAFKA_DEFAULT_MAX_OUTSTANDING;
	size = OutboxDestinationSharedOptions(row, &o->timeout_ms, &o->headers);
	if (o->timeout_ms < 0)
		o->timeout_ms = KAFKA_DEFAULT_TIMEOUT_MS;
	dest->options = o;
	texts[0] = o->servers;
	texts[1] = o->topic;
	texts[2] = o->key;
	texts[3] = o->sasl_username;
	texts[4] = o->sasl_password;
	texts[5] = o->ca_file;
	texts[6] = o->security_protocol;
	texts[7] = o->sasl_mechanism;
	size += sizeof(KafkaDestOptions);
	for (size_t i = 0; i < lengthof(texts); i++)
		size += texts[i] ? strlen(texts[i]) : 0;
	return size;
}

/* Sets ev's outcome to a failure with error (palloc'd). */
void
KafkaFail(OutboxEvent *ev, char *error, bool permanent)
{
	ev->ok = false;
	ev->permanent = permanent;
	ev->error = error;
}

/*
 * The event's aggregate as the message key: in the CloudEvents formats
 * their partitionkey (the Kafka binding's key), else the aggregate_id;
 * NULL without an aggregate_id.
 */
static char *
aggregate_key(const OutboxEvent *ev)
{
	if (strcmp(ev->dest.format, OUTBOX_FORMAT_ENVELOPE) != 0)
		return OutboxCloudEventPartitionKey(ev);
	return ev->aggregate_id;
}

/*
 * prepare: the event's headers follow the rules for headers; its topic
 * (built from the template) is a Kafka topic name; its key is built; the
 * body is in the destination's format, in UTF-8. A value that cannot be
 * built is a permanent failure: retrying builds the same.
 */
static Size
kafka_prepare(void *state pg_attribute_unused(), OutboxEvent *ev)
{
	KafkaDestOptions *o = KAFKA_OPTIONS(ev);
	OutboxProblem p;
	const char *missing = NULL;
	const char *why = NULL;
	Size		cost;

	if (ev->headers != NULL && !OutboxHeadersCheck(ev->headers, true, &p))
	{
		KafkaFail(ev, p.message, true);
		return 0;
	}
	o->topic_built = OutboxTemplateBuild(o->topic, ev, &missing, &why);
	if (o->topic_built == NULL)
	{
		KafkaFail(ev, missing ?
				  psprintf("the topic template uses %s, which the event does not have", missing) :
				  psprintf("destination option \"topic\" is not valid: %s", why), true);
		return 0;
	}
	if (!topic_valid(o->topic_built, strlen(o->topic_built)))
	{
		KafkaFail(ev, pstrdup("the topic built for the event is not a Kafka topic name"), true);
		return 0;
	}
	if (o->key == NULL)
		o->key_built = aggregate_key(ev);
	else if ((o->key_built = OutboxTemplateBuild(o->key, ev, &missing, &why)) == NULL)
	{
		KafkaFail(ev, missing ?
				  psprintf("the key template uses %s, which the event does not have", missing) :
				  psprintf("destination option \"key\" is not valid: %s", why), true);
		return 0;
	}
	/* in UTF-8, as the body and CloudEvents' partitionkey are */
	if (o->key_built != NULL)
		o->key_built = pg_server_to_any(o->key_built, strlen(o->key_built), PG_UTF8);
	cost = OutboxBodyToUtf8(ev, OutboxPrepareFormat(ev));
	return cost + strlen(o->topic_built) + (o->key_built ? strlen(o->key_built) : 0);
}

/* Adds header name: value to h, if value is set. */
static void
add_header(rd_kafka_headers_t *h, const char *name, const char *value)
{
	if (value != NULL)
		rd_kafka_header_add(h, name, -1, value, -1);
}

/*
 * The message's headers: the relay's outbox-* and content-type, then the
 * destination's and the event's that header_reserved lets through, then,
 * in binary CloudEvents, the event's attributes under the Kafka binding
 * (ce_*). The caller hands them to librdkafka, which frees them.
 */
rd_kafka_headers_t *
KafkaHeaders(const OutboxEvent *ev)
{
	const KafkaDestOptions *o = KAFKA_OPTIONS(ev);
	OutboxHeader *merged;
	int			nmerged = OutboxMergeHeaders(o->headers, ev->headers, &merged);
	rd_kafka_headers_t *h = rd_kafka_headers_new(nmerged + 6 + list_length(ev->extra_headers));
	char		attempt[16];
	ListCell   *lc;

	snprintf(attempt, sizeof(attempt), "%d", ev->attempts + 1);
	add_header(h, "outbox-event-id", ev->event_id);
	add_header(h, "outbox-event-type", ev->event_type);
	add_header(h, "outbox-aggregate-type", ev->aggregate_type);
	add_header(h, "outbox-aggregate-id", ev->aggregate_id);
	add_header(h, "outbox-attempt", attempt);
	add_header(h, "content-type", ev->dest.fmt->content_type);
	for (int i = 0; i < nmerged; i++)
		if (!header_reserved(merged[i].name))
			add_header(h, merged[i].name, merged[i].value);
	/* binary CloudEvents: "ce_<attribute>: <value>" lines, built by prepare */
	foreach(lc, ev->extra_headers)
	{
		char	   *line = lfirst(lc);
		char	   *sep = strstr(line, ": ");

		if (sep != NULL)
			rd_kafka_header_add(h, line, sep - line, sep + 2, -1);
	}
	return h;
}

/* ---------------------------------------------------------------------
 * The kind's callbacks
 * ---------------------------------------------------------------------
 */

/* startup: no producer until the first event. */
static void *
kafka_startup(void)
{
	return palloc0(sizeof(KafkaKindState));
}

/* enqueue: the event waits for collect, which produces what waits at once. */
static void
kafka_enqueue(void *state, OutboxEvent *ev)
{
	KafkaProducer *p = KafkaProducerFor(state, ev);
	KafkaMessage *m = MemoryContextAllocZero(p->cxt, sizeof(KafkaMessage));

	p->last_used = GetCurrentTimestamp();
	m->ev = ev;
	dlist_push_tail(&p->waiting, &m->node);
	p->nwaiting++;
	p->live++;
}

/*
 * collect: produces what waits, reads every producer's reports and returns
 * the events whose outcome is known; ends producers that are superseded
 * or unused for KAFKA_IDLE_CLOSE_MS once nothing of theirs is out.
 */
static List *
kafka_collect(void *state)
{
	KafkaKindState *ks = state;
	List	   *done = NIL;
	ListCell   *lc;
	TimestampTz now = GetCurrentTimestamp();

	/* before outcomes are in hand, not after, where a stop would drop them */
	CHECK_FOR_INTERRUPTS();
	foreach(lc, ks->producers)
	{
		KafkaProducer *p = lfirst(lc);

		KafkaProduceWaiting(p, &done);
		KafkaReadQueue(p, &done);
		if (p->live == 0 && p->outstanding == 0 &&
			TimestampDifferenceExceeds(p->last_used, now, KAFKA_IDLE_CLOSE_MS))
			p->retiring = true;
		if (p->retiring && p->live == 0 && p->outstanding == 0)
		{
			KafkaProducerFree(p);
			ks->producers = foreach_delete_current(ks->producers, lc);
			ks->generation++;
		}
	}
	return done;
}

/* pending: events taken whose outcome is not returned yet. */
static int
kafka_pending(void *state)
{
	KafkaKindState *ks = state;
	int			n = 0;
	ListCell   *lc;

	foreach(lc, ks->producers)
		n += ((KafkaProducer *) lfirst(lc))->live;
	return n;
}

/* busy: events taken, or messages not reported (given-up ones too). */
static bool
kafka_busy(void *state)
{
	KafkaKindState *ks = state;
	ListCell   *lc;

	foreach(lc, ks->producers)
	{
		KafkaProducer *p = lfirst(lc);

		if (p->live > 0 || p->outstanding > 0)
			return true;
	}
	return false;
}

/*
 * How many more events destination name can take: its max_outstanding less
 * what its producers hold (waiting, and produced without a report). At
 * least 0.
 */
static int
dest_room(KafkaKindState *ks, const char *name, int cap)
{
	int			held = 0;
	ListCell   *lc;

	foreach(lc, ks->producers)
	{
		KafkaProducer *p = lfirst(lc);

		if (strcmp(p->name, name) != 0)
			continue;
		if (!p->retiring)
			cap = p->cap;
		held += p->nwaiting + p->outstanding;
	}
	return Max(cap - held, 0);
}

/* room: what dest_room says of ev's destination. */
static int
kafka_room(void *state, const OutboxEvent *ev)
{
	return dest_room(state, ev->dest.name, KAFKA_OPTIONS(ev)->max_outstanding);
}

/* full: destinations without room. */
static List *
kafka_full(void *state)
{
	KafkaKindState *ks = state;
	List	   *full = NIL;
	ListCell   *lc;

	foreach(lc, ks->producers)
	{
		KafkaProducer *p = lfirst(lc);

		if (!p->retiring && dest_room(ks, p->name, p->cap) == 0)
			full = lappend(full, p->name);
	}
	return full;
}

/* sockets: each producer's wake-up pipe, to read. */
static uint64
kafka_sockets(void *state, const OutboxWaitSocket **socks, int *n)
{
	KafkaKindState *ks = state;
	ListCell   *lc;

	if (ks->nsocks < list_length(ks->producers))
	{
		ks->nsocks = Max(list_length(ks->producers), 16);
		if (ks->socks != NULL)
			pfree(ks->socks);
		ks->socks = MemoryContextAlloc(TopMemoryContext, sizeof(OutboxWaitSocket) * ks->nsocks);
	}
	*n = 0;
	foreach(lc, ks->producers)
	{
		KafkaProducer *p = lfirst(lc);

		if (p->rk == NULL)
			continue;
		ks->socks[*n].fd = p->pipe_fds[0];
		ks->socks[*n].events = WL_SOCKET_READABLE;
		(*n)++;
	}
	*socks = ks->socks;
	return ks->generation;
}

/*
 * socket_ready: while events are in hand, collect reads the queue. A
 * producer with none is read here, so that what librdkafka reports while
 * the relay is idle (a broker gone, log lines) does not pile up. Such a
 * read completes no event.
 */
static void
kafka_socket_ready(void *state, pgsocket fd, uint32 events pg_attribute_unused())
{
	KafkaKindState *ks = state;
	ListCell   *lc;

	foreach(lc, ks->producers)
	{
		KafkaProducer *p = lfirst(lc);

		if (p->rk != NULL && p->pipe_fds[0] == fd && p->live == 0 && p->outstanding == 0)
		{
			List	   *done = NIL;

			KafkaReadQueue(p, &done);
			Assert(done == NIL);
			return;
		}
	}
}

/*
 * timeout_ms: at once while events wait to be produced; every
 * KAFKA_POLL_MS while messages are out (librdkafka reports each within
 * its message.timeout.ms, and its pipe wakes the relay; the poll is a
 * floor); else no wake-up.
 */
static long
kafka_timeout_ms(void *state)
{
	KafkaKindState *ks = state;
	long		timeout = -1;
	ListCell   *lc;

	foreach(lc, ks->producers)
	{
		KafkaProducer *p = lfirst(lc);

		if (p->nwaiting > 0)
			return 0;
		if (p->outstanding > 0)
			timeout = KAFKA_POLL_MS;
	}
	return timeout;
}

/*
 * abandon: forgets every event taken. Waiting ones are dropped; produced
 * ones not sent yet are purged (they will be claimed again), and every
 * produced one is still reported, to no event. Must not throw.
 */
static void
kafka_abandon(void *state)
{
	KafkaKindState *ks = state;
	ListCell   *lc;

	foreach(lc, ks->producers)
	{
		KafkaProducer *p = lfirst(lc);
		dlist_mutable_iter iter;

		dlist_iter	it;

		dlist_foreach_modify(iter, &p->waiting)
		{
			dlist_delete(iter.cur);
			pfree(dlist_container(KafkaMessage, node, iter.cur));
		}
		p->nwaiting = 0;
		dlist_foreach(it, &p->in_flight)
			dlist_container(KafkaMessage, node, it.cur)->ev = NULL;
		dlist_foreach(it, &p->reported)
			dlist_container(KafkaMessage, node, it.cur)->ev = NULL;
		KafkaProducerPurge(p);
		p->live = 0;
	}
}

/* The Kafka kind: produced after COMMIT, delivered when acknowledged. */
extern const OutboxDestinationKind OutboxKafkaKind; /* src/kinds/registry.c */

const OutboxDestinationKind OutboxKafkaKind = {
	.name = "kafka",
	.description = "a Kafka topic",
	.target_column = "bootstrap_servers",
	.own_columns = (const OutboxKindColumn[]) {{NULL}},
	.options = kafka_options,
	.formats = (const char *const[]) {
		OUTBOX_FORMAT_ENVELOPE, OUTBOX_FORMAT_CLOUDEVENTS, OUTBOX_FORMAT_CLOUDEVENTS_BINARY, NULL
	},
	.binding = &kafka_ce_binding,
	.send_point = OUTBOX_SEND_AFTER_COMMIT,
	.options_size = sizeof(KafkaDestOptions),
	/* a new producer is a new idempotence session: the broker keeps its copies */
	.room_bounds_copies = true,
	.check_destination = kafka_check_destination,
	.decode = kafka_decode,
	.startup = kafka_startup,
	.prepare = kafka_prepare,
	.enqueue = kafka_enqueue,
	.collect = kafka_collect,
	.pending = kafka_pending,
	.busy = kafka_busy,
	.full = kafka_full,
	.room = kafka_room,
	.sockets = kafka_sockets,
	.timeout_ms = kafka_timeout_ms,
	.socket_ready = kafka_socket_ready,
	.abandon = kafka_abandon,
};
