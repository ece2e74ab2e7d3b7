//! What the bus reports about its own process (org.freedesktop.DBus in
//! GetConnectionCredentials and GetConnectionSELinuxSecurityContext), and
//! whether SELinux is there to ask about at all.

use std::path::Path;

use quickbus_bus::{Bus, BusOptions};

/// Where selinuxfs lives when SELinux is enabled (libselinux looks there).
const SELINUX_ENFORCE: &str = "/sys/fs/selinux/enforce";

/// Fill in the bus process's own uid, pid and start time (the bus core
/// reads no files). Call after any fork, so the pid is the daemon's final
/// one.
pub fn fill_own_identity(opts: &mut BusOptions) {
    opts.own_uid = Some(rustix::process::getuid().as_raw());
    opts.own_pid = std::process::id();
    // What the daemon opens a pidfd of this process by, when a peer asks
    // for the `ProcessFD` of org.freedesktop.DBus.
    opts.own_process_started = crate::sys::process_start_time(opts.own_pid);
}

/// Tell `bus`, under SELinux, its own label.
pub fn describe_self(bus: &mut Bus) {
    let selinux = selinux_enabled();
    bus.set_selinux(selinux, selinux.then(own_security_label).flatten());
}

/// SELinux is enabled when selinuxfs is mounted, as libselinux's
/// `is_selinux_enabled` decides.
pub(crate) fn selinux_enabled() -> bool {
    Path::new(SELINUX_ENFORCE).exists()
}

/// This process's LSM label (`/proc/self/attr/current`), without the
/// trailing NUL or newline.
pub(crate) fn own_security_label() -> Option<Vec<u8>> {
    trimmed_label(std::fs::read("/proc/self/attr/current").ok()?)
}

/// The kernel ends a label with a NUL, a newline, or both.
fn trimmed_label(mut label: Vec<u8>) -> Option<Vec<u8>> {
    while matches!(label.last(), Some(0 | b'\n')) {
        label.pop();
    }
    (!label.is_empty()).then_some(label)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn own_process_fd_refers_to_this_process() {
        let mut opts = BusOptions::default();
        fill_own_identity(&mut opts);
        assert_eq!(opts.own_pid, std::process::id());
        // Every kernel the daemon supports has pidfd_open (Linux 5.3+);
        // without it ProcessFD is never offered, which this test must show.
        let started = opts.own_process_started.expect("no start time in /proc");
        let fd = crate::sys::open_pidfd_verified(opts.own_pid, started)
            .expect("pidfd_open failed: Linux older than 5.3?");
        let info =
            std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).unwrap();
        assert!(
            info.lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>()
                    == ["Pid:", &std::process::id().to_string()]),
            "{info}"
        );
    }

    #[test]
    fn labels_lose_trailing_nuls_and_newlines() {
        assert_eq!(
            trimmed_label(b"system_u:system_r:dbusd_t:s0\n\0".to_vec()),
            Some(b"system_u:system_r:dbusd_t:s0".to_vec())
        );
        assert_eq!(
            trimmed_label(b"unconfined".to_vec()),
            Some(b"unconfined".to_vec())
        );
        assert_eq!(trimmed_label(b"\0".to_vec()), None);
    }
}
