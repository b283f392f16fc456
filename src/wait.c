/*-------------------------------------------------------------------------
 *
 * wait.c
 *	  The relay's one wait: its latch, the postmaster, and the sockets of
 *	  every destination kind, in one WaitEventSet.
 *
 * A commit that emitted sets the relay's latch (emit.c), a signal sets it
 * too, and an answer makes a kind's socket ready: any of them ends the wait
 * at once, whatever else is in flight, so no wait needs to be cut into
 * slices. Ready sockets are handed to their kind (socket_ready); the caller
 * then collects the outcomes. The set lives as long as the process and is
 * built again only when a kind's list of sockets changed: PostgreSQL's
 * WaitEventSet cannot remove a socket. A kind whose sockets come and go
 * with each request gives one socket that stands for all of them instead
 * (an epoll instance of the kind's own, on Linux).
 *
 * OutboxSendAndWait is the same wait for outbox_relay(), which sends in its
 * caller's transaction and returns once every outcome is in.
 *
 * src/wait.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "destination.h"
#include "kind_registry.h"
#include "wait.h"

/* ready events handled per wait; the rest are still ready at the next */
#define MAX_OCCURRED 64
/* kinds with sockets, at most */
#define MAX_KINDS 8

/*
 * Two sets of the same sockets: one with the latch, to wait on, and one
 * without it, to look at the sockets while the latch is set (a set with a
 * latch that is set reports only the latch, and a busy database can set it
 * before every wait).
 */
static WaitEventSet *wait_set = NULL;
static WaitEventSet *poll_set = NULL;
static uint64 set_generation[MAX_KINDS];
static bool set_complete = false;	/* false while (or after failing) building */

/*
 * Whether the set holds what the kinds wait on now; the number of sockets
 * they have in *total.
 */
static bool
set_current(int *total)
{
	bool		current = set_complete;

	*total = 0;
	for (int i = 0; i < OutboxKindCount(); i++)
	{
		const OutboxWaitSocket *socks;
		int			n = 0;
		uint64		generation;

		generation = OutboxKindSockets(i, &socks, &n);
		*total += n;
		if (generation != set_generation[i])
			current = false;
	}
	return current;
}

/*
 * Builds the sets again: latch, postmaster, each kind's sockets. An ERROR
 * on the way (out of file descriptors, say) leaves them incomplete, and the
 * next wait builds them again.
 */
static void
build_set(int total)
{
	set_complete = false;
	if (wait_set != NULL)
		FreeWaitEventSet(wait_set);
	if (poll_set != NULL)
		FreeWaitEventSet(poll_set);
	wait_set = poll_set = NULL;
	wait_set = OutboxCreateWaitEventSet(2 + total);
	poll_set = OutboxCreateWaitEventSet(1 + total);
	AddWaitEventToSet(wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	AddWaitEventToSet(poll_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	for (int i = 0; i < OutboxKindCount(); i++)
	{
		const OutboxWaitSocket *socks;
		int			n = 0;

		set_generation[i] = OutboxKindSockets(i, &socks, &n);
		for (int j = 0; j < n; j++)
		{
			if (socks[j].events == 0)
				continue;
			/* user_data: the kind's index + 1, so that it is never NULL */
			AddWaitEventToSet(wait_set, socks[j].events, socks[j].fd, NULL, (void *) (intptr_t) (i + 1));
			AddWaitEventToSet(poll_set, socks[j].events, socks[j].fd, NULL, (void *) (intptr_t) (i + 1));
		}
	}
	set_complete = true;
}

/*
 * Waits up to timeout_ms (0: only looks) for the latch, a kind's socket,
 * or the time a kind asked to run at (its timeout_ms), and hands each ready
 * socket to its kind. With the latch already set it only looks. Exits the
 * process if the postmaster died. Returns whether the latch is set; the
 * caller resets it. No transaction needed;
 * reported as wait event wait_event meanwhile. ERROR if the set cannot be
 * built (out of file descriptors, for one).
 */
bool
OutboxWait(long timeout_ms, uint32 wait_event)
{
	WaitEvent	occurred[MAX_OCCURRED];
	int			total;
	int			n;
	bool		latch = false;

	StaticAssertStmt(MAX_KINDS >= 2, "MAX_KINDS too small");
	Assert(OutboxKindCount() <= MAX_KINDS);
	if (!set_current(&total))
		build_set(total);
	for (int i = 0; i < OutboxKindCount(); i++)
	{
		long		t = OutboxKindTimeoutMs(i);

		if (t >= 0 && t < timeout_ms)
			timeout_ms = t;
	}
	if (MyLatch->is_set)
	{
		/* the caller has work at once: only move the sockets along */
		latch = true;
		n = WaitEventSetWait(poll_set, 0, occurred, MAX_OCCURRED, wait_event);
	}
	else
		n = WaitEventSetWait(wait_set, Max(timeout_ms, 0), occurred, MAX_OCCURRED, wait_event);
	for (int i = 0; i < n; i++)
	{
		if (occurred[i].events & WL_LATCH_SET)
			latch = true;
		else if (occurred[i].user_data != NULL)
			OutboxKindSocketReady((int) (intptr_t) occurred[i].user_data - 1, occurred[i].fd,
								  occurred[i].events & (WL_SOCKET_READABLE | WL_SOCKET_WRITEABLE));
	}
	return latch;
}

/*
 * Sends n events of OUTBOX_SEND_AFTER_COMMIT kinds and returns once every
 * outcome is in its event: the synchronous form, for outbox_relay(), which
 * runs in the caller's transaction. Waits as the worker does (OutboxWait),
 * on the latch and the kinds' sockets. Interruptible: on ERROR (a cancel,
 * a statement_timeout) the kinds abandon the events, which die with the
 * transaction, before the error goes on.
 */
void
OutboxSendAndWait(OutboxEvent **events, int n)
{
	PG_TRY();
	{
		int			pending = n;

		for (int i = 0; i < n; i++)
			OutboxKindEnqueue(events[i]);
		for (;;)
		{
			List	   *done = OutboxKindsCollect();

			pending -= list_length(done);
			list_free(done);
			/* and the rest of the answers, which keeps connections alive */
			if (pending <= 0 && !OutboxKindsBusy())
				break;
			if (OutboxWait(1000, PG_WAIT_EXTENSION))
				ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_CATCH();
	{
		OutboxKindsAbandon();
		PG_RE_THROW();
	}
	PG_END_TRY();
}
