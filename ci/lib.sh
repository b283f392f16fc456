# shellcheck shell=bash disable=SC2034 # variables used by the sourcing scripts
# ci/lib.sh - helpers shared by the scripts in ci/, demo/ and bench/.
# Sourced, not run. Every apt-get of these scripts goes through apt_get (or
# apt_in_chroot in ci/chroot.sh), which waits a bounded, announced time for
# another package manager (a freshly booted machine often runs
# unattended-upgrades) instead of failing at once on "Could not get lock
# /var/lib/dpkg/lock-frontend".
#
# Environment:
#   OUTBOX_APT_LOCK_TIMEOUT  seconds to wait for apt/dpkg locks held by
#                            another process (default 600)
#   OUTBOX_LOG_DIR           where the scripts write their full logs
#                            (default /tmp/outbox-logs)
#   OUTBOX_TEST_JOBS         TAP test files run at once (default 2: the
#                            tests mostly wait on servers and sockets)
#   OUTBOX_BUILD_JOBS        make jobs for a build (default: the cores)
#   OUTBOX_NODE_DIR          where the tests' npm packages are installed
#                            (default /var/cache/outbox-npm; the tests read
#                            its node_modules)

APT_LOCK_TIMEOUT=${OUTBOX_APT_LOCK_TIMEOUT:-600}
LOG_DIR=${OUTBOX_LOG_DIR:-/tmp/outbox-logs}
TEST_JOBS=${OUTBOX_TEST_JOBS:-2}
BUILD_JOBS=${OUTBOX_BUILD_JOBS:-$(nproc)}
NODE_DIR=${OUTBOX_NODE_DIR:-/var/cache/outbox-npm}
PG15_CONFIG=/usr/lib/postgresql/15/bin/pg_config

# kind_packages build|test: the Debian packages the destination kinds need
# to build (their client libraries) or to be tested (their brokers), from
# src/kinds/kinds.list, the one list of them; space-separated.
kind_packages() {
    local col
    case $1 in build) col=4 ;; test) col=5 ;; *) return 1 ;; esac
    awk -v c="$col" '!/^#/ && NF && $c != "-" { printf "%s ", $c }' \
        "$(dirname "${BASH_SOURCE[0]}")/../src/kinds/kinds.list"
}

# monitoring_packages SUITE: the Debian packages the monitoring test
# (test/t/104_monitoring.pl) runs: prometheus, promtool (in prometheus's
# own package on bookworm, a package of its own from trixie on) and
# postgres_exporter, for Debian suite SUITE (the host: bookworm).
monitoring_packages() {
    case $1 in
    bookworm) echo "prometheus prometheus-postgres-exporter" ;;
    *) echo "prometheus promtool prometheus-postgres-exporter" ;;
    esac
}

step() { printf '==> %s\n' "$*"; }
# note: a step line for the console even from inside quietly (fd 3).
note() {
    if { : >&3; } 2>/dev/null; then step "$@" >&3; else step "$@"; fi
}

# quietly LOG CMD...: runs CMD with its output appended to LOG only. On
# failure prints the last lines of LOG and where the rest is.
quietly() {
    local log=$1 rc
    shift
    printf '\n$ %s\n' "$*" >>"$log"
    "$@" </dev/null 3>&1 >>"$log" 2>&1 && return 0
    rc=$?
    echo "FAILED (exit status $rc): $*"
    tail -n 25 "$log" | sed 's/^/    /'
    echo "    (full log: $log)"
    return "$rc"
}

# lock_holders FILE...: the pids holding a POSIX lock (apt and dpkg lock
# with fcntl) on any of the files, one per line.
lock_holders() {
    local f inodes=" "
    for f; do
        [ -e "$f" ] && inodes+="$(stat -c %i "$f") "
    done
    [ "$inodes" != " " ] || return 0
    # /proc/locks: "1: POSIX  ADVISORY  WRITE 1234 fe:00:131090 0 EOF",
    # with "->" after the number for a waiting lock
    awk -v want="$inodes" '{
        i = ($2 == "->") ? 1 : 0
        n = split($(6 + i), dev, ":")
        if (index(want, " " dev[n] " ")) print $(5 + i)
    }' /proc/locks | sort -u
}

# wait_for_apt [ROOT]: waits, at most APT_LOCK_TIMEOUT seconds, until no
# other process holds the package manager's locks of the system at ROOT
# (default /). apt-get's own DPkg::Lock::Timeout covers the dpkg lock only,
# not the lists lock that "apt-get update" takes, so both are checked here.
wait_for_apt() {
    local root=${1:-} waited=0 pids who p
    local locks=("$root/var/lib/dpkg/lock-frontend" "$root/var/lib/dpkg/lock"
        "$root/var/lib/apt/lists/lock" "$root/var/cache/apt/archives/lock")
    pids=$(lock_holders "${locks[@]}")
    [ -n "$pids" ] || return 0
    who=
    for p in $pids; do who+=", $(cat "/proc/$p/comm" 2>/dev/null || echo '?') (pid $p)"; done
    note "apt/dpkg of ${root:-the host} is busy (${who#, }): waiting up to ${APT_LOCK_TIMEOUT}s (OUTBOX_APT_LOCK_TIMEOUT)"
    while [ -n "$(lock_holders "${locks[@]}")" ]; do
        if [ "$waited" -ge "$APT_LOCK_TIMEOUT" ]; then
            note "ERROR: the apt/dpkg locks of ${root:-/} are still held after ${APT_LOCK_TIMEOUT}s"
            return 1
        fi
        sleep 2
        waited=$((waited + 2))
    done
    note "the package manager is free after ${waited}s"
}

# apt_get ARGS...: apt-get on the host, non-interactive, waiting for locks.
apt_get() {
    wait_for_apt "" || return 1
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout="$APT_LOCK_TIMEOUT" "$@"
}

# missing_packages PKG...: those of PKG that are not installed.
missing_packages() {
    local p
    for p; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
    done
}

# install_packages LOG PKG...: installs the missing PKGs on the host, with
# apt's output in LOG. Says first which installed packages this upgrades:
# postgresql-server-dev-15 can pull in a newer postgresql-15, and Debian
# then restarts any cluster of it that is running.
install_packages() {
    local log=$1 missing upgrades
    shift
    missing=$(missing_packages "$@")
    [ -n "$missing" ] || return 0
    # shellcheck disable=SC2086 # one word per package
    set -- $missing
    step "installing Debian packages: $* (log: $log)"
    quietly "$log" apt_get update || return 1
    upgrades=$(apt-get -s install --no-install-recommends "$@" 2>/dev/null |
        sed -n 's/^Inst \([^ ]*\) \[\([^]]*\)\] (\([^ ]*\).*/\1 \2 -> \3/p' | paste -sd, - | sed 's/,/, /g')
    [ -z "$upgrades" ] || step "this upgrades installed packages: $upgrades"
    case " $* " in
    *" postgresql-15 "*)
        step "Debian's postgresql-15 package creates a cluster 15/main (port 5432) and starts it where it can" ;;
    esac
    quietly "$log" apt_get install -y --no-install-recommends "$@"
}

# result_text STATUS: a version's result from the exit status of
# ci/build-and-check.sh or ci/chroot.sh.
result_text() {
    case $1 in
    0) echo PASS ;;
    3) echo "FAIL (build)" ;;
    4) echo "FAIL (tests)" ;;
    5) echo "FAIL (cleanup)" ;;
    130 | 143) echo "FAIL (interrupted)" ;;
    *) echo "FAIL (setup)" ;;
    esac
}

# The released versions the upgrade tests start from
# (test/t/062_upgrade_from_1_0.pl; test/t/063_upgrade_from_1_1.pl and
# test/t/064_upgrade_from_1_1_events.pl), and
# the commit of each: RELEASE_<version, dots as underscores>. The tests run
# from a copy of the tree without .git, so the scripts extract each
# release (ci/check.sh, and ci/chroot.sh on the host for the chroots) and
# pass its place in OUTBOX_<version>_SRC (OUTBOX_1_0_SRC, OUTBOX_1_1_SRC),
# or why they could not in OUTBOX_<version>_SRC_ERROR, which the test
# prints as it skips.
RELEASES="1.0 1.1"
RELEASE_1_0=c0d51ffd0a6f4e53b49c6010e6ceeb0b00ab210a
RELEASE_1_1=ea8b815f3c1241df63b423991817f44bd4828f8b

# copy_tree DEST: the source tree of the current folder into DEST: the
# files git tracks or would add, as they are in the working tree; without
# git, everything but build and test output.
copy_tree() {
    local dest=$1
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git ls-files -co --exclude-standard | while read -r f; do [ -e "$f" ] && echo "$f"; done |
            tar -cf - -T - | tar -xf - -C "$dest"
    else
        tar -cf - --exclude=.git --exclude=tmp_check --exclude=results \
            --exclude='*.o' --exclude='*.so' --exclude='*.bc' . | tar -xf - -C "$dest"
    fi
}

# release_tree REPO VERSION DEST: extracts the tree of release VERSION
# (one of RELEASES) from the git repository REPO into DEST (replaced). A
# shallow clone lacks the commit: it is deepened first (git fetch
# --unshallow). On failure, prints why on stdout and returns 1.
release_tree() {
    local repo=$1 version=$2 dest=$3 var commit short
    var=RELEASE_${version//./_}
    commit=${!var:-}
    if [ -z "$commit" ]; then
        echo "release $version is not one of the releases ci/lib.sh knows ($RELEASES)"
        return 1
    fi
    short=${commit:0:7}
    if ! command -v git >/dev/null || ! git -C "$repo" rev-parse --git-dir >/dev/null 2>&1; then
        echo "$repo is not a git repository (or git is missing): release $version ($short) cannot be extracted"
        return 1
    fi
    if ! git -C "$repo" cat-file -e "$commit^{commit}" 2>/dev/null &&
        [ "$(git -C "$repo" rev-parse --is-shallow-repository 2>/dev/null)" = true ]; then
        git -C "$repo" fetch --quiet --unshallow >/dev/null 2>&1 || true
    fi
    if ! git -C "$repo" cat-file -e "$commit^{commit}" 2>/dev/null; then
        echo "commit $short (release $version) is not in the repository at $repo, and git fetch --unshallow did not bring it"
        return 1
    fi
    rm -rf "$dest" && mkdir -p "$dest" &&
        git -C "$repo" archive "$commit" | tar -xf - -C "$dest" ||
        { echo "git archive $short into $dest failed"; return 1; }
}

# install_node_modules REPO LOG: installs the npm packages of
# REPO/test/node/package-lock.json (the tests' independent receivers, such
# as the CloudEvents SDK) into $NODE_DIR with npm ci, unless that lock is
# installed there already. Output to LOG.
install_node_modules() {
    local repo=$1 log=$2
    if cmp -s "$repo/test/node/package-lock.json" "$NODE_DIR/package-lock.json" &&
        [ -d "$NODE_DIR/node_modules" ]; then
        return 0
    fi
    note "installing the tests' npm packages into $NODE_DIR (npm ci)"
    # Debian's nodejs comes without npm (NodeSource's has it)
    if ! command -v npm >/dev/null; then
        install_packages "$log" npm || return 1
    fi
    mkdir -p "$NODE_DIR" &&
        cp "$repo/test/node/package.json" "$repo/test/node/package-lock.json" "$NODE_DIR/" &&
        (cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error) >>"$log" 2>&1 || {
        echo "npm ci in $NODE_DIR failed; its output is in $log" >&2
        rm -f "$NODE_DIR/package-lock.json"
        return 1
    }
}
