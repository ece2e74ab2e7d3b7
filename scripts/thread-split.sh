#!/usr/bin/env bash
# How a threaded quickbus-daemon's CPU splits between its loop thread and
# its worker threads, for one quickbus-bench many-clients run (issue 27;
# docs/performance.md, "Threads"). The loop thread does what stays serial
# (epoll, routing, the turn's bookkeeping), but also its equal share of
# each phase it hands to the pool and the whole of the phases too small
# to hand over; the workers' time includes rayon's spinning while they
# wait for work. So the loop thread's share is how much the one thread
# carries, which bounds what the pool can win, not the serial part
# itself (scripts/cpu-split.sh estimates that, by instructions).
#
# Usage: scripts/thread-split.sh THREADS [quickbus-bench many-clients options]
#   e.g. scripts/thread-split.sh 4 --clients 16 --wide-fan-out 48 --reps 1
# Needs a release build (cargo build --release -p quickbus-daemon -p
# quickbus-bench). Prints one line per daemon the bench started with
# THREADS threads (the pairs run and the fan-out run each start their own).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if (($# < 1)) || ! [[ $1 =~ ^[0-9]+$ ]] || (($1 < 2)); then
    echo "usage: $0 THREADS (2 or more) [quickbus-bench many-clients options]" >&2
    exit 2
fi
threads=$1
shift
bench=target/release/quickbus-bench
daemon=target/release/quickbus-daemon
for program in "$bench" "$daemon"; do
    [[ -x $program ]] || { echo "$program: build it first (cargo build --release)" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$bench" --only many-clients --buses quickbus --quickbus-threads "$threads" "$@" \
    >"$work/bench.out" 2>&1 &
bench_pid=$!
# The last user+system ticks seen of each thread: daemon pid, then
# "loop" or "worker", then the thread id.
declare -A ticks
limit="<limit name=\"threads\">$threads</limit>"
while kill -0 "$bench_pid" 2>/dev/null; do
    for pid in $(pgrep -f "^$PWD/$daemon --config-file=" || true); do
        config=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | sed -n 's/^--config-file=//p')
        grep -qF "$limit" "$config" 2>/dev/null || continue
        for task in /proc/"$pid"/task/*; do
            read -r -a stat <"$task/stat" 2>/dev/null || continue
            comm=$(cat "$task/comm" 2>/dev/null) || continue
            kind=loop
            [[ $comm == quickbus-io-* ]] && kind=worker
            ticks["$pid $kind ${task##*/}"]=$((stat[13] + stat[14]))
        done
    done
    sleep 0.05
done
wait "$bench_pid" || { cat "$work/bench.out" >&2; exit 1; }
((${#ticks[@]} > 0)) || { echo "no daemon with $threads threads was seen: a longer run" >&2; exit 1; }
for pid in $(for key in "${!ticks[@]}"; do echo "${key%% *}"; done | sort -un); do
    loop=0 workers=0
    for key in "${!ticks[@]}"; do
        read -r owner kind _ <<<"$key"
        [[ $owner == "$pid" ]] || continue
        if [[ $kind == loop ]]; then
            loop=$((loop + ticks[$key]))
        else
            workers=$((workers + ticks[$key]))
        fi
    done
    awk -v pid="$pid" -v t="$threads" -v l="$loop" -v w="$workers" 'BEGIN {
        printf "daemon %s (%s threads): loop thread %d ticks, workers %d ticks, loop share %.0f %%\n",
            pid, t, l, w, (l + w > 0) ? 100 * l / (l + w) : 0 }'
done
grep -E "^ *(pairs|receivers|[0-9]+) " "$work/bench.out" | grep -E "qb t$threads|pairs|receivers" || true
