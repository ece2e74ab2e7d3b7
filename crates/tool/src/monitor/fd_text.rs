//! A passed file descriptor as dbus-monitor 1.14 describes it: never its
//! number (it differs in every process), but its inode and file type and,
//! for a socket, its address family, its own address and its peer's. The
//! lines and their quirks are dbus-monitor's, so the two outputs compare
//! equal (tests/e2e/tests/observe.rs):
//!
//! - the detail lines sit two levels below the value's own depth;
//! - an inode is printed as a C `int` (wrapping above 2^31);
//! - a file of no known type leaves `type: ` without its line end;
//! - a unix socket without a path (unnamed or abstract) is `name @...`,
//!   and its `peer @...` line repeats its own name, not the peer's;
//! - a unix socket with a path shows the peer's path, empty when the peer
//!   has none.

use std::fmt::Write;
use std::os::fd::OwnedFd;

use rustix::fs::FileType;
use rustix::net::{AddressFamily, SocketAddrAny};

use super::text::indent;

/// Appends the description of `fd` (None: its index named no fd that
/// arrived) for a value at `depth`, its own indentation already written.
pub(super) fn describe(fd: Option<&OwnedFd>, depth: usize, out: &mut String) {
    out.push_str("file descriptor\n");
    let Some((fd, stat)) = fd.and_then(|fd| Some((fd, rustix::fs::fstat(fd).ok()?))) else {
        return;
    };
    let depth = depth + 2;
    indent(depth, out);
    let _ = writeln!(out, "inode: {}", stat.st_ino as i32);
    indent(depth, out);
    out.push_str("type: ");
    let file_type = FileType::from_raw_mode(stat.st_mode);
    if let Some(name) = type_name(file_type) {
        let _ = writeln!(out, "{name}");
    }
    if file_type == FileType::Socket {
        describe_socket(fd, depth, out);
    }
}

fn type_name(file_type: FileType) -> Option<&'static str> {
    Some(match file_type {
        FileType::RegularFile => "file",
        FileType::Directory => "directory",
        FileType::CharacterDevice => "char",
        FileType::BlockDevice => "block",
        FileType::Fifo => "fifo",
        FileType::Symlink => "link",
        FileType::Socket => "socket",
        FileType::Unknown => return None,
    })
}

/// The family and addresses. The family is asked first (`SO_DOMAIN`):
/// only the families printed with addresses are read as addresses.
fn describe_socket(fd: &OwnedFd, depth: usize, out: &mut String) {
    let Ok(family) = rustix::net::sockopt::get_socket_domain(fd) else {
        return;
    };
    let line = |out: &mut String, text: std::fmt::Arguments<'_>| {
        indent(depth, out);
        let _ = writeln!(out, "{text}");
    };
    if ![
        AddressFamily::UNIX,
        AddressFamily::INET,
        AddressFamily::INET6,
    ]
    .contains(&family)
    {
        let name = if family == AddressFamily::BLUETOOTH {
            "bluetooth".to_owned()
        } else {
            format!("unknown ({})", family.as_raw())
        };
        line(out, format_args!("address family: {name}"));
        return;
    }
    let Ok(own) = rustix::net::getsockname(fd) else {
        return;
    };
    // dbus-monitor prints a peer line whenever getpeername succeeds.
    let peer = rustix::net::getpeername(fd);
    match own {
        SocketAddrAny::Unix(own) => {
            line(out, format_args!("address family: unix"));
            match own.path().map(|p| p.to_bytes()).filter(|p| !p.is_empty()) {
                Some(path) => {
                    line(out, format_args!("name {}", String::from_utf8_lossy(path)));
                    if let Ok(peer) = peer {
                        let path = match peer {
                            Some(SocketAddrAny::Unix(p)) => p
                                .path()
                                .map(|p| String::from_utf8_lossy(p.to_bytes()).into_owned()),
                            _ => None,
                        };
                        line(out, format_args!("peer {}", path.unwrap_or_default()));
                    }
                }
                None => {
                    // Printed as a C string: up to the first NUL.
                    let name = own.abstract_name().unwrap_or_default();
                    let name = name.split(|&b| b == 0).next().unwrap_or_default();
                    let name = String::from_utf8_lossy(name);
                    line(out, format_args!("name @{name}"));
                    if peer.is_ok() {
                        line(out, format_args!("peer @{name}"));
                    }
                }
            }
        }
        SocketAddrAny::V4(own) => {
            line(out, format_args!("address family: inet"));
            line(out, format_args!("name {} port {}", own.ip(), own.port()));
            if let Ok(Some(SocketAddrAny::V4(peer))) = peer {
                line(out, format_args!("peer {} port {}", peer.ip(), peer.port()));
            }
        }
        SocketAddrAny::V6(own) => {
            line(out, format_args!("address family: inet6"));
            line(out, format_args!("name {} port {}", own.ip(), own.port()));
            if let Ok(Some(SocketAddrAny::V6(peer))) = peer {
                line(out, format_args!("peer {} port {}", peer.ip(), peer.port()));
            }
        }
        _ => line(
            out,
            format_args!("address family: unknown ({})", family.as_raw()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::{UnixListener, UnixStream};

    fn described(fd: &OwnedFd) -> String {
        let mut out = String::new();
        describe(Some(fd), 1, &mut out);
        out
    }

    fn inode(fd: &OwnedFd) -> i32 {
        rustix::fs::fstat(fd).unwrap().st_ino as i32
    }

    #[test]
    fn a_pipe_is_a_fifo_two_levels_down() {
        let (read, _write) = rustix::pipe::pipe().unwrap();
        assert_eq!(
            described(&read),
            format!(
                "file descriptor\n         inode: {}\n         type: fifo\n",
                inode(&read)
            )
        );
    }

    #[test]
    fn a_socket_pair_repeats_its_own_empty_name_as_the_peer() {
        let (a, _b) = UnixStream::pair().unwrap();
        let a = OwnedFd::from(a);
        assert_eq!(
            described(&a),
            format!(
                "file descriptor\n         inode: {}\n         type: socket\n         \
                 address family: unix\n         name @\n         peer @\n",
                inode(&a)
            )
        );
    }

    #[test]
    fn a_path_socket_shows_the_peer_s_empty_path() {
        let dir = std::env::temp_dir().join(format!("qb-fd-text-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let listener = UnixListener::bind(&dir).unwrap();
        let _client = UnixStream::connect(&dir).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        let accepted = OwnedFd::from(accepted);
        let listener = OwnedFd::from(listener);
        let _ = std::fs::remove_file(&dir);
        let path = dir.display();
        assert!(described(&accepted).ends_with(&format!("name {path}\n         peer \n")));
        // Listening: no peer at all.
        assert!(described(&listener).ends_with(&format!("unix\n         name {path}\n")));
    }

    #[test]
    fn a_missing_fd_is_only_named() {
        let mut out = String::new();
        describe(None, 1, &mut out);
        assert_eq!(out, "file descriptor\n");
    }
}
