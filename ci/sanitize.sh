#!/bin/bash
# ci/sanitize.sh - runs pg_regress and the whole TAP suite on PostgreSQL 15
# with the extension built with AddressSanitizer and UndefinedBehaviorSanitizer,
# as root on Debian bookworm, and fails if the sanitizers report anything.
#
# Debian's postgres is not instrumented, so gcc's ASan runtime is preloaded
# into it (LD_PRELOAD), with leak detection off: PostgreSQL frees memory by
# dropping memory contexts, or not at all before exit, which LeakSanitizer
# would report by the thousand. ci/sanitize-preload.c is preloaded with it:
# without it postgres hangs at startup, and UBSan loses its options; the
# file says why. Only outbox.so is instrumented, so the reports are about
# the extension's own code and what it passes to libc and libcurl.
#
# Nothing is installed into the system's PostgreSQL: the script copies
# /usr/lib/postgresql/15 and /usr/share/postgresql/15 into a private prefix
# (PostgreSQL finds its lib and share directories relative to its binaries),
# replaces the copy's postgres with a wrapper that execs the real one with
# the runtime preloaded, and installs the instrumented outbox.so there.
#
# Before the tests, a server runs a function with two planted bugs
# (ci/sanitize-canary.c): unless both are reported, the run stops, since it
# would prove nothing. Then every AddressSanitizer report is a file
# <dir>/reports/asan.<pid> (the backend that hit it exits, and the test that
# used it fails); every UBSan report is a "runtime error:" line with its
# stack in a server log, and the backend goes on. All are printed at the
# end, with the number of reports, the result of the tests and the time.
# The work directory is removed after a clean run, kept otherwise.
#
# Environment: OUTBOX_SAN_DIR (default: a new /tmp/outbox-san.XXXXXX),
# OUTBOX_TEST_USER (default postgres; initdb refuses to run as root),
# OUTBOX_TEST_JOBS (see ci/lib.sh); PROVE_TESTS and REGRESS run some tests
# only, as in ci/check.sh (REGRESS= skips pg_regress).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=ci/lib.sh
. ci/lib.sh
pgv=15
user=${OUTBOX_TEST_USER:-postgres}
started=$(date +%s)

if [ "$(id -u)" != 0 ]; then
    echo "sanitize.sh: run as root (it installs Debian packages)" >&2
    exit 1
fi

# -- packages -----------------------------------------------------------------
# shellcheck disable=SC2207 # word splitting of the kinds' package list is wanted
packages=("postgresql-$pgv" "postgresql-server-dev-$pgv" $(kind_packages build) $(kind_packages test) $(monitoring_packages bookworm) libssl-dev openssl nodejs
          libipc-run-perl make gcc libasan8 libubsan1 binutils python3)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "==> installing: ${missing[*]}"
    apt-get -o DPkg::Lock::Timeout=120 update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install \
            -y -qq --no-install-recommends "${missing[@]}" >/dev/null || exit 1
fi
mkdir -p "$LOG_DIR"
install_node_modules "$PWD" "$LOG_DIR/deps.log" || exit 1

# -- private PostgreSQL -------------------------------------------------------
if [ -n "${OUTBOX_SAN_DIR:-}" ]; then
    san=$(realpath -m "$OUTBOX_SAN_DIR")
    own_dir=0
else
    san=$(mktemp -d /tmp/outbox-san.XXXXXX) || exit 1
    own_dir=1
fi
case $san in
    / | /usr | /usr/*) echo "sanitize.sh: refusing OUTBOX_SAN_DIR=$san" >&2; exit 1 ;;
esac
echo "==> private PostgreSQL $pgv in $san"
rm -rf "${san:?}/usr" "${san:?}/lib" "$san/src" "$san/reports" "$san/canary" "$san/logs"
mkdir -p "$san" && chmod 755 "$san" &&
    mkdir -p "$san/usr/lib/postgresql" "$san/usr/share/postgresql" "$san/usr/include" \
             "$san/lib" "$san/reports" &&
    cp -a /usr/lib/postgresql/$pgv "$san/usr/lib/postgresql/" &&
    cp -a /usr/share/postgresql/$pgv "$san/usr/share/postgresql/" || exit 1
# the directories pg_config reports outside the two copies
ln -s /usr/include/postgresql "$san/usr/include/postgresql"
ln -s /usr/share/locale "$san/usr/share/locale"
ln -s /usr/lib/x86_64-linux-gnu "$san/usr/lib/x86_64-linux-gnu"

bin=$san/usr/lib/postgresql/$pgv/bin
pg_config=$bin/pg_config
pkglibdir=$("$pg_config" --pkglibdir)
sharedir=$("$pg_config" --sharedir)
case "$pkglibdir:$sharedir" in
    "$san"/*:"$san"/*) ;;
    *) echo "sanitize.sh: the copied pg_config points outside $san ($pkglibdir, $sharedir)" >&2
       exit 1 ;;
esac

libasan=$(realpath "$(gcc -print-file-name=libasan.so)")
[ -f "$libasan" ] || { echo "sanitize.sh: gcc's libasan not found" >&2; exit 1; }
gcc -shared -fPIC -O2 -Wall -Wextra -o "$san/lib/sanitize-preload.so" ci/sanitize-preload.c || exit 1

# UBSan shares AddressSanitizer's report path (see sanitize-preload.c), so
# both name the same one; UBSan's own messages go to stderr, the server log.
asan_options="detect_leaks=0:allocator_may_return_null=1:log_path=$san/reports/asan"
ubsan_options="print_stacktrace=1:halt_on_error=0:report_error_type=1:log_path=$san/reports/asan"

# The real binary stays in bin/, where its lib and share directories are
# found; the wrapper passes its own path as argv[0], which postgres records
# in postmaster.opts, so `pg_ctl restart` starts the wrapper again.
mv "$bin/postgres" "$bin/postgres.real"
cat > "$bin/postgres" <<EOF
#!/bin/bash
# Written by ci/sanitize.sh: Debian's postgres with the sanitizer runtime.
export LD_PRELOAD="$libasan $san/lib/sanitize-preload.so\${LD_PRELOAD:+ \$LD_PRELOAD}"
export ASAN_OPTIONS="$asan_options"
export UBSAN_OPTIONS="$ubsan_options"
exec -a "$bin/postgres" "$bin/postgres.real" "\$@"
EOF
chmod 755 "$bin/postgres"
if ! version=$(timeout 60 "$bin/postgres" -V) ||
   [ "$version" != "$("$bin/postgres.real" -V)" ]; then
    echo "sanitize.sh: postgres does not start under the sanitizer runtime" >&2
    exit 1
fi

# -- instrumented build -------------------------------------------------------
work=$san/src
mkdir -p "$work"
copy_tree "$work"
# -fsanitize=undefined leaves out float-cast-overflow; signed overflow is not
# checked because PostgreSQL code is built with -fwrapv, where it is defined.
cflags=("-fsanitize=address,undefined,float-cast-overflow" -fno-omit-frame-pointer -g -O1
        -DUSE_ASSERT_CHECKING)
echo "==> building with ${cflags[*]}"
make -s -j"$BUILD_JOBS" -C "$work" PG_CONFIG="$pg_config" with_llvm=no PG_CFLAGS="${cflags[*]}" &&
    make -s -C "$work" PG_CONFIG="$pg_config" with_llvm=no install >/dev/null || exit 1
if ! readelf -d "$pkglibdir/outbox.so" | grep -q 'libasan'; then
    echo "sanitize.sh: $pkglibdir/outbox.so is not instrumented" >&2
    exit 1
fi
chown -R "$user" "$work" "$san/reports"

as_user() { runuser -u "$user" -- env PATH="$bin:$PATH" "$@"; }

# Prints the UBSan reports of server logs: the message and its stack.
ubsan_reports() {
    awk '/: runtime error: /  { print FILENAME ": " $0; stack = 1; next }
         stack && /^    #/   { print; next }
                             { stack = 0 }' "$@" 2>/dev/null
}

# -- canary -------------------------------------------------------------------
echo "==> canary"
canary=$san/canary
mkdir -p "$canary" && chown "$user" "$canary"
gcc -shared -fPIC "${cflags[@]}" -I"$("$pg_config" --includedir-server)" \
    -o "$san/lib/sanitize-canary.so" ci/sanitize-canary.c || exit 1
if ! as_user initdb -D "$canary/data" -A trust -N >"$canary/initdb.log" 2>&1 ||
   ! as_user pg_ctl -D "$canary/data" -l "$canary/server.log" -w \
        -o "-c listen_addresses='' -c unix_socket_directories='$canary' -c port=5432 -c shared_preload_libraries=outbox" \
        start >/dev/null; then
    cat "$canary"/*.log
    exit 1
fi
as_user psql -X -q -h "$canary" -p 5432 -d postgres >/dev/null 2>&1 <<EOF
CREATE FUNCTION sanitize_canary(int) RETURNS int AS '$san/lib/sanitize-canary.so' LANGUAGE C STRICT;
SELECT sanitize_canary(8);
EOF
as_user pg_ctl -D "$canary/data" -m immediate -w stop >/dev/null
if ! grep -qs 'heap-buffer-overflow.*sanitize-canary.c' "$san"/reports/asan.* ||
   ! ubsan_reports "$canary/server.log" | grep -q 'shift exponent'; then
    echo "sanitize.sh: the canary's bugs were not both reported: the sanitizers are not working" >&2
    for f in "$san"/reports/* "$canary/server.log"; do [ -f "$f" ] && { echo "== $f"; cat "$f"; }; done
    exit 1
fi
mv "$san"/reports/* "$canary/"

# -- tests --------------------------------------------------------------------
failed=0
echo "==> pg_regress"
if [ "${REGRESS-unset}" = "" ]; then
    echo "(skipped: REGRESS is empty)"
elif ! as_user make -s -C "$work" PG_CONFIG="$pg_config" with_llvm=no installcheck TAP_TESTS= \
    ${REGRESS+REGRESS="$REGRESS"}; then
    failed=1
    [ -f "$work/regression.diffs" ] && cat "$work/regression.diffs"
fi
mkdir -p "$san/logs"
[ -d "$work/tmp_check/log" ] && cp -a "$work/tmp_check/log" "$san/logs/pg_regress"
echo "==> TAP suite"
# OUTBOX_TEST_SANITIZER: tests skip their speed comparisons, which an
# instrumented server does not meet, and triple their bounds on the relay's
# own delays (time_bound in test/perl/OutboxTest.pm); they still check
# everything else.
# The upgrade tests are skipped: they run the server from a copy of the
# installation, and this run's postgres is a wrapper that runs the binary
# in place, which would find its own lib and share directories, not the
# copy's.
no_copy="not under the sanitizer run (a copy of its wrapped postgres would not run from the copy)"
if ! as_user env OUTBOX_TEST_SANITIZER=1 OUTBOX_1_0_SRC= OUTBOX_1_0_SRC_ERROR="$no_copy" \
    OUTBOX_1_1_SRC= OUTBOX_1_1_SRC_ERROR="$no_copy" \
    make -s -C "$work" PG_CONFIG="$pg_config" with_llvm=no prove_installcheck PROVE_FLAGS="--timer -j$TEST_JOBS" \
    ${PROVE_TESTS+PROVE_TESTS="$PROVE_TESTS"}; then
    failed=1
    for f in "$work"/tmp_check/log/*; do
        [ -f "$f" ] && { echo "== $f"; tail -n 100 "$f"; }
    done
fi
[ -d "$work/tmp_check/log" ] && cp -a "$work/tmp_check/log" "$san/logs/tap"

# -- reports ------------------------------------------------------------------
asan=("$san"/reports/asan.*)
[ -e "${asan[0]}" ] || asan=()
for f in "${asan[@]}"; do
    echo "== $f"
    cat "$f"
done
ubsan=$(ubsan_reports "$san"/logs/*/*)
[ -n "$ubsan" ] && { echo "== UndefinedBehaviorSanitizer"; echo "$ubsan"; }
# an AddressSanitizer report that missed its file, in a server log
mapfile -t stray < <(grep -l 'ERROR: AddressSanitizer' "$san"/logs/*/* 2>/dev/null)
for f in "${stray[@]}"; do
    echo "== $f"
    grep -A 40 'ERROR: AddressSanitizer' "$f"
done
count=$(( ${#asan[@]} + $(grep -c ': runtime error: ' <<<"$ubsan") + ${#stray[@]} ))

elapsed=$(( $(date +%s) - started ))
echo
echo "sanitizer reports: $count"
echo "tests: $([ $failed = 0 ] && echo PASS || echo FAIL)"
echo "time: $((elapsed / 60))m$((elapsed % 60))s"
if [ $failed = 0 ] && [ $count = 0 ]; then
    if [ $own_dir = 1 ]; then
        rm -rf "$san"
    else
        rm -rf "${san:?}/usr" "${san:?}/lib" "$san/src" "$san/reports" "$san/canary" "$san/logs"
    fi
    exit 0
fi
echo "sanitize.sh: kept $san (reports in $san/reports, server logs in $san/logs)" >&2
exit 1
