#!/usr/bin/env bash
# GLib's GDBus installed tests (Debian's libglib2.0-tests) with a bus daemon
# of our choice as the `dbus-daemon` they start: GTestDBus runs whatever
# `dbus-daemon` comes first on PATH, so a temporary directory holding a
# `dbus-daemon` wrapper that execs DAEMON goes first on PATH.
#
#   scripts/glib-gdbus-tests.sh [DAEMON]
#
# DAEMON defaults to target/debug/quickbus-daemon (following
# CARGO_TARGET_DIR). Every gdbus-*.test file under
# /usr/share/installed-tests/glib is one binary; each runs on its own, with
# a time limit, in a scratch directory. Prints one line per binary and a
# summary line; exits non-zero when a binary fails, times out, or a TAP
# subtest says `not ok`, and when no test ran at all. A binary that skips
# itself as a whole (exit status 77, every TAP line a SKIP) is a skip.
# Every skipped subtest is printed on its own `SKIP binary: ...` line.
# The daemons inherit this script's environment (quickbus's QUICKBUS_TEST_*
# hooks included: scripts/test.sh runs the tests a second time with a
# pool). With GLIB_TEST_LOG_DIR set, each binary's output (the daemons'
# logs on standard error included) is kept there as BINARY.log.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tests_dir=/usr/share/installed-tests/glib
per_binary_limit=${GLIB_TEST_TIME_LIMIT:-60}
log_dir=${GLIB_TEST_LOG_DIR:-}
daemon=${1:-${CARGO_TARGET_DIR:-target}/debug/quickbus-daemon}
daemon=$(realpath -e "$daemon") || {
    echo "glib-gdbus-tests: no daemon at ${1:-the default path}; build it first" >&2
    exit 1
}

shopt -s nullglob
test_files=("$tests_dir"/gdbus-*.test)
if ((${#test_files[@]} == 0)); then
    echo "glib-gdbus-tests: no $tests_dir/gdbus-*.test (install libglib2.0-tests)" >&2
    exit 1
fi

scratch=$(mktemp -d /tmp/qb-glib.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/bin"
# A wrapper (not a symlink) so that a broken daemon path shows up as a
# failure of the tests, never as a silent fallback to /usr/bin/dbus-daemon.
printf '#!/bin/sh\nexec %q "$@"\n' "$daemon" >"$scratch/bin/dbus-daemon"
chmod +x "$scratch/bin/dbus-daemon"

passed_binaries=0
skipped_binaries=0
failed_binaries=()
subtests_ok=0
subtests_failed=0
subtests_skipped=0
start=$SECONDS
for file in "${test_files[@]}"; do
    exec_line=$(sed -n 's/^Exec=//p' "$file" | head -n 1)
    name=$(basename "$file" .test)
    if [[ -z $exec_line ]]; then
        echo "FAIL $name: no Exec= line in $file"
        failed_binaries+=("$name")
        continue
    fi
    work="$scratch/$name"
    mkdir -p "$work/home" "$work/runtime"
    chmod 700 "$work/runtime"
    log="$work/output"
    status=0
    # shellcheck disable=SC2086 # Exec= is a command line, split like a shell would
    (cd "$work" && env -u DBUS_SESSION_BUS_ADDRESS -u DBUS_SYSTEM_BUS_ADDRESS \
        -u DBUS_STARTER_ADDRESS -u DBUS_STARTER_BUS_TYPE \
        PATH="$scratch/bin:$PATH" HOME="$work/home" XDG_RUNTIME_DIR="$work/runtime" \
        timeout --kill-after=10 "$per_binary_limit" $exec_line) >"$log" 2>&1 || status=$?
    if [[ -n $log_dir ]]; then
        cp "$log" "$log_dir/$name.log"
    fi
    ok=$(grep -cE '^ok ' "$log" || true)
    skipped=$(grep -cE '^ok .*# SKIP' "$log" || true)
    not_ok=$(grep -cE '^not ok ' "$log" || true)
    subtests_ok=$((subtests_ok + ok - skipped))
    subtests_skipped=$((subtests_skipped + skipped))
    subtests_failed=$((subtests_failed + not_ok))
    if ((status == 0 && not_ok == 0)); then
        passed_binaries=$((passed_binaries + 1))
        echo "ok   $name ($((ok - skipped)) passed, $skipped skipped)"
        # Each skipped subtest by name, for test.sh's list of what did not run.
        if ((skipped > 0)); then
            grep -E '^ok .*# SKIP' "$log" | sed "s|^|SKIP $name: |"
        fi
    elif ((status == 77 && not_ok == 0 && ok == skipped)); then
        # 77: the binary skipped itself as a whole (gdbus-threading does,
        # upstream finds it unreliable: glib#1515).
        skipped_binaries=$((skipped_binaries + 1))
        echo "skip $name: $(grep -m 1 -E '^ok .*# SKIP' "$log" || echo 'exit status 77')"
    else
        if ((status == 124 || status == 137)); then
            why="timed out after ${per_binary_limit}s"
        else
            why="exit status $status, $not_ok subtests not ok"
        fi
        echo "FAIL $name ($why); its output:"
        sed 's/^/    /' "$log" | tail -n 40
        failed_binaries+=("$name")
    fi
done

echo "GLib GDBus tests against $daemon: $passed_binaries of ${#test_files[@]} binaries passed" \
    "($skipped_binaries skipped themselves, ${#failed_binaries[@]} failed)," \
    "$subtests_ok subtests passed, $subtests_failed failed, $subtests_skipped skipped," \
    "in $((SECONDS - start)) s"
if ((${#failed_binaries[@]} > 0)); then
    echo "failed: ${failed_binaries[*]}" >&2
    exit 1
fi
if ((subtests_ok == 0)); then
    echo "glib-gdbus-tests: no subtest passed; something is wrong with the run" >&2
    exit 1
fi
