#!/usr/bin/env bash
# The one test command (README, CI): installs the Debian packages whose
# clients the end-to-end tests drive (when missing), builds the workspace,
# checks formatting and lints, and runs every test. The end-to-end tests use
# the quickbus-daemon this build produced, or $QUICKBUS_TEST_DAEMON when set
# (e.g. QUICKBUS_TEST_DAEMON=/usr/bin/dbus-daemon QUICKBUS_ALLOW_SKIP=1 to
# check the tests themselves against the reference: quickbus's own promises
# cannot run there, and skipping fails without QUICKBUS_ALLOW_SKIP=1).
# Exits non-zero on the first failure. Whether it passes or fails, it ends
# with a report (scripts/test-report.sh): the step that failed, if one did,
# and everything that did not run (ignored tests, skips allowed by
# QUICKBUS_ALLOW_SKIP, the suites' own skips), so neither a failure nor a
# skip is ever silent.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# step, logged and the closing report (which step failed, what did not run).
# shellcheck source=scripts/test-report.sh
source scripts/test-report.sh

# dbus-send, dbus-run-session, dbus-daemon (reference), busctl, gdbus,
# dbus-python with GLib, and libdbus/sd-bus headers and tests for later work;
# tshark (reads quickbus captures), chromium (renders the HTML report) and
# tmux (drives quickbus top) for the observe tests; ss (iproute2) shows the
# socket buffers the daemon set; libglib2.0-tests holds GLib's GDBus
# installed tests. dbus-daemon is also the reference of the differential
# harness (tests/differential), and xdg-dbus-proxy in front of it the
# reference of its sandbox test (tests/differential/tests/sandbox.rs,
# issue 26's container filter). libnss-extrausers gives the NSS tests a
# user that only NSS knows. mmdebstrap and systemd-container
# (systemd-nspawn) build and boot the boot test's Debian, go-md2man turns
# docs/quickbus-daemon-config.md into quickbus-daemon.conf(5) for the package.
# jq reads `cargo metadata` for scripts/check-msrv.sh.
# qemu-system-x86 boots Debian's kernel with SELinux for the SELinux guest test.
# gcc, make, pkg-config, libexpat1-dev, libglib2.0-dev, curl and xz-utils
# build dbus from source with Containers1 (scripts/build-dbus-containers.sh).
# xdg-dbus-proxy is also the proxy the bench's sandbox rows compare against.
packages=(jq dbus-daemon dbus-bin libglib2.0-bin python3-dbus python3-gi systemd dbus-tests libsystemd-dev tshark chromium tmux iproute2 libglib2.0-tests libnss-extrausers mmdebstrap systemd-container go-md2man qemu-system-x86 gcc make pkg-config libexpat1-dev libglib2.0-dev curl xz-utils xdg-dbus-proxy)

install_packages() {
    if ! command -v dpkg-query >/dev/null; then
        echo "not a Debian system: install ${packages[*]} (or equivalents) yourself" >&2
        return
    fi
    local missing=() package
    for package in "${packages[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
            missing+=("$package")
        fi
    done
    if ((${#missing[@]} == 0)); then
        return
    fi
    step "installing ${missing[*]}"
    local sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        sudo=(sudo)
    fi
    "${sudo[@]}" apt-get update
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

install_rust_components() {
    local component
    for component in rustfmt clippy; do
        if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1 && command -v rustup >/dev/null; then
            step "adding the $component component"
            rustup component add "$component"
        fi
    done
}

install_packages
install_rust_components

step "cargo build --workspace"
cargo build --workspace

step "cargo fmt --all -- --check"
cargo fmt --all -- --check

# Includes clippy's incompatible_msrv (a workspace lint): no standard-library
# API newer than the declared rust-version.
step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "rust-version: no dependency needs a newer compiler"
bash scripts/check-msrv.sh

# dbus 1.14.10 from Debian's source with Containers1 re-enabled, for dbus's
# test-containers (the conformance runner's tests and the step below). Built
# once, then cached in ~/.cache/quickbus until the script changes.
step "dbus with Containers1, built from source (cached)"
dbus_containers_build=$(bash scripts/build-dbus-containers.sh)

# The hand-offs to the daemon's own threads, model-checked by loom over
# the interleavings of their threads: the log's (crates/daemon/src/logging/
# handoff.rs, every interleaving), the fd closer's
# (crates/daemon/src/fd_closer.rs, up to 3 preemptions) and the spawner's
# (crates/daemon/src/spawner.rs, up to 5). The daemon's lib
# built with loom's lock, condition variable and threads
# (--cfg quickbus_loom; every module's `loom_tests`), in a target directory
# of its own so the build above is not redone. About 35 s to build and
# 60 to 80 s to run on 2 cores (the three modules' tests run side by
# side); a release build runs the models faster but takes 60 s to build.
# A filter that matched nothing would pass: the step fails unless each
# module's tests ran.
step "the hand-offs to the log's, the fd closer's and the spawner's threads, model-checked (loom)"
loom_run=$(mktemp /tmp/qb-loom.XXXXXX)
logged env RUSTFLAGS="--cfg quickbus_loom" cargo test -p quickbus-daemon --lib \
    --target-dir "${CARGO_TARGET_DIR:-target}/loom" loom_tests | tee "$loom_run"
for module in logging::handoff::loom_tests fd_closer::loom_tests spawner::loom_tests; do
    if ! grep -q "^test $module::.* ok$" "$loom_run"; then
        echo "no loom test of $module ran (is the quickbus_loom cfg set?)" >&2
        exit 1
    fi
done
rm -f "$loom_run"

# Includes the differential harness (tests/differential): every scenario
# against /usr/bin/dbus-daemon and the quickbus-daemon just built, any
# difference not in tests/differential/differences.toml a failure.
step "cargo test --workspace"
logged cargo test --workspace

# The end-to-end tests again, every bus the harness configures with a pool
# of 4 threads reading, parsing and writing ahead even for one connection
# (QUICKBUS_E2E_THREADS, tests/e2e/src/forced_threads.rs): the default is
# no pool below 8 cores, so the pass above runs almost every test on the
# single-threaded loop, while a 16-core machine runs 4 threads. The log
# prints how long it took (as for every step: `==> took N s: STEP`).
# With `-p`, cargo resolves the features of quickbus-e2e alone, so about
# 14 crates build again (some 20 s); naming each test target across the
# workspace would reuse the build, for a page of shell: not worth it.
step "the end-to-end tests with 4 threads (QUICKBUS_E2E_THREADS=4)"
logged env QUICKBUS_E2E_THREADS=4 cargo test -p quickbus-e2e --tests

# dbus-daemon's own bus tests (Debian's dbus-tests), run by the project's
# runner against the daemon just built. It prints one line per subtest and
# the summary, and fails on any failure.
step "dbus-daemon's test suite against quickbus-daemon"
logged cargo run --quiet -p quickbus-conformance -- \
    "${CARGO_TARGET_DIR:-target}/debug/quickbus-daemon"

# dbus's test-containers (Containers1), from the build above: first against
# that build's dbus-daemon, then against the daemon just built, which must
# pass every subtest the reference passed, none skipped. One line per
# subtest and daemon, a summary; as root it creates /run/dbus/containers
# (where the sockets go) if missing.
step "dbus's test-containers: the reference, then quickbus-daemon"
logged cargo run --quiet -p quickbus-conformance -- \
    --containers-build "$dbus_containers_build" \
    "${CARGO_TARGET_DIR:-target}/debug/quickbus-daemon"

# GLib's GDBus installed tests (Debian's libglib2.0-tests), with the daemon
# just built as the `dbus-daemon` they start. One line per binary and a
# summary; fails on any failure or time-out.
step "GLib's GDBus tests against quickbus-daemon"
logged bash scripts/glib-gdbus-tests.sh "${CARGO_TARGET_DIR:-target}/debug/quickbus-daemon"

# dbus-daemon's suite, dbus's test-containers and GLib's tests again,
# every quickbus daemon they start with a pool of 4 threads reading and
# writing ahead even for one connection, as the e2e tests' second pass:
# they start the daemon with configuration files of their own, so the
# daemon's test hooks say it instead of a `threads` limit
# (QUICKBUS_TEST_THREADS=4 replaces the configuration's, and
# QUICKBUS_TEST_LEAST_PARALLEL=1 lowers the pool's threshold); the runners
# pass their environment on to the daemons (the reference dbus-daemon that
# test-containers runs first ignores it). Some 30 s on 2 cores. The
# daemons' logs are kept, and each pass fails unless every log that holds
# a quickbus-daemon line also says its pool started (a runner that stopped
# passing the hooks on would otherwise pass as a run with threads); the
# logs are left in $pool_logs when a pass fails.
pool_threads=4
pool_hooks=(QUICKBUS_TEST_THREADS=$pool_threads QUICKBUS_TEST_LEAST_PARALLEL=1)
pool_logs=$(mktemp -d /tmp/qb-pool-logs.XXXXXX)

# Fails unless DIR holds a quickbus-daemon's log and every file that does
# says "N threads read and write the connections" (N: $pool_threads).
pool_ran() {
    local dir=$1 daemons missing
    daemons=$(grep -rlE 'quickbus-daemon\[[0-9]+\]' "$dir" | sort || true)
    missing=$(comm -23 <(echo "$daemons") \
        <(grep -rlF "$pool_threads threads read and write the connections" "$dir" | sort || true))
    if [[ -z $daemons || -n $missing ]]; then
        echo "no pool of $pool_threads threads in the daemons' logs under $dir:" \
            "${missing:-no quickbus-daemon log at all}" >&2
        return 1
    fi
    echo "every daemon ran $pool_threads threads ($(wc -l <<<"$daemons") logs in $dir)"
}

step "dbus-daemon's test suite against quickbus-daemon with 4 threads (QUICKBUS_TEST_THREADS=4)"
logged env "${pool_hooks[@]}" cargo run --quiet -p quickbus-conformance -- \
    --log-dir "$pool_logs/conformance" "${CARGO_TARGET_DIR:-target}/debug/quickbus-daemon"
pool_ran "$pool_logs/conformance"

step "dbus's test-containers against quickbus-daemon with 4 threads (QUICKBUS_TEST_THREADS=4)"
logged env "${pool_hooks[@]}" cargo run --quiet -p quickbus-conformance -- \
    --containers-build "$dbus_containers_build" --log-dir "$pool_logs/containers" \
    "${CARGO_TARGET_DIR:-target}/debug/quickbus-daemon"
pool_ran "$pool_logs/containers"

step "GLib's GDBus tests against quickbus-daemon with 4 threads (QUICKBUS_TEST_THREADS=4)"
mkdir "$pool_logs/glib"
logged env "${pool_hooks[@]}" GLIB_TEST_LOG_DIR="$pool_logs/glib" \
    bash scripts/glib-gdbus-tests.sh "${CARGO_TARGET_DIR:-target}/debug/quickbus-daemon"
pool_ran "$pool_logs/glib"
rm -rf "$pool_logs"

# The Debian package of this checkout (cargo-deb, installed when missing),
# then Debian 12 booted in systemd-nspawn on dbus-daemon and on quickbus with
# the same checks (scripts/boot-test.sh says which, and how to skip it on a
# machine that cannot boot a container).
step "boot test: Debian on dbus-daemon and on quickbus"
logged bash scripts/boot-test.sh

# Debian 12's kernel booted under qemu with SELinux enforcing: the same
# cases on dbus-daemon and quickbus must decide the same, enforcing and
# permissive (scripts/selinux-guest-test.sh).
step "SELinux guest test: dbus-daemon and quickbus under the same policy"
logged bash scripts/selinux-guest-test.sh "${CARGO_TARGET_DIR:-target}/debug/quickbus-daemon"

# The same kernel with AppArmor enforcing test profiles whose dbus rules
# that kernel cannot enforce: both daemons must allow every case, refuse
# <apparmor mode="required"/> alike, and log the same
# (scripts/apparmor-guest-test.sh).
step "AppArmor guest test: dbus-daemon and quickbus under the same profiles"
logged bash scripts/apparmor-guest-test.sh "${CARGO_TARGET_DIR:-target}/debug/quickbus-daemon"

all_passed
