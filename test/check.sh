#!/bin/bash
# Runs every test of the extension against an installed build:
# `make installcheck` runs pg_regress on a temporary instance, then the TAP
# suite under test/t. PostgreSQL's initdb refuses to run as root, so
# when started as root the tests run as the owner of the source tree (set
# OUTBOX_TEST_USER to choose another user).
#
# Environment: PG_CONFIG (default: pg_config on PATH).
set -euo pipefail

cd "$(dirname "$0")/.."
PG_CONFIG=${PG_CONFIG:-pg_config}

run() {
    if [ "$(id -u)" = 0 ]; then
        local user=${OUTBOX_TEST_USER:-$(stat -c %U .)}
        if [ "$user" = root ]; then
            echo "check.sh: the source tree is owned by root; set OUTBOX_TEST_USER or chown it" >&2
            exit 1
        fi
        runuser -u "$user" -- env PATH="$PATH" "$@"
    else
        "$@"
    fi
}

status=0
rm -rf tmp_check results regression.diffs regression.out
if ! run make -s PG_CONFIG="$PG_CONFIG" installcheck PROVE_FLAGS="--timer"; then
    status=1
    [ -f regression.diffs ] && cat regression.diffs
    for f in tmp_check/log/*; do
        [ -f "$f" ] && { echo "== $f"; tail -n 150 "$f"; }
    done
fi
exit $status
