#!/bin/bash
# ci/package.sh - the Debian package of one PostgreSQL version, as a DBA
# gets it. As root, from the source tree it is part of, for the PostgreSQL
# of PG_CONFIG:
#
#   1. builds the source package pg-outbox and the binary package
#      postgresql-<version>-outbox with pg_buildext (debian/; the control
#      file is regenerated for the versions this system supports, as
#      apt.postgresql.org does) on a copy of the tree, and checks both with
#      lintian where lintian is installed (no errors allowed)
#   2. installs it with apt-get while a server that preloads the latest
#      release (1.1, the last of RELEASES in ci/lib.sh) runs, and checks
#      what the README's Upgrading section says of that moment: ALTER
#      EXTENSION UPDATE is refused until the restart, with the guard of
#      the update script to this version, events are still written, and
#      after the restart the update goes through (the release is built
#      from the repository's history, as for the upgrade tests:
#      OUTBOX_1_1_SRC, else extracted with git; skipped with a warning
#      when neither is there)
#   3. runs pg_regress against the installed package (debian/tests/installcheck)
#
# The package stays installed: it replaces the build ci/build-and-check.sh
# installed. Environment: PG_CONFIG, OUTBOX_1_1_SRC, OUTBOX_LOG_DIR.
# Exit status: 0 passed, 3 the package does not build or lint, 4 a check failed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 3
# shellcheck source=ci/lib.sh
. ci/lib.sh
PG_CONFIG=${PG_CONFIG:-pg_config}
user=${OUTBOX_TEST_USER:-postgres}

if [ "$(id -u)" != 0 ]; then
    echo "package.sh: run as root (it installs a Debian package)" >&2
    exit 3
fi
v=$("$PG_CONFIG" --version | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
bindir=$("$PG_CONFIG" --bindir)
pkg=postgresql-$v-outbox
ext_version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" outbox.control)
deb_version=$(dpkg-parsechangelog -S Version) || exit 3
work=$(mktemp -d /tmp/outbox-package.XXXXXX)
chmod 755 "$work"
log=$LOG_DIR/package-$v.log
mkdir -p "$LOG_DIR"
: >"$log"
start=$SECONDS

fail() { # fail STATUS MESSAGE: says why, where the rest is, and exits
    echo "package.sh: $2 (log: $log; work directory kept: $work)" >&2
    [ -f "$work/data/log" ] && tail -n 40 "$work/data/log" >&2
    exit "$1"
}

step "package: $pkg $deb_version (build log: $log)"
src=$work/pg-outbox-$ext_version
mkdir "$src" && copy_tree "$src" || fail 3 "cannot copy the tree"
(cd "$src" && pg_buildext updatecontrol) >>"$log" 2>&1 || fail 3 "pg_buildext updatecontrol failed"
grep -qx "Package: $pkg" "$src/debian/control" ||
    fail 3 "pg_buildext builds no $pkg here (debian/pgversions and this system's supported versions:" \
        "$(cd "$src" && pg_buildext supported-versions | paste -sd' ')"
# the source package too, as an archive builds it: its upstream tarball is
# the tree without debian/ (what make dist's release tarball holds)
tar -C "$work" --exclude="pg-outbox-$ext_version/debian" -czf "$work/pg-outbox_${deb_version%-*}.orig.tar.gz" \
    "pg-outbox-$ext_version" || fail 3 "cannot make the upstream tarball"
(cd "$src" && dpkg-buildpackage -uc -us -j"$BUILD_JOBS") >>"$log" 2>&1 || fail 3 "dpkg-buildpackage failed"
[ -f "$work/pg-outbox_$deb_version.dsc" ] || fail 3 "dpkg-buildpackage made no source package pg-outbox_$deb_version.dsc"
deb=$work/${pkg}_${deb_version}_$(dpkg --print-architecture).deb
[ -f "$deb" ] || fail 3 "dpkg-buildpackage made no $deb"
dpkg-deb -f "$deb" Depends | sed 's/^/    depends: /'
if command -v lintian >/dev/null; then
    # initial-upload-closes-no-bugs: the package is built by the project,
    # not uploaded to Debian, so there is no ITP bug for it to close; a
    # version in development (UNRELEASED, see debian/changelog) is never
    # uploaded either
    suppress=initial-upload-closes-no-bugs
    if [ "$(dpkg-parsechangelog -l "$src/debian/changelog" -S Distribution)" = UNRELEASED ]; then
        suppress+=,unreleased-changes,bad-distribution-in-changes-file
    fi
    lint=$(lintian --fail-on error --suppress-tags "$suppress" "$work"/*.changes 2>&1)
    rc=$?
    printf '%s\n' "$lint" | grep -v '^running with root privileges' | grep . | tee -a "$log" | sed 's/^/    lintian: /'
    [ "$rc" = 0 ] || fail 3 "lintian reports errors"
    echo "    lintian: no errors"
else
    echo "    lintian is not installed here: the package is linted on the host only"
fi

# 2. installed while a server that preloads the latest release runs
as_user() { runuser -u "$user" -- "$@"; }
psql_run() { as_user "$bindir/psql" -X -h "$work" -p 5432 -d postgres -v ON_ERROR_STOP=1 -Atqc "$1"; }
pg_ctl() { as_user "$bindir/pg_ctl" -D "$work/data" -l "$work/data/log" -w "$@" >>"$log" 2>&1; }
prev=${RELEASES##* }
release_var=OUTBOX_${prev//./_}_SRC
release=${!release_var:-}
if [ -z "$release" ]; then
    release=$work/release-$prev
    if ! why=$(release_tree "$PWD" "$prev" "$release"); then
        release=
        echo "WARNING: installing under a server that runs $prev is NOT checked: $why"
    fi
fi
# purge what an earlier run left, so that apt-get installs this build
if dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed'; then
    apt_get purge -y "$pkg" >>"$log" 2>&1 || fail 4 "apt-get purge $pkg failed"
fi
if [ -n "$release" ]; then
    cp -R "$release/." "$work/build-$prev" &&
        make -s -j"$BUILD_JOBS" -C "$work/build-$prev" PG_CONFIG="$PG_CONFIG" >>"$log" 2>&1 &&
        make -s -C "$work/build-$prev" PG_CONFIG="$PG_CONFIG" install >>"$log" 2>&1 ||
        fail 4 "release $prev does not build"
    chown "$user" "$work"
    as_user "$bindir/initdb" -D "$work/data" -A trust >>"$log" 2>&1 || fail 4 "initdb failed"
    cat >>"$work/data/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$work'
shared_preload_libraries = 'outbox'
outbox.databases = 'postgres'
EOF
    pg_ctl start || fail 4 "the server does not start"
    trap 'pg_ctl -m immediate stop' EXIT
    psql_run "CREATE EXTENSION outbox; SELECT outbox_emit('package.before', '{}')" >/dev/null &&
        [ "$(psql_run "SELECT extversion FROM pg_extension WHERE extname = 'outbox'")" = "$prev" ] ||
        fail 4 "CREATE EXTENSION outbox did not make $prev"
    echo "    a server with $prev preloaded runs; apt-get install ./$(basename "$deb")"
fi
apt_get install -y --no-install-recommends "$deb" >>"$log" 2>&1 || fail 4 "apt-get install $deb failed"
[ "$(dpkg-query -W -f='${Version}' "$pkg")" = "$deb_version" ] || fail 4 "$pkg $deb_version is not installed"
for f in exporter_queries.yml outbox.rules.yml outbox.rules.test.yml; do
    cmp -s "/usr/share/doc/$pkg/examples/$f" "$src/monitoring/$f" ||
        fail 4 "the package does not install monitoring/$f as /usr/share/doc/$pkg/examples/$f"
done
echo "    monitoring/ installed in /usr/share/doc/$pkg/examples"
if [ -n "$release" ]; then
    out=$(psql_run 'ALTER EXTENSION outbox UPDATE' 2>&1) && fail 4 "ALTER EXTENSION UPDATE before the restart succeeded"
    case $out in
    *"older than version $ext_version"*"Restart the server"*) ;;
    *) fail 4 "ALTER EXTENSION UPDATE before the restart failed with another message: $out" ;;
    esac
    echo "    before the restart: ALTER EXTENSION UPDATE refused (${out%%$'\n'*})"
    pg_ctl restart || fail 4 "the server does not restart"
    psql_run "SELECT outbox_emit('package.after_restart', '{}')" >/dev/null ||
        fail 4 "outbox_emit fails between the restart and the update"
    psql_run 'ALTER EXTENSION outbox UPDATE' >>"$log" 2>&1 || fail 4 "ALTER EXTENSION UPDATE after the restart failed"
    got=$(psql_run "SELECT extversion || ' ' || outbox_library_version() || ' ' || (SELECT count(*) FROM outbox)
                      FROM pg_extension WHERE extname = 'outbox'")
    [ "$got" = "$ext_version $ext_version 2" ] ||
        fail 4 "after the update: extension, library, events = '$got', expected '$ext_version $ext_version 2'"
    echo "    after the restart: ALTER EXTENSION UPDATE done, SQL and library $ext_version, both events kept"
    pg_ctl stop || fail 4 "the server does not stop"
    trap - EXIT
fi

# 3. pg_regress against the installed files
(cd "$src" && debian/tests/installcheck) || fail 4 "pg_regress against the installed package failed"
rm -rf "$work"
step "package $pkg $deb_version built, installed and tested in $((SECONDS - start))s"
