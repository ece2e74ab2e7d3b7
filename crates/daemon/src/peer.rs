//! What the daemon learns about a new peer at accept time, for the bus
//! core (which reads no files): the kernel's credentials (groups from
//! `SO_PEERGROUPS`), the user database's groups of its uid (NSS), and its
//! command line for log lines.

use std::io;
use std::os::fd::AsFd;

use quickbus_bus::Credentials;

use crate::userdb::CachedUserDb;

/// dbus-daemon quotes at most this many bytes of a peer's command line.
const COMM_MAX: usize = 50;

/// A peer the kernel cannot tell us about (tcp): no uid (`u32::MAX` names
/// nobody), no pid, no groups. Only ANONYMOUS can authenticate it.
pub fn unidentified() -> Credentials {
    Credentials {
        uid: u32::MAX,
        gid: u32::MAX,
        user_groups: quickbus_bus::UserGroups::Known(Vec::new()),
        ..Credentials::default()
    }
}

/// Everything known about the peer at the other end of `socket`.
pub fn identify(socket: impl AsFd, users: &mut CachedUserDb) -> io::Result<Credentials> {
    let mut creds = crate::sys::peer_credentials(socket)?;
    // As the user database says now: accounts added meanwhile count.
    creds.user_groups = users.groups_of(creds.uid);
    creds.comm = creds.pid.and_then(command_line);
    Ok(creds)
}

/// `/proc/<pid>/cmdline` as dbus-daemon shows it: the first bytes, the
/// NULs between arguments turned into spaces.
fn command_line(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(quote_command_line(&raw))
}

fn quote_command_line(raw: &[u8]) -> String {
    let cut = &raw[..raw.len().min(COMM_MAX)];
    let text: Vec<u8> = cut.iter().map(|&b| if b == 0 { b' ' } else { b }).collect();
    String::from_utf8_lossy(&text).trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_are_spaced_and_cut_at_fifty_bytes() {
        assert_eq!(quote_command_line(b"sleep\x00100\x00"), "sleep 100");
        let long = b"dbus-send\x00--bus=unix:path=/tmp/p2r/bus,guid=246c9d0123456789\x00";
        assert_eq!(
            quote_command_line(long),
            "dbus-send --bus=unix:path=/tmp/p2r/bus,guid=246c9d"
        );
        assert_eq!(quote_command_line(b""), "");
    }

    #[test]
    fn our_own_socket_pair_is_identified() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let creds = identify(&a, &mut CachedUserDb::system()).unwrap();
        assert_eq!(creds.pid, Some(std::process::id()));
        assert!(creds.comm.is_some_and(|c| !c.is_empty()));
    }
}
