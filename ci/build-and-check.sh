#!/bin/bash
# ci/build-and-check.sh - the build-and-test recipe of one PostgreSQL
# version, the same on the host (15) and in the chroots (17, 18; see
# ci/chroot.sh). As root, from the source tree it is part of:
#
#   1. make clean, then make with PG_CFLAGS="-DUSE_ASSERT_CHECKING -Wall -Wextra -Werror"
#   2. make install into the PostgreSQL of PG_CONFIG (its system directories)
#   3. pg_regress and the TAP suite as an unprivileged user (ci/check.sh),
#      which prints regression.diffs and the servers' logs on failure
#   4. with OUTBOX_PGXN_CHECK=1, the PGXN zip: made, built outside the
#      repository, installed and tested (ci/pgxn.sh)
#   5. the Debian package: built, linted, installed under a running server
#      and tested (ci/package.sh); it replaces the builds of steps 2 and 4
#
# Environment: PG_CONFIG (default: pg_config on PATH), OUTBOX_PGXN_CHECK.
# Exit status: 0 passed, 3 build or install failed, 4 tests failed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 3
export PG_CONFIG=${PG_CONFIG:-pg_config}
cflags="-DUSE_ASSERT_CHECKING -Wall -Wextra -Werror"

if [ "$(id -u)" != 0 ]; then
    echo "build-and-check.sh: run as root (it installs into PostgreSQL's directories)" >&2
    exit 3
fi
version=$("$PG_CONFIG" --version) || exit 3

start=$SECONDS
echo "==> build: $version, PG_CFLAGS=\"$cflags\""
make -s PG_CONFIG="$PG_CONFIG" clean &&
    make -s -j"${OUTBOX_BUILD_JOBS:-$(nproc)}" PG_CONFIG="$PG_CONFIG" PG_CFLAGS="$cflags" || exit 3
echo "==> install into $("$PG_CONFIG" --pkglibdir) and $("$PG_CONFIG" --sharedir)/extension"
make -s PG_CONFIG="$PG_CONFIG" install >/dev/null || exit 3
echo "==> built and installed in $((SECONDS - start))s"

start=$SECONDS
bash ci/check.sh || exit 4
echo "==> tests passed in $((SECONDS - start))s"

if [ "${OUTBOX_PGXN_CHECK:-0}" = 1 ]; then
    bash ci/pgxn.sh || exit $?
fi
bash ci/package.sh || exit $?
