/*
 * sanitize-preload.c
 *	  Preloaded after the AddressSanitizer runtime by ci/sanitize.sh, so that
 *	  Debian's uninstrumented postgres runs under the sanitizers. Two fixes.
 *
 * 1. The hang at startup. In a binary not built with -fsanitize=address the
 * runtime initialises lazily, on the first call to malloc. In Debian's
 * postgres that call comes from libp11-kit's constructor (pulled in by
 * libldap -> libgnutls), inside newlocale(), which holds glibc's
 * __libc_setlocale_lock for writing. The runtime's initialisation looks up
 * the optional symbol "swift_demangle" with dlsym() and then calls
 * dlerror(); glibc formats the "undefined symbol" message with gettext,
 * whose dcigettext() takes the same lock for reading. The recursive use
 * leaves the lock's reader count negative, and the next writer
 * (bindtextdomain() in main(), or freelocale() at exit) waits forever on a
 * futex: even `postgres -V` hangs. The same hang is reported for other
 * programs in llvm/llvm-project#49223. Defining swift_demangle makes the
 * lookup succeed, so dlerror() has no message to format and the lock is not
 * touched. The runtime calls it only for names starting with "_T" (Swift);
 * returning NULL means "not demangled".
 *
 * 2. UndefinedBehaviorSanitizer's options. gcc's UBSan runtime is a library
 * of its own, loaded with outbox.so, and it initialises at its first report.
 * It reads UBSAN_OPTIONS from /proc/self/environ, but by then PostgreSQL
 * has overwritten that memory with the process title (ps_status.c), so the
 * options are lost: no stack traces, and the report path it sets (which,
 * through symbol interposition, is AddressSanitizer's) falls back to
 * stderr. The runtime also asks __ubsan_default_options() for options; this
 * one returns UBSAN_OPTIONS as it was when the process started.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

char	   *swift_demangle(const char *mangled, size_t mangled_len,
						   char *out, size_t *out_len, unsigned int flags);
const char *__ubsan_default_options(void);

static char ubsan_options[4096];

char *
swift_demangle(const char *mangled, size_t mangled_len,
			   char *out, size_t *out_len, unsigned int flags)
{
	(void) mangled;
	(void) mangled_len;
	(void) out;
	(void) out_len;
	(void) flags;
	return NULL;
}

const char *
__ubsan_default_options(void)
{
	return ubsan_options;
}

/* Runs before main(), while the environment is intact. */
__attribute__((constructor))
static void
save_ubsan_options(void)
{
	const char *options = getenv("UBSAN_OPTIONS");

	if (options != NULL && strlen(options) < sizeof(ubsan_options))
		strcpy(ubsan_options, options);
}
