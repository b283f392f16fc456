/*-------------------------------------------------------------------------
 *
 * files.c
 *	  The one way the relay reads a file that a destination names: a
 *	  webhook's ca_file, a JetStream destination's nats_ca_file and
 *	  nats_creds_file.
 *
 * An admin with pg_read_server_files names the file, and the relay reads
 * it inside the server: whatever is there must neither hold the relay up
 * nor fill its memory. So the file is opened without waiting for a writer
 * (O_NONBLOCK: a FIFO), read only if it is a regular file (not a device
 * such as /dev/zero, a directory or a socket) of at most
 * OUTBOX_FILE_MAX_BYTES, and read within a deadline. Libraries that would
 * read such a file themselves (libcurl's CURLOPT_CAINFO, libnats's
 * natsOptions_LoadCATrustedCertificates) are given its contents instead.
 *
 * Calls nothing of PostgreSQL's that allocates, throws or keeps state:
 * it runs on the relay's thread and on threads of the kinds' own (libnats
 * callbacks), which must never call into PostgreSQL.
 *
 * src/files.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include "destination.h"

/*
 * Opens path for OutboxReadFile if it is a regular file of at most
 * OUTBOX_FILE_MAX_BYTES, with its status in *st: the descriptor, or -1
 * with error set.
 */
static int
open_regular(const char *path, const char *column, struct stat *st,
			 char *error, size_t error_size)
{
	char		why[PG_STRERROR_R_BUFLEN];
	struct stat before;
	int			fd;

	/*
	 * The type first, by name: opening a device can act on it (a tape
	 * rewinds, a terminal becomes the process's), so only a regular file
	 * is opened; fstat below checks that the file opened is that one.
	 */
	if (stat(path, &before) != 0)
	{
		snprintf(error, error_size, "%s cannot be opened: %s", column,
				 strerror_r(errno, why, sizeof(why)));
		return -1;
	}
	if (!S_ISREG(before.st_mode))
	{
		snprintf(error, error_size, "%s is not a regular file", column);
		return -1;
	}
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
	{
		snprintf(error, error_size, "%s cannot be opened: %s", column,
				 strerror_r(errno, why, sizeof(why)));
		return -1;
	}
	if (fstat(fd, st) != 0)
		snprintf(error, error_size, "%s cannot be read: %s", column,
				 strerror_r(errno, why, sizeof(why)));
	else if (!S_ISREG(st->st_mode) || st->st_dev != before.st_dev || st->st_ino != before.st_ino)
		snprintf(error, error_size, "%s is not a regular file", column);
	else if (st->st_size > OUTBOX_FILE_MAX_BYTES)
		snprintf(error, error_size, "%s is larger than %d bytes", column, OUTBOX_FILE_MAX_BYTES);
	else
		return fd;
	close(fd);
	return -1;
}

/*
 * Reads the size bytes of the file open on fd before deadline into a
 * malloc'd, NUL-terminated *out: true, or false with error set (and
 * nothing left allocated). A file that grew since its fstat fails.
 */
static bool
read_within(int fd, const char *column, const struct timespec *deadline, size_t size,
			char **out, size_t *len, char *error, size_t error_size)
{
	char		why[PG_STRERROR_R_BUFLEN];
	size_t		have = 0;
	/* one byte more: a file that grew since fstat is seen */
	char	   *buf = malloc(size + 2);

	if (buf == NULL)
	{
		snprintf(error, error_size, "out of memory reading %s", column);
		return false;
	}
	for (;;)
	{
		struct timespec now;
		ssize_t		n;

		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > deadline->tv_sec ||
			(now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec))
		{
			snprintf(error, error_size, "%s was not read within the time limit", column);
			break;
		}
		n = read(fd, buf + have, size + 1 - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
		{
			snprintf(error, error_size, "%s cannot be read: %s", column,
					 strerror_r(errno, why, sizeof(why)));
			break;
		}
		have += n;
		if (have > size)
		{
			snprintf(error, error_size, "%s changed while it was read", column);
			break;
		}
		if (n == 0)
		{
			buf[have] = '\0';
			*out = buf;
			*len = have;
			return true;
		}
	}
	explicit_bzero(buf, have);
	free(buf);
	return false;
}

/*
 * Reads the file at path, which destination column `column` names, into a
 * malloc'd NUL-terminated buffer (*out, its length in *len; the caller
 * frees it, zeroing it first if it may hold a secret), and, if st is not
 * NULL, the file's status (fstat) into *st. Fails unless the file is a
 * regular file of at most OUTBOX_FILE_MAX_BYTES, read before deadline
 * (CLOCK_MONOTONIC); never opens anything else (a device, a FIFO). On failure returns
 * false with error (error_size bytes) saying why in words that name the
 * column, never the path or anything read from the file. Thread-safe and
 * raises nothing: callable from any thread.
 */
bool
OutboxReadFile(const char *path, const char *column, const struct timespec *deadline,
			   char **out, size_t *len, struct stat *st, char *error, size_t error_size)
{
	struct stat own;
	int			fd;
	bool		ok;

	*out = NULL;
	*len = 0;
	fd = open_regular(path, column, st != NULL ? st : &own, error, error_size);
	if (fd < 0)
		return false;
	ok = read_within(fd, column, deadline, (size_t) (st != NULL ? st : &own)->st_size,
					 out, len, error, error_size);
	close(fd);
	return ok;
}

/*
 * The CLOCK_MONOTONIC time timeout_ms from now: a deadline for
 * OutboxReadFile. Thread-safe; raises nothing.
 */
struct timespec
OutboxDeadlineIn(int timeout_ms)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	t.tv_sec += timeout_ms / 1000;
	t.tv_nsec += (long) (timeout_ms % 1000) * 1000000L;
	if (t.tv_nsec >= 1000000000L)
	{
		t.tv_sec++;
		t.tv_nsec -= 1000000000L;
	}
	return t;
}
