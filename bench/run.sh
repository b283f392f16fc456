#!/bin/bash
# Benchmarks, as root on Debian bookworm: installs what they need (nginx,
# wrk, psycopg2 for the latency client), builds and installs the extension,
# and runs bench/bench.py on a throwaway cluster. Prints figures; the numbers
# are measurements, not pass/fail. Arguments go to bench.py (--quick, --only).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/deps.sh
missing=()
for p in nginx-light wrk python3-psycopg2; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # the package starts a system nginx; the benchmark runs its own
    systemctl disable --now nginx >/dev/null 2>&1 || service nginx stop >/dev/null 2>&1 || true
fi
export PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
make -s PG_CONFIG=$PG_CONFIG >/dev/null
make -s PG_CONFIG=$PG_CONFIG install >/dev/null
exec /usr/bin/python3 bench/bench.py "$@"
