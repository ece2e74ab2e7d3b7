//! What the bus reports about its own process (org.freedesktop.DBus in
//! GetConnectionCredentials and GetConnectionSELinuxSecurityContext), and
//! whether SELinux is there to ask about at all.

use std::path::Path;

use quickbus_bus::{Bus, ProcessFd};
use rustix::process::{getpid, pidfd_open, PidfdFlags};

/// Where selinuxfs lives when SELinux is enabled (libselinux looks there).
const SELINUX_ENFORCE: &str = "/sys/fs/selinux/enforce";

/// Tell `bus` its own pidfd and, under SELinux, its own label. Call after
/// any fork, so the pid is the daemon's final one.
pub fn describe_self(bus: &mut Bus) {
    bus.set_own_process_fd(own_process_fd());
    let selinux = selinux_enabled();
    bus.set_selinux(selinux, selinux.then(own_security_label).flatten());
}

/// A pidfd of this process. Opening one by pid is race-free for ourselves
/// (we are alive to ask); None on kernels before 5.3.
fn own_process_fd() -> Option<ProcessFd> {
    match pidfd_open(getpid(), PidfdFlags::empty()) {
        Ok(fd) => Some(ProcessFd::new(fd)),
        Err(e) => {
            tracing::debug!("no pidfd of the bus itself: {e}");
            None
        }
    }
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
        // Every kernel the daemon supports has pidfd_open (Linux 5.3+);
        // without it ProcessFD is never offered, which this test must show.
        let fd = own_process_fd().expect("pidfd_open failed: Linux older than 5.3?");
        let fd = fd.open().unwrap();
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
