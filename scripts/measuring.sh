# shellcheck shell=bash
# Sourced by the measuring scripts (cpu-split.sh, sched-delay.sh,
# pool-profile.sh), run from the checkout's root. `measuring_setup DAEMON
# [TOOL...]` checks that the release quickbus-bench (`$bench`) and DAEMON
# are built and that each TOOL is installed, exiting 2 with what to do
# otherwise, and makes `$work`, a directory removed on exit.
bench=target/release/quickbus-bench

measuring_setup() {
    local daemon=$1 program tool
    shift
    for program in "$bench" "$daemon"; do
        [[ -x $program ]] || {
            echo "$program: build it first (cargo build --release -p quickbus-daemon -p quickbus-bench)" >&2
            exit 2
        }
    done
    for tool in "$@"; do
        command -v "$tool" >/dev/null || { echo "$tool is not installed" >&2; exit 2; }
    done
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
}
