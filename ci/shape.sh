#!/bin/bash
# ci/shape.sh - checks the shape of the code: a ratchet that keeps files,
# functions, the README and the TAP files within the sizes the project set,
# keeps the includes between the project's own files free of cycles, and
# keeps the core (src/) from naming a destination kind (src/kinds/<kind>/).
# Each rule is cheap to keep and costly to restore once broken, so a change
# that breaks one is to be caught when it is made, not found later.
#
#   1. a C file (src/**/*.c) has at most 1000 lines;
#   2. a C function (src/**/*.[ch]) has at most 80 lines, counted from the
#      line with its name and parameters to its closing brace, in
#      PostgreSQL's layout: return type on its own line, `name(args...)` at
#      column 0, `{` alone at column 0, `}` alone at column 0 (initializers,
#      which end with `};`, are not functions);
#   3. no include cycle among the project's modules: a module is a .c/.h
#      pair by path without extension (src/foo.c and src/foo.h are "foo",
#      src/kinds/http/x.h is "kinds/http/x"), with an edge A -> B when a file
#      of A includes "B.h" (quoted includes, resolved relative to the
#      including file's directory, then to src/); loops found with tsort;
#   4. a core file (a .c or .h directly in src/, except the kind registry)
#      does not name a kind in code (comments removed): a kind is a
#      directory src/kinds/<kind>/, named by <kind> and by each word of
#      src/kinds/<kind>/NAMES (one a line), matched case-insensitively as
#      a substring, so inside identifiers and string literals too, except
#      in capitals not followed by "_" (prose: "a valid HTTP field name")
#      and inside PostgreSQL's own identifiers (pg_identifiers below);
#   5. a TAP file (test/t/*.pl) has at most 250 lines;
#   6. README.md has at most 600 lines;
#   7. each kind's Debian build package (src/kinds/kinds.list) is in the
#      Build-Depends of debian/control.in and debian/control;
#   8. a file of a kind (src/kinds/<kind>/) includes, of the core's headers
#      (src/*.h), only the interface and the shared rules of what is sent
#      (kind_headers below): never the worker's bookkeeping.
#
# Run: ci/shape.sh [ROOT]     (from any directory; ROOT defaults to the
#                              repository holding this script)
#      ci/shape.sh --self-test (checks the checker on a fixture tree)
# Prints one line per violation, "ci/shape.sh: <file>:<line>: <what>",
# then a summary; exits 0 when every rule holds, 1 otherwise (2 when it
# cannot run).
#
# An exception is named below, in file_exceptions ("path: reason", for
# rules 1, 5 and 6) or function_exceptions ("path:function: reason", for
# rule 2), with a one-line reason; an exception that is no longer needed is
# reported so that it can be removed. The limits are the variables below
# them. SHAPE_REGISTRY overrides the kind registry's path.
set -euo pipefail

max_c_file_lines=1000
max_function_lines=80
max_tap_lines=250
max_readme_lines=600

file_exceptions=(
    "src/health.c: the shared-memory health tables, their locking and the SQL functions reading them, kept in one place"
)
function_exceptions=(
    "src/guc.c:OutboxDefineGucs: one flat DefineCustom*Variable call per setting, a list read whole"
)
# The kind registry may name every kind; under src/kinds/ it is not core anyway.
registry=${SHAPE_REGISTRY:-src/kinds/registry.c}

me=ci/shape.sh
script=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")

# ---------------------------------------------------------------------------
# The self-test: a fixture tree at every limit, which must pass; the same
# tree one step over each limit, which must report exactly those steps; the
# tree without src/kinds/. The fixtures name the kind registry
# src/registry.c (SHAPE_REGISTRY), to check that it is left out of rule 4.

# lines N [TEXT]: N lines of filler, TEXT (escapes expanded) then a number
lines() { awk -v n="$1" -v t="${2:-x}" 'BEGIN { for (i = 1; i <= n; i++) print t " " i }'; }

# function_of N NAME: a static function of N lines from its name line to
# its closing brace (N >= 5), its parameters over two lines
function_of() {
    printf 'static int\n%s(int a,\n\t\t int b)\n{\n' "$2"
    awk -v n="$(($1 - 4))" 'BEGIN { for (i = 1; i < n; i++) print "\ta += b * " i ";" }'
    printf '\treturn a;\n}\n'
}

# exception_fixture DIR: each C file and function named as an exception,
# over its limit
exception_fixture() {
    local e k f
    for e in "${file_exceptions[@]}"; do
        f=${e%%: *}
        mkdir -p "$1/$(dirname "$f")"
        case $f in src/*.c) lines "$((max_c_file_lines + 1))" '/* filler */' > "$1/$f" ;; esac
    done
    for e in "${function_exceptions[@]}"; do
        k=${e%%: *} f=${e%%:*}
        mkdir -p "$1/$(dirname "$f")"
        function_of "$((max_function_lines + 20))" "${k#*:}" >> "$1/$f"
    done
}

# fixture DIR: a tree that passes every rule, at each limit
fixture() {
    local d=$1 n
    mkdir -p "$d/src/kinds/http" "$d/src/kinds/jetstream" "$d/src/kinds/notify" "$d/test/t"
    exception_fixture "$d"
    lines "$max_readme_lines" > "$d/README.md"
    lines "$max_tap_lines" '# t' > "$d/test/t/001_at_limit.pl"
    lines 40 '# t' > "$d/test/t/002_short.pl"
    # C files: one at the limit, with a function at the limit and
    # initializers over it; the others recursively under src/kinds/
    {
        printf '#include "postgres.h"\n#include "a.h"\n\n'
        printf 'typedef struct Pair\n{\n\tint\t\t\ta;\n\tint\t\t\tb;\n} Pair;\n\n'
        function_of "$max_function_lines" at_limit
        printf '\nstatic const Pair table[] = {\n'
        lines "$((max_function_lines + 10))" '\t{1, 2}, /*' | sed 's|$| */|'
        printf '};\n\nstatic const Pair other[] =\n{\n'
        lines "$((max_function_lines + 10))" '\t{3, 4}, /*' | sed 's|$| */|'
        printf '};\n\nDEFINE_TABLE(more, Pair) =\n{\n'
        lines "$((max_function_lines + 10))" '\t{5, 6}, /*' | sed 's|$| */|'
        printf '};\n\nvoid\nshort_one(void)\n{\n}\n'
    } > "$d/src/ok.c"
    n=$(wc -l < "$d/src/ok.c")
    lines "$((max_c_file_lines - n))" '/* filler */' >> "$d/src/ok.c"
    printf '#include "http.h"\n#include "../../a.h"\n\nint\nhttp_send(void)\n{\n' > "$d/src/kinds/http/http.c"
    printf '\treturn 1;\t\t/* an http kind, also a webhook, names itself */\n}\n' >> "$d/src/kinds/http/http.c"
    printf 'extern int http_send(void);\n' > "$d/src/kinds/http/http.h"
    # includes: a -> b -> c, a name that is no file of the project, and in
    # a kind, queue -> send (its send.h, not src/send.h)
    printf '#include "b.h"\n' > "$d/src/a.h"
    printf '#include "c.h"\n#include "postgres.h"\n' > "$d/src/b.h"
    printf '#include "../a.h"\n' > "$d/src/c.h"
    printf '#include "send.h"\n' > "$d/src/kinds/notify/queue.c"
    touch "$d/src/kinds/notify/queue.h" "$d/src/kinds/notify/send.h" "$d/src/send.h" "$d/src/queue.h"
    # kinds: http (also webhook), jetstream (also nats), notify
    printf 'webhook\n' > "$d/src/kinds/http/NAMES"
    printf '\nnats\n' > "$d/src/kinds/jetstream/NAMES"
    printf 'const void *kinds[] = {&OutboxHttpKind, &OutboxNotifyKind, &OutboxJetStreamKind};\n' > "$d/src/registry.c"
    cat > "$d/src/core.c" <<'EOF'
/*
 * Core: knows of no http, webhook, NATS or JetStream
 * destination, only of this comment.
 */
#include "postgres.h"	/* not "notify.h" */

// nor nats_servers here
static const char *const url = "a//b";	/* Notify */
static int	n = 1;	/* http */ static int m = 2; /* webhook */
EOF
}

# fixture_bad DIR: the same tree with one step over each limit
fixture_bad() {
    local d=$1
    fixture "$d"
    lines "$((max_readme_lines + 1))" > "$d/README.md"
    lines "$((max_tap_lines + 1))" '# t' > "$d/test/t/003_over.pl"
    lines "$((max_c_file_lines + 1))" '/* filler */' > "$d/src/big.c"
    lines "$((max_c_file_lines + 1))" '/* filler */' > "$d/src/kinds/http/big.c"
    function_of "$((max_function_lines + 1))" over_limit > "$d/src/long.c"
    function_of "$((max_function_lines + 1))" over_limit_ifdef | sed 's/^\t\t int b)/#if 1\n\t\t int b)\n#else\n\t\t long b)\n#endif/; /^\ta += b \* [1-4];/d' >> "$d/src/long.c"
    printf '#include "a.h"\n' >> "$d/src/b.h"
    printf '#include "queue.h"\n' > "$d/src/kinds/notify/send.c"
    cat >> "$d/src/core.c" <<'EOF'
static const void *k = &OutboxJetStreamKind;	/* http */
static const char *const u = "x//y"; static int webhooks = 0;
EOF
}

expected_bad() {
    cat <<EOF
$me: src/big.c:1: C file has $((max_c_file_lines + 1)) lines, over the limit of $max_c_file_lines
$me: src/kinds/http/big.c:1: C file has $((max_c_file_lines + 1)) lines, over the limit of $max_c_file_lines
$me: src/long.c:2: function over_limit has $((max_function_lines + 1)) lines, over the limit of $max_function_lines
$me: src/long.c:$((max_function_lines + 4)): function over_limit_ifdef has $((max_function_lines + 1)) lines, over the limit of $max_function_lines
$me: src/a.h:1: include cycle a -> b -> a (src/a.h:1 includes "b.h", src/b.h:3 includes "a.h")
$me: src/kinds/notify/queue.c:1: include cycle kinds/notify/queue -> kinds/notify/send -> kinds/notify/queue (src/kinds/notify/queue.c:1 includes "send.h", src/kinds/notify/send.c:1 includes "queue.h")
$me: src/core.c:10: core file names kind jetstream ("jetstream") in code: static const void *k = &OutboxJetStreamKind;
$me: src/core.c:11: core file names kind http ("webhook") in code: static const char *const u = "x//y"; static int webhooks = 0;
$me: test/t/003_over.pl:1: TAP file has $((max_tap_lines + 1)) lines, over the limit of $max_tap_lines
$me: README.md:1: README has $((max_readme_lines + 1)) lines, over the limit of $max_readme_lines
EOF
}

# run NAME EXPECTED_STATUS DIR [VAR=VALUE]: runs the check on DIR; the
# violations it reports must be those of standard input, its exit status
# EXPECTED_STATUS, and every exception must be used
run() {
    local name=$1 want=$2 dir=$3 out status=0 allowed
    shift 3
    out=$(env "$@" bash "$script" "$dir") || status=$?
    allowed=$(grep -c "^$me: allowed: " <<<"$out" || true)
    if [ "$status" = "$want" ] &&
        [ "$allowed" = $((${#file_exceptions[@]} + ${#function_exceptions[@]})) ] &&
        diff -u - <(grep -E "^$me: [^ ]+:[0-9]+: " <<<"$out") > "$tmp/diff"; then
        echo "self-test: $name: ok"
        return 0
    fi
    echo "self-test: $name: FAILED: exit $status (expected $want), $allowed exceptions used; its output:"
    printf '%s\n' "$out" | sed 's/^/    /'
    echo "    violations expected (-) and reported (+):"
    sed 's/^/    /' "$tmp/diff"
    return 1
}

self_test() {
    local failed=0
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    fixture "$tmp/good"
    fixture_bad "$tmp/bad"
    run "a tree at every limit passes" 0 "$tmp/good" SHAPE_REGISTRY=src/registry.c < /dev/null || failed=1
    if run "one step over each limit fails, with exactly $(expected_bad | wc -l) violations" 1 "$tmp/bad" \
        SHAPE_REGISTRY=src/registry.c < <(expected_bad); then
        expected_bad | sed 's/^/    /'
    else
        failed=1
    fi
    rm -rf "$tmp/good/src/kinds"
    if run "without src/kinds/, a tree at every limit passes" 0 "$tmp/good" < /dev/null &&
        grep -q "^$me: note: rule 4: src/kinds/ does not exist" <<<"$(bash "$script" "$tmp/good")"; then
        echo "self-test: without src/kinds/, rule 4 says it checks nothing: ok"
    else
        echo "self-test: without src/kinds/, rule 4 does not say it checks nothing: FAILED"
        failed=1
    fi
    if [ "$failed" = 0 ]; then echo "$me --self-test: PASS"; else echo "$me --self-test: FAIL"; fi
    return "$failed"
}

case "${1:-}" in
    --self-test) self_test; exit ;;
    -h | --help) sed -n '2,/^set -euo/p' "$script" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "usage: $me [--self-test | ROOT]" >&2; exit 2 ;;
esac

# ---------------------------------------------------------------------------
# The check.

root=${1:-$(dirname "$script")/..}
cd "$root" 2>/dev/null || { echo "$me: cannot enter $root" >&2; exit 2; }
[ -d src ] || { echo "$me: $PWD has no src/" >&2; exit 2; }

shopt -s globstar nullglob
c_files=(src/**/*.c)
ch_files=(src/**/*.[ch])
tap_files=(test/t/*.pl)
readme=()
[ -f README.md ] && readme=(README.md)
core_files=()
for f in src/*.[ch]; do [ "$f" = "$registry" ] || core_files+=("$f"); done

declare -A file_reason=() function_reason=() used=() count=() nlines=()
for e in "${file_exceptions[@]}"; do file_reason[${e%%: *}]=${e#*: }; done
for e in "${function_exceptions[@]}"; do function_reason[${e%%: *}]=${e#*: }; done

violations=0
violation() { # RULE FILE:LINE TEXT
    echo "$me: $2: $3"
    violations=$((violations + 1))
    count[$1]=$((${count[$1]:-0} + 1))
}
note() { echo "$me: $*"; }

# Rules 1, 5 and 6 count lines; one wc for all of them (/dev/null: never
# read standard input).
while read -r n f; do nlines[$f]=$n; done < <(wc -l /dev/null "${c_files[@]}" "${tap_files[@]}" "${readme[@]}")

too_long() { # RULE FILE LIMIT WHAT
    local n=${nlines[$2]}
    if [ -n "${file_reason[$2]+set}" ]; then
        used[$2]=1
        if [ "$n" -gt "$3" ]; then
            note "allowed: $2:1: $4 has $n lines, over the limit of $3 (${file_reason[$2]})"
        else
            note "exception no longer needed, remove it: $2:1: $4 has $n lines, the limit is $3"
        fi
    elif [ "$n" -gt "$3" ]; then
        violation "$1" "$2:1" "$4 has $n lines, over the limit of $3"
    fi
}

# Rule 1: C files.
for f in "${c_files[@]}"; do too_long files "$f" "$max_c_file_lines" "C file"; done

# Rule 2: functions. A name line is at column 0: an identifier and "(",
# after the return type if that is on the same line; its continuation lines
# are indented (preprocessor lines among them are passed over); then "{"
# alone at column 0, the line before it ending with ")". The body ends at
# the first "}" alone at column 0. An initializer ("= {", or "=" then "{")
# has no such name line, and ends with "};".
functions=0
if [ "${#ch_files[@]}" -gt 0 ]; then
    while IFS=$'\t' read -r f line name n; do
        functions=$((functions + 1))
        if [ "$n" = -1 ]; then
            violation functions "$f:$line" "function $name has no closing \"}\" alone at column 0"
        elif [ -n "${function_reason[$f:$name]+set}" ]; then
            used[$f:$name]=1
            if [ "$n" -gt "$max_function_lines" ]; then
                note "allowed: $f:$line: function $name has $n lines, over the limit of $max_function_lines (${function_reason[$f:$name]})"
            else
                note "exception no longer needed, remove it: $f:$line: function $name has $n lines, the limit is $max_function_lines"
            fi
        elif [ "$n" -gt "$max_function_lines" ]; then
            violation functions "$f:$line" "function $name has $n lines, over the limit of $max_function_lines"
        fi
    done < <(awk '
        FNR == 1 {
            if (body) print file "\t" start "\t" name "\t-1"
            file = FILENAME; cand = 0; body = 0
        }
        body {
            if ($0 ~ /^}[ \t]*$/) { print FILENAME "\t" start "\t" name "\t" FNR - start + 1; body = 0 }
            next
        }
        /^\{[ \t]*$/ {
            if (cand && last ~ /\)[ \t]*$/) { body = 1; start = cand }
            cand = 0
            next
        }
        /^[ \t]+[^ \t]/ { if (cand) last = $0; next }
        /^#/ { next }
        {
            cand = 0
            if (match($0, /^[A-Za-z_][A-Za-z0-9_ \t*]*\(/)) {
                head = substr($0, 1, RLENGTH - 1)
                sub(/[ \t]+$/, "", head)
                if (match(head, /[A-Za-z_][A-Za-z0-9_]*$/)) {
                    cand = FNR; name = substr(head, RSTART); last = $0
                }
            }
        }
        END { if (body) print file "\t" start "\t" name "\t-1" }
    ' "${ch_files[@]}")
fi

# Rule 3: include cycles between modules. An edge "A B FILE:LINE NAME" for
# the first include of B by a file of A; tsort names the modules of each
# loop in order.
declare -A modules=() edge=()
for f in "${ch_files[@]}"; do m=${f#src/}; modules[${m%.[ch]}]=1; done
edges=""
if [ "${#ch_files[@]}" -gt 0 ]; then
    edges=$(awk -v files="${ch_files[*]}" '
        function norm(p,   n, a, i, k, st, out) {
            n = split(p, a, "/"); k = 0
            for (i = 1; i <= n; i++) {
                if (a[i] == "" || a[i] == ".") continue
                if (a[i] == "..") { if (k > 0) k--; continue }
                st[++k] = a[i]
            }
            out = st[1]
            for (i = 2; i <= k; i++) out = out "/" st[i]
            return out
        }
        function module(p) { sub(/^src\//, "", p); sub(/\.[ch]$/, "", p); return p }
        BEGIN { n = split(files, f, " "); for (i = 1; i <= n; i++) have[f[i]] = 1 }
        /^[ \t]*#[ \t]*include[ \t]*"/ {
            inc = $0
            sub(/^[ \t]*#[ \t]*include[ \t]*"/, "", inc); sub(/".*/, "", inc)
            dir = FILENAME; sub(/\/[^\/]*$/, "", dir)
            to = norm(dir "/" inc)
            if (!(to in have)) { to = norm("src/" inc); if (!(to in have)) next }
            a = module(FILENAME); b = module(to)
            if (a != b && !((a, b) in seen)) { seen[a, b] = 1; print a, b, FILENAME ":" FNR, inc }
        }
    ' "${ch_files[@]}")
fi
if [ -n "$edges" ]; then
    while read -r a b where inc; do edge[$a $b]="$where includes \"$inc\""; done <<<"$edges"
    loops=()
    while read -r line; do
        line=${line#tsort: }
        case $line in
            *"input contains a loop"*) loops+=("") ;;
            *) [ "${#loops[@]}" -gt 0 ] && loops[-1]="${loops[-1]} $line" ;;
        esac
    done < <(awk '{ print $1, $2 }' <<<"$edges" | tsort 2>&1 >/dev/null)
    for l in "${loops[@]}"; do
        read -r -a mods <<<"$l"
        [ "${#mods[@]}" -gt 0 ] || continue
        path=${mods[0]} where=""
        for i in "${!mods[@]}"; do
            a=${mods[$i]} b=${mods[$(((i + 1) % ${#mods[@]}))]}
            if [ -z "${edge[$a $b]:-}" ]; then where=""; break; fi
            path="$path -> $b" where="$where${where:+, }${edge[$a $b]}"
        done
        if [ -n "$where" ]; then
            violation cycles "${where%% *}" "include cycle $path ($where)"
        else
            violation cycles "src/${mods[0]}" "include cycle among the modules ${mods[*]}"
        fi
    done
fi

# Rule 4: core files naming a kind. Words are "word:kind". PostgreSQL's
# own identifiers that contain one are not the kind's.
pg_identifiers=(bgw_notify_pid)
words=() nkinds=0
if [ ! -d src/kinds ]; then
    note "note: rule 4: src/kinds/ does not exist, so there is no kind to look for: nothing checked"
else
    for d in src/kinds/*/; do
        d=${d%/} k=${d##*/}
        nkinds=$((nkinds + 1))
        words+=("$k:$k")
        if [ -f "$d/NAMES" ]; then
            while read -r w _; do
                if [ -n "$w" ] && [ "${w#\#}" = "$w" ]; then words+=("$w:$k"); fi
            done < "$d/NAMES"
        fi
    done
    [ "$nkinds" -gt 0 ] || note "note: rule 4: src/kinds/ holds no kind directory: nothing checked"
fi
if [ "${#words[@]}" -gt 0 ] && [ "${#core_files[@]}" -gt 0 ]; then
    # Comments become spaces (string and character literals kept whole),
    # then each line is searched for each word.
    while IFS=$'\t' read -r where what; do
        violation kinds "$where" "$what"
    done < <(awk -v words="${words[*]}" -v pg="${pg_identifiers[*]}" '
        # Whether code names w: an occurrence in any case (an identifier,
        # a string), except the word written in capitals and not followed
        # by "_" (prose in a message: "a valid HTTP field name").
        function names(code, low, w,    from, p, at) {
            from = 1
            while ((p = index(substr(low, from), w)) > 0) {
                at = from + p - 1
                if (substr(code, at, length(w)) != toupper(w) || substr(code, at + length(w), 1) == "_")
                    return 1
                from = at + length(w)
            }
            return 0
        }
        BEGIN {
            npg = split(pg, pgword, " ")
            n = split(words, w, " ")
            for (i = 1; i <= n; i++) { split(w[i], p, ":"); word[i] = tolower(p[1]); kind[i] = p[2] }
        }
        FNR == 1 { comment = 0 }
        {
            line = $0; code = ""; q = ""
            len = length(line)
            for (i = 1; i <= len; i++) {
                c = substr(line, i, 1)
                if (comment) {
                    if (c == "*" && substr(line, i + 1, 1) == "/") { comment = 0; i++; code = code "  " }
                    else code = code " "
                } else if (q != "") {
                    code = code c
                    if (c == "\\") { code = code substr(line, i + 1, 1); i++ }
                    else if (c == q) q = ""
                } else if (c == "/" && substr(line, i + 1, 1) == "*") { comment = 1; i++; code = code "  " }
                else if (c == "/" && substr(line, i + 1, 1) == "/") break
                else { if (c == "\"" || c == "\047") q = c; code = code c }
            }
            # PostgreSQL'"'"'s own identifiers that contain a kind'"'"'s word
            for (j = 1; j <= npg; j++) gsub(pgword[j], "", code)
            low = tolower(code); kinds = ""; found = ""
            split("", seen)
            for (j = 1; j <= n; j++) {
                if (!names(code, low, word[j])) continue
                found = found (found == "" ? "" : ", ") "\"" word[j] "\""
                if (!(kind[j] in seen)) { seen[kind[j]] = 1; kinds = kinds (kinds == "" ? "" : ", ") kind[j] }
            }
            if (found != "") {
                gsub(/^[ \t]+|[ \t]+$/, "", code); gsub(/[ \t]+/, " ", code)
                if (length(code) > 120) code = substr(code, 1, 117) "..."
                print FILENAME ":" FNR "\tcore file names kind " kinds " (" found ") in code: " code
            }
        }
    ' "${core_files[@]}")
fi

# Rule 7: each kind's build package (src/kinds/kinds.list) is a
# Build-Depends of the Debian package, in debian/control.in and the
# debian/control made from it (which cannot read the list themselves).
if [ -f src/kinds/kinds.list ]; then
    while read -r kind _ _ pkg _; do
        if [ -z "$kind" ] || [ "${kind#\#}" != "$kind" ] || [ "$pkg" = - ]; then continue; fi
        for f in debian/control.in debian/control; do
            [ -f "$f" ] || continue
            if ! sed -n '/^Build-Depends:/,/^[A-Z]/p' "$f" | grep -q "^ *${pkg}[ ,(]"; then
                violation deps "$f" "Build-Depends lacks $pkg, which the $kind kind builds with (src/kinds/kinds.list)"
            fi
        done
    done < src/kinds/kinds.list
fi

# Rule 8: a kind's files include, of the core's headers, only the
# interface (destination.h) and the shared rules of what is sent.
kind_headers=" destination.h format.h envelope.h cloudevents.h headers.h signature.h event_template.h trace_context.h compat.h log_limit.h "
if [ -d src/kinds ]; then
    mapfile -t kind_files < <(find src/kinds -mindepth 2 -name '*.[ch]' | sort)
    while IFS=: read -r f line inc; do
        inc=${inc#*\"} inc=${inc%%\"*}
        dir=${f%/*}
        if [ -e "$dir/$inc" ] || [ ! -e "src/$inc" ]; then continue; fi
        case "$kind_headers" in *" $inc "*) continue ;; esac
        violation kincludes "$f:$line" "a kind includes the core's $inc (a kind sees destination.h and the shared rules only)"
    done < <(grep -n '^#include "' "${kind_files[@]}" /dev/null)
fi

# Rules 5 and 6: TAP files, README.
for f in "${tap_files[@]}"; do too_long tap "$f" "$max_tap_lines" "TAP file"; done
for f in "${readme[@]}"; do too_long readme "$f" "$max_readme_lines" README; done

for e in "${!file_reason[@]}"; do
    [ -n "${used[$e]:-}" ] || note "exception for a file that does not exist, remove it: $e"
done
for e in "${!function_reason[@]}"; do
    [ -n "${used[$e]:-}" ] || note "exception for a function that does not exist, remove it: $e"
done

summary="${#c_files[@]} C files, $functions functions, ${#modules[@]} modules,"
summary="$summary ${#core_files[@]} core files against ${#words[@]} words naming $nkinds kinds,"
summary="$summary ${#tap_files[@]} TAP files"
if [ "$violations" = 0 ]; then
    echo "$me: PASS: every rule holds in $summary"
    exit 0
fi
echo "$me: FAIL: $violations violations (C files over $max_c_file_lines lines: ${count[files]:-0};" \
    "functions over $max_function_lines lines: ${count[functions]:-0}; include cycles: ${count[cycles]:-0};" \
    "core lines naming a kind: ${count[kinds]:-0}; TAP files over $max_tap_lines lines: ${count[tap]:-0};" \
    "README over $max_readme_lines lines: ${count[readme]:-0}; Debian build dependencies: ${count[deps]:-0};" \
    "kinds including the core's headers: ${count[kincludes]:-0}) in $summary"
exit 1
