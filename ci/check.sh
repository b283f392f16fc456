#!/bin/bash
# ci/check.sh - runs every test of the extension against an installed build:
# `make installcheck` runs pg_regress on a temporary instance, then the TAP
# suite under test/t. PostgreSQL's initdb refuses to run as root, so when
# started as root this runs the tests as OUTBOX_TEST_USER (default postgres)
# on a copy of the source tree in /tmp, left in place if a test fails. On
# failure it prints regression.diffs and the end of every server log.
#
# Environment: PG_CONFIG (default: pg_config on PATH), OUTBOX_TEST_USER.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PG_CONFIG=${PG_CONFIG:-pg_config}

if [ "$(id -u)" = 0 ]; then
    user=${OUTBOX_TEST_USER:-postgres}
    work=$(mktemp -d /tmp/outbox-check.XXXXXX)
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git ls-files -co --exclude-standard | while read -r f; do [ -e "$f" ] && echo "$f"; done |
            tar -cf - -T - | tar -xf - -C "$work"
    else
        tar -cf - --exclude=.git --exclude=tmp_check --exclude=results . | tar -xf - -C "$work"
    fi
    chown -R "$user" "$work"
    echo "==> tests as $user in $work"
    if runuser -u "$user" -- env PATH="$PATH" PG_CONFIG="$PG_CONFIG" bash "$work/ci/check.sh"; then
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
trap 'rm -f "$out"' EXIT
if make -s PG_CONFIG="$PG_CONFIG" installcheck PROVE_FLAGS="--timer" 2>&1 | tee "$out"; then
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
