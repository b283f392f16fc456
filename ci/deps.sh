#!/bin/bash
# ci/deps.sh - installs what building and testing the extension needs on
# Debian bookworm, as root: PostgreSQL 15 with its PGXS headers, the
# destination kinds' libraries and test brokers (src/kinds/kinds.list:
# libcurl, libnats, nats-server), libssl-dev (ed25519 signatures), openssl (the tests' certificates and
# signature checks), prometheus, promtool and postgres_exporter (the
# monitoring test), the Perl modules of the TAP tests, Python for the test
# webhook endpoint, Node.js (the tests' signature checks), debootstrap for
# the PostgreSQL 17/18 chroots, what builds and lints the Debian package
# (build-essential, debhelper, postgresql-server-dev-all for pg_buildext,
# lintian), and unzip for the PGXN zip. Says first what it installs and
# which installed packages that upgrades (postgresql-server-dev-15 can
# bring a newer postgresql-15); apt's output goes to $OUTBOX_LOG_DIR/deps.log.
# Quiet when everything is already there.
set -euo pipefail
# shellcheck source=ci/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# shellcheck disable=SC2207 # word splitting of the kinds' package list is wanted
packages=(postgresql-15 postgresql-server-dev-15 $(kind_packages build) $(kind_packages test) $(monitoring_packages bookworm) libssl-dev openssl nodejs
    libipc-run-perl make gcc python3 debootstrap ca-certificates build-essential debhelper dpkg-dev postgresql-server-dev-all lintian unzip)

if [ "$(id -u)" != 0 ]; then
    echo "deps.sh: run as root (it installs Debian packages)" >&2
    exit 1
fi
mkdir -p "$LOG_DIR"
install_packages "$LOG_DIR/deps.log" "${packages[@]}"
install_node_modules "$(dirname "${BASH_SOURCE[0]}")/.." "$LOG_DIR/deps.log"
