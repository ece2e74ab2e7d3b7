#!/usr/bin/env bash
# Where quickbus-daemon's CPU goes per message, for one quickbus-bench
# workload (issue 27's first measurement; docs/performance.md, "Where one
# message's CPU goes"). Two runs of the same workload:
#
# 1. a normal run: the daemon's user and system CPU time, read from
#    /proc/PID/stat while it runs (the system part is the syscalls:
#    epoll_wait, recvmsg, sendmsg and the socket copies, work that is per
#    connection and parallel by nature);
# 2. a run under callgrind (valgrind): the daemon's user-space instructions,
#    and the share of them inside the bus core's entry points
#    (Bus::receive, Bus::write_queue without the sendmsg it calls,
#    Bus::handle_timeouts): the routing and queueing that stay serial
#    behind one point of order.
#
# It prints both and their product, the serial share of the whole per-message
# CPU. That product takes instructions as a stand-in for user time (callgrind
# counts instructions, not cycles): an estimate, not a measurement of time.
#
# Usage: scripts/cpu-split.sh WORKLOAD SIZE COUNT [CALLGRIND_COUNT]
#   e.g. scripts/cpu-split.sh round-trip 64 100000 20000
# Needs a release build (cargo build --release -p quickbus-daemon -p
# quickbus-bench) and valgrind.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if (($# < 3)); then
    echo "usage: $0 WORKLOAD SIZE COUNT [CALLGRIND_COUNT]" >&2
    exit 2
fi
workload=$1 size=$2 count=$3 callgrind_count=${4:-$(($3 / 10))}
# shellcheck source=scripts/measuring.sh
source scripts/measuring.sh
daemon=target/release/quickbus-daemon
measuring_setup "$daemon" valgrind callgrind_annotate

# 1. user and system time of the daemon over a normal run.
"$bench" --only "$workload" --sizes "$size" --count "$count" --buses quickbus --reps 3 \
    >"$work/bench.out" 2>&1 &
bench_pid=$!
declare -A times
while kill -0 "$bench_pid" 2>/dev/null; do
    for pid in $(pgrep -f "^$PWD/$daemon --config-file=" || true); do
        if read -r -a stat <"/proc/$pid/stat" 2>/dev/null; then
            times[$pid]="${stat[13]} ${stat[14]}"
        fi
    done
    sleep 0.05
done
wait "$bench_pid" || { cat "$work/bench.out" >&2; exit 1; }
user=0 system=0
for pid in "${!times[@]}"; do
    read -r u s <<<"${times[$pid]}"
    user=$((user + u)) system=$((system + s))
done
((user + system > 0)) || { echo "the daemon's CPU time was not seen: a longer COUNT" >&2; exit 1; }

# 2. user-space instructions under callgrind, the daemon started through a
# wrapper that quickbus-bench runs as its quickbus-daemon.
cat >"$work/daemon-under-callgrind" <<EOF
#!/bin/sh
exec valgrind --tool=callgrind --callgrind-out-file=$work/callgrind.%p $PWD/$daemon "\$@"
EOF
chmod +x "$work/daemon-under-callgrind"
"$bench" --only "$workload" --sizes "$size" --count "$callgrind_count" --buses quickbus --reps 1 \
    --quickbus "$work/daemon-under-callgrind" >"$work/callgrind-bench.out" 2>&1 ||
    { cat "$work/callgrind-bench.out" >&2; exit 1; }
profile=$(ls "$work"/callgrind.* | head -n 1)
annotated=$(callgrind_annotate --inclusive=yes --threshold=100 "$profile" 2>/dev/null)
instructions() {
    # The inclusive count of the function whose name ends in $1 (its
    # own entry, the line with the binary's path in brackets); 0 when it
    # never ran.
    { grep -E "$1 \[" <<<"$annotated" || true; } | head -n 1 | awk '{gsub(",", "", $1); n = $1} END {print n + 0}'
}
total=$(grep "PROGRAM TOTALS" <<<"$annotated" | awk '{gsub(",", "", $1); print $1}')
core=0
for entry in 'quickbus_bus::bus::Bus::receive' 'quickbus_bus::bus::Bus::handle_timeouts'; do
    core=$((core + $(instructions "$entry")))
done
# The write: the core advances the connection's queue and reacts
# (Bus::write_queue), around the daemon's sendmsg (transport::write_once,
# which is per connection and not the core's): only the sendmsgs made
# inside it (overflow::Queues::write calls them) are taken off, not those
# a pool's workers make from lent outboxes, whose writes write_queue
# settles too.
write_queue=$(instructions 'queueing::<impl quickbus_bus::bus::Bus>::write_queue')
((write_queue > 0)) || { echo "Bus::write_queue not found in the profile: the script is out of date" >&2; exit 1; }
write_once=$(callgrind_annotate --inclusive=yes --tree=caller --threshold=100 "$profile" 2>/dev/null |
    awk '/^ *$/ {v = 0} /< .*Queues::write \(/ {v = $1}
        /\*  .*transport::write_once \[/ && !found {gsub(",", "", v); n = v + 0; found = 1}
        END {if (found) print n}')
[[ -n $write_once ]] || { echo "transport::write_once not found in the profile: the script is out of date" >&2; exit 1; }
core=$((core + write_queue - write_once))
((core > 0)) || { echo "Bus::receive not found in the profile: the script is out of date" >&2; exit 1; }
parse=$(instructions 'quickbus_wire::message::Message::parse')

awk -v u="$user" -v s="$system" -v core="$core" -v total="$total" -v parse="$parse" \
    -v what="$workload $size B" 'BEGIN {
    user_share = u / (u + s)
    core_share = core / total
    printf "%s\n", what
    printf "  daemon CPU: user %.0f %%, system (syscalls) %.0f %%\n", 100 * user_share, 100 * (1 - user_share)
    printf "  user-space instructions: bus core %.0f %%, Message::parse %.0f %%, the rest %.0f %%\n",
        100 * core_share, 100 * parse / total, 100 * (1 - core_share - parse / total)
    printf "  serial share of the per-message CPU (core share x user share): %.0f %%\n", 100 * core_share * user_share
}'
