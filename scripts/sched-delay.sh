#!/usr/bin/env bash
# Where a caller waits during a storm (issue 25, seed 000): the scheduling
# delay, from being woken to running on a CPU, of the bus and of each part
# of quickbus-bench's storm workload, from `perf sched timehist` over one
# storm run on quickbus alone.
#
# Usage: scripts/sched-delay.sh [DAEMON [STORM OPTIONS...]]
#   DAEMON: the quickbus-daemon to run (default target/release/quickbus-daemon)
#   STORM OPTIONS: more quickbus-bench options (default --flood-rates 0 --reps 1)
# Needs a release build of quickbus-bench, perf, and the rights to trace
# the scheduler (root).
#
# It prints, per part, how many times it was switched in (after a wake-up
# or a preemption; the trace covers the whole bench run, start-up and
# connects included) and the median, 99th percentile and largest delay
# in µs: `bus` (the
# daemon's threads: its loop, named after its program, and its workers),
# `caller` (the bench's main thread, which makes the
# calls), `callee`, `flooder` and `receivers` (the storm's named threads).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

daemon=$(realpath "${1:-target/release/quickbus-daemon}")
shift || true
options=("$@")
((${#options[@]})) || options=(--flood-rates 0 --reps 1)
# shellcheck source=scripts/measuring.sh
source scripts/measuring.sh
measuring_setup "$daemon" perf

perf sched record -o "$work/sched.data" -- \
    "$bench" --only storm --buses quickbus --quickbus "$daemon" "${options[@]}" \
    >"$work/bench.out" 2>"$work/perf.err" || { cat "$work/perf.err" "$work/bench.out" >&2; exit 1; }
perf sched timehist -i "$work/sched.data" >"$work/timehist" 2>/dev/null
grep -A 3 '^== storm' "$work/bench.out"

# A line: time, [cpu], task name[tid/pid] (the name may hold spaces; the
# main thread shows [pid] alone), wait time, sch delay, run time (ms).
awk '
    NR <= 3 { next }
    {
        delay = $(NF - 1) * 1000
        task = ""
        for (i = 3; i <= NF - 3; i++) task = task (i > 3 ? " " : "") $i
        part = ""
        if (index(task, daemon_comm "[") == 1 || task ~ /^quickbus-io-[0-9]+\[/) part = "bus"
        else if (task ~ /^quickbus-bench\[[0-9]+\]$/) part = "caller"
        else if (task ~ /^storm-callee\[/) part = "callee"
        else if (task ~ /^storm-flooder\[/) part = "flooder"
        else if (task ~ /^storm-receiver\[/) part = "receivers"
        if (part != "") print part, delay
    }
' daemon_comm="$(basename "$daemon" | cut -c1-15)" "$work/timehist" | sort -k1,1 -k2,2n | awk '
    function report() {
        if (n == 0) return
        p99 = int(n * 0.99 + 0.5)
        if (p99 < 1) p99 = 1
        printf "%-10s %8d switch-ins   sch delay µs: p50 %7.1f   p99 %7.1f   max %8.1f\n",
            part, n, d[int((n + 1) / 2)], d[p99], d[n]
        seen[part] = 1
    }
    $1 != part { report(); part = $1; n = 0 }
    { d[++n] = $2 }
    END {
        report()
        # The parts are found by thread name (the bench names the storm'"'"'s
        # threads in crates/bench/src/storm.rs): one missing is a rename.
        split("bus caller callee flooder receivers", parts, " ")
        for (i = 1; i <= 5; i++)
            if (!(parts[i] in seen))
                printf "%-10s no switch-ins found: were its threads renamed?\n", parts[i]
    }
'
