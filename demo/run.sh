#!/bin/bash
# The main job on a throwaway cluster, as root on Debian bookworm: installs
# what is needed (ci/deps.sh), builds the extension and installs it into the
# system's PostgreSQL 15, starts a PostgreSQL 15 cluster in a temporary
# directory with the relay worker preloaded and a webhook endpoint on
# 127.0.0.1 (test/sink.py), runs the seed lesson's canon (demo/canon.py)
# against them, prints its four lines, and removes the cluster and the
# endpoint again, also on Ctrl-C. The build's output goes to
# $OUTBOX_LOG_DIR/demo-build.log.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=ci/lib.sh
. ci/lib.sh
src=$(pwd)
export PG_CONFIG=$PG15_CONFIG
bin=$("$PG_CONFIG" --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)

bash ci/deps.sh
step "building the extension and installing it into the system's PostgreSQL 15" \
    "($("$PG_CONFIG" --pkglibdir), $("$PG_CONFIG" --sharedir)/extension)"
build() {
    make -s PG_CONFIG="$PG_CONFIG" clean &&
        make -s PG_CONFIG="$PG_CONFIG" &&
        make -s PG_CONFIG="$PG_CONFIG" install
}
mkdir -p "$LOG_DIR"
quietly "$LOG_DIR/demo-build.log" build

tmp=$(mktemp -d /tmp/outbox-demo.XXXXXX)
chown postgres "$tmp"
sink_pid=
cleanup() {
    local rc=$?
    trap '' INT TERM
    [ "$rc" -lt 128 ] || step "interrupted: removing the throwaway cluster and the endpoint"
    [ -n "$sink_pid" ] && kill "$sink_pid" 2>/dev/null
    [ -f "$tmp/data/postmaster.pid" ] &&
        runuser -u postgres -- "$bin/pg_ctl" -D "$tmp/data" -m fast -w stop >/dev/null 2>&1
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
step "starting a throwaway cluster in $tmp (port $port)"
runuser -u postgres -- "$bin/initdb" -D "$tmp/data" -A trust -U postgres >/dev/null
cat >>"$tmp/data/postgresql.conf" <<CONF
port = $port
listen_addresses = ''
unix_socket_directories = '$tmp'
shared_preload_libraries = 'outbox'
outbox.databases = 'postgres'
CONF
runuser -u postgres -- "$bin/pg_ctl" -D "$tmp/data" -l "$tmp/server.log" -w start >/dev/null
export PGHOST=$tmp PGPORT=$port PGUSER=postgres PGDATABASE=postgres
"$bin/psql" -X -q -c "CREATE EXTENSION outbox"

# Ctrl-C is for canon.py; the endpoint ignores it and cleanup stops it
(trap '' INT && exec python3 "$src/test/sink.py" --port-file "$tmp/sink.port") &
sink_pid=$!
for _ in $(seq 100); do [ -s "$tmp/sink.port" ] && break; sleep 0.1; done
step "webhook endpoint on http://127.0.0.1:$(cat "$tmp/sink.port")"
step "100 tasks by a dual-write client, then 100 through outbox_emit(); every tenth client dies after COMMIT"
step "then 100 into a BullMQ queue in the same database, the relay killed after the 50th"
echo
PATH=$bin:$PATH NODE_PATH=$NODE_DIR/node_modules python3 "$src/demo/canon.py" \
    --sink "http://127.0.0.1:$(cat "$tmp/sink.port")" --bullmq-tool "$src/test/bullmq_tool.js"
