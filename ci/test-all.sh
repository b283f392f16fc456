#!/bin/bash
# ci/test-all.sh - the README's test command. As root on Debian bookworm:
# installs the dependencies (ci/deps.sh), then for each PostgreSQL version
# builds with assertions and warnings as errors, installs, and runs
# pg_regress and the TAP suite, then builds, installs and tests the Debian
# package (ci/build-and-check.sh): 15 on the host, with the PGXN zip too,
# 17 and 18 in Debian chroots (ci/chroot.sh, which makes them on first use).
#
# It changes the host: it installs Debian packages (which can upgrade an
# installed postgresql-15), and it installs the extension into the host's
# PostgreSQL 15. The tests need an assertion-enabled build there; the
# package postgresql-15-outbox (ci/package.sh) replaces it at the end, or
# a normal build if the run stopped before.
#
# Environment:
#   OUTBOX_VERSIONS        versions to test   ("15 17 18")
#   OUTBOX_CHROOT_REFRESH  1: apt-get update and full-upgrade the chroots first
#   OUTBOX_LOG_DIR         full logs          (/tmp/outbox-logs)
#   and those of ci/chroot.sh and ci/lib.sh.
# Prints one result line per version, then "versions: N passed, M failed".
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=ci/lib.sh
. ci/lib.sh
versions=${OUTBOX_VERSIONS:-15 17 18}
total=$(echo "$versions" | wc -w)

for v in $versions; do
    case $v in 15 | 17 | 18) ;; *) echo "test-all.sh: unsupported version '$v' (15, 17, 18)" >&2; exit 2 ;; esac
done
if [ "$(id -u)" != 0 ]; then
    echo "test-all.sh: run as root (it installs packages and makes chroots)" >&2
    exit 2
fi
mkdir -p "$LOG_DIR"
begin=$SECONDS
results=()
failed=0
interrupted=0
trap 'interrupted=1' INT TERM

# normal_build: a build without assertions, for the host's PostgreSQL 15
normal_build() {
    make -s PG_CONFIG="$PG15_CONFIG" clean &&
        make -s PG_CONFIG="$PG15_CONFIG" &&
        make -s PG_CONFIG="$PG15_CONFIG" install
}

if ! bash ci/deps.sh; then
    echo "versions: 0 passed, $total failed (dependencies could not be installed)"
    exit 1
fi

for v in $versions; do
    start=$SECONDS
    log=$LOG_DIR/pg$v.log
    if [ "$v" = 15 ]; then
        step "PostgreSQL 15 on the host: installs an assertion-enabled build of the extension into" \
            "$("$PG15_CONFIG" --pkglibdir) and $("$PG15_CONFIG" --sharedir)/extension until the end of this run"
        (PG_CONFIG=$PG15_CONFIG OUTBOX_PGXN_CHECK=1 bash ci/build-and-check.sh) 2>&1 | (
            trap '' INT TERM
            tee "$log" | sed -u 's/^/[pg15] /'
        )
        rc=${PIPESTATUS[0]}
        # passed: the package replaced the assertion-enabled build
        [ "$rc" = 0 ] || restore_15=1
    else
        bash ci/chroot.sh "$v"
        rc=$?
    fi
    [ "$interrupted" = 0 ] || rc=130
    result=$(result_text "$rc")
    [ "$rc" = 0 ] || { failed=$((failed + 1)); result+=", log: $log"; }
    results+=("PostgreSQL $v: $result ($((SECONDS - start))s)")
    [ "$interrupted" = 0 ] || break
done

if [ "${restore_15:-0}" = 1 ]; then
    if [ "$interrupted" = 1 ]; then
        echo "The host's PostgreSQL 15 has an assertion-enabled build of outbox; to put a normal one back:"
        echo "    make PG_CONFIG=$PG15_CONFIG clean all install"
    else
        trap - INT TERM
        step "reinstalling a normal build (no assertions) into the host's PostgreSQL 15"
        quietly "$LOG_DIR/pg15-normal-build.log" normal_build ||
            echo "The normal build failed: the host's PostgreSQL 15 keeps the assertion-enabled one."
    fi
fi

echo
printf '%s\n' "${results[@]}"
not_run=$((total - ${#results[@]}))
[ "$not_run" = 0 ] || echo "($not_run not run)"
echo "total time: $((SECONDS - begin))s"
echo "versions: $((${#results[@]} - failed)) passed, $((failed + not_run)) failed"
[ "$failed" = 0 ] && [ "$not_run" = 0 ]
