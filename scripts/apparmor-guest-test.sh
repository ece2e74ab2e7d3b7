#!/usr/bin/env bash
# The AppArmor guest test (issue 19): Debian 12's own kernel booted under
# qemu (software emulation) with AppArmor enforcing, the apparmor package's
# profiles loaded and two test profiles (scripts/apparmor-guest/qbtest)
# whose dbus rules deny a send, a receive, a bind and eavesdropping. A unit
# inside runs the same cases (scripts/apparmor-guest/cases.py) against
# dbus-daemon and against the quickbus-daemon given as $1 (as started, and
# restarted in place with its services connected), writes the
# results to the second serial port and powers off; this script compares
# every decision, text and AppArmor log line. Debian's kernel has no
# AppArmor D-Bus mediation, so both daemons must allow everything and both
# must refuse `<apparmor mode="required"/>` with the same message.
#
# The root file system is cached under ${CARGO_TARGET_DIR:-target}/apparmor-guest
# (scripts/guest/lib.sh). Needs root, mmdebstrap, qemu-system-x86_64, and
# Debian's archive for the first build. Where it cannot run it fails, loudly.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

daemon=$(realpath "${1:?usage: apparmor-guest-test.sh QUICKBUS_DAEMON}")
guest=apparmor
packages=(systemd systemd-sysv linux-image-amd64 initramfs-tools apparmor
    dbus-daemon dbus-bin python3-dbus python3-gi procps)
# shellcheck source=scripts/guest/lib.sh
source scripts/guest/lib.sh

setup() {
    install -m 644 scripts/apparmor-guest/qbtest "$rootfs/etc/apparmor.d/qbtest"
    # The profiles must compile (the parser in the chroot, no kernel load).
    chroot "$rootfs" apparmor_parser --skip-kernel-load -Q /etc/apparmor.d/qbtest
    echo "root:x" | chroot "$rootfs" chpasswd
}
guest_rootfs setup scripts/apparmor-guest/qbtest

step "the guest image: the daemon and the cases copied in"
install -m 755 "$daemon" "$rootfs/usr/local/bin/quickbus-daemon"
guest_install_unit scripts/apparmor-guest/cases.py scripts/apparmor-guest/qbtest.service
guest_boot apparmor=1 security=apparmor

step "comparing dbus-daemon and quickbus"
python3 scripts/apparmor-guest/compare.py "$results"
