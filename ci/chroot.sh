#!/usr/bin/env bash
# ci/chroot.sh - builds and tests the extension against PostgreSQL 17 and 18,
# each inside its own Debian chroot, with the recipe the host uses for 15
# (ci/build-and-check.sh).
#
# Usage: ci/chroot.sh [--refresh] [17] [18]    build and test (default: both)
#        ci/chroot.sh --remove [17] [18]       delete the chroots
#
#   PostgreSQL 17 comes from Debian trixie, PostgreSQL 18 from Debian sid.  The
#   host (Debian bookworm) packages neither, so each version gets a minbase
#   debootstrap chroot with the server, its PGXS headers, the TAP test modules
#   and libcurl installed.  A fresh copy of the source tree is built there by
#   ci/build-and-check.sh, which installs into the chroot's PostgreSQL and runs
#   the tests as the chroot's postgres user.
#
#   The first run per version debootstraps and installs packages, which takes
#   a few minutes; later runs reuse the chroot as it is and never update it.
#   --refresh (or OUTBOX_CHROOT_REFRESH=1) first runs apt-get update and
#   full-upgrade in it, to follow trixie's point releases and sid's daily
#   changes; --remove deletes it, and the next run makes a new one.
#   debootstrap's and apt's output goes to the log only: the console gets one
#   line per step, then the build and the tests.  Everything mounted into a
#   chroot is unmounted again on every exit path.
#
# Must run as root.  Environment:
#   OUTBOX_CHROOT_DIR      where the chroots live  (/var/cache/outbox-matrix)
#   OUTBOX_LOG_DIR         full log per version, pg<version>.log  (/tmp/outbox-logs)
#   OUTBOX_DEBIAN_MIRROR   Debian mirror           (http://deb.debian.org/debian)
#   OUTBOX_CHROOT_REFRESH  1: as --refresh
#   OUTBOX_APT_LOCK_TIMEOUT, OUTBOX_TEST_JOBS  see ci/lib.sh
#
# Exit status: 0 if every version passed, else that of the last one that
# failed: 2 setup, 3 build, 4 tests, 5 cleanup, 130 interrupted.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=ci/lib.sh
. "$SCRIPT_DIR/lib.sh"
REPO_DIR=$(git -C "$SCRIPT_DIR" rev-parse --show-toplevel 2>/dev/null || (cd "$SCRIPT_DIR/.." && pwd))

CHROOT_BASE=${OUTBOX_CHROOT_DIR:-/var/cache/outbox-matrix}
MIRROR=${OUTBOX_DEBIAN_MIRROR:-http://deb.debian.org/debian}
REFRESH=${OUTBOX_CHROOT_REFRESH:-0}
# Paths inside the chroot (each release of RELEASES in ci/lib.sh goes to
# $RELEASE_DIR-<version>).  The packages marker holds the installed package list.
BUILD_DIR=/build/outbox RELEASE_DIR=/build/outbox BOOTSTRAP_MARKER=/.outbox-debootstrap-ok PACKAGES_MARKER=/.outbox-packages-ok
CHROOT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# per release version: its tree in the chroot, or why it could not be extracted
declare -A RELEASE_SRC=() RELEASE_ERROR=()

suite_for() { case $1 in 17) echo trixie ;; 18) echo sid ;; *) return 1 ;; esac; }
packages_for() {
    echo "postgresql-$1 postgresql-server-dev-$1 $(kind_packages build) $(kind_packages test) libssl-dev openssl nodejs pkgconf" \
        "$(monitoring_packages "$(suite_for "$1")")" \
        "libipc-run-perl make gcc python3 perl ca-certificates" \
        "build-essential debhelper dpkg-dev postgresql-server-dev-all lintian"
}
warn() { printf 'WARNING: %s\n' "$*"; }
usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; }

# Run a command in the chroot as root, with a clean environment.
in_chroot() {
    chroot "$ROOT" /usr/bin/env -i PATH="$CHROOT_PATH" HOME=/root LANG=C.UTF-8 \
        DEBIAN_FRONTEND=noninteractive "$@"
}
# apt-get in the chroot, waiting for its locks as on the host.
# shellcheck disable=SC2317 # called through quietly
apt_in_chroot() {
    wait_for_apt "$ROOT" || return 1
    in_chroot apt-get -o DPkg::Lock::Timeout="$APT_LOCK_TIMEOUT" "$@"
}

mounts_under_root() { awk -v r="$ROOT/" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r; }
add_mount() { # add_mount PATH-IN-CHROOT MOUNT-ARGS...
    local target=$ROOT$1
    shift
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
    trap - EXIT
    trap '' INT TERM PIPE
    set +e
    kill_chroot_processes
    unmount_all
    [ -z "$(mounts_under_root)" ] || { echo "ERROR: still mounted: $(mounts_under_root)"; exit 5; }
    [ "$rc" -eq 0 ] && exit 0
    case $rc in 130 | 143) exit "$rc" ;; esac
    if [ "$STAGE" = setup ]; then
        echo "ERROR: setup failed (exit status $rc); full log: $LOG"
        exit 2
    fi
    case $rc in 3 | 4) exit "$rc" ;; *) exit 4 ;; esac
}

ensure_debootstrap() {
    [ -f "$ROOT$BOOTSTRAP_MARKER" ] && return 0
    # A completed debootstrap removes its own /debootstrap work directory.
    if [ -x "$ROOT/usr/bin/apt-get" ] && [ -s "$ROOT/var/lib/dpkg/status" ] && [ ! -e "$ROOT/debootstrap" ]; then
        step "reusing the existing debootstrap in $ROOT"
    else
        [ ! -e "$ROOT" ] || { step "removing the incomplete chroot $ROOT"; rm -rf --one-file-system "$ROOT"; }
        step "debootstrap --variant=minbase $SUITE (first run only: a few minutes)"
        quietly "$LOG" debootstrap --variant=minbase "$SUITE" "$ROOT" "$MIRROR"
    fi
    touch "$ROOT$BOOTSTRAP_MARKER"
    FRESH=1
}

configure_chroot() {
    cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
    # sid's Release file is often past its Valid-Until date on mirrors
    echo 'Acquire::Check-Valid-Until "false";' >"$ROOT/etc/apt/apt.conf.d/99outbox"
    # Never start services in the chroot, and skip creating the default cluster.
    printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
    chmod 755 "$ROOT/usr/sbin/policy-rc.d"
    mkdir -p "$ROOT/etc/postgresql-common"
    echo 'create_main_cluster = false' >"$ROOT/etc/postgresql-common/createcluster.conf"
}

ensure_packages() {
    local pkgs tap_dir=$ROOT/usr/lib/postgresql/$VERSION/lib/pgxs/src/test/perl/PostgreSQL/Test
    local dpkg_opts=(-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
    pkgs=$(packages_for "$VERSION")
    configure_chroot
    if [ "$(cat "$ROOT$PACKAGES_MARKER" 2>/dev/null)" != "$pkgs" ]; then
        step "installing packages in the chroot: $pkgs"
        quietly "$LOG" in_chroot dpkg --configure -a # finish an install that was interrupted earlier
        quietly "$LOG" apt_in_chroot update
        # shellcheck disable=SC2086 # word splitting of the package list is intended
        quietly "$LOG" apt_in_chroot install -y --no-install-recommends "${dpkg_opts[@]}" $pkgs
        quietly "$LOG" apt_in_chroot clean
        echo "$pkgs" >"$ROOT$PACKAGES_MARKER"
    elif [ "$REFRESH" = 1 ] && [ "$FRESH" = 0 ]; then
        step "refreshing the chroot: apt-get update, full-upgrade"
        quietly "$LOG" in_chroot dpkg --configure -a
        quietly "$LOG" apt_in_chroot update
        quietly "$LOG" apt_in_chroot full-upgrade -y "${dpkg_opts[@]}"
        quietly "$LOG" apt_in_chroot clean
    fi
    step "PostgreSQL in the chroot: $(in_chroot "/usr/lib/postgresql/$VERSION/bin/pg_config" --version)"
    [ -f "$tap_dir/Cluster.pm" ] || warn "TAP modules missing: $tap_dir/Cluster.pm"
    grep -Eq '^enable_tap_tests[[:space:]]*=[[:space:]]*yes' \
        "$ROOT/usr/lib/postgresql/$VERSION/lib/pgxs/src/Makefile.global" ||
        warn "PGXS for PostgreSQL $VERSION was not configured with --enable-tap-tests"
}

copy_source() { # tracked + untracked-but-not-ignored files, into a fresh directory
    local dest=$ROOT$BUILD_DIR
    local v why
    rm -rf --one-file-system "$dest" "$ROOT$RELEASE_DIR"-[0-9]* "$ROOT"/tmp/outbox-check.*
    mkdir -p "$dest"
    # the releases for the upgrade tests: git runs here, on the host
    for v in $RELEASES; do
        if why=$(release_tree "$REPO_DIR" "$v" "$ROOT$RELEASE_DIR-$v"); then
            RELEASE_SRC[$v]=$RELEASE_DIR-$v RELEASE_ERROR[$v]=
        else
            RELEASE_SRC[$v]='' RELEASE_ERROR[$v]=$why
            warn "the upgrade test from $v will be skipped: $why"
        fi
    done
    if git -C "$REPO_DIR" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        (cd "$REPO_DIR" && git ls-files -co --exclude-standard -z |
            while IFS= read -r -d '' f; do [ -e "$f" ] || [ -L "$f" ] && printf '%s\0' "$f"; done |
            tar --null -T - -cf -) | tar -xf - -C "$dest"
    else
        tar -C "$REPO_DIR" --exclude=.git --exclude=tmp_check --exclude=results --exclude='*.o' \
            --exclude='*.so' --exclude=log -cf - . | tar -xf - -C "$dest"
    fi
}

lock_version() { # held until this run (and all it started) ends
    mkdir -p "$CHROOT_BASE"
    exec 9>"$CHROOT_BASE/pg$VERSION.lock"
    flock -n 9 || { echo "ERROR: another run is using $ROOT"; exit 1; }
}

run_version() {
    set -euo pipefail
    VERSION=$1 STAGE=setup MOUNTS=() FRESH=0 RELEASE_SRC=() RELEASE_ERROR=()
    SUITE=$(suite_for "$VERSION")
    ROOT=$(realpath -m "$CHROOT_BASE/pg$VERSION")
    local start=$SECONDS
    lock_version
    trap 'finish $?' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    step "PostgreSQL $VERSION: Debian $SUITE chroot at $ROOT (full log: $LOG)"
    kill_chroot_processes
    unmount_all # leftovers from a run that was killed hard
    ensure_debootstrap
    add_mount /proc -t proc proc
    add_mount /dev/pts -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts
    add_mount /dev/shm -t tmpfs -o mode=1777,nosuid,nodev shm
    ensure_packages
    copy_source
    # the tests' npm packages (ci/deps.sh installed them on the host)
    rm -rf --one-file-system "$ROOT$NODE_DIR" && mkdir -p "$ROOT$NODE_DIR" &&
        cp -a "$NODE_DIR/." "$ROOT$NODE_DIR/"
    step "setup done in $((SECONDS - start))s"

    STAGE=build-and-check
    in_chroot PG_CONFIG="/usr/lib/postgresql/$VERSION/bin/pg_config" OUTBOX_HOST_ROOT="$ROOT" \
        OUTBOX_1_0_SRC="${RELEASE_SRC[1.0]}" OUTBOX_1_0_SRC_ERROR="${RELEASE_ERROR[1.0]}" \
        OUTBOX_1_1_SRC="${RELEASE_SRC[1.1]}" OUTBOX_1_1_SRC_ERROR="${RELEASE_ERROR[1.1]}" OUTBOX_TEST_JOBS="$TEST_JOBS" \
        bash "$BUILD_DIR/ci/build-and-check.sh"
}

remove_version() {
    VERSION=$1 MOUNTS=()
    ROOT=$(realpath -m "$CHROOT_BASE/pg$VERSION")
    lock_version
    [ -e "$ROOT" ] || { step "no chroot at $ROOT"; return 0; }
    kill_chroot_processes
    unmount_all
    [ -z "$(mounts_under_root)" ] || { echo "ERROR: still mounted: $(mounts_under_root)"; exit 5; }
    step "removing $ROOT ($(du -sh --one-file-system "$ROOT" | cut -f1))"
    rm -rf --one-file-system "$ROOT"
}

MODE="test"
while [ $# -gt 0 ]; do
    case $1 in
    -h | --help) usage; exit 0 ;;
    --refresh) REFRESH=1 ;;
    --remove) MODE=remove ;;
    -*) echo "unknown option '$1'" >&2; usage >&2; exit 2 ;;
    *) break ;;
    esac
    shift
done
VERSIONS=("$@")
[ $# -gt 0 ] || VERSIONS=(17 18)
for v in "${VERSIONS[@]}"; do
    suite_for "$v" >/dev/null || { echo "unsupported PostgreSQL version '$v' (use 17 and/or 18)" >&2; exit 2; }
done
[ "$(id -u)" -eq 0 ] || { echo "ci/chroot.sh must run as root (debootstrap, chroot, mount)" >&2; exit 2; }

if [ "$MODE" = remove ]; then
    for v in "${VERSIONS[@]}"; do (remove_version "$v"); done
    exit 0
fi

mkdir -p "$LOG_DIR"
declare -A RESULT=()
INTERRUPTED=0 status=0
trap 'INTERRUPTED=1' INT TERM
for v in "${VERSIONS[@]}"; do
    LOG=$LOG_DIR/pg$v.log
    : >"$LOG"
    set +e
    (run_version "$v") 2>&1 | (
        trap '' INT TERM
        tee -a "$LOG" | sed -u "s/^/[pg$v] /"
    )
    rc=${PIPESTATUS[0]}
    set -e
    [ "$INTERRUPTED" -eq 0 ] || rc=130
    RESULT[$v]=$(result_text "$rc")
    [ "$rc" -eq 0 ] || status=$rc
    [ "$INTERRUPTED" -eq 0 ] || break
done

echo
for v in "${VERSIONS[@]}"; do
    echo "PostgreSQL $v: ${RESULT[$v]:-not run}"
done
echo "(full logs: $LOG_DIR/pg<version>.log)"
exit "$status"
