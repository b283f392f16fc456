/*
 * A disk whose flushes are slow, for bench/bench.py section 13: preloaded
 * into the PostgreSQL server (LD_PRELOAD), it makes every fdatasync() and
 * fsync() wait SLOW_FSYNC_US microseconds before the real one, as a
 * network volume or a busy disk would. Nothing else changes.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

static void
wait_first(void)
{
	static long us = -1;

	if (us < 0)
	{
		const char *e = getenv("SLOW_FSYNC_US");

		us = e ? atol(e) : 0;
	}
	if (us > 0)
	{
		struct timespec ts = {us / 1000000, (us % 1000000) * 1000};

		/* a signal (PostgreSQL's processes get many) cuts it short: go on */
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
	}
}

/* waits, then calls the C library's function of that name */
static int
slow(const char *name, int fd)
{
	int			(*real) (int) = (int (*) (int)) dlsym(RTLD_NEXT, name);

	wait_first();
	return real(fd);
}

int
fdatasync(int fd)
{
	return slow("fdatasync", fd);
}

int
fsync(int fd)
{
	return slow("fsync", fd);
}
