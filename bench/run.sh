#!/bin/bash
# Benchmarks, as root on Debian bookworm: installs what they need (ci/deps.sh,
# then nginx, wrk, psycopg2 for the latency client), builds the extension
# without assertions and installs it into the system's PostgreSQL 15, and
# runs bench/bench.py on a throwaway cluster. Prints figures; the numbers are
# measurements, not pass/fail. Arguments go to bench.py (--quick, --only).
# apt's and the build's output go to $OUTBOX_LOG_DIR/bench-setup.log.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=ci/lib.sh
. ci/lib.sh
log=$LOG_DIR/bench-setup.log
mkdir -p "$LOG_DIR"

bash ci/deps.sh
new_nginx=$(missing_packages nginx-light)
install_packages "$log" nginx-light libnginx-mod-http-echo wrk python3-psycopg2
if [ -n "$new_nginx" ]; then
    step "disabling the system nginx that the package started (the benchmark runs its own)"
    systemctl disable --now nginx >/dev/null 2>&1 || service nginx stop >/dev/null 2>&1 || true
fi

export PG_CONFIG=$PG15_CONFIG
step "building the extension (no assertions) and installing it into the system's PostgreSQL 15" \
    "($("$PG_CONFIG" --pkglibdir), $("$PG_CONFIG" --sharedir)/extension)"
build() {
    make -s PG_CONFIG="$PG_CONFIG" clean &&
        make -s PG_CONFIG="$PG_CONFIG" &&
        make -s PG_CONFIG="$PG_CONFIG" install
}
quietly "$log" build
exec /usr/bin/python3 bench/bench.py "$@"
