#!/bin/bash
# The main job on a throwaway cluster, as root on Debian bookworm: installs
# what is needed, builds and installs the extension, starts a PostgreSQL 15
# cluster in a temporary directory with the relay worker preloaded and a
# webhook endpoint on 127.0.0.1, runs the seed lesson's canon (demo/canon.py)
# against them, prints its three lines, and removes everything it started.
set -euo pipefail

cd "$(dirname "$0")/.."
src=$(pwd)
export PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
bin=/usr/lib/postgresql/15/bin

bash ci/deps.sh
echo "==> building and installing the extension"
make -s PG_CONFIG=$PG_CONFIG >/dev/null
make -s PG_CONFIG=$PG_CONFIG install >/dev/null

tmp=$(mktemp -d /tmp/outbox-demo.XXXXXX)
chown postgres "$tmp"
sink_pid=
cleanup() {
    [ -n "$sink_pid" ] && kill "$sink_pid" 2>/dev/null
    [ -f "$tmp/data/postmaster.pid" ] &&
        runuser -u postgres -- "$bin/pg_ctl" -D "$tmp/data" -m fast -w stop >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "==> starting a throwaway cluster in $tmp (port $port)"
runuser -u postgres -- "$bin/initdb" -D "$tmp/data" -A trust -U postgres >/dev/null
cat >> "$tmp/data/postgresql.conf" <<CONF
port = $port
listen_addresses = ''
unix_socket_directories = '$tmp'
shared_preload_libraries = 'outbox'
outbox.databases = 'postgres'
CONF
runuser -u postgres -- "$bin/pg_ctl" -D "$tmp/data" -l "$tmp/server.log" -w start >/dev/null
export PGHOST=$tmp PGPORT=$port PGUSER=postgres PGDATABASE=postgres
"$bin/psql" -X -q -c "CREATE EXTENSION outbox"

python3 "$src/test/sink.py" --port-file "$tmp/sink.port" &
sink_pid=$!
for _ in $(seq 100); do [ -s "$tmp/sink.port" ] && break; sleep 0.1; done
echo "==> webhook endpoint on http://127.0.0.1:$(cat "$tmp/sink.port")"
echo "==> 100 tasks by a dual-write client, then 100 through outbox_emit(); every tenth client dies after COMMIT"
echo
PATH=$bin:$PATH python3 "$src/demo/canon.py" --sink "http://127.0.0.1:$(cat "$tmp/sink.port")"
