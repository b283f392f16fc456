/*-------------------------------------------------------------------------
 *
 * rabbitmq.c
 *	  The RabbitMQ kind of destination: each event published to an
 *	  exchange of a RabbitMQ broker (AMQP 0-9-1) with rabbitmq-c, counted
 *	  delivered only once the broker confirms it.
 *
 * Every message is persistent (delivery_mode 2), carries the event_id as
 * its message_id, and is published mandatory on a channel in confirm
 * mode (RabbitMQ's publisher confirms). A basic.ack marks the event
 * delivered; a basic.nack (a queue at its max-length with overflow
 * reject-publish, say), a basic.return (no queue bound for the routing
 * key: RabbitMQ returns a mandatory message before it acks it), a closed
 * connection or channel, and no confirm within the time limit are failed
 * attempts, retried with backoff. RabbitMQ does not deduplicate on
 * message_id: a message stored whose confirm was lost is stored again by
 * the retry, so consumers deduplicate on it (the inbox table,
 * docs/rabbitmq.md).
 *
 * A writer's headers never steer the broker: RabbitMQ reads the CC and
 * BCC headers as more routing keys (sender-selected distribution) and
 * x-* headers as its own (x-delay, x-death, x-match...), so neither an
 * event's headers nor a destination's may carry those names, nor the
 * names the relay sets itself.
 *
 * This file holds the kind's table, its rules and its callbacks;
 * rabbitmq_conn.c drives the connections.
 *
 * Runs in the relay worker, or in a backend running outbox_relay().
 *
 * src/kinds/rabbitmq/rabbitmq.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/memutils.h"

#include "cloudevents.h"
#include "envelope.h"
#include "event_template.h"
#include "format.h"
#include "headers.h"
#include "rabbitmq_int.h"

/* an option's URLs, as one string, at most */
#define RMQ_MAX_URLS_BYTES 4096
/* connections unused this long are closed (a destination deleted, renamed) */
#define RMQ_IDLE_CLOSE_MS (5 * 60 * 1000)
/* how often a socket without room for the next message is looked at */
#define RMQ_ROOM_POLL_MS 10

/*
 * CloudEvents' AMQP protocol binding (section 3.1.4): in binary mode each
 * attribute is an application property, here a header, named
 * "cloudEvents:" and the attribute, its value as is.
 */
static const OutboxCloudEventBinding rmq_ce_binding = {"cloudEvents:", false};

static const OutboxKindOption rmq_options[] = {
	{"urls", OUTBOX_OPTION_STRING, true, 1, RMQ_MAX_URLS_BYTES},
	{"vhost", OUTBOX_OPTION_STRING, false, 1, RMQ_SHORTSTR_MAX},
	{"user", OUTBOX_OPTION_STRING, false, 1, RMQ_SHORTSTR_MAX},
	{"password", OUTBOX_OPTION_STRING, false, 1, RMQ_SHORTSTR_MAX},
	{"tls_ca_file", OUTBOX_OPTION_STRING, false, 1, MAXPGPATH - 1},
	{"exchange", OUTBOX_OPTION_STRING, false, 1, RMQ_SHORTSTR_MAX},
	{"routing_key", OUTBOX_OPTION_STRING, false, 1, 1024},
	{"max_unconfirmed", OUTBOX_OPTION_INTEGER, false, 1, RMQ_MAX_UNCONFIRMED_LIMIT},
	{"max_message_bytes", OUTBOX_OPTION_INTEGER, false, 1024, RMQ_MAX_MESSAGE_BYTES_LIMIT},
	{NULL}
};

/* ---------------------------------------------------------------------
 * The rules
 * ---------------------------------------------------------------------
 */

/*
 * Whether a header named name would be read by RabbitMQ as its own, or
 * stands for what the relay sets: CC and BCC (sender-selected
 * distribution, RabbitMQ's docs), x-* (the broker's and its plugins'
 * arguments), outbox-* and content-type (the relay's).
 */
static bool
header_reserved(const char *name)
{
	/* and a name that is no AMQP short string cannot be sent */
	return strlen(name) > RMQ_SHORTSTR_MAX ||
		pg_strncasecmp(name, "x-", 2) == 0 || pg_strcasecmp(name, "cc") == 0 ||
		pg_strcasecmp(name, "bcc") == 0 || pg_strncasecmp(name, "outbox-", 7) == 0 ||
		pg_strcasecmp(name, "content-type") == 0;
}

/*
 * The URLs of option urls, split at commas and trimmed (palloc'd), or
 * NULL with *why set: at most RMQ_MAX_URLS, each amqp:// or amqps://
 * host[:port] with no credentials (they are options, so that a URL can be
 * named in messages) and no virtual host (the vhost option).
 */
char **
RabbitmqSplitUrls(const char *urls, int *n, const char **why)
{
	char	  **out = palloc0(sizeof(char *) * RMQ_MAX_URLS);
	char	   *copy = pstrdup(urls);
	char	   *save = NULL;

	*n = 0;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
	{
		struct amqp_connection_info info;
		char	   *scratch;
		char	   *rest;

		while (*tok == ' ')
			tok++;
		for (char *end = tok + strlen(tok); end > tok && end[-1] == ' '; end--)
			end[-1] = '\0';
		if (*n == RMQ_MAX_URLS)
			return (*why = "more than 16 URLs", NULL);
		if (*tok == '\0')
			return (*why = "a URL is empty", NULL);
		if (pg_strncasecmp(tok, "amqp://", 7) == 0)
			rest = tok + 7;
		else if (pg_strncasecmp(tok, "amqps://", 8) == 0)
			rest = tok + 8;
		else
			return (*why = "each URL starts with amqp:// or amqps://", NULL);
		if (strchr(rest, '@') != NULL)
			return (*why = "a URL holds no credentials: set the options user and password", NULL);
		if (strchr(rest, '/') != NULL && strcmp(strchr(rest, '/'), "/") != 0)
			return (*why = "a URL names no virtual host: set the option vhost", NULL);
		scratch = pstrdup(tok);
		if (amqp_parse_url(scratch, &info) != AMQP_STATUS_OK || info.host[0] == '\0')
			return (*why = "a URL is not an AMQP URL", NULL);
		out[(*n)++] = pstrdup(tok);
	}
	if (*n == 0)
		return (*why = "no URL", NULL);
	return out;
}

/* Whether s is a name RabbitMQ takes for an exchange: [A-Za-z0-9_.:-]. */
static bool
exchange_name_valid(const char *s)
{
	for (; *s; s++)
		if (!isalnum((unsigned char) *s) && strchr("-_.:", *s) == NULL)
			return false;
	return true;
}

/*
 * check_destination: the URLs, the exchange's name, the routing key (or
 * its template) and the destination's headers. From the BEFORE trigger on
 * outbox_destinations, in the writer's transaction; never quotes a value.
 */
static bool
rmq_check_destination(const OutboxDestinationRow *row, OutboxProblem *p)
{
	char	   *urls = OutboxDestinationOptionText(row, "urls");
	char	   *exchange = OutboxDestinationOptionText(row, "exchange");
	char	   *key = OutboxDestinationOptionText(row, "routing_key");
	const char *why = NULL;
	int			n;
	int			timeout_ms;
	Jsonb	   *headers;

	if (RabbitmqSplitUrls(urls, &n, &why) == NULL)
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination option \"urls\" is not valid"),
								psprintf("%c%s.", pg_toupper(why[0]), why + 1));
	/* the file's rule, as for a webhook's ca_file */
	if (!OutboxDestinationFileCheck(row, "tls_ca_file", "urls", p))
		return false;
	if (exchange != NULL && !exchange_name_valid(exchange))
		return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
								pstrdup("destination option \"exchange\" is not a RabbitMQ exchange name"),
								pstrdup("It has letters, digits, \"-\", \"_\", \".\" and \":\" only."));
	if (key != NULL)
	{
		StringInfoData sample;

		initStringInfo(&sample);
		if (!OutboxTemplateSample(key, &sample, &why))
			return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
									pstrdup("destination option \"routing_key\" is not valid"),
									psprintf("As a template of a routing key, %s.", why));
		if (sample.len > RMQ_SHORTSTR_MAX)
			return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
									pstrdup("destination option \"routing_key\" is too long"),
									psprintf("A routing key has at most %d bytes.", RMQ_SHORTSTR_MAX));
	}
	(void) OutboxDestinationSharedOptions(row, &timeout_ms, &headers);
	if (headers != NULL)
	{
		OutboxHeader *list;
		int			nh = OutboxHeaderList(headers, &list);

		for (int i = 0; i < nh; i++)
			if (header_reserved(list[i].name))
				return OutboxProblemSet(p, ERRCODE_CHECK_VIOLATION,
										pstrdup("a RabbitMQ destination's headers may not be named x-*, CC, BCC, outbox-* or content-type, nor longer than 255 bytes"),
										pstrdup("RabbitMQ reads CC, BCC and x-* headers as its own; the relay sets the others; an AMQP header's name has at most 255 bytes."));
	}
	return true;
}

/* decode: the options into a RmqDestOptions. */
static Size
rmq_decode(const OutboxDestinationRow *row, OutboxDestination *dest)
{
	RmqDestOptions *o = palloc0(sizeof(RmqDestOptions));
	int64		n;
	Size		size;

	o->urls = OutboxDestinationOptionText(row, "urls");
	o->vhost = OutboxDestinationOptionText(row, "vhost");
	if (o->vhost == NULL)
		o->vhost = pstrdup("/");
	o->user = OutboxDestinationOptionText(row, "user");
	if (o->user == NULL)
		o->user = pstrdup("guest");
	o->password = OutboxDestinationOptionText(row, "password");
	if (o->password == NULL)
		o->password = pstrdup("guest");
	o->ca_file = OutboxDestinationOptionText(row, "tls_ca_file");
	o->exchange = OutboxDestinationOptionText(row, "exchange");
	if (o->exchange == NULL)
		o->exchange = pstrdup("");
	o->routing_key = OutboxDestinationOptionText(row, "routing_key");
	o->max_unconfirmed = OutboxDestinationOptionInt(row, "max_unconfirmed", &n) ?
		(int) n : RMQ_DEFAULT_MAX_UNCONFIRMED;
	o->max_message_bytes = OutboxDestinationOptionInt(row, "max_message_bytes", &n) ?
		n : RMQ_DEFAULT_MAX_MESSAGE_BYTES;
	size = OutboxDestinationSharedOptions(row, &o->timeout_ms, &o->headers);
	if (o->timeout_ms < 0)
		o->timeout_ms = RMQ_DEFAULT_TIMEOUT_MS;
	dest->options = o;
	return sizeof(RmqDestOptions) + size + strlen(o->urls) + strlen(o->vhost) +
		strlen(o->user) + strlen(o->password) + strlen(o->exchange) +
		(o->ca_file ? strlen(o->ca_file) : 0) +
		(o->routing_key ? strlen(o->routing_key) : 0);
}

/* Sets ev's outcome to a failure with error (palloc'd). */
void
RabbitmqFail(OutboxEvent *ev, char *error, bool permanent)
{
	ev->ok = false;
	ev->permanent = permanent;
	ev->error = error;
}

/*
 * prepare: the event's headers follow the rules for headers, its routing
 * key can be built (the event type when the destination sets none) and
 * fits in 255 bytes; the body is in the destination's format, in UTF-8.
 */
static Size
rmq_prepare(void *state pg_attribute_unused(), OutboxEvent *ev)
{
	RmqDestOptions *o = RMQ_OPTIONS(ev);
	OutboxProblem p;
	const char *missing = NULL;
	const char *why = NULL;
	Size		cost;

	if (ev->headers != NULL && !OutboxHeadersCheck(ev->headers, true, &p))
	{
		RabbitmqFail(ev, p.message, true);
		return 0;
	}
	o->key = o->routing_key ? OutboxTemplateBuild(o->routing_key, ev, &missing, &why) :
		pstrdup(ev->event_type);
	if (o->key == NULL || strlen(o->key) > RMQ_SHORTSTR_MAX)
	{
		RabbitmqFail(ev, missing ?
					 psprintf("the routing key template uses %s, which the event does not have", missing) :
					 why ? psprintf("destination option \"routing_key\" is not valid: %s", why) :
					 psprintf("the routing key built for the event is longer than %d bytes",
							  RMQ_SHORTSTR_MAX), true);
		return 0;
	}
	cost = OutboxBodyToUtf8(ev, OutboxPrepareFormat(ev));
	if (ev->body != NULL && (int64) strlen(ev->body) > o->max_message_bytes)
	{
		/* the broker would close the channel, failing every message on it */
		RabbitmqFail(ev, psprintf("the message of %zu bytes is larger than the destination's max_message_bytes (" INT64_FORMAT ")",
								  strlen(ev->body), o->max_message_bytes), true);
		return 0;
	}
	return cost + strlen(o->key);
}

/* ---------------------------------------------------------------------
 * The message
 * ---------------------------------------------------------------------
 */

/* Appends header key: a string value to t, if value is set. */
static void
add_text(amqp_table_entry_t *t, int *n, const char *key, const char *value)
{
	if (value == NULL)
		return;
	t[*n].key = amqp_cstring_bytes(key);
	t[*n].value.kind = AMQP_FIELD_KIND_UTF8;
	t[*n].value.value.bytes = amqp_cstring_bytes(value);
	(*n)++;
}

/*
 * An upper bound of the bytes ev's message takes on the wire: its body,
 * and its properties and headers as RabbitmqPublish bounds them, with
 * every header the destination's and the event's could add. Computed once,
 * when the event is taken (rmq_enqueue), so that a batch is sized by what
 * it writes (pick_batch): a message with large headers must not pass as
 * small, or it would go out unguarded. Runs in the relay, no transaction,
 * after prepare (the routing key built); interruptible (the headers'
 * merge).
 */
Size
RabbitmqMessageBytes(OutboxEvent *ev)
{
	const RmqDestOptions *o = RMQ_OPTIONS(ev);
	OutboxHeader *merged;
	int			nmerged = OutboxMergeHeaders(o->headers, ev->headers, &merged);
	Size		body = strlen(ev->body);

	/*
	 * 1 kB for the frames' and properties' fixed parts, and 8 bytes of
	 * frame around each part of the body at the smallest frame_max
	 * AMQP allows (4,096)
	 */
	Size		bytes = 1024 + body + 8 * (body / 4088 + 1) +
		strlen(ev->event_type) * 2 + strlen(ev->event_id) * 2 + 5 * 8 +
		strlen(o->exchange) + strlen(ev->dest.fmt->content_type) +
		(o->key != NULL ? strlen(o->key) : 0);
	ListCell   *lc;

	if (ev->aggregate_type != NULL)
		bytes += strlen(ev->aggregate_type);
	if (ev->aggregate_id != NULL)
		bytes += strlen(ev->aggregate_id);
	for (int i = 0; i < nmerged; i++)
		bytes += strlen(merged[i].name) + strlen(merged[i].value) + 8;
	foreach(lc, ev->extra_headers)
		bytes += strlen(lfirst(lc)) + 8;
	return bytes;
}

/*
 * Publishes ev on c's channel: persistent, mandatory, message_id the
 * event_id, type the event type, timestamp its creation (Unix seconds),
 * content_type the format's; headers: the relay's outbox-*, then the
 * destination's and the event's that header_reserved lets through, then,
 * in binary CloudEvents, the event's attributes under the AMQP binding.
 * Returns rabbitmq-c's status (AMQP_STATUS_OK: written to the socket); or
 * sends nothing and sets *problem when the properties would not fit in one
 * frame of the broker's frame_max (the header frame, which rabbitmq-c then
 * cannot encode, and ends the connection), by an upper bound of their size.
 */
int
RabbitmqPublish(RmqConn *c, OutboxEvent *ev, char **problem)
{
	const RmqDestOptions *o = RMQ_OPTIONS(ev);
	OutboxHeader *merged;
	int			nmerged = OutboxMergeHeaders(o->headers, ev->headers, &merged);
	amqp_table_entry_t *entries = palloc0(sizeof(amqp_table_entry_t) *
										  (nmerged + 5 + list_length(ev->extra_headers)));
	ListCell   *lc;
	amqp_basic_properties_t props;
	int			n = 0;
	int			status;
	int			frame_max = amqp_get_frame_max(c->amqp);
	Size		bytes = 1024 + strlen(ev->event_type) + strlen(ev->event_id);

	add_text(entries, &n, "outbox-event-id", ev->event_id);
	add_text(entries, &n, "outbox-event-type", ev->event_type);
	add_text(entries, &n, "outbox-aggregate-type", ev->aggregate_type);
	add_text(entries, &n, "outbox-aggregate-id", ev->aggregate_id);
	entries[n].key = amqp_cstring_bytes("outbox-attempt");
	entries[n].value.kind = AMQP_FIELD_KIND_I32;
	entries[n].value.value.i32 = ev->attempts + 1;
	n++;
	for (int i = 0; i < nmerged; i++)
		if (!header_reserved(merged[i].name))
			add_text(entries, &n, merged[i].name, merged[i].value);
	/* binary CloudEvents: "cloudEvents:<attribute>: <value>" lines, built by prepare */
	foreach(lc, ev->extra_headers)
	{
		char	   *line = lfirst(lc);
		char	   *sep = strstr(line, ": ");

		if (sep != NULL)
			add_text(entries, &n, pnstrdup(line, sep - line), sep + 2);
	}
	*problem = NULL;
	for (int i = 0; i < n; i++)
		bytes += entries[i].key.len + 8 + (entries[i].value.kind == AMQP_FIELD_KIND_UTF8 ?
										   entries[i].value.value.bytes.len : 4);
	if (frame_max > 0 && bytes > (Size) frame_max)
	{
		*problem = psprintf("the message's properties and headers, up to %zu bytes, do not fit in a frame of %d bytes, the broker's frame_max",
							bytes, frame_max);
		pfree(entries);
		return AMQP_STATUS_OK;
	}

	memset(&props, 0, sizeof(props));
	props._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
		AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TIMESTAMP_FLAG |
		AMQP_BASIC_APP_ID_FLAG | AMQP_BASIC_HEADERS_FLAG;
	/* a short string: a longer type is in the outbox-event-type header only */
	if (strlen(ev->event_type) <= RMQ_SHORTSTR_MAX)
		props._flags |= AMQP_BASIC_TYPE_FLAG;
	props.content_type = amqp_cstring_bytes(ev->dest.fmt->content_type);
	props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
	props.message_id = amqp_cstring_bytes(ev->event_id);
	props.type = amqp_cstring_bytes(ev->event_type);
	props.timestamp = (uint64_t) (ev->created_at / USECS_PER_SEC +
								  (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY);
	props.app_id = amqp_cstring_bytes("outbox");
	props.headers.num_entries = n;
	props.headers.entries = entries;
	status = amqp_basic_publish(c->amqp, 1, amqp_cstring_bytes(c->exchange),
								amqp_cstring_bytes(o->key), 1, 0, &props,
								amqp_cstring_bytes(ev->body));
	pfree(entries);
	return status;
}

/* ---------------------------------------------------------------------
 * The kind's callbacks
 * ---------------------------------------------------------------------
 */

/* startup: no connection until the first event. */
static void *
rmq_startup(void)
{
	return palloc0(sizeof(RmqKindState));
}

/* enqueue: the event waits for its connection, its time limit running. */
static void
rmq_enqueue(void *state, OutboxEvent *ev)
{
	RmqConn    *c = RabbitmqConnFor(state, ev);
	/* first: it may be interrupted, and nothing is held yet */
	Size		size = RabbitmqMessageBytes(ev);
	RmqWaiting *w = MemoryContextAllocZero(c->cxt, sizeof(RmqWaiting));

	c->last_used = GetCurrentTimestamp();
	w->ev = ev;
	w->deadline = TimestampTzPlusMilliseconds(c->last_used, c->timeout_ms);
	w->size = size;
	/* over a limit the broker gave: dead-lettered at the next service */
	if (c->broker_max_size > 0 && (int64) strlen(ev->body) > c->broker_max_size)
		c->size_check = true;
	dlist_push_tail(&c->waiting, &w->node);
	c->nwaiting++;
	c->live++;
}

/*
 * collect: moves every connection along (rabbitmq_conn.c) and returns the
 * events whose outcome is known; closes connections that are superseded
 * or unused for RMQ_IDLE_CLOSE_MS once nothing of theirs is in flight.
 */
static List *
rmq_collect(void *state)
{
	RmqKindState *ks = state;
	List	   *done = NIL;
	ListCell   *lc;
	TimestampTz now = GetCurrentTimestamp();

	foreach(lc, ks->conns)
	{
		RmqConn    *c = lfirst(lc);

		RabbitmqService(c, &done);
		if (c->live == 0 && c->nunconfirmed == 0 &&
			TimestampDifferenceExceeds(c->last_used, now, RMQ_IDLE_CLOSE_MS))
			c->retiring = true;
		if (c->retiring && c->live == 0 && c->nunconfirmed == 0)
		{
			RabbitmqClose(c, NULL, &done);
			RabbitmqFreeConn(c);
			ks->conns = foreach_delete_current(ks->conns, lc);
			ks->generation++;
		}
	}
	CHECK_FOR_INTERRUPTS();
	return done;
}

/* pending: events taken whose outcome is not returned yet. */
static int
rmq_pending(void *state)
{
	RmqKindState *ks = state;
	int			n = 0;
	ListCell   *lc;

	foreach(lc, ks->conns)
		n += ((RmqConn *) lfirst(lc))->live;
	return n;
}

/*
 * busy: events taken, or messages not confirmed (abandoned ones too, whose
 * time limit collect keeps). A connection being made for events that
 * failed meanwhile is taken with the next event.
 */
static bool
rmq_busy(void *state)
{
	RmqKindState *ks = state;
	ListCell   *lc;

	foreach(lc, ks->conns)
	{
		RmqConn    *c = lfirst(lc);

		if (c->live > 0 || c->nunconfirmed > 0)
			return true;
	}
	return false;
}

/*
 * How many more events destination name can take: its cap less what its
 * connections hold (waiting, and published without a confirm, given-up
 * ones too). At least 0.
 */
static int
dest_room(RmqKindState *ks, const char *name, int cap)
{
	int			held = 0;
	ListCell   *lc;

	foreach(lc, ks->conns)
	{
		RmqConn    *c = lfirst(lc);

		if (strcmp(c->name, name) != 0)
			continue;
		if (!c->retiring)
			cap = c->cap;
		held += c->nwaiting + c->nunconfirmed;
	}
	return Max(cap - held, 0);
}

/* room: what dest_room says of ev's destination. */
static int
rmq_room(void *state, const OutboxEvent *ev)
{
	return dest_room(state, ev->dest.name, RMQ_OPTIONS(ev)->max_unconfirmed);
}

/* full: destinations without room. */
static List *
rmq_full(void *state)
{
	RmqKindState *ks = state;
	List	   *full = NIL;
	ListCell   *lc;

	foreach(lc, ks->conns)
	{
		RmqConn    *c = lfirst(lc);

		if (!c->retiring && dest_room(ks, c->name, c->cap) == 0)
			full = lappend(full, c->name);
	}
	return full;
}

/*
 * sockets: each connected connection's, to read. Room to write is polled
 * (timeout_ms): a writable socket is not yet one with room for a message.
 */
static uint64
rmq_sockets(void *state, const OutboxWaitSocket **socks, int *n)
{
	RmqKindState *ks = state;
	ListCell   *lc;

	if (ks->nsocks < list_length(ks->conns))
	{
		ks->nsocks = Max(list_length(ks->conns), 16);
		if (ks->socks != NULL)
			pfree(ks->socks);
		ks->socks = MemoryContextAlloc(TopMemoryContext, sizeof(OutboxWaitSocket) * ks->nsocks);
	}
	*n = 0;
	foreach(lc, ks->conns)
	{
		RmqConn    *c = lfirst(lc);

		if (c->phase != RMQ_READY)
			continue;
		ks->socks[*n].fd = c->fd;
		ks->socks[*n].events = WL_SOCKET_READABLE;
		(*n)++;
	}
	*socks = ks->socks;
	return ks->generation;
}

/*
 * socket_ready: while events are in hand, collect reads what came. A
 * connection with none is read here: the relay does not collect while it
 * has nothing in hand, and the broker's heartbeats (every 15 s at the 30 s
 * the relay asks for) are what wake it then, to send its own and to see a
 * connection closed. Such a read completes no event.
 */
static void
rmq_socket_ready(void *state, pgsocket fd, uint32 events pg_attribute_unused())
{
	RmqKindState *ks = state;
	ListCell   *lc;

	foreach(lc, ks->conns)
	{
		RmqConn    *c = lfirst(lc);

		if (c->phase == RMQ_READY && c->fd == fd && c->live == 0 && c->nunconfirmed == 0)
		{
			List	   *done = NIL;

			RabbitmqReadFrames(c, &done);
			Assert(done == NIL);
			return;
		}
	}
}

/* Moves *due to t if t comes first. */
static void
earlier(TimestampTz *due, TimestampTz t)
{
	if (*due == 0 || t < *due)
		*due = t;
}

/*
 * timeout_ms: the first time limit of a waiting or unconfirmed event, a
 * connection's next attempt while events wait, and, while a connection
 * has events in hand, its heartbeat (rabbitmq-c sends and checks them only
 * when called), its send buffer's room and frames left to read. An idle
 * connection asks for no wake-up: the broker's heartbeats wake the relay
 * (socket_ready).
 */
static long
rmq_timeout_ms(void *state)
{
	RmqKindState *ks = state;
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz due = 0;
	ListCell   *lc;

	foreach(lc, ks->conns)
	{
		RmqConn    *c = lfirst(lc);

		if (c->nwaiting > 0)
			earlier(&due, dlist_head_element(RmqWaiting, node, &c->waiting)->deadline);
		if (c->nwaiting > 0 && c->phase == RMQ_BACKING_OFF)
			earlier(&due, c->retry_at);
		if (c->nunconfirmed > 0)
			earlier(&due, dlist_head_element(RmqUnconfirmed, node, &c->unconfirmed)->deadline);
		/* what collect does, which runs only while events are in hand */
		if (c->phase != RMQ_READY || (c->live == 0 && c->nunconfirmed == 0))
			continue;
		if (c->heartbeat_ms > 0)
			earlier(&due, TimestampTzPlusMilliseconds(c->last_io, c->heartbeat_ms / 2));
		if (c->want_write)
			earlier(&due, TimestampTzPlusMilliseconds(now, RMQ_ROOM_POLL_MS));
		if (c->more)
			earlier(&due, now);
	}
	if (due == 0)
		return -1;
	if (due <= now)
		return 0;
	return (long) Min((due - now + 999) / 1000, (TimestampTz) PG_INT32_MAX);
}

/*
 * abandon: forgets every event taken. Waiting ones are dropped; published
 * ones keep their tag until confirmed. Must not throw.
 */
static void
rmq_abandon(void *state)
{
	RmqKindState *ks = state;
	ListCell   *lc;

	foreach(lc, ks->conns)
	{
		RmqConn    *c = lfirst(lc);
		dlist_mutable_iter iter;
		dlist_iter	it;

		dlist_foreach_modify(iter, &c->waiting)
		{
			dlist_delete(iter.cur);
			pfree(dlist_container(RmqWaiting, node, iter.cur));
		}
		c->nwaiting = 0;
		dlist_foreach(it, &c->unconfirmed)
			dlist_container(RmqUnconfirmed, node, it.cur)->ev = NULL;
		c->live = 0;
	}
}

/* The RabbitMQ kind: published after COMMIT, delivered when confirmed. */
extern const OutboxDestinationKind OutboxRabbitmqKind;	/* src/kinds/registry.c */

const OutboxDestinationKind OutboxRabbitmqKind = {
	.name = "rabbitmq",
	.description = "a RabbitMQ exchange",
	.target_column = "urls",
	.own_columns = (const OutboxKindColumn[]) {{NULL}},
	.options = rmq_options,
	.formats = (const char *const[]) {
		OUTBOX_FORMAT_ENVELOPE, OUTBOX_FORMAT_CLOUDEVENTS, OUTBOX_FORMAT_CLOUDEVENTS_BINARY, NULL
	},
	.binding = &rmq_ce_binding,
	.send_point = OUTBOX_SEND_AFTER_COMMIT,
	.options_size = sizeof(RmqDestOptions),
	/* RabbitMQ keeps no record of message_ids */
	.room_bounds_copies = true,
	.check_destination = rmq_check_destination,
	.decode = rmq_decode,
	.startup = rmq_startup,
	.prepare = rmq_prepare,
	.enqueue = rmq_enqueue,
	.collect = rmq_collect,
	.pending = rmq_pending,
	.busy = rmq_busy,
	.full = rmq_full,
	.room = rmq_room,
	.sockets = rmq_sockets,
	.timeout_ms = rmq_timeout_ms,
	.socket_ready = rmq_socket_ready,
	.abandon = rmq_abandon,
};
