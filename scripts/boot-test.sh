#!/usr/bin/env bash
# The boot test (issue 13): Debian 12 booted in a container with
# systemd-nspawn, once on dbus-daemon (the baseline) and once with quickbus
# enabled as the system bus and the user bus from the package this checkout
# builds (scripts/build-deb.sh). The same checks run in both boots; the
# texts clients see (polkit's and the policy's denials) must be the same.
# A third boot checks that removing the package switches back to
# dbus-daemon.
#
# The root file system is made by mmdebstrap (minbase plus the packages
# below) and cached as a tarball under ${CARGO_TARGET_DIR:-target}/boot-test,
# keyed on the package list and the setup: built once, reused by later runs.
# Each boot unpacks a fresh copy.
#
# The host's PID 1 need not be systemd: nspawn runs with --register=no
# --keep-unit, and commands run inside through nsenter into the container's
# init. Needs root, systemd-nspawn (systemd-container), mmdebstrap and
# network access to Debian's archive for the first build of the rootfs.
#
# Where the machine cannot boot a container, the test says why and fails,
# unless QUICKBUS_BOOT_TEST=skip, which turns that (and only that) into a
# loud SKIPPED. QUICKBUS_BOOT_TEST=off does not run it at all.
#
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

suite=bookworm
packages=(systemd systemd-sysv dbus dbus-user-session polkitd libpam-systemd
    libnss-systemd systemd-container procps)
# The unprivileged user of the checks (a login session through machinectl).
setup_user='useradd --create-home --uid 1000 --user-group --shell /bin/bash tester'

target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
work="$target/boot-test"
mkdir -p "$work"

say() { printf '%s\n' "$*"; }
step() { printf '\n==> %s\n' "$*"; }

cannot_run() {
    if [[ ${QUICKBUS_BOOT_TEST:-} == skip ]]; then
        say "SKIPPED: boot test: $* (QUICKBUS_BOOT_TEST=skip)"
        exit 0
    fi
    say "boot test cannot run: $*" >&2
    say "(set QUICKBUS_BOOT_TEST=skip to skip it on such a machine)" >&2
    exit 1
}

if [[ ${QUICKBUS_BOOT_TEST:-} == off ]]; then
    say "boot test not run (QUICKBUS_BOOT_TEST=off)"
    exit 0
fi
[[ $(id -u) -eq 0 ]] || cannot_run "needs root (nspawn, chroot)"
for tool in systemd-nspawn mmdebstrap nsenter chroot; do
    command -v "$tool" >/dev/null || cannot_run "$tool is not installed"
done

# ---------------------------------------------------------------- rootfs
key=$(printf '%s\n' "$suite" "${packages[@]}" "$setup_user" | sha256sum | cut -c1-16)
tarball="$work/rootfs-$suite-$key.tar"
if [[ ! -s $tarball ]]; then
    step "building the $suite root file system (cached as $tarball)"
    started=$SECONDS
    rm -f "$work"/rootfs-*.tar
    include=$(IFS=,; echo "${packages[*]}")
    if ! mmdebstrap --variant=minbase --include="$include" \
        --customize-hook="chroot \"\$1\" $setup_user" \
        "$suite" "$work/rootfs-partial.tar"; then
        rm -f "$work/rootfs-partial.tar"
        cannot_run "mmdebstrap could not build the root file system"
    fi
    mv "$work/rootfs-partial.tar" "$tarball"
    say "root file system built in $((SECONDS - started)) s"
else
    say "root file system: cached $tarball"
fi

step "building the package"
deb=$(bash scripts/build-deb.sh)
say "package: $deb"

# ---------------------------------------------------------------- one boot
failures=()
leader=
nspawn_pid=
mode=

pass() { say "  ok    $mode: $1"; }
fail() {
    local name=$1 line
    shift
    say "  FAIL  $mode: $name"
    for line in "$@"; do say "        $line"; done
    failures+=("$mode: $name")
}

# A container this script started is not left running, whatever happens.
stop_container() {
    if [[ -n $nspawn_pid ]] && kill -0 "$nspawn_pid" 2>/dev/null; then
        say "stopping the container (pid $nspawn_pid)" >&2
        kill -TERM "$nspawn_pid" 2>/dev/null || true
        local waited=0
        while kill -0 "$nspawn_pid" 2>/dev/null && ((waited++ < 100)); do sleep 0.1; done
        kill -KILL "$nspawn_pid" 2>/dev/null || true
    fi
}
trap stop_container EXIT

# A command inside the container, as root, bounded.
guest() { timeout 120 nsenter -t "$leader" -a "$@" </dev/null; }

# `sh -c SCRIPT` in a login session of the unprivileged user (machinectl
# shell: PAM, logind, user@1000.service, the user bus). Prints the
# script's output; returns its status (machinectl itself always says 0).
user_session() {
    local out status
    out=$(guest machinectl -q shell tester@.host /bin/sh -c "$1"'; echo "exit status $?"' 2>&1 | tr -d '\r') || true
    status=$(printf '%s\n' "$out" | sed -n 's/^exit status \([0-9]*\)$/\1/p' | tail -n 1)
    printf '%s\n' "$out" | grep -v '^exit status [0-9]*$' || true
    return "${status:-255}"
}

# `busctl ...` as the unprivileged user, outside any session.
as_tester() { guest setpriv --reuid=1000 --regid=1000 --init-groups "$@"; }

# Unpacks a fresh root, installs the package and runs `setup` in it.
prepare_root() {
    local root=$1
    shift
    rm -rf "$root"
    mkdir -p "$root"
    tar -C "$root" -xf "$tarball"
    cp "$deb" "$root/root/quickbus.deb"
    chroot "$root" dpkg -i /root/quickbus.deb >/dev/null
    local command
    for command in "$@"; do
        chroot "$root" sh -c "$command"
    done
}

boot() {
    local root=$1 log=$2
    : >"$log"
    systemd-nspawn -D "$root" -b --register=no --keep-unit --private-network \
        --console=pipe </dev/null >"$log" 2>&1 &
    nspawn_pid=$!
    leader=
    local waited=0 child
    while [[ -z $leader ]]; do
        for child in $(pgrep -P "$nspawn_pid" || true); do
            if [[ $(cat "/proc/$child/comm" 2>/dev/null) == systemd ]]; then
                leader=$child
            fi
        done
        if [[ -z $leader ]]; then
            kill -0 "$nspawn_pid" 2>/dev/null || cannot_run "systemd-nspawn exited: $(tail -n 5 "$log")"
            ((waited++ < 600)) || cannot_run "no init in the container after 60 s"
            sleep 0.1
        fi
    done
}

# Waits (bounded) until systemd in the container answers systemctl, then
# until it has finished starting up (whatever the outcome: checks() judges).
wait_for_manager() {
    local waited=0
    until guest systemctl show -p Version --value >/dev/null 2>&1; do
        ((waited++ < 600)) || cannot_run "systemd in the container never answered"
        sleep 0.1
    done
    guest systemctl is-system-running --wait >/dev/null 2>&1 || true
}

# Waits (bounded) for the container to be gone; sets poweroff_took to the
# seconds that took, or "never". (Not in a subshell: this shell must reap
# nspawn, or its zombie would look alive.)
power_off() {
    local started=$EPOCHREALTIME
    guest systemctl poweroff || true
    local waited=0
    while kill -0 "$nspawn_pid" 2>/dev/null; do
        if ((waited++ > 1200)); then
            kill -KILL "$nspawn_pid" 2>/dev/null || true
            wait "$nspawn_pid" 2>/dev/null || true
            poweroff_took=never
            return
        fi
        sleep 0.1
    done
    wait "$nspawn_pid" 2>/dev/null || true
    poweroff_took=$(awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
}

# The program whose pid is `pid` in the container.
program_of() { guest readlink "/proc/$1/exe" || echo "(no process $1)"; }

# Client-visible texts with the parts that differ between boots masked.
normalize() { sed -E 's/:1\.[0-9]+/:1.N/g; s/\(uid=[0-9]+ pid=[0-9]+/(uid=U pid=P/g'; }

# Records a text of this boot for comparison with the baseline's.
record_text() { printf '%s\n' "$2" | normalize >"$work/$mode.$1.txt"; }

checks() {
    local expected=$1 out status pid

    if out=$(guest systemctl is-system-running --wait 2>&1) && [[ $out == running ]]; then
        pass "the system is running"
    else
        fail "the system is running" "is-system-running: $out" \
            "$(guest systemctl list-units --failed --plain --no-legend 2>&1)"
    fi
    out=$(guest systemctl list-units --failed --plain --no-legend 2>&1 || true)
    if [[ -z $out ]]; then pass "no failed unit"; else fail "no failed unit" "$out"; fi

    pid=$(guest systemctl show -p MainPID --value dbus.service)
    out=$(program_of "$pid")
    if [[ $out == "$expected" ]]; then
        pass "dbus.service runs $expected"
    else
        fail "dbus.service runs $expected" "it runs $out ($(guest systemctl show -p Id --value dbus.service))"
    fi
    out=$(guest busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus \
        GetConnectionUnixProcessID s org.freedesktop.DBus 2>&1 || true)
    if [[ $out == "u $pid" ]]; then pass "the bus is dbus.service's process"; else fail "the bus is dbus.service's process" "$out, MainPID $pid"; fi

    out=$(guest busctl list --acquired --no-legend 2>&1 || true)
    if grep -q '^org.freedesktop.systemd1 ' <<<"$out" && grep -q '^org.freedesktop.login1 ' <<<"$out"; then
        pass "systemd1 and login1 are on the bus"
    else
        fail "systemd1 and login1 are on the bus" "$out"
    fi

    local tool
    for tool in hostnamectl timedatectl localectl "loginctl list-sessions"; do
        # shellcheck disable=SC2086 # the subcommand splits
        if out=$(guest $tool 2>&1); then pass "$tool"; else fail "$tool" "$out"; fi
    done
    if out=$(guest hostnamectl hostname boot-test-renamed 2>&1) &&
        [[ $(guest hostnamectl hostname 2>&1) == boot-test-renamed ]]; then
        pass "hostnamectl sets the hostname (through hostname1 and polkit)"
    else
        fail "hostnamectl sets the hostname (through hostname1 and polkit)" "$out"
    fi

    # Refused by polkit (systemd asks it over the bus); the text is systemd's.
    out=$(as_tester busctl call org.freedesktop.systemd1 /org/freedesktop/systemd1 \
        org.freedesktop.systemd1.Manager StartUnit ss systemd-hostnamed.service replace 2>&1) &&
        status=0 || status=$?
    if ((status != 0)); then pass "an unprivileged StartUnit is refused"; else fail "an unprivileged StartUnit is refused" "$out"; fi
    record_text start-unit-denied "$out"

    # Refused by the bus's policy: dbus-daemon's text.
    # (dbus-send: busctl prints only "Access denied", not the bus's text)
    out=$(as_tester dbus-send --system --print-reply --dest=org.freedesktop.DBus \
        /org/freedesktop/DBus org.freedesktop.DBus.RequestName \
        string:org.freedesktop.login1 uint32:0 2>&1) && status=0 || status=$?
    if ((status != 0)) && grep -q 'not allowed to own the service "org.freedesktop.login1"' <<<"$out"; then
        pass "an unprivileged RequestName of a system name is refused by policy"
    else
        fail "an unprivileged RequestName of a system name is refused by policy" "$out"
    fi
    record_text request-name-denied "$out"

    if out=$(guest systemctl reload dbus 2>&1) &&
        [[ $(guest systemctl is-active dbus.service) == active ]] &&
        guest busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus GetId >/dev/null; then
        pass "systemctl reload dbus"
    else
        fail "systemctl reload dbus" "$out" "$(guest systemctl status --no-pager dbus.service 2>&1 | tail -n 8)"
    fi

    # A login session's user bus.
    out=$(user_session 'systemctl --user is-system-running --wait
        busctl --user call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus GetId >/dev/null &&
        busctl --user list --no-legend | grep -q "^org.freedesktop.DBus " &&
        systemctl --user reload dbus.service &&
        busctl --user call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus GetId >/dev/null &&
        readlink /proc/$(systemctl --user show -p MainPID --value dbus.service)/exe') && status=0 || status=$?
    if ((status == 0)) && [[ $(head -n 1 <<<"$out") == running && $(tail -n 1 <<<"$out") == "$expected" ]]; then
        pass "a login session's user bus runs on $expected (systemctl --user, busctl --user, reload)"
    else
        fail "a login session's user bus runs on $expected (systemctl --user, busctl --user, reload)" "status $status:" "$out"
    fi

    journal_check "$expected"
    dynamic_user_check "$expected"
}

# Two broken service files, then a reload: dbus-daemon warns about the one
# whose file name is not its bus name, quickbus about the one without its
# group. Either must show up at priority warning or higher.
journal_check() {
    local expected=$1 pid out
    pid=$(guest systemctl show -p MainPID --value dbus.service)
    guest sh -c 'dir=/usr/share/dbus-1/system-services
        printf "[D-BUS Service]\nName=org.example.BootTestNamed\nExec=/bin/false\nUser=root\n" >$dir/org.example.BootTestMisnamed.service
        printf "Name=org.example.BootTestBroken\n" >$dir/org.example.BootTestBroken.service'
    guest systemctl reload dbus || true
    guest journalctl --sync || true
    local name="warnings reach journalctl -p warning"
    out=$(guest journalctl -b -q -o cat -p warning "_PID=$pid" 2>&1 | grep 'BootTest' || true)
    if [[ -n $out ]]; then
        pass "$name"
    else
        fail "$name" "no warning from pid $pid" \
            "$(guest journalctl -b -q -o short "_PID=$pid" 2>&1 | tail -n 5)"
    fi
    guest sh -c 'rm -f /usr/share/dbus-1/system-services/org.example.BootTest*.service'
}

# A DynamicUser= service's user, named by a bus policy, owns its name. The
# user exists only while a unit uses it, so, as at boot, the bus loads the
# policy (reloads) before the user exists: the name is unknown then. A unit
# of that user starts and asks for the name, with no reload in between;
# a unit of another dynamic user is refused it by the policy (so the
# policy, not a default, decided), after connecting.
#
# dbus-daemon cannot do this: systemd starts dbus.service with
# SYSTEMD_NSS_DYNAMIC_BYPASS=1 (so that the bus never waits on PID 1 for a
# user lookup), so nss-systemd tells it of no dynamic user. It then drops
# the policy ("Unknown username") and refuses the connections of every
# dynamic user, whose groups it cannot look up ("Transport endpoint is not
# connected"; systemd issues 22737 and 9503). quickbus reads the links PID
# 1 keeps for bus daemons in /run/systemd/dynamic-uid (see
# crates/daemon/src/dynamic_users.rs). So this is a quickbus promise: the
# baseline's outcome is shown, not judged.
dynamic_user_check() {
    local expected=$1 out other pid name="a DynamicUser= service's user named in a bus policy owns its name"
    guest sh -c 'cat >/etc/dbus-1/system.d/org.example.BootTestDynamic.conf <<EOF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <policy user="boottestdyn">
    <allow own="org.example.BootTestDynamic"/>
  </policy>
</busconfig>
EOF'
    guest systemctl reload dbus || true
    local request=(busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus
        RequestName su org.example.BootTestDynamic 0)
    out=$(guest systemd-run --quiet --wait --pipe -p DynamicUser=yes -p User=boottestdyn \
        "${request[@]}" 2>&1 || true)
    other=$(guest systemd-run --quiet --wait --pipe -p DynamicUser=yes -p User=boottestother \
        "${request[@]}" 2>&1 || true)
    if [[ $expected == */dbus-daemon ]]; then
        pid=$(guest systemctl show -p MainPID --value dbus.service)
        say "  note  $mode: $name: not a dbus-daemon feature; it gave: $out; to another dynamic user: $other"
        say "        its journal: $(guest journalctl -b -q -o cat "_PID=$pid" 2>&1 | grep -m 1 boottestdyn || echo 'nothing about boottestdyn')"
    elif [[ $out == "u 1" && $other == *"Access denied"* ]]; then
        pass "$name"
    else
        fail "$name" "boottestdyn: $out" "boottestother (must be refused by the policy): $other" \
            "getent (not the bus's view: no SYSTEMD_NSS_DYNAMIC_BYPASS): $(guest getent passwd boottestdyn || echo 'no such user')"
    fi
    guest rm -f /etc/dbus-1/system.d/org.example.BootTestDynamic.conf
}

# The system bus's log: its process's lines (the unit is quickbus.service,
# of which dbus.service is an alias, and the pid stays across restarts).
bus_journal() {
    guest journalctl -b -q -o cat --no-pager "_PID=$(guest systemctl show -p MainPID --value dbus.service)" 2>&1
}

# How many times the system bus logged a finished restart in place.
restarts_logged() {
    bus_journal | grep -c 'restarted in place' || true
}

# Waits (bounded) until the bus has logged `count` restarts.
wait_for_restarts() {
    local count=$1 waited=0
    until (($(restarts_logged) >= count)); do
        ((waited++ < 300)) || return 1
        sleep 0.1
    done
}

owner_of() {
    guest busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus \
        GetNameOwner s "$1" 2>&1 || true
}

# The system bus restarts in place (docs/restart.md) three ways: SIGUSR2
# from systemctl, `quickbus --system restart`, and a reinstall of the
# package, whose postinst restarts it onto the binary dpkg just replaced.
# Each time the bus keeps its pid and every client its connection:
# systemd1 and login1 their unique names, the session its user bus.
restart_checks() {
    local pid systemd1 login1 out logged failed_before
    pid=$(guest systemctl show -p MainPID --value dbus.service)
    failed_before=$(guest systemctl list-units --failed --plain --no-legend 2>&1 || true)
    systemd1=$(owner_of org.freedesktop.systemd1)
    login1=$(owner_of org.freedesktop.login1)
    logged=$(restarts_logged)
    kept() {
        local what=$1
        out="pid $(guest systemctl show -p MainPID --value dbus.service), systemd1 $(owner_of org.freedesktop.systemd1), login1 $(owner_of org.freedesktop.login1)"
        if [[ $out == "pid $pid, systemd1 $systemd1, login1 $login1" ]] &&
            guest loginctl list-sessions >/dev/null 2>&1 &&
            guest hostnamectl >/dev/null 2>&1 &&
            [[ $(guest systemctl is-active dbus.service) == active ]]; then
            pass "$what: the bus kept its pid and its clients ($out)"
        else
            fail "$what: the bus kept its pid and its clients" "before: pid $pid, systemd1 $systemd1, login1 $login1" \
                "after:  $out" "$(bus_journal | tail -n 8)"
        fi
    }
    guest systemctl kill -s USR2 --kill-whom=main dbus.service
    if wait_for_restarts $((logged + 1)); then
        pass "systemctl kill -s USR2: the system bus restarted in place"
    else
        fail "systemctl kill -s USR2: the system bus restarted in place" \
            "$(bus_journal | tail -n 8)"
    fi
    kept "SIGUSR2"
    if out=$(guest quickbus --system restart 2>&1) && wait_for_restarts $((logged + 2)); then
        pass "quickbus --system restart"
    else
        fail "quickbus --system restart" "$out"
    fi
    kept "quickbus restart"
    # An upgrade: dpkg unpacks a new /usr/bin/quickbus-daemon (a new file;
    # the running one is unlinked) and the postinst restarts onto it.
    if out=$(guest dpkg -i /root/quickbus.deb 2>&1) && wait_for_restarts $((logged + 3)) &&
        [[ $(program_of "$pid") == /usr/bin/quickbus-daemon ]]; then
        pass "a package upgrade restarts the bus onto the new binary (/proc/$pid/exe is the new file)"
    else
        fail "a package upgrade restarts the bus onto the new binary" "$out" "exe: $(program_of "$pid")"
    fi
    kept "upgrade"
    # A new login (PAM, logind, user@1000 and its bus over the system bus).
    if out=$(user_session 'busctl --user call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus GetId'); then
        pass "a new login session works after the restarts"
    else
        fail "a new login session works after the restarts" "$out"
    fi
    # (dynamic_user_check leaves one transient unit failed on purpose.)
    out=$(guest systemctl list-units --failed --plain --no-legend 2>&1 || true)
    if [[ $out == "$failed_before" ]]; then
        pass "no unit failed during the restarts"
    else
        fail "no unit failed during the restarts" "before: $failed_before" "after: $out"
    fi
}

# Containers1 on the system bus as the package sets it up: the socket
# directory from its tmpfiles.d snippet, owned by the bus's user, and an
# app run by `quickbus --system sandbox` reaching the bus through its
# container socket, as a contained connection.
container_check() {
    local out
    out=$(guest stat -c '%U %a' /run/dbus/containers 2>&1 || true)
    if [[ $out == "messagebus 755" ]]; then
        pass "/run/dbus/containers is made by the package's tmpfiles.d snippet (messagebus 755)"
    else
        fail "/run/dbus/containers is made by the package's tmpfiles.d snippet" "$out"
    fi
    # A contained connection may not manage containers: the bus refuses
    # StopInstance with its "in container" AccessDenied, which only a
    # connection that came in through a container socket gets (dbus-send:
    # busctl prints only "Access denied", not the bus's text).
    out=$(guest quickbus --system sandbox -- dbus-send --system --print-reply \
        --dest=org.freedesktop.DBus /org/freedesktop/DBus \
        org.freedesktop.DBus.Containers1.StopInstance \
        objpath:/org/freedesktop/DBus/Containers1/c999 2>&1 || true)
    if [[ $out == *"StopInstance"*"in container"* ]]; then
        pass "quickbus --system sandbox: the app is in a container instance (StopInstance refused to it)"
    else
        fail "quickbus --system sandbox: the app is in a container instance (StopInstance refused to it)" "$out"
    fi
}

declare -A poweroff_seconds

run_boot() {
    mode=$1
    local expected=$2 full=$3
    shift 3
    local root="$work/root-$mode" log="$work/$mode.console.log" started
    step "boot: $mode"
    started=$SECONDS
    prepare_root "$root" "$@"
    boot "$root" "$log"
    wait_for_manager
    say "  booted in $((SECONDS - started)) s (unpack, install, boot)"
    if [[ $full == full ]]; then
        checks "$expected"
        if [[ $expected == /usr/bin/quickbus-daemon ]]; then
            container_check
            restart_checks
        fi
    else
        local pid out
        pid=$(guest systemctl show -p MainPID --value dbus.service)
        out=$(program_of "$pid")
        if [[ $out == "$expected" ]]; then pass "dbus.service runs $expected"; else fail "dbus.service runs $expected" "it runs $out"; fi
        out=$(user_session 'busctl --user call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus GetId >/dev/null &&
            readlink /proc/$(systemctl --user show -p MainPID --value dbus.service)/exe') || true
        if [[ $(tail -n 1 <<<"$out") == "$expected" ]]; then
            pass "the user bus runs $expected"
        else
            fail "the user bus runs $expected" "$out"
        fi
    fi
    power_off
    rm -rf "$root"
    local seconds=$poweroff_took
    poweroff_seconds[$mode]=$seconds
    if [[ $seconds == never ]]; then
        fail "systemctl poweroff completes" "still running after 120 s; console: $(tail -n 5 "$log")"
    else
        pass "systemctl poweroff completes ($seconds s)"
    fi
}

enable_quickbus=(
    'systemctl enable quickbus.service'
    'systemctl --global enable quickbus.service'
)
# Enabled then disabled again: dbus-daemon must be back, as if never enabled.
baseline=(
    "${enable_quickbus[@]}"
    'systemctl disable quickbus.service'
    'systemctl --global disable quickbus.service'
)

run_boot dbus-daemon /usr/bin/dbus-daemon full "${baseline[@]}"
run_boot quickbus /usr/bin/quickbus-daemon full "${enable_quickbus[@]}"
# Removing the package while enabled switches back at the next boot.
run_boot removed /usr/bin/dbus-daemon short "${enable_quickbus[@]}" 'dpkg --remove quickbus >/dev/null'

step "texts clients see, quickbus against dbus-daemon"
for text in start-unit-denied request-name-denied; do
    if diff -u "$work/dbus-daemon.$text.txt" "$work/quickbus.$text.txt"; then
        say "  ok    $text: $(head -n 1 "$work/quickbus.$text.txt")"
    else
        failures+=("texts: $text differs from dbus-daemon's")
    fi
done
say "poweroff took ${poweroff_seconds[dbus-daemon]} s on dbus-daemon, ${poweroff_seconds[quickbus]} s on quickbus (information only)"

if ((${#failures[@]})); then
    step "boot test: ${#failures[@]} check(s) failed"
    printf '  %s\n' "${failures[@]}"
    exit 1
fi
step "boot test: all checks passed"
