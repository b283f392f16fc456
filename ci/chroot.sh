#!/usr/bin/env bash
# ci/chroot.sh - build and test the outbox extension against several
# PostgreSQL major versions, each inside its own Debian chroot.
#
# Usage: ci/chroot.sh [17] [18]        (default: all of them, one after another)
#
#   PostgreSQL 17 comes from Debian trixie, PostgreSQL 18 from Debian sid.  The
#   host (Debian bookworm) packages neither, so each version gets a minbase
#   debootstrap chroot with the server, its PGXS headers, the TAP test modules
#   and libcurl installed.  A fresh copy of the source tree is built there with
#   assertions and -Werror, installed, and then tested as an unprivileged user
#   (initdb refuses to run as root) with the project's test entry point.
#
# Must run as root.  Environment:
#   OUTBOX_CHROOT_DIR       where the chroots live  (/var/cache/outbox-matrix)
#   OUTBOX_MATRIX_LOG_DIR   full log per version    (/tmp/outbox-matrix-logs)
#   OUTBOX_MATRIX_TEST_CMD  test command, run in the build copy (bash ci/check.sh)
#   OUTBOX_MATRIX_MIRROR    Debian mirror           (http://deb.debian.org/debian)
#
# The first run per version debootstraps (if needed) and installs packages,
# which takes a few minutes; a marker file in the chroot makes later runs skip
# that.  Everything mounted into a chroot is unmounted again on every exit path.
set -euo pipefail

CHROOT_BASE=${OUTBOX_CHROOT_DIR:-/var/cache/outbox-matrix}
LOG_DIR=${OUTBOX_MATRIX_LOG_DIR:-/tmp/outbox-matrix-logs}
TEST_CMD=${OUTBOX_MATRIX_TEST_CMD:-bash ci/check.sh}
MIRROR=${OUTBOX_MATRIX_MIRROR:-http://deb.debian.org/debian}
TEST_USER=outboxtest
# Paths inside the chroot.  The packages marker holds the installed package list.
BUILD_DIR=/build/outbox BOOTSTRAP_MARKER=/.outbox-debootstrap-ok PACKAGES_MARKER=/.outbox-packages-ok
CHROOT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(git -C "$SCRIPT_DIR" rev-parse --show-toplevel 2>/dev/null || (cd "$SCRIPT_DIR/.." && pwd))

suite_for() { case $1 in 17) echo trixie ;; 18) echo sid ;; *) return 1 ;; esac; }
packages_for() {
    echo "postgresql-$1 postgresql-server-dev-$1 libcurl4-openssl-dev pkgconf" \
        "libipc-run-perl make gcc python3 perl ca-certificates"
}
log() { printf '==> %s\n' "$*"; }
warn() { printf 'WARNING: %s\n' "$*"; }
usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; }

# Run a command in the chroot as root / as the test user, with a clean environment.
in_chroot() {
    chroot "$ROOT" /usr/bin/env -i PATH="$CHROOT_PATH" HOME=/root LANG=C.UTF-8 \
        DEBIAN_FRONTEND=noninteractive "$@"
}
as_test_user() {
    chroot --userspec="$TEST_UID:$TEST_GID" --groups="$TEST_GID" "$ROOT" /usr/bin/env -i \
        PATH="/usr/lib/postgresql/$VERSION/bin:$CHROOT_PATH" HOME="/home/$TEST_USER" \
        USER="$TEST_USER" LOGNAME="$TEST_USER" LANG=C.UTF-8 "$@"
}

mounts_under_root() { awk -v r="$ROOT/" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r; }
add_mount() { # add_mount PATH-IN-CHROOT MOUNT-ARGS...
    local target=$ROOT$1; shift
    mount "$@" "$target"
    MOUNTS=("$target" "${MOUNTS[@]}")
}
unmount_all() { # ours in reverse order, then anything else left under the chroot
    local m
    for m in "${MOUNTS[@]}" $(mounts_under_root); do
        mountpoint -q "$m" || continue
        umount "$m" 2>/dev/null || { warn "$m busy, detaching lazily"; umount -l "$m"; }
    done
    MOUNTS=()
}
# Processes started inside the chroot (e.g. a postgres left over by a failed test).
kill_chroot_processes() {
    local sig p pids
    for sig in TERM KILL; do
        pids=()
        for p in /proc/[0-9]*; do
            [ "$(readlink "$p/root" 2>/dev/null)" = "$ROOT" ] && pids+=("${p#/proc/}")
        done
        [ ${#pids[@]} -eq 0 ] && return 0
        warn "sending SIG$sig to leftover chroot processes: ${pids[*]}"
        kill -s "$sig" "${pids[@]}" 2>/dev/null || true
        sleep 3
    done
}

# shellcheck disable=SC2317 # invoked from the EXIT trap
finish() { # EXIT trap of one version's run: clean up, map the failed stage to an exit code
    local rc=$1
    trap - EXIT; trap '' INT TERM PIPE; set +e
    kill_chroot_processes
    unmount_all
    [ -z "$(mounts_under_root)" ] || { echo "ERROR: still mounted: $(mounts_under_root)"; exit 5; }
    [ "$rc" -eq 0 ] && exit 0
    printf 'ERROR: %s stage failed (exit status %s)\n' "$STAGE" "$rc"
    case $STAGE in build) exit 3 ;; tests) exit 4 ;; *) exit 2 ;; esac
}

ensure_debootstrap() {
    [ -f "$ROOT$BOOTSTRAP_MARKER" ] && return 0
    # A completed debootstrap removes its own /debootstrap work directory.
    if [ -x "$ROOT/usr/bin/apt-get" ] && [ -s "$ROOT/var/lib/dpkg/status" ] && [ ! -e "$ROOT/debootstrap" ]; then
        log "reusing existing debootstrap in $ROOT"
    else
        [ ! -e "$ROOT" ] || { log "removing incomplete chroot $ROOT"; rm -rf --one-file-system "$ROOT"; }
        log "debootstrap --variant=minbase $SUITE $ROOT $MIRROR"
        debootstrap --variant=minbase "$SUITE" "$ROOT" "$MIRROR"
    fi
    touch "$ROOT$BOOTSTRAP_MARKER"
}

ensure_packages() {
    local pkgs tap_dir=$ROOT/usr/lib/postgresql/$VERSION/lib/pgxs/src/test/perl/PostgreSQL/Test
    pkgs=$(packages_for "$VERSION")
    if [ "$(cat "$ROOT$PACKAGES_MARKER" 2>/dev/null)" != "$pkgs" ]; then
        log "installing packages: $pkgs"
        cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
        echo 'Acquire::Check-Valid-Until "false";' >"$ROOT/etc/apt/apt.conf.d/99outbox"
        # Never start services in the chroot, and skip creating the default cluster.
        printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
        chmod 755 "$ROOT/usr/sbin/policy-rc.d"
        mkdir -p "$ROOT/etc/postgresql-common"
        echo 'create_main_cluster = false' >"$ROOT/etc/postgresql-common/createcluster.conf"
        in_chroot dpkg --configure -a # finish an install that was interrupted earlier
        in_chroot apt-get update
        # shellcheck disable=SC2086 # word splitting of the package list is intended
        in_chroot apt-get install -y --no-install-recommends \
            -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold $pkgs
        in_chroot apt-get clean
        echo "$pkgs" >"$ROOT$PACKAGES_MARKER"
    fi
    [ -f "$tap_dir/Cluster.pm" ] || warn "TAP modules missing: $tap_dir/Cluster.pm"
    grep -Eq '^enable_tap_tests[[:space:]]*=[[:space:]]*yes' \
        "$ROOT/usr/lib/postgresql/$VERSION/lib/pgxs/src/Makefile.global" ||
        warn "PGXS for PostgreSQL $VERSION was not configured with --enable-tap-tests"
    in_chroot id -u "$TEST_USER" >/dev/null 2>&1 ||
        in_chroot useradd --create-home --shell /bin/bash "$TEST_USER"
    TEST_UID=$(in_chroot id -u "$TEST_USER"); TEST_GID=$(in_chroot id -g "$TEST_USER")
}

copy_source() { # tracked + untracked-but-not-ignored files, into a fresh directory
    local dest=$ROOT$BUILD_DIR
    rm -rf --one-file-system "$dest"; mkdir -p "$dest"
    if git -C "$REPO_DIR" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        (cd "$REPO_DIR" && git ls-files -co --exclude-standard -z |
            while IFS= read -r -d '' f; do [ -e "$f" ] || [ -L "$f" ] && printf '%s\0' "$f"; done |
            tar --null -T - -cf -) | tar -xf - -C "$dest"
    else
        tar -C "$REPO_DIR" --exclude=.git --exclude=tmp_check --exclude=results --exclude='*.o' \
            --exclude='*.so' --exclude=log -cf - . | tar -xf - -C "$dest"
    fi
    chown -R "$TEST_UID:$TEST_GID" "$dest"
}

run_version() {
    set -euo pipefail
    VERSION=$1 STAGE=setup MOUNTS=()
    SUITE=$(suite_for "$VERSION")
    ROOT=$(realpath -m "$CHROOT_BASE/pg$VERSION")
    local pg_config=/usr/lib/postgresql/$VERSION/bin/pg_config start=$SECONDS
    mkdir -p "$CHROOT_BASE"
    exec 9>"$CHROOT_BASE/pg$VERSION.lock" # held until this run (and all it started) ends
    flock -n 9 || { echo "ERROR: another run is using $ROOT"; exit 1; }
    trap 'finish $?' EXIT
    trap 'exit 130' INT; trap 'exit 143' TERM
    log "PostgreSQL $VERSION: Debian $SUITE chroot at $ROOT"
    kill_chroot_processes; unmount_all # leftovers from a run that was killed hard
    ensure_debootstrap
    add_mount /proc -t proc proc
    add_mount /dev/pts -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts
    add_mount /dev/shm -t tmpfs -o mode=1777,nosuid,nodev shm
    ensure_packages
    copy_source
    log "setup done in $((SECONDS - start))s"

    STAGE=build start=$SECONDS
    in_chroot make -C "$BUILD_DIR" PG_CONFIG="$pg_config" \
        PG_CFLAGS="-DUSE_ASSERT_CHECKING -Wall -Wextra -Werror"
    in_chroot make -C "$BUILD_DIR" PG_CONFIG="$pg_config" install
    chown -R "$TEST_UID:$TEST_GID" "$ROOT$BUILD_DIR"
    log "build done in $((SECONDS - start))s"

    STAGE=tests start=$SECONDS
    log "running as $TEST_USER: $TEST_CMD"
    # shellcheck disable=SC2016 # $1/$2 are expanded by the inner bash
    as_test_user PG_CONFIG="$pg_config" /bin/bash -c 'cd "$1" && eval "$2"' bash "$BUILD_DIR" "$TEST_CMD"
    log "tests passed in $((SECONDS - start))s"
}

[ $# -gt 0 ] && case $1 in -h | --help) usage; exit 0 ;; esac
VERSIONS=("$@"); [ $# -gt 0 ] || VERSIONS=(17 18)
for v in "${VERSIONS[@]}"; do
    suite_for "$v" >/dev/null || { echo "unsupported PostgreSQL version '$v' (use 17 and/or 18)" >&2; exit 2; }
done
[ "$(id -u)" -eq 0 ] || { echo "ci/chroot.sh must run as root (debootstrap, chroot, mount)" >&2; exit 2; }
mkdir -p "$LOG_DIR"

declare -A RESULT=()
INTERRUPTED=0
trap 'INTERRUPTED=1' INT TERM
for v in "${VERSIONS[@]}"; do
    set +e
    ( run_version "$v" ) 2>&1 | ( trap '' INT TERM; tee "$LOG_DIR/pg$v.log" | sed -u "s/^/[pg$v] /" )
    rc=${PIPESTATUS[0]}
    set -e
    case $rc in
        0) RESULT[$v]=PASS ;;
        3) RESULT[$v]="FAIL (build)" ;;
        4) RESULT[$v]="FAIL (tests)" ;;
        5) RESULT[$v]="FAIL (cleanup)" ;;
        *) RESULT[$v]="FAIL (setup)" ;;
    esac
    [ "$INTERRUPTED" -eq 0 ] || { RESULT[$v]="FAIL (interrupted)"; break; }
done

echo
status=0
for v in "${VERSIONS[@]}"; do
    echo "PostgreSQL $v: ${RESULT[$v]:-not run}"
    [ "${RESULT[$v]:-}" = PASS ] || status=1
done
echo "(full logs: $LOG_DIR/pg<version>.log)"
exit $status
