/*-------------------------------------------------------------------------
 *
 * http_sockets.c
 *	  libcurl's sockets and timer in the relay's wait, for the webhook
 *	  kind: the multi handle and its socket and timer callbacks, the kind's
 *	  epoll instance, and the sockets and socket_ready callbacks.
 *
 * libcurl is driven by its socket interface: the sockets it asks to watch
 * go into the relay's one wait (wait.c), which hands the ready ones back
 * (socket_ready), so an answer wakes the relay at once; its timer comes
 * back as the kind's timeout_ms (http_collect.c). On Linux they go there
 * as one epoll instance of the kind's own, which the socket callback keeps
 * up to date with one epoll_ctl per change: libcurl changes what it
 * watches for every request (a kept-alive connection is watched only while
 * a request uses it), and the relay's WaitEventSet, which cannot remove a
 * socket, would have to be built again each time (about 8 % of the relay's
 * CPU under load, measured). Without epoll, the sockets go into the wait
 * as they are.
 *
 * libcurl's callbacks get the kind's state (HttpState) as their userdata.
 *
 * src/kinds/http/http_sockets.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <curl/curl.h>
#include <poll.h>
#ifdef HAVE_SYS_EPOLL_H
#include <sys/epoll.h>
#endif
#include <unistd.h>

#include "storage/latch.h"
#include "utils/timestamp.h"

#include "destination.h"
#include "http_int.h"
#include "http_targets.h"

/* ready sockets handed to libcurl per socket_ready, at most */
#define MAX_READY 64

/*
 * Registers socket s in epoll_fd for events (0: removes it); had: what it
 * was registered for. Returns false on failure (errno set). Without epoll,
 * true.
 */
static bool
epoll_update(HttpState *st, curl_socket_t s, uint32 had, uint32 events)
{
#ifdef HAVE_SYS_EPOLL_H
	struct epoll_event ev;

	if (st->epoll_fd < 0)
		return true;
	ev.events = ((events & WL_SOCKET_READABLE) ? EPOLLIN : 0) |
		((events & WL_SOCKET_WRITEABLE) ? EPOLLOUT : 0);
	ev.data.fd = s;
	if (events == 0)
		/* libcurl may have closed it already, which removed it */
		return epoll_ctl(st->epoll_fd, EPOLL_CTL_DEL, s, &ev) == 0 ||
			errno == EBADF || errno == ENOENT;
	return epoll_ctl(st->epoll_fd, had == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, s, &ev) == 0;
#else
	return true;
#endif
}

/*
 * libcurl socket callback (userp: the kind's state): notes what libcurl
 * wants of socket s (CURL_POLL_IN, _OUT, _INOUT, or _REMOVE when it is
 * done with it), and updates epoll_fd. Must not throw or allocate;
 * returning -1 fails the transfers (a full table, which the connection
 * limit rules out, or an epoll_ctl that failed: out of kernel memory).
 */
static int
socket_changed(CURL *easy pg_attribute_unused(), curl_socket_t s, int what,
			   void *userp, void *socketp pg_attribute_unused())
{
	HttpState  *st = (HttpState *) userp;
	uint32		events = 0;
	int			i;

	if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
		events |= WL_SOCKET_READABLE;
	if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
		events |= WL_SOCKET_WRITEABLE;
	for (i = 0; i < st->nsockets; i++)
		if (st->sockets[i].fd == s)
			break;
	if (what == CURL_POLL_REMOVE)
	{
		if (i < st->nsockets)
		{
			bool		ok = epoll_update(st, s, st->sockets[i].events, 0);

			st->sockets[i] = st->sockets[--st->nsockets];
			st->sockets_generation++;
			return ok ? 0 : -1;
		}
		return 0;
	}
	if (i == st->nsockets)
	{
		if (st->nsockets == MAX_SOCKETS)
			return -1;
		st->sockets[st->nsockets].fd = s;
		st->sockets[st->nsockets].events = 0;
		st->nsockets++;
	}
	if (st->sockets[i].events != events)
	{
		uint32		had = st->sockets[i].events;

		st->sockets[i].events = events;
		st->sockets_generation++;
		if (!epoll_update(st, s, had, events))
			return -1;
	}
	return 0;
}

/*
 * libcurl timer callback (userp: the kind's state): libcurl wants
 * curl_multi_socket_action with CURL_SOCKET_TIMEOUT in timeout_ms (0: as
 * soon as possible; -1: no timer). Only notes when; collect makes the call
 * (OutboxHttpRunTimers). Must not throw.
 */
static int
timer_changed(CURLM *m pg_attribute_unused(), long timeout_ms, void *userp)
{
	HttpState  *st = (HttpState *) userp;

	st->curl_due = timeout_ms < 0 ? 0 :
		TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	return 0;
}

/*
 * A new multi handle, its callbacks set with st as their userdata, and
 * st's sockets those of the new handle (none yet); FATAL if out of memory.
 */
CURLM *
OutboxHttpNewMulti(HttpState *st)
{
	CURLM	   *m = curl_multi_init();

	if (m == NULL ||
		curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, socket_changed) != CURLM_OK ||
		curl_multi_setopt(m, CURLMOPT_SOCKETDATA, st) != CURLM_OK ||
		curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, timer_changed) != CURLM_OK ||
		curl_multi_setopt(m, CURLMOPT_TIMERDATA, st) != CURLM_OK)
		ereport(FATAL,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("could not create a libcurl multi handle")));
	st->nsockets = 0;
	st->sockets_generation++;
	st->curl_due = 0;
	st->multi_generation = OutboxTargetsGeneration();
#ifdef HAVE_SYS_EPOLL_H
	/* a new set: the old multi handle's sockets may still be in the old one */
	if (st->epoll_fd >= 0)
		close(st->epoll_fd);
	/* without one (out of descriptors), the sockets go into the wait as they are */
	st->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	st->epoll_socket[0].fd = st->epoll_fd;
	st->epoll_socket[0].events = WL_SOCKET_READABLE;
	/* the relay's wait takes in the new descriptor, even if its number is the old one's */
	st->epoll_generation = ++st->sockets_generation;
#endif
	return m;
}

/* libcurl reads or writes socket fd, as mask (CURL_CSELECT_*) says. */
static void
socket_action(HttpState *st, curl_socket_t fd, int mask)
{
	int			still;
	CURLMcode	mc = curl_multi_socket_action(st->multi, fd, mask, &still);

	if (mc != CURLM_OK)
		elog(ERROR, "HTTP transfers failed: %s", curl_multi_strerror(mc));
}

/* Runs libcurl's timers if they are due: new requests connect and send. */
void
OutboxHttpRunTimers(HttpState *st)
{
	int			still;
	CURLMcode	mc;

	if (st->curl_due == 0 || GetCurrentTimestamp() < st->curl_due)
		return;
	st->curl_due = 0;
	mc = curl_multi_socket_action(st->multi, CURL_SOCKET_TIMEOUT, 0, &still);
	if (mc != CURLM_OK)
		elog(ERROR, "HTTP transfers failed: %s", curl_multi_strerror(mc));
}

#ifdef HAVE_SYS_EPOLL_H
/*
 * Hands libcurl each socket of epoll_fd that is ready now; more than
 * MAX_READY: the rest are ready again at the next look.
 */
static void
epoll_dispatch(HttpState *st)
{
	struct epoll_event ready[MAX_READY];
	int			n = epoll_wait(st->epoll_fd, ready, MAX_READY, 0);

	for (int i = 0; i < n; i++)
		socket_action(st, ready[i].data.fd,
					  ((ready[i].events & (EPOLLIN | EPOLLHUP)) ? CURL_CSELECT_IN : 0) |
					  ((ready[i].events & EPOLLOUT) ? CURL_CSELECT_OUT : 0) |
					  ((ready[i].events & EPOLLERR) ? CURL_CSELECT_ERR : 0));
}
#endif

/*
 * Hands libcurl every socket that is ready now, without waiting: what the
 * endpoints sent is read before a request is ended for its time limit.
 */
void
OutboxHttpReadReadySockets(HttpState *st)
{
#ifdef HAVE_SYS_EPOLL_H
	if (st->epoll_fd >= 0)
	{
		epoll_dispatch(st);
		return;
	}
#endif
	{
		struct pollfd fds[MAX_SOCKETS];
		int			n = st->nsockets;

		for (int i = 0; i < n; i++)
		{
			fds[i].fd = st->sockets[i].fd;
			fds[i].events = ((st->sockets[i].events & WL_SOCKET_READABLE) ? POLLIN : 0) |
				((st->sockets[i].events & WL_SOCKET_WRITEABLE) ? POLLOUT : 0);
			fds[i].revents = 0;
		}
		if (poll(fds, n, 0) <= 0)
			return;
		for (int i = 0; i < n; i++)
			if (fds[i].revents != 0)
				socket_action(st, fds[i].fd,
							  ((fds[i].revents & (POLLIN | POLLHUP)) ? CURL_CSELECT_IN : 0) |
							  ((fds[i].revents & POLLOUT) ? CURL_CSELECT_OUT : 0) |
							  ((fds[i].revents & POLLERR) ? CURL_CSELECT_ERR : 0));
	}
}

/*
 * socket_ready: libcurl reads or writes socket fd, as events say; for
 * epoll_fd, each of its sockets that is ready.
 */
void
OutboxHttpSocketReady(void *state, pgsocket fd, uint32 events)
{
	HttpState  *st = (HttpState *) state;

	if (st->multi == NULL)
		return;
#ifdef HAVE_SYS_EPOLL_H
	if (fd == st->epoll_fd)
	{
		epoll_dispatch(st);
		st->serviced_at = GetCurrentTimestamp();
		return;
	}
#endif
	socket_action(st, fd, ((events & WL_SOCKET_READABLE) ? CURL_CSELECT_IN : 0) |
				  ((events & WL_SOCKET_WRITEABLE) ? CURL_CSELECT_OUT : 0));
	st->serviced_at = GetCurrentTimestamp();
}

/*
 * sockets: what the relay waits on: epoll_fd, whose sockets are libcurl's
 * (the list changes only with the multi handle); or, without it, what
 * libcurl asked to be watched (see socket_changed).
 */
uint64
OutboxHttpSockets(void *state, const OutboxWaitSocket **socks, int *n)
{
	HttpState  *st = (HttpState *) state;

	if (st->epoll_fd >= 0)
	{
		*socks = st->epoll_socket;
		*n = 1;
		return st->epoll_generation;
	}
	*socks = st->sockets;
	*n = st->nsockets;
	return st->sockets_generation;
}
