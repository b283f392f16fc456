#!/bin/bash
# ci/check.sh - runs every test of the extension against an installed build:
# `make installcheck` runs pg_regress on a temporary instance, then the TAP
# suite under test/t. PostgreSQL's initdb refuses to run as root, so when
# started as root this runs the tests as OUTBOX_TEST_USER (default postgres)
# on a copy of the source tree in /tmp, left in place if a test fails. On
# failure it prints regression.diffs and the end of every server log.
#
# The upgrade tests build releases 1.0 and 1.1 from the repository's
# history: unless OUTBOX_1_0_SRC (OUTBOX_1_1_SRC) already names its source
# (ci/chroot.sh extracts them on the host), this extracts each with git
# (see release_tree in ci/lib.sh) and warns if it cannot, in which case
# the tests from that release are skipped.
#
# Environment: PG_CONFIG (default: pg_config on PATH), OUTBOX_TEST_USER,
# OUTBOX_1_0_SRC, OUTBOX_1_0_SRC_ERROR, OUTBOX_1_1_SRC,
# OUTBOX_1_1_SRC_ERROR, OUTBOX_TEST_JOBS, OUTBOX_FAN_OUT_EVENTS,
# OUTBOX_BULLMQ_EVENTS, OUTBOX_RABBITMQ_EVENTS and OUTBOX_KAFKA_EVENTS (see ci/slow.sh); and to run some
# tests only, PGXS's own variables: PROVE_TESTS (TAP files, e.g.
# "test/t/035_gone.pl") and REGRESS (pg_regress files, "setup" first,
# e.g. "setup secrets"). With one of them only, the other suite is left out;
# TAP_TESTS set and empty leaves the TAP suite out (pg_regress only, as the
# Debian package's test does). with_<kind>=no tests a build without that
# kind (see the Makefile).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=ci/lib.sh
. ci/lib.sh
PG_CONFIG=${PG_CONFIG:-pg_config}
OUTBOX_1_0_SRC=${OUTBOX_1_0_SRC:-}
OUTBOX_1_0_SRC_ERROR=${OUTBOX_1_0_SRC_ERROR:-}
OUTBOX_1_1_SRC=${OUTBOX_1_1_SRC:-}
OUTBOX_1_1_SRC_ERROR=${OUTBOX_1_1_SRC_ERROR:-}

# releases DIR: for each of RELEASES (ci/lib.sh) not given already, sets
# OUTBOX_<version>_SRC to its tree extracted into DIR/<version>, or
# OUTBOX_<version>_SRC_ERROR with a warning.
releases() {
    local v src err why
    [ "${TAP_TESTS-unset}" != "" ] || return 0 # only the TAP suite needs them
    for v in $RELEASES; do
        src=OUTBOX_${v//./_}_SRC err=OUTBOX_${v//./_}_SRC_ERROR
        if [ -n "${!src}" ] || [ -n "${!err}" ]; then continue; fi
        if why=$(release_tree "$PWD" "$v" "$1/$v"); then
            printf -v "$src" '%s' "$1/$v"
        else
            printf -v "$err" '%s' "$why"
            echo "WARNING: the upgrade test from $v will be skipped: $why" >&2
        fi
    done
}

if [ "$(id -u)" = 0 ]; then
    user=${OUTBOX_TEST_USER:-postgres}
    work=$(mktemp -d /tmp/outbox-check.XXXXXX)
    copy_tree "$work"
    releases "$work/.releases"
    chown -R "$user" "$work"
    echo "==> tests as $user in $work"
    # the kinds a build left out (with_<kind>=no, see the Makefile)
    kinds_out=()
    for v in $(compgen -v with_); do kinds_out+=("$v=${!v}"); done
    if runuser -u "$user" -- env PATH="$PATH" PG_CONFIG="$PG_CONFIG" OUTBOX_1_0_SRC="$OUTBOX_1_0_SRC" \
        OUTBOX_1_0_SRC_ERROR="$OUTBOX_1_0_SRC_ERROR" OUTBOX_1_1_SRC="$OUTBOX_1_1_SRC" \
        OUTBOX_1_1_SRC_ERROR="$OUTBOX_1_1_SRC_ERROR" OUTBOX_TEST_JOBS="$TEST_JOBS" \
        ${PROVE_TESTS+PROVE_TESTS="$PROVE_TESTS"} ${REGRESS+REGRESS="$REGRESS"} ${TAP_TESTS+TAP_TESTS="$TAP_TESTS"} \
        ${OUTBOX_FAN_OUT_EVENTS+OUTBOX_FAN_OUT_EVENTS="$OUTBOX_FAN_OUT_EVENTS"} \
        ${OUTBOX_BULLMQ_EVENTS+OUTBOX_BULLMQ_EVENTS="$OUTBOX_BULLMQ_EVENTS"} \
        ${OUTBOX_RABBITMQ_EVENTS+OUTBOX_RABBITMQ_EVENTS="$OUTBOX_RABBITMQ_EVENTS"} \
        ${OUTBOX_KAFKA_EVENTS+OUTBOX_KAFKA_EVENTS="$OUTBOX_KAFKA_EVENTS"} \
        "${kinds_out[@]}" \
        bash "$work/ci/check.sh"; then
        rm -rf "$work"
        exit 0
    fi
    # in a chroot, ci/chroot.sh says where that is on the host
    where=${OUTBOX_HOST_ROOT:-}$work
    echo "check.sh: tests failed; regression.diffs and the server logs are in $where" \
        "($where/regression.diffs, $where/tmp_check/log/)" >&2
    exit 1
fi

bindir=$("$PG_CONFIG" --bindir)
export PATH="$bindir:$PATH"
rm -rf tmp_check results regression.diffs regression.out
out=$(mktemp /tmp/outbox-check-output.XXXXXX)
release=$(mktemp -d /tmp/outbox-releases.XXXXXX)
trap 'rm -rf "$out" "$release"' EXIT
releases "$release"
export OUTBOX_1_0_SRC OUTBOX_1_0_SRC_ERROR OUTBOX_1_1_SRC OUTBOX_1_1_SRC_ERROR
# what to run: everything, or the suites and files named
what=(installcheck)
if [ "${TAP_TESTS-unset}" = "" ]; then what+=(TAP_TESTS=); fi
if [ -n "${PROVE_TESTS:-}" ] && [ -z "${REGRESS:-}" ]; then
    what=(prove_installcheck PROVE_TESTS="$PROVE_TESTS")
elif [ -n "${REGRESS:-}" ]; then
    what=(installcheck REGRESS="$REGRESS")
    if [ -n "${PROVE_TESTS:-}" ]; then what+=(PROVE_TESTS="$PROVE_TESTS"); else what+=(TAP_TESTS=); fi
fi
if make -s PG_CONFIG="$PG_CONFIG" "${what[@]}" PROVE_FLAGS="--timer -j$TEST_JOBS" 2>&1 | tee "$out"; then
    exit 0
fi
# The logs of what failed: pg_regress's server for regression.diffs, and
# for each TAP script that prove's summary names, its own logs. All logs
# if neither can be told.
logs=()
if [ -f regression.diffs ]; then
    cat regression.diffs
    logs+=(tmp_check/log/postmaster.log)
fi
# shellcheck disable=SC2013 # script names have no spaces
for t in $(sed -n 's#^test/t/\([^ ]*\)\.pl  *(Wstat.*#\1#p' "$out"); do
    logs+=(tmp_check/log/*"$t"*)
done
[ ${#logs[@]} -gt 0 ] || logs=(tmp_check/log/*)
for f in "${logs[@]}"; do
    [ -f "$f" ] && { echo "== $f (last 150 lines)"; tail -n 150 "$f"; }
done
exit 1
