#!/usr/bin/env bash
# The SELinux guest test (issue 19): Debian 12's own kernel booted under
# qemu (software emulation) with SELinux enforcing Debian's
# selinux-policy-default plus a small module (scripts/selinux-guest/qbtest.te).
# A unit inside runs the same cases (scripts/selinux-guest/cases.py) against
# dbus-daemon and against the quickbus-daemon given as $1, enforcing and then
# permissive, writes the results to the second serial port and powers off;
# this script compares every decision and AccessDenied text.
#
# The root file system (mmdebstrap, the module installed and the tree
# labelled with setfiles in a chroot) is cached under
# ${CARGO_TARGET_DIR:-target}/selinux-guest, keyed on its inputs; each run
# copies the daemon in and makes an ext4 image with mke2fs -d, which keeps
# the labels. Needs root, mmdebstrap, qemu-system-x86_64, and Debian's
# archive for the first build. Where it cannot run it fails, loudly.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

daemon=$(realpath "${1:?usage: selinux-guest-test.sh QUICKBUS_DAEMON}")
suite=bookworm
packages=(systemd systemd-sysv linux-image-amd64 initramfs-tools
    selinux-policy-default selinux-policy-dev policycoreutils selinux-utils
    checkpolicy make m4 dbus-daemon dbus-bin python3-dbus python3-gi
    python3-selinux procps)

target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
work="$target/selinux-guest"
mkdir -p "$work"
say() { printf '%s\n' "$*"; }
step() { printf '\n==> %s\n' "$*"; }
fail() { say "SELinux guest test cannot run: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || fail "needs root (mmdebstrap, chroot, labels)"
for tool in mmdebstrap qemu-system-x86_64 mke2fs chroot; do
    command -v "$tool" >/dev/null || fail "$tool is not installed"
done

key=$(cat scripts/selinux-guest/qbtest.te <(printf '%s\n' "$suite" "${packages[@]}") | sha256sum | cut -c1-16)
rootfs="$work/rootfs-$key"
if [[ ! -f $rootfs/.complete ]]; then
    step "building the $suite root file system with SELinux (cached as $rootfs)"
    started=$SECONDS
    rm -rf "$work"/rootfs-*
    include=$(IFS=,; echo "${packages[*]}")
    mmdebstrap --variant=minbase --include="$include" "$suite" "$rootfs" ||
        fail "mmdebstrap could not build the root file system"
    cp scripts/selinux-guest/qbtest.te "$rootfs/root/"
    chroot "$rootfs" sh -ec '
        cd /root
        make -f /usr/share/selinux/devel/Makefile qbtest.pp
        semodule -i qbtest.pp
        sed -i "s/^SELINUX=.*/SELINUX=enforcing/" /etc/selinux/config
        echo "root:x" | chpasswd
    ' || fail "could not install the policy module"
    touch "$rootfs/.complete"
    say "root file system built in $((SECONDS - started)) s"
else
    say "root file system: cached $rootfs"
fi

step "the guest image: the daemon and the cases copied in, labelled"
install -m 755 "$daemon" "$rootfs/usr/local/bin/quickbus-daemon"
install -m 755 scripts/selinux-guest/cases.py "$rootfs/usr/local/bin/qbtest-cases"
install -m 644 scripts/selinux-guest/qbtest.service "$rootfs/etc/systemd/system/qbtest.service"
ln -sf /etc/systemd/system/qbtest.service "$rootfs/etc/systemd/system/multi-user.target.wants/qbtest.service"
mount --bind /proc "$rootfs/proc"
trap 'umount "$rootfs/proc" 2>/dev/null || true' EXIT
chroot "$rootfs" setfiles -F /etc/selinux/default/contexts/files/file_contexts / ||
    fail "setfiles could not label the tree"
umount "$rootfs/proc"
trap - EXIT
image="$work/guest.img"
rm -f "$image"
mke2fs -q -t ext4 -d "$rootfs" "$image" 3G || fail "mke2fs -d failed"

step "booting Debian 12's kernel, SELinux enforcing (qemu, TCG)"
kernel=$(ls "$rootfs"/boot/vmlinuz-* | tail -1)
initrd=$(ls "$rootfs"/boot/initrd.img-* | tail -1)
results="$work/results.txt"
console="$work/console.log"
rm -f "$results" "$console"
started=$SECONDS
timeout 900 qemu-system-x86_64 -accel tcg,thread=multi -cpu max -smp 2 -m 1024 \
    -nographic -no-reboot \
    -kernel "$kernel" -initrd "$initrd" \
    -append "root=/dev/vda rw console=ttyS0 selinux=1 security=selinux enforcing=1 panic=-1" \
    -drive "file=$image,format=raw,if=virtio" \
    -serial "file:$console" -serial "file:$results" -monitor none ||
    fail "qemu failed or timed out (console: $console)"
say "guest ran in $((SECONDS - started)) s"
[[ -s $results ]] || fail "the guest wrote no results (console: $console)"

step "comparing dbus-daemon and quickbus"
python3 scripts/selinux-guest/compare.py "$results"
