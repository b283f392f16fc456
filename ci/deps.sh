#!/bin/bash
# Installs what building and testing the extension needs on Debian bookworm,
# as root: PostgreSQL 15 with its PGXS headers, libcurl, the Perl modules of
# the TAP tests, Python for the test webhook endpoint, and debootstrap for
# the PostgreSQL 17/18 chroots. Quiet when everything is already there.
set -euo pipefail

packages=(postgresql-15 postgresql-server-dev-15 libcurl4-openssl-dev
          libipc-run-perl make gcc python3 debootstrap ca-certificates)

if [ "$(id -u)" != 0 ]; then
    echo "deps.sh: run as root (it installs Debian packages)" >&2
    exit 1
fi

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "==> installing: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
