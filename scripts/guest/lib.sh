# Shared plumbing of the guest tests (scripts/*-guest-test.sh): a Debian
# root file system built once with mmdebstrap and cached under
# ${CARGO_TARGET_DIR:-target}/<name>-guest keyed on its inputs, an ext4
# image made from it with mke2fs -d, and Debian's own kernel booted from it
# under qemu (TCG: no KVM here), with the results on the second serial
# port. Source it after setting `guest` (the name) and `packages`; every
# failure is loud (`fail`).

suite=bookworm
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
work="$target/$guest-guest"
mkdir -p "$work"
say() { printf '%s\n' "$*"; }
step() { printf '\n==> %s\n' "$*"; }
fail() { say "$guest guest test cannot run: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || fail "needs root (mmdebstrap, chroot)"
for tool in mmdebstrap qemu-system-x86_64 mke2fs chroot; do
    command -v "$tool" >/dev/null || fail "$tool is not installed"
done

# guest_rootfs SETUP_FUNCTION KEY_FILES...: the cached root file system in
# $rootfs, built (and then set up by SETUP_FUNCTION) when its key changed.
guest_rootfs() {
    local setup=$1
    shift
    local key
    key=$(cat "$@" <(printf '%s\n' "$suite" "${packages[@]}") | sha256sum | cut -c1-16)
    rootfs="$work/rootfs-$key"
    if [[ -f $rootfs/.complete ]]; then
        say "root file system: cached $rootfs"
        return
    fi
    step "building the $suite root file system for the $guest guest (cached as $rootfs)"
    local started=$SECONDS include
    rm -rf "$work"/rootfs-*
    include=$(IFS=,; echo "${packages[*]}")
    mmdebstrap --variant=minbase --include="$include" "$suite" "$rootfs" ||
        fail "mmdebstrap could not build the root file system"
    "$setup" || fail "could not set up the root file system"
    touch "$rootfs/.complete"
    say "root file system built in $((SECONDS - started)) s"
}

# guest_install_unit CASES SERVICE: the cases and the unit that runs them.
guest_install_unit() {
    install -m 755 "$1" "$rootfs/usr/local/bin/qbtest-cases"
    install -m 644 "$2" "$rootfs/etc/systemd/system/qbtest.service"
    ln -sf /etc/systemd/system/qbtest.service \
        "$rootfs/etc/systemd/system/multi-user.target.wants/qbtest.service"
}

# guest_boot KERNEL_ARGS...: make the image, boot it until the unit powers
# it off; the results in $results.
guest_boot() {
    local image="$work/guest.img" console="$work/console.log" started kernel initrd
    results="$work/results.txt"
    rm -f "$image" "$results" "$console"
    mke2fs -q -t ext4 -d "$rootfs" "$image" 3G || fail "mke2fs -d failed"
    step "booting Debian 12's kernel: $* (qemu, TCG)"
    kernel=$(ls "$rootfs"/boot/vmlinuz-* | tail -1)
    initrd=$(ls "$rootfs"/boot/initrd.img-* | tail -1)
    started=$SECONDS
    timeout 900 qemu-system-x86_64 -accel tcg,thread=multi -cpu max -smp 2 -m 1024 \
        -nographic -no-reboot \
        -kernel "$kernel" -initrd "$initrd" \
        -append "root=/dev/vda rw console=ttyS0 panic=-1 $*" \
        -drive "file=$image,format=raw,if=virtio" \
        -serial "file:$console" -serial "file:$results" -monitor none ||
        fail "qemu failed or timed out (console: $console)"
    say "guest ran in $((SECONDS - started)) s"
    [[ -s $results ]] || fail "the guest wrote no results (console: $console)"
}
