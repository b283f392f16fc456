#!/bin/bash
# ci/pgxn.sh - the PGXN source distribution, as a PGXN user gets it. As
# root, in the git checkout it is part of, for the PostgreSQL of PG_CONFIG:
# `make dist` makes outbox-<version>.zip and the release tarball from the
# committed tree (HEAD);
# the zip is unpacked in a directory of its own, outside the repository
# and without .git, built there with warnings as errors, installed, and
# tested with pg_regress by `make installcheck` (as root, the Makefile runs
# it as the postgres user through the zip's own ci/check.sh).
# Uncommitted changes are not in the zip: a warning says so.
#
# It installs the zip's build into the PostgreSQL of PG_CONFIG, replacing
# what was there (ci/build-and-check.sh runs ci/package.sh after it).
# Environment: PG_CONFIG. Exit status: 0 passed, 3 no zip or no build, 4 tests failed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 3
PG_CONFIG=${PG_CONFIG:-pg_config}
if [ "$(id -u)" != 0 ]; then
    echo "pgxn.sh: run as root (it installs into PostgreSQL's directories)" >&2
    exit 3
fi
git rev-parse --git-dir >/dev/null 2>&1 || { echo "pgxn.sh: not a git checkout: make dist needs one" >&2; exit 3; }
[ -z "$(git status --porcelain --untracked-files=no)" ] ||
    echo "WARNING: uncommitted changes are not in the zip (make dist archives HEAD)"
start=$SECONDS
work=$(mktemp -d /tmp/outbox-pgxn.XXXXXX)
chmod 755 "$work"

make -s PG_CONFIG="$PG_CONFIG" dist || exit 3
zip=$(ls -t outbox-*.zip | head -n 1)
tarball=$(ls -t outbox-*.tar.gz | head -n 1)
mv "$zip" "$tarball" "$work/" || exit 3
echo "==> PGXN: $zip ($(du -k "$work/$zip" | cut -f1) kB, $(unzip -Z1 "$work/$zip" | grep -vc '/$') files), unpacked in $work"
# the release tarball holds the same files, under the extension's version
diff <(unzip -Z1 "$work/$zip" | grep -v '/$' | sed 's#^[^/]*/##' | sort) \
    <(tar -tzf "$work/$tarball" | grep -v '/$' | sed 's#^[^/]*/##' | sort) >/dev/null ||
    { echo "pgxn.sh: $tarball and $zip hold different files" >&2; exit 3; }
echo "==> release tarball: $tarball ($(du -k "$work/$tarball" | cut -f1) kB), the same files"
(cd "$work" && unzip -q "$zip") || exit 3
dir=$work/${zip%.zip}
[ -d "$dir" ] || { echo "pgxn.sh: $zip has no top directory ${zip%.zip}/" >&2; exit 3; }
[ ! -e "$dir/.git" ] && ! git -C "$dir" rev-parse --git-dir >/dev/null 2>&1 ||
    { echo "pgxn.sh: $dir is inside a git repository" >&2; exit 3; }
make -s -j"${OUTBOX_BUILD_JOBS:-$(nproc)}" -C "$dir" PG_CONFIG="$PG_CONFIG" PG_CFLAGS="-Werror" >/dev/null &&
    make -s -C "$dir" PG_CONFIG="$PG_CONFIG" install >/dev/null || { echo "pgxn.sh: the zip does not build" >&2; exit 3; }
make -s -C "$dir" PG_CONFIG="$PG_CONFIG" installcheck TAP_TESTS= || { echo "pgxn.sh: pg_regress failed on the zip's build (kept: $work)" >&2; exit 4; }
rm -rf "$work"
echo "==> PGXN: $zip built outside the repository and passed pg_regress in $((SECONDS - start))s"
