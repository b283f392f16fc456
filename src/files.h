/*-------------------------------------------------------------------------
 *
 * files.h
 *	  Reading a file that a destination names (a CA bundle, NATS
 *	  credentials), under one rule for every kind (see files.c).
 *
 * src/files.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_FILES_H
#define OUTBOX_FILES_H

#include <sys/stat.h>
#include <time.h>

/*
 * The largest file the relay reads for a destination. A creds file is a
 * user JWT and an nkey seed, a few kB; a CA file is a PEM bundle, and
 * Debian's whole system bundle (/etc/ssl/certs/ca-certificates.crt) is
 * about 220 kB. 1 MB holds four of those, and bounds what a relay or a
 * check holds for a file an admin names.
 */
#define OUTBOX_FILE_MAX_BYTES (1024 * 1024)

extern bool OutboxReadFile(const char *path, const char *column,
						   const struct timespec *deadline, char **out, size_t *len,
						   struct stat *st, char *error, size_t error_size);
extern struct timespec OutboxDeadlineIn(int timeout_ms);

#endif							/* OUTBOX_FILES_H */
