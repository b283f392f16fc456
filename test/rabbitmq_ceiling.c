/*
 * rabbitmq_ceiling: the broker's own ceiling for the benchmark, measured by
 * a confirmed publisher written with rabbitmq-c, the library the relay
 * uses, so that the figure is the broker's and not a client's.
 *
 *   rabbitmq_ceiling PORT USER PASSWORD QUEUE COUNT SIZE WINDOW [TYPE ATYPE AID]
 *
 * Publishes COUNT persistent messages of SIZE bytes to QUEUE on 127.0.0.1
 * through the default exchange, on a channel in confirm mode, with at most
 * WINDOW unconfirmed at any time (a sliding window), corked while it
 * writes a burst as the relay does. With TYPE, ATYPE and AID, each message
 * also carries what the relay's do: mandatory, a 36-character message id,
 * content type, type, timestamp, app id and the outbox-* headers. Prints
 * the seconds from the first publish to the last confirm; exits 1 on a
 * nack, a return or a broken connection.
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <amqp.h>
#include <amqp_tcp_socket.h>

static void
fail(const char *what)
{
	fprintf(stderr, "rabbitmq_ceiling: %s\n", what);
	exit(1);
}

static void
check_reply(amqp_rpc_reply_t r, const char *what)
{
	if (r.reply_type != AMQP_RESPONSE_NORMAL)
		fail(what);
}

static void
cork(int fd, int on)
{
#ifdef TCP_CORK
	(void) setsockopt(fd, IPPROTO_TCP, TCP_CORK, &on, sizeof(on));
#endif
}

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static amqp_table_entry_t
text_entry(const char *key, const char *value)
{
	amqp_table_entry_t e;

	e.key = amqp_cstring_bytes(key);
	e.value.kind = AMQP_FIELD_KIND_UTF8;
	e.value.value.bytes = amqp_cstring_bytes(value);
	return e;
}

/* confirmed[tag]: whether the broker has confirmed the message of that delivery tag */
static char *confirmed;

/* reads one frame: the delivery tag up to which every message is confirmed */
static uint64_t
read_confirm(amqp_connection_state_t conn, uint64_t acked)
{
	amqp_frame_t frame;

	if (amqp_simple_wait_frame(conn, &frame) != AMQP_STATUS_OK)
		fail("connection lost");
	if (frame.frame_type != AMQP_FRAME_METHOD)
		return acked;
	switch (frame.payload.method.id)
	{
		case AMQP_BASIC_ACK_METHOD:
			{
				amqp_basic_ack_t *ack = frame.payload.method.decoded;

				if (ack->multiple)
					for (uint64_t t = acked + 1; t <= ack->delivery_tag; t++)
						confirmed[t] = 1;
				else
					confirmed[ack->delivery_tag] = 1;
				while (confirmed[acked + 1])
					acked++;
				return acked;
			}
		case AMQP_BASIC_NACK_METHOD:
			fail("a message was nacked");
			break;
		case AMQP_BASIC_RETURN_METHOD:
			fail("a message was returned");
			break;
		default:
			fail("an unexpected method");
	}
	return acked;
}

int
main(int argc, char **argv)
{
	amqp_connection_state_t conn;
	amqp_socket_t *sock;
	long		count;
	long		size;
	long		window;
	int			like = argc >= 11;
	char	   *body;
	char		id[64];
	uint64_t	sent = 0;
	uint64_t	acked = 0;
	double		start;
	int			fd;

	if (argc != 8 && argc != 11)
		fail("usage: PORT USER PASSWORD QUEUE COUNT SIZE WINDOW [TYPE ATYPE AID]");
	count = atol(argv[5]);
	size = atol(argv[6]);
	window = atol(argv[7]);
	if (count < 1 || size < 0 || window < 1)
		fail("COUNT and WINDOW must be at least 1, SIZE at least 0");
	body = malloc(size);
	memset(body, 'x', size);
	confirmed = calloc(count + 2, 1);

	conn = amqp_new_connection();
	sock = amqp_tcp_socket_new(conn);
	if (sock == NULL || amqp_socket_open(sock, "127.0.0.1", atoi(argv[1])) != AMQP_STATUS_OK)
		fail("cannot connect");
	check_reply(amqp_login(conn, "/", 0, 131072, 60, AMQP_SASL_METHOD_PLAIN, argv[2], argv[3]),
				"cannot log in");
	amqp_channel_open(conn, 1);
	check_reply(amqp_get_rpc_reply(conn), "cannot open a channel");
	amqp_confirm_select(conn, 1);
	check_reply(amqp_get_rpc_reply(conn), "cannot select confirms");
	fd = amqp_get_sockfd(conn);

	start = now();
	while (acked < (uint64_t) count)
	{
		cork(fd, 1);
		while (sent < (uint64_t) count && sent - acked < (uint64_t) window)
		{
			amqp_basic_properties_t props;
			amqp_table_entry_t entries[5];

			memset(&props, 0, sizeof(props));
			snprintf(id, sizeof(id), "00000000-0000-7000-8000-%012llu", (unsigned long long) sent);
			props._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG;
			props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
			props.message_id = amqp_cstring_bytes(id);
			if (like)
			{
				entries[0] = text_entry("outbox-event-id", id);
				entries[1] = text_entry("outbox-event-type", argv[8]);
				entries[2] = text_entry("outbox-aggregate-type", argv[9]);
				entries[3] = text_entry("outbox-aggregate-id", argv[10]);
				entries[4].key = amqp_cstring_bytes("outbox-attempt");
				entries[4].value.kind = AMQP_FIELD_KIND_I32;
				entries[4].value.value.i32 = 1;
				props._flags |= AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_TYPE_FLAG |
					AMQP_BASIC_TIMESTAMP_FLAG | AMQP_BASIC_APP_ID_FLAG | AMQP_BASIC_HEADERS_FLAG;
				props.content_type = amqp_cstring_bytes("application/json");
				props.type = amqp_cstring_bytes(argv[8]);
				props.timestamp = (uint64_t) time(NULL);
				props.app_id = amqp_cstring_bytes("outbox");
				props.headers.num_entries = 5;
				props.headers.entries = entries;
			}
			if (amqp_basic_publish(conn, 1, amqp_cstring_bytes(""), amqp_cstring_bytes(argv[4]),
								   like, 0, &props,
								   (amqp_bytes_t) {.len = size, .bytes = body}) != AMQP_STATUS_OK)
				fail("cannot publish");
			sent++;
		}
		cork(fd, 0);
		/* wait for one frame, then take those already read without waiting */
		acked = read_confirm(conn, acked);
		while (amqp_frames_enqueued(conn) || amqp_data_in_buffer(conn))
			acked = read_confirm(conn, acked);
	}
	printf("%.6f\n", now() - start);
	amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
	amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
	amqp_destroy_connection(conn);
	return 0;
}
