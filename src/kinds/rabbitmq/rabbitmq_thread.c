/*-------------------------------------------------------------------------
 *
 * rabbitmq_thread.c
 *	  What of the RabbitMQ kind runs on a thread other than the process's
 *	  own: making a connection (connect_main), whose steps rabbitmq-c
 *	  takes as blocking calls (the TCP connect, the AMQP handshake and
 *	  login, opening the channel, checking the exchange, turning on
 *	  confirms), so that a broker that answers slowly or never holds the
 *	  relay up for none of them, and SIGTERM ends it at once.
 *
 * Once made, the connection is handed to the relay, which alone uses it
 * from then on (rabbitmq-c's connection is used by one thread at a time).
 *
 * The contract of every function that runs on the thread:
 *	 - it calls rabbitmq-c, OpenSSL (an amqps:// server's CAs) and the C
 *	   library, and of PostgreSQL only SetLatch (safe from any thread of
 *	   the process), and that only until the process starts to exit
 *	   (connect_exiting, before shared memory, where a worker's latch is,
 *	   goes), and what destination.h says is safe on any thread
 *	   (OutboxReadFile, OutboxDeadlineIn);
 *	 - it never pallocs, raises, logs or checks for interrupts: it reports
 *	   in fixed buffers, which the relay turns into text;
 *	 - it reads of RmqConnect what was set before it started, and touches
 *	   its shared fields under mu only;
 *	 - it starts with every signal blocked, so PostgreSQL's handlers run
 *	   on the process's own thread only.
 *
 * src/kinds/rabbitmq/rabbitmq_thread.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

/* libssl comes with librabbitmq, which is built with it for amqps:// */
#include <openssl/crypto.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"

#include "rabbitmq_int.h"

/*
 * The process is exiting: no thread sets the latch any more (exiting), and
 * a thread still running when the C library's exit handlers start could
 * be using OpenSSL while its own exit handler frees it, so then the
 * process ends at once (exit_guard), with its exit code. Under exit_mu.
 */
static pthread_mutex_t exit_mu = PTHREAD_MUTEX_INITIALIZER;
static bool exiting = false;
static int	exit_code = 0;
static int	running = 0;		/* connect threads not ended */
static bool exit_callback = false;

/* Appends printf-style text to a->error, cut at its size. */
static void
report(RmqConnect *a, const char *fmt,...) pg_attribute_printf(2, 3);

static void
report(RmqConnect *a, const char *fmt,...)
{
	size_t		have = strlen(a->error);
	va_list		ap;

	if (have + 1 >= sizeof(a->error))
		return;
	va_start(ap, fmt);
	vsnprintf(a->error + have, sizeof(a->error) - have, fmt, ap);
	va_end(ap);
}

/* Reports what went wrong at step, if the reply says something did; true if not. */
static bool
reply_ok(RmqConnect *a, amqp_rpc_reply_t r, const char *step)
{
	switch (r.reply_type)
	{
		case AMQP_RESPONSE_NORMAL:
			return true;
		case AMQP_RESPONSE_NONE:
			report(a, "%s: no answer", step);
			break;
		case AMQP_RESPONSE_LIBRARY_EXCEPTION:
			report(a, "%s: %s", step, amqp_error_string2(r.library_error));
			break;
		case AMQP_RESPONSE_SERVER_EXCEPTION:
			if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD)
			{
				amqp_connection_close_t *m = r.reply.decoded;

				report(a, "%s: RabbitMQ closed the connection: %u %.*s", step, m->reply_code,
					   (int) m->reply_text.len, (char *) m->reply_text.bytes);
			}
			else if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD)
			{
				amqp_channel_close_t *m = r.reply.decoded;

				report(a, "%s: RabbitMQ closed the channel: %u %.*s", step, m->reply_code,
					   (int) m->reply_text.len, (char *) m->reply_text.bytes);
			}
			else
				report(a, "%s: an unexpected answer (method 0x%08X)", step, r.reply.id);
			break;
	}
	return false;
}

/* A table entry key: a boolean true. */
static amqp_table_entry_t
true_entry(const char *key)
{
	amqp_table_entry_t e;

	e.key = amqp_cstring_bytes(key);
	e.value.kind = AMQP_FIELD_KIND_BOOLEAN;
	e.value.value.boolean = 1;
	return e;
}

/*
 * The CAs an amqps:// server's certificate must chain to: the PEM
 * certificates of a->ca_file, read with OutboxReadFile (a regular file of
 * at most 1 MB, within the time limit) and handed to OpenSSL from memory,
 * never by path; without one, the system's. rabbitmq-c checks the chain
 * and the host name. True, or false with the failure reported.
 */
static bool
tls_trust(RmqConnect *a, amqp_socket_t *sock)
{
	SSL_CTX    *ctx = amqp_ssl_socket_get_context(sock);
	struct timespec deadline = OutboxDeadlineIn(a->timeout_ms);
	char		error[256];
	char	   *pem;
	size_t		len;
	struct stat st;
	BIO		   *bio;
	X509	   *cert;
	int			added = 0;

	amqp_ssl_socket_set_verify_peer(sock, 1);
	amqp_ssl_socket_set_verify_hostname(sock, 1);
	if (a->ca_file == NULL)
	{
		if (SSL_CTX_set_default_verify_paths(ctx) != 1)
			report(a, "cannot load the system's CA certificates");
		return true;
	}
	if (!OutboxReadFile(a->ca_file, "tls_ca_file", &deadline, &pem, &len, &st,
						error, sizeof(error)))
	{
		report(a, "%s", error);
		return false;
	}
	bio = BIO_new_mem_buf(pem, (int) len);
	while (bio != NULL && (cert = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL)
	{
		if (X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), cert) == 1)
			added++;
		X509_free(cert);
	}
	if (bio != NULL)
		BIO_free(bio);
	free(pem);
	if (added == 0)
	{
		report(a, "destination tls_ca_file holds no PEM certificate");
		return false;
	}
	return true;
}

/*
 * Logs in on conn (its socket open), opens channel 1, checks that the
 * exchange exists (a passive declare: a missing one is said now, not by a
 * channel closed at the first publish), and puts the channel in confirm
 * mode; the connection asks to be told when the broker blocks it
 * (connection.blocked). Each step waits at most tv. True, or false with
 * the failure reported.
 */
static bool
setup(RmqConnect *a, amqp_connection_state_t conn, struct timeval *tv)
{
	amqp_table_entry_t caps[3];
	amqp_table_entry_t props[2];
	amqp_table_t table;
	char		step[RMQ_SHORTSTR_MAX + 32];

	caps[0] = true_entry("connection.blocked");
	caps[1] = true_entry("publisher_confirms");
	caps[2] = true_entry("authentication_failure_close");
	props[0].key = amqp_cstring_bytes("capabilities");
	props[0].value.kind = AMQP_FIELD_KIND_TABLE;
	props[0].value.value.table.num_entries = lengthof(caps);
	props[0].value.value.table.entries = caps;
	props[1].key = amqp_cstring_bytes("connection_name");
	props[1].value.kind = AMQP_FIELD_KIND_UTF8;
	props[1].value.value.bytes = amqp_cstring_bytes(a->connection_name);
	table.num_entries = lengthof(props);
	table.entries = props;

	if (amqp_set_handshake_timeout(conn, tv) != AMQP_STATUS_OK ||
		amqp_set_rpc_timeout(conn, tv) != AMQP_STATUS_OK)
	{
		report(a, "cannot set rabbitmq-c's time limits");
		return false;
	}
	if (!reply_ok(a, amqp_login_with_properties(conn, a->vhost, 1, RMQ_FRAME_MAX, RMQ_HEARTBEAT_S,
												&table, AMQP_SASL_METHOD_PLAIN,
												a->user, a->password), "logging in"))
		return false;
	amqp_channel_open(conn, 1);
	if (!reply_ok(a, amqp_get_rpc_reply(conn), "opening a channel"))
		return false;
	if (a->exchange[0] != '\0')
	{
		amqp_exchange_declare(conn, 1, amqp_cstring_bytes(a->exchange), amqp_cstring_bytes("direct"),
							  1, 0, 0, 0, amqp_empty_table);
		snprintf(step, sizeof(step), "checking exchange \"%s\"", a->exchange);
		if (!reply_ok(a, amqp_get_rpc_reply(conn), step))
			return false;
	}
	amqp_confirm_select(conn, 1);
	return reply_ok(a, amqp_get_rpc_reply(conn), "turning on publisher confirms");
}

/* Frees a and what it holds (a connection the relay did not take). */
static void
connect_free(RmqConnect *a)
{
	if (a->conn != NULL)
		amqp_destroy_connection(a->conn);
	pthread_mutex_destroy(&a->mu);
	free(a);
}

/*
 * The thread: connects to the first URL that takes it, in turn, then
 * hands the connection over (finished), or frees everything if the relay
 * gave up on it (abandoned).
 */
static void *
connect_main(void *arg)
{
	RmqConnect *a = arg;
	struct timeval tv;
	amqp_connection_state_t made = NULL;
	bool		abandoned;

	tv.tv_sec = a->timeout_ms / 1000;
	tv.tv_usec = (a->timeout_ms % 1000) * 1000;
	for (int i = 0; i < a->nurls && made == NULL; i++)
	{
		amqp_connection_state_t conn = amqp_new_connection();
		amqp_socket_t *sock = NULL;
		int			status;

		report(a, "%s%s: ", i > 0 ? "; " : "", a->urls[i]);
		if (conn != NULL)
			sock = a->tls[i] ? amqp_ssl_socket_new(conn) : amqp_tcp_socket_new(conn);
		if (sock == NULL)
			report(a, "out of memory");
		else if (a->tls[i] && !tls_trust(a, sock))
			;					/* reported */
		else if ((status = amqp_socket_open_noblock(sock, a->hosts[i], a->ports[i], &tv)) != AMQP_STATUS_OK)
			report(a, "cannot connect: %s", amqp_error_string2(status));
		else if (setup(a, conn, &tv))
		{
			made = conn;
			break;
		}
		if (conn != NULL)
			amqp_destroy_connection(conn);
	}

	pthread_mutex_lock(&a->mu);
	a->conn = made;
	a->finished = true;
	abandoned = a->abandoned;
	pthread_mutex_unlock(&a->mu);
	if (abandoned)
		connect_free(a);
	pthread_mutex_lock(&exit_mu);
	if (!abandoned && !exiting)
		SetLatch(MyLatch);
	running--;
	pthread_mutex_unlock(&exit_mu);
	return NULL;
}

/*
 * before_shmem_exit: from now on no thread of the kind sets the latch; and
 * the exit code, for exit_guard.
 */
static void
connect_exiting(int code, Datum arg pg_attribute_unused())
{
	pthread_mutex_lock(&exit_mu);
	exiting = true;
	exit_code = code;
	pthread_mutex_unlock(&exit_mu);
}

/*
 * An atexit handler, registered after OpenSSL's (RabbitmqConnectStart),
 * so run before it: with a connect thread still running, ends the process
 * at once with its exit code, PostgreSQL's exit callbacks done and the
 * libraries' handlers not run.
 */
static void
exit_guard(void)
{
	bool		left;

	pthread_mutex_lock(&exit_mu);
	left = running > 0;
	pthread_mutex_unlock(&exit_mu);
	if (left)
		_exit(exit_code);
}

/* Copies s into the arena at *p, returning the copy. */
static char *
arena_copy(char **p, const char *s)
{
	char	   *out = *p;
	size_t		n = strlen(s) + 1;

	memcpy(out, s, n);
	*p += n;
	return out;
}

/*
 * Starts making c's connection on a thread of its own: one malloc'd block
 * holds what the thread reads (c's URLs, parsed, and credentials). NULL
 * with *error set if the thread cannot start. Relay thread; the caller
 * polls it with RabbitmqConnectDone.
 */
RmqConnect *
RabbitmqConnectStart(const RmqConn *c, const char **error)
{
	size_t		size = sizeof(RmqConnect) + strlen(c->vhost) + strlen(c->user) +
		strlen(c->password) + strlen(c->exchange) + strlen(c->name) +
		(c->ca_file ? strlen(c->ca_file) : 0) + 64;
	RmqConnect *a;
	char	   *p;
	sigset_t	all;
	sigset_t	old;
	int			rc;

	if (!exit_callback)
	{
		before_shmem_exit(connect_exiting, 0);
		/* OpenSSL registers its exit handler when first initialized */
		(void) OPENSSL_init_ssl(0, NULL);
		if (atexit(exit_guard) != 0)
			return (*error = "cannot register an exit handler", NULL);
		exit_callback = true;
	}
	for (int i = 0; i < c->nurls; i++)
		size += 2 * strlen(c->urls[i]) + 2;
	a = calloc(1, size);
	if (a == NULL)
		return (*error = "out of memory", NULL);
	p = (char *) (a + 1);
	pthread_mutex_init(&a->mu, NULL);
	a->nurls = c->nurls;
	for (int i = 0; i < c->nurls; i++)
	{
		struct amqp_connection_info info;
		char	   *scratch = arena_copy(&p, c->urls[i]);

		a->urls[i] = arena_copy(&p, c->urls[i]);
		/* checked when the destination was written */
		if (amqp_parse_url(scratch, &info) == AMQP_STATUS_OK)
		{
			a->hosts[i] = info.host;
			a->ports[i] = info.port;
			a->tls[i] = info.ssl;
		}
		else
			a->hosts[i] = "";
	}
	a->vhost = arena_copy(&p, c->vhost);
	a->user = arena_copy(&p, c->user);
	a->password = arena_copy(&p, c->password);
	a->exchange = arena_copy(&p, c->exchange);
	a->ca_file = c->ca_file ? arena_copy(&p, c->ca_file) : NULL;
	snprintf(a->connection_name, sizeof(a->connection_name), "outbox relay, destination %s", c->name);
	a->timeout_ms = c->timeout_ms;

	pthread_mutex_lock(&exit_mu);
	running++;
	pthread_mutex_unlock(&exit_mu);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&a->thread, NULL, connect_main, a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
	{
		pthread_mutex_lock(&exit_mu);
		running--;
		pthread_mutex_unlock(&exit_mu);
		connect_free(a);
		return (*error = "cannot start a thread to connect", NULL);
	}
	return a;
}

/*
 * Whether a's thread has finished; then joins it, sets *conn (NULL if no
 * URL took the connection, with *error saying why for each), and frees a.
 * Relay thread.
 */
bool
RabbitmqConnectDone(RmqConnect *a, amqp_connection_state_t *conn, char **error)
{
	bool		finished;

	pthread_mutex_lock(&a->mu);
	finished = a->finished;
	pthread_mutex_unlock(&a->mu);
	if (!finished)
		return false;
	pthread_join(a->thread, NULL);
	*conn = a->conn;
	a->conn = NULL;
	*error = *conn ? NULL : OutboxRedact(a->error, strlen(a->error));
	connect_free(a);
	return true;
}

/*
 * Gives a up: its thread frees it when it finishes, or it is freed now if
 * it has. Relay thread; must not throw.
 */
void
RabbitmqConnectAbandon(RmqConnect *a)
{
	bool		finished;
	pthread_t	thread;

	/* once abandoned is set, a thread that finishes frees a: copy first */
	pthread_mutex_lock(&a->mu);
	finished = a->finished;
	thread = a->thread;
	a->abandoned = true;
	pthread_mutex_unlock(&a->mu);
	if (finished)
	{
		pthread_join(thread, NULL);
		connect_free(a);
	}
	else
		pthread_detach(thread);
}
