#!/usr/bin/env bash
# What a call carrying an fd costs the daemon (docs/performance.md, "Fds
# clients pass: the cost of closing them off the loop"): N method calls
# through the bus, each with one memfd the callee closes
# (scripts/fd-cost/calls.py, python3-dbus), against each DAEMON given, in
# turn, ROUNDS times:
# - the daemon's CPU per call (user + system of all its threads, from
#   /proc/PID/stat; 10 ms ticks, so use N of 20,000 or more);
# - with --syscalls, once per daemon: its syscalls over 2,000 such calls
#   (strace -c -f, attached after start-up).
#
# Usage: scripts/fd-cost.sh [--syscalls] N ROUNDS DAEMON...
#   e.g. scripts/fd-cost.sh --syscalls 20000 4 old/quickbus-daemon target/release/quickbus-daemon
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

syscalls=false
if [[ ${1:-} == --syscalls ]]; then
    syscalls=true
    shift
fi
if (($# < 3)); then
    echo "usage: $0 [--syscalls] N ROUNDS DAEMON..." >&2
    exit 2
fi
calls=$1 rounds=$2
shift 2

work=$(mktemp -d /tmp/qb-fd-cost.XXXXXX)
daemon_pid=
cleanup() {
    if [[ -n $daemon_pid ]]; then kill "$daemon_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

# Start DAEMON on a session bus of its own; sets daemon_pid and address.
start() {
    : > "$work/address"
    "$1" --session --nofork --print-address=1 > "$work/address" 2> "$work/log" &
    daemon_pid=$!
    for _ in $(seq 100); do
        [[ -s $work/address ]] && break
        sleep 0.05
    done
    address=$(head -1 "$work/address")
    [[ -n $address ]] || { echo "$1 printed no address:" >&2; cat "$work/log" >&2; exit 1; }
}

stop() {
    kill "$daemon_pid"
    wait "$daemon_pid" 2>/dev/null || true
    daemon_pid=
}

for ((round = 1; round <= rounds; round++)); do
    for daemon in "$@"; do
        start "$daemon"
        echo "round $round $daemon: $(/usr/bin/python3 "$here/fd-cost/calls.py" "$address" "$daemon_pid" "$calls")"
        stop
    done
done

if $syscalls; then
    for daemon in "$@"; do
        start "$daemon"
        strace -f -c -p "$daemon_pid" -o "$work/strace" 2>/dev/null &
        tracer=$!
        sleep 0.5
        /usr/bin/python3 "$here/fd-cost/calls.py" "$address" "$daemon_pid" 2000 > /dev/null
        kill -INT "$tracer"
        wait "$tracer" 2>/dev/null || true
        stop
        echo "== syscalls of $daemon over 2,000 calls with an fd"
        grep -E ' (futex|close|recvmsg|sendmsg|epoll_wait|getpid)$' "$work/strace" || true
    done
fi
