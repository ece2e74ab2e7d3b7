#!/usr/bin/env bash
# What a quickbus-daemon's threads do during a quickbus-bench many-clients
# run (issue 27; docs/performance.md, "Threads"): for each daemon the bench
# starts (the plain quickbus, then the one with THREADS threads), over
# SECONDS of its pairs' window, each thread's CPU seconds and context
# switches (voluntary: it slept, waiting for work or a socket; involuntary:
# it was preempted), from /proc/PID/task/TID/{schedstat,status}. Handing a
# turn's phases to a pool wakes its threads and puts them back to sleep
# every turn: the switches show that cost, where a VM's perf samples (on
# a timer, without a PMU) cannot tell it from the socket wake-ups.
#
# Usage: scripts/pool-profile.sh THREADS [SECONDS [quickbus-bench many-clients options]]
#   e.g. scripts/pool-profile.sh 2 1 --clients 16 --wide-fan-out 1 --count 10 --reps 1
# Needs a release build (cargo build --release -p quickbus-daemon -p
# quickbus-bench). The bench's own table follows, for the round trips
# those seconds carried (its window is 2 s, --quick 0.3 s: SECONDS must
# fit in it after the 0.5 s this script waits).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if (($# < 1)) || ! [[ $1 =~ ^[0-9]+$ ]] || (($1 < 2)); then
    echo "usage: $0 THREADS (2 or more) [SECONDS [quickbus-bench many-clients options]]" >&2
    exit 2
fi
threads=$1 seconds=${2:-1}
shift $(($# > 1 ? 2 : 1))
# shellcheck source=scripts/measuring.sh
source scripts/measuring.sh
daemon=target/release/quickbus-daemon
measuring_setup "$daemon"

# One line per thread of `pid`: its name, run ns, voluntary and
# involuntary switches.
threads_of() {
    local task name run switches
    for task in /proc/"$1"/task/*; do
        name=$(cat "$task/comm" 2>/dev/null) || continue
        read -r run _ <"$task/schedstat" 2>/dev/null || continue
        switches=$(awk '/^(non)?voluntary_ctxt_switches/ {printf "%s ", $2}' "$task/status" 2>/dev/null) || continue
        echo "${task##*/} $name $run $switches"
    done
}

"$bench" --only many-clients --buses quickbus --quickbus-threads "$threads" "$@" \
    >"$work/bench.out" 2>&1 &
bench_pid=$!
seen=" "
while kill -0 "$bench_pid" 2>/dev/null; do
    for pid in $(pgrep -f "^$PWD/$daemon --config-file=" || true); do
        [[ $seen == *" $pid "* ]] && continue
        seen+="$pid "
        # Past the pairs' warm-up (0.2 s), inside their window.
        sleep 0.5
        threads_of "$pid" >"$work/before" || continue
        sleep "$seconds"
        threads_of "$pid" >"$work/after" || continue
        echo "daemon $pid, over $seconds s:"
        join <(sort "$work/before") <(sort "$work/after") | awk -v s="$seconds" '{
            printf "  %-16s cpu %5.2f s/s   switches/s: voluntary %8.0f   involuntary %7.0f\n",
                $2, ($7 - $3) / 1e9 / s, ($8 - $4) / s, ($9 - $5) / s
        }'
    done
    sleep 0.05
done
wait "$bench_pid" || { cat "$work/bench.out" >&2; exit 1; }
grep -E "^pairs|^[0-9]+ +(quickbus|qb t$threads) " "$work/bench.out" || true
