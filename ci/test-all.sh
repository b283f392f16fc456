#!/bin/bash
# Sets up and runs every test, as root on Debian bookworm: installs the
# dependencies, builds with warnings as errors, installs, and runs pg_regress
# and the TAP suite on the host's PostgreSQL 15, then on PostgreSQL 17 and 18
# in Debian chroots (ci/chroot.sh). OUTBOX_VERSIONS="15 17 18" chooses.
set -uo pipefail

cd "$(dirname "$0")/.."
versions=${OUTBOX_VERSIONS:-15 17 18}
results=()
failed=0

bash ci/deps.sh || exit 1

for v in $versions; do
    if [ "$v" = 15 ]; then
        pg_config=/usr/lib/postgresql/15/bin/pg_config
        echo "==> PostgreSQL 15 (host)"
        if make -s PG_CONFIG=$pg_config clean &&
           make -s PG_CONFIG=$pg_config PG_CFLAGS="-DUSE_ASSERT_CHECKING -Wall -Wextra -Werror" &&
           make -s PG_CONFIG=$pg_config install >/dev/null &&
           PG_CONFIG=$pg_config bash ci/check.sh; then
            results+=("PostgreSQL 15: PASS")
        else
            results+=("PostgreSQL 15: FAIL")
            failed=$((failed + 1))
        fi
    else
        if bash ci/chroot.sh "$v"; then
            results+=("PostgreSQL $v: PASS")
        else
            results+=("PostgreSQL $v: FAIL")
            failed=$((failed + 1))
        fi
    fi
done

echo
printf '%s\n' "${results[@]}"
total=$(echo $versions | wc -w)
echo "versions: $((total - failed)) passed, $failed failed"
[ $failed = 0 ]
