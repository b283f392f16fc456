#!/bin/bash
# ci/cassert.sh - builds PostgreSQL 15 with assertions from Debian's source
# package and runs every test of the extension (pg_regress and the TAP
# suite, ci/check.sh) against it, as root on Debian bookworm.
#
# Debian's server is built without --enable-cassert, and that hides a class
# of bugs the other runs cannot see: --enable-cassert also turns on
# CLOBBER_FREED_MEMORY (freed memory is overwritten, so a read of freed
# memory gives garbage at once instead of the old value) and
# MEMORY_CONTEXT_CHECKING (writes past an allocation are reported when its
# context is reset), besides PostgreSQL's own Assert()s around the
# extension's calls. The sanitizer run (ci/sanitize.sh) instruments the
# extension, not the server's allocator, so a use of memory that a
# memory context freed stays invisible to it.
#
# It takes about 17 minutes on 2 cores (7 to build, 10 for the tests), so
# it is not part of .ci/run; run it before a release and after changes to
# memory handling. The build is kept in OUTBOX_CASSERT_DIR and reused while
# the source version is the same.
#
# The source: the postgresql-15 source package of bookworm (apt-get
# source, which needs deb-src lines: if apt has none, this adds
# /etc/apt/sources.list.d/outbox-deb-src.sources, the deb lines' archives
# as deb-src). The newest version whose files can be downloaded is used.
#
# Environment: OUTBOX_CASSERT_DIR (default /var/cache/outbox-cassert),
# OUTBOX_TEST_USER (default postgres), OUTBOX_LOG_DIR.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=ci/lib.sh
. ci/lib.sh
dir=${OUTBOX_CASSERT_DIR:-/var/cache/outbox-cassert}
started=$(date +%s)

if [ "$(id -u)" != 0 ]; then
    echo "cassert.sh: run as root (it installs Debian packages)" >&2
    exit 1
fi
case $dir in
    / | /usr | /usr/*) echo "cassert.sh: refusing OUTBOX_CASSERT_DIR=$dir" >&2; exit 1 ;;
esac
mkdir -p "$LOG_DIR" "$dir"
log=$LOG_DIR/cassert.log

step "packages"
# shellcheck disable=SC2046 # word splitting of the kinds' package list is wanted
install_packages "$log" gcc make bison flex perl bzip2 libssl-dev zlib1g-dev \
    $(kind_packages build) $(kind_packages test) $(monitoring_packages bookworm) openssl nodejs libipc-run-perl python3 git ca-certificates postgresql-15
install_node_modules "$PWD" "$log" || exit 1

step "source of postgresql-15"
if ! apt-cache showsrc postgresql-15 2>/dev/null | grep -q '^Version:'; then
    sed -e 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
        >/etc/apt/sources.list.d/outbox-deb-src.sources
    quietly "$log" apt_get update
fi
src=$dir/source
mkdir -p "$src"
version=
# the security archive's index can list a version whose files it does not serve
for v in $(apt-cache showsrc postgresql-15 | awk '/^Version:/ { print $2 }' | sort -rV); do
    if (cd "$src" && apt-get source --download-only -qq "postgresql-15=$v" >>"$log" 2>&1); then
        version=$v
        break
    fi
    echo "    $v: could not be downloaded (see $log)"
done
if [ -z "$version" ]; then
    echo "cassert.sh: no version of the postgresql-15 source package could be downloaded" >&2
    exit 1
fi
upstream=${version%%-*}
tarball=$src/postgresql-15_$upstream.orig.tar.bz2
prefix=$dir/pg-$upstream
echo "    $version ($tarball)"

# the contrib modules the tests use: pgcrypto (TAP 034), auto_explain (TAP 022)
if [ ! -x "$prefix/bin/postgres" ] || ! grep -qs -- '--enable-cassert' "$prefix/.configured" ||
   [ ! -f "$prefix/lib/postgresql/auto_explain.so" ]; then
    step "building PostgreSQL $upstream with --enable-cassert into $prefix"
    build=$dir/build-$upstream
    rm -rf "$build" "$prefix"
    mkdir -p "$build"
    tar -xjf "$tarball" -C "$build" --strip-components=1
    opts=(--prefix="$prefix" --enable-cassert --enable-debug --enable-tap-tests
          --with-openssl --without-icu --without-readline)
    (cd "$build" &&
        quietly "$log" ./configure "${opts[@]}" CFLAGS="-O1 -g" &&
        quietly "$log" make -j"$(nproc)" -s &&
        quietly "$log" make -s install &&
        quietly "$log" make -s -C contrib/pgcrypto install &&
        quietly "$log" make -s -C contrib/auto_explain install) || exit 1
    echo "${opts[*]}" >"$prefix/.configured"
    rm -rf "$build"
fi
pg_config=$prefix/bin/pg_config
"$pg_config" --configure | grep -q -- '--enable-cassert' ||
    { echo "cassert.sh: $pg_config was not configured with --enable-cassert" >&2; exit 1; }

step "building the extension against it"
work=$(mktemp -d /tmp/outbox-cassert.XXXXXX)
copy_tree "$work"
quietly "$log" make -C "$work" PG_CONFIG="$pg_config" with_llvm=no \
    PG_CFLAGS="-Wall -Wextra -Werror" &&
    quietly "$log" make -C "$work" PG_CONFIG="$pg_config" with_llvm=no install || exit 1
rm -rf "$work"

step "tests"
status=0
PG_CONFIG=$pg_config bash ci/check.sh || status=$?
elapsed=$(( $(date +%s) - started ))
printf '==> cassert run: %s in %dm%02ds\n' "$([ $status = 0 ] && echo passed || echo FAILED)" \
    $((elapsed / 60)) $((elapsed % 60))
exit $status
