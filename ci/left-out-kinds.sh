#!/bin/bash
# ci/left-out-kinds.sh - builds the extension without each optional
# destination kind in turn (make with_<kind>=no; the optional kinds are
# marked in src/kinds/kinds.list) and checks that the library does not link
# the kind's client library; then tests a build without all of them:
# pg_regress (with left_out_<kind> in place of each kind's own test), and
# the TAP files in which the kinds a build has matter (the relay's start,
# fan-out, the kind interface and options, upgrades, monitoring, BullMQ).
# Only src/kinds/registry.c differs in such a build, so the rest of the
# suite would run the 15 build's tests again: OUTBOX_LEFT_OUT_TAP=all runs
# every TAP file (the tests of the kinds left out skip themselves).
#
# As root, after ci/deps.sh. It leaves the host's PostgreSQL 15 alone: the
# build goes into a private copy of it under $OUTBOX_LEFT_OUT_DIR (default
# /tmp/outbox-left-out), removed at the end unless a test failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 3
# shellcheck source=ci/lib.sh
. ci/lib.sh

if [ "$(id -u)" != 0 ]; then
    echo "left-out-kinds.sh: run as root (it runs the tests as another user)" >&2
    exit 3
fi
dir=${OUTBOX_LEFT_OUT_DIR:-/tmp/outbox-left-out}
tap="001_relay_basic 008_pg_dump 009_without_extension 046_fan_out 048_kind_interface 049_fan_out_many
    062_upgrade_from_1_0 100_kind_options 104_monitoring 110_bullmq 112_bullmq_routing"
if [ "${OUTBOX_LEFT_OUT_TAP:-}" = all ]; then
    prove_tests="test/t/*.pl"
else
    prove_tests=$(for t in $tap; do printf 'test/t/%s.pl ' "$t"; done)
fi
cflags="-DUSE_ASSERT_CHECKING -Wall -Wextra -Werror"
rc=0

# a relocatable copy of the host's PostgreSQL 15: its pg_config finds the
# rest from its own path
rm -rf "$dir"
mkdir -p "$dir/usr/lib" "$dir/usr/share" "$dir/usr/include"
cp -a /usr/lib/postgresql "$dir/usr/lib/" &&
    cp -a /usr/share/postgresql "$dir/usr/share/" &&
    cp -a /usr/include/postgresql "$dir/usr/include/" || exit 3
pg_config=$dir/usr/lib/postgresql/15/bin/pg_config

# each optional kind left out alone: it builds, and links nothing of the kind's
out=()
while read -r kind optional lib _; do
    [ "$optional" = yes ] || continue
    out+=("with_$kind=no")
    step "without the $kind kind (make with_$kind=no): build, PostgreSQL 15 in $dir"
    if ! { make -s PG_CONFIG="$pg_config" clean &&
        make -s -j"$BUILD_JOBS" PG_CONFIG="$pg_config" "with_$kind=no" PG_CFLAGS="$cflags"; }; then
        rc=1
        continue
    fi
    if [ "$lib" != - ] && ldd outbox.so | grep -q -- "lib${lib#-l}[.-]"; then
        echo "left-out-kinds.sh: outbox.so built with_$kind=no links ${lib#-l}" >&2
        rc=1
    fi
done < <(grep -v '^#' src/kinds/kinds.list)
# then a build without any of them: pg_regress, each left-out kind's
# left_out_<kind> test among it, and the TAP files above
step "without ${out[*]}: pg_regress, and TAP: ${OUTBOX_LEFT_OUT_TAP:-$(echo $tap)}"
if make -s PG_CONFIG="$pg_config" clean &&
    make -s -j"$BUILD_JOBS" PG_CONFIG="$pg_config" "${out[@]}" PG_CFLAGS="$cflags" &&
    make -s PG_CONFIG="$pg_config" "${out[@]}" install >/dev/null; then
    env "${out[@]}" PG_CONFIG="$pg_config" TAP_TESTS= bash ci/check.sh </dev/null || rc=1
    env "${out[@]}" PG_CONFIG="$pg_config" PROVE_TESTS="$prove_tests" bash ci/check.sh </dev/null || rc=1
else
    rc=1
fi
make -s clean
[ "$rc" != 0 ] || rm -rf "$dir"
exit "$rc"
