#!/usr/bin/env bash
# The SELinux guest test (issue 19): Debian 12's own kernel booted under
# qemu (software emulation) with SELinux enforcing Debian's
# selinux-policy-default plus a small module (scripts/selinux-guest/qbtest.te).
# A unit inside runs the same cases (scripts/selinux-guest/cases.py) against
# dbus-daemon and against the quickbus-daemon given as $1 (as started, and
# restarted in place with its clients connected), enforcing and then
# permissive, writes the results to the second serial port and powers off;
# this script compares every decision, AccessDenied text and AVC record.
#
# The root file system (mmdebstrap, the module installed in a chroot) is
# cached under ${CARGO_TARGET_DIR:-target}/selinux-guest, keyed on its
# inputs (scripts/guest/lib.sh); each run copies the daemon in, labels the
# tree with setfiles and makes an ext4 image with mke2fs -d, which keeps
# the labels. Needs root, mmdebstrap, qemu-system-x86_64, and Debian's
# archive for the first build. Where it cannot run it fails, loudly.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

daemon=$(realpath "${1:?usage: selinux-guest-test.sh QUICKBUS_DAEMON}")
guest=selinux
packages=(systemd systemd-sysv linux-image-amd64 initramfs-tools
    selinux-policy-default selinux-policy-dev policycoreutils selinux-utils
    checkpolicy make m4 dbus-daemon dbus-bin python3-dbus python3-gi
    python3-selinux procps)
# shellcheck source=scripts/guest/lib.sh
source scripts/guest/lib.sh

setup() {
    cp scripts/selinux-guest/qbtest.te "$rootfs/root/"
    chroot "$rootfs" sh -ec '
        cd /root
        make -f /usr/share/selinux/devel/Makefile qbtest.pp
        semodule -i qbtest.pp
        sed -i "s/^SELINUX=.*/SELINUX=enforcing/" /etc/selinux/config
        echo "root:x" | chpasswd
    '
}
guest_rootfs setup scripts/selinux-guest/qbtest.te

step "the guest image: the daemon and the cases copied in, labelled"
install -m 755 "$daemon" "$rootfs/usr/local/bin/quickbus-daemon"
guest_install_unit scripts/selinux-guest/cases.py scripts/selinux-guest/qbtest.service
mount --bind /proc "$rootfs/proc"
trap 'umount "$rootfs/proc" 2>/dev/null || true' EXIT
chroot "$rootfs" setfiles -F /etc/selinux/default/contexts/files/file_contexts / ||
    fail "setfiles could not label the tree"
umount "$rootfs/proc"
trap - EXIT
guest_boot selinux=1 security=selinux enforcing=1

step "comparing dbus-daemon and quickbus"
python3 scripts/selinux-guest/compare.py "$results"
