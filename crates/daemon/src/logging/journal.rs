//! The journal's native protocol (systemd's `JOURNAL_NATIVE_PROTOCOL`):
//! one datagram per entry to `/run/systemd/journal/socket`, each field
//! `NAME=value\n`, or, for a value with a newline, `NAME\n`, its length
//! as 64-bit little-endian, the value and `\n`. An entry too large for one
//! datagram goes in a sealed memfd whose descriptor is the datagram.
//!
//! The fields are those tracing-journald sent before this module replaced
//! it: the event's fields under their names upper-cased (no prefix:
//! `MESSAGE`, `DBUS_UNIQUE_NAME`, `DBUS_PEER_UID`, ...), `PRIORITY`
//! (error 3, warning 4, info 6 and 5 for security messages, debug 7),
//! `SYSLOG_IDENTIFIER`, `SYSLOG_FACILITY` (daemon 3, auth 4 for security
//! messages, as dbus-daemon's syslog), `TARGET`, `CODE_FILE`, `CODE_LINE`.
//! (The daemon opens no tracing spans, so no span fields exist to send.)
//!
//! Sent by the log's thread only, which may wait while journald is slow;
//! the bus does not.

use std::io::{self, IoSlice, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix};

use super::record::Record;
use super::IDENTIFIER;

const SOCKET: &str = "/run/systemd/journal/socket";

pub struct Journal {
    socket: UnixDatagram,
    path: PathBuf,
}

impl Journal {
    /// The journal to send to, if journald listens.
    pub fn open() -> Option<Journal> {
        Journal::open_at(Path::new(SOCKET))
    }

    /// A journal listening at `path` (the tests': `open` in production):
    /// an empty datagram, which journald ignores, tells whether one does.
    /// The probe does not wait (this runs on the thread that configures
    /// the log): a journald whose queue is full is there all the same.
    fn open_at(path: &Path) -> Option<Journal> {
        let socket = UnixDatagram::unbound().ok()?;
        socket.set_nonblocking(true).ok()?;
        match socket.send_to(&[], path) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return None,
        }
        socket.set_nonblocking(false).ok()?;
        Some(Journal {
            socket,
            path: path.to_owned(),
        })
    }

    /// Send one entry; lost if journald has gone.
    pub fn send(&self, record: &Record) {
        let _ = self.send_entry(&entry(record));
    }

    fn send_entry(&self, entry: &[u8]) -> io::Result<()> {
        match self.socket.send_to(entry, &self.path) {
            Err(e) if too_large_for_a_datagram(&e) => self.send_in_memfd(entry),
            sent => sent.map(drop),
        }
    }

    /// The protocol's way for an entry larger than a datagram: its bytes
    /// in a memfd, sealed so journald can map it safely, whose descriptor
    /// is sent alone.
    fn send_in_memfd(&self, entry: &[u8]) -> io::Result<()> {
        let memfd = rustix::fs::memfd_create(
            "quickbus-journal-entry",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )?;
        let mut file = std::fs::File::from(memfd);
        file.write_all(entry)?;
        rustix::fs::fcntl_add_seals(
            &file,
            SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE | SealFlags::SEAL,
        )?;
        let fds = [file.as_fd()];
        let mut space = [0u8; rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        control.push(SendAncillaryMessage::ScmRights(&fds));
        let address = SocketAddrUnix::new(self.path.as_path())?;
        let no_bytes: [IoSlice<'_>; 0] = [];
        rustix::net::sendmsg_unix(
            &self.socket,
            &address,
            &no_bytes,
            &mut control,
            SendFlags::NOSIGNAL,
        )?;
        Ok(())
    }
}

/// Whether a datagram's send failed for its size: EMSGSIZE beyond the
/// socket's largest datagram, ENOBUFS where the kernel cannot find the
/// memory for one that large (systemd's own sender takes the memfd for
/// both).
fn too_large_for_a_datagram(error: &io::Error) -> bool {
    use rustix::io::Errno;
    [Errno::MSGSIZE, Errno::NOBUFS]
        .iter()
        .any(|errno| error.raw_os_error() == Some(errno.raw_os_error()))
}

/// `record` as one entry of the native protocol.
pub fn entry(record: &Record) -> Vec<u8> {
    let mut entry = Vec::with_capacity(256 + record.message.len());
    // The journal's priorities are syslog's severities.
    let priority = super::syslog_severity(record.level, record.security) as u32;
    put(&mut entry, "PRIORITY", priority.to_string().as_bytes());
    put(&mut entry, "TARGET", record.target.as_bytes());
    if let Some(file) = record.file {
        put(&mut entry, "CODE_FILE", file.as_bytes());
    }
    if let Some(line) = record.line {
        put(&mut entry, "CODE_LINE", line.to_string().as_bytes());
    }
    put(&mut entry, "SYSLOG_IDENTIFIER", IDENTIFIER.as_bytes());
    let facility = if record.security { "4" } else { "3" };
    put(&mut entry, "SYSLOG_FACILITY", facility.as_bytes());
    put(&mut entry, "MESSAGE", record.message.as_bytes());
    for (name, value) in &record.fields {
        put(&mut entry, &field_name(name), value.as_bytes());
    }
    entry
}

/// One field: `NAME=value\n`, or the binary form where the value has a
/// newline (which would end the field in the text form).
fn put(entry: &mut Vec<u8>, name: &str, value: &[u8]) {
    entry.extend_from_slice(name.as_bytes());
    if value.contains(&b'\n') {
        entry.push(b'\n');
        entry.extend_from_slice(&(value.len() as u64).to_le_bytes());
    } else {
        entry.push(b'=');
    }
    entry.extend_from_slice(value);
    entry.push(b'\n');
}

/// A tracing field's name as a journal field's (as tracing-journald made
/// it): upper case, `.` as `_`, any other character the journal refuses
/// in a name left out, no leading `_` (those are journald's own fields).
fn field_name(name: &str) -> String {
    name.chars()
        .map(|c| if c == '.' { '_' } else { c })
        .filter(|c| *c == '_' || c.is_ascii_alphanumeric())
        .skip_while(|c| *c == '_')
        .map(|c| c.to_ascii_uppercase())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    fn record(message: &str) -> Record {
        Record {
            level: Level::INFO,
            security: false,
            target: "quickbus_bus::bus",
            file: Some("crates/bus/src/bus.rs"),
            line: Some(42),
            message: message.to_owned(),
            fields: vec![
                ("dbus_unique_name", ":1.5".to_owned()),
                ("dbus_peer_uid", "0".to_owned()),
            ],
        }
    }

    #[test]
    fn an_entry_is_text_fields_in_tracing_journalds_names() {
        let got = entry(&record("Activating service"));
        assert_eq!(
            String::from_utf8(got).unwrap(),
            "PRIORITY=6\n\
             TARGET=quickbus_bus::bus\n\
             CODE_FILE=crates/bus/src/bus.rs\n\
             CODE_LINE=42\n\
             SYSLOG_IDENTIFIER=quickbus-daemon\n\
             SYSLOG_FACILITY=3\n\
             MESSAGE=Activating service\n\
             DBUS_UNIQUE_NAME=:1.5\n\
             DBUS_PEER_UID=0\n"
        );
    }

    #[test]
    fn security_lines_are_notices_of_the_auth_facility() {
        let mut denied = record("Rejected");
        denied.security = true;
        let got = String::from_utf8(entry(&denied)).unwrap();
        assert!(got.starts_with("PRIORITY=5\n"), "{got}");
        assert!(got.contains("\nSYSLOG_FACILITY=4\n"), "{got}");
    }

    #[test]
    fn priorities_follow_the_levels() {
        let priority = |level| {
            let mut r = record("x");
            r.level = level;
            String::from_utf8(entry(&r)).unwrap()[..11].to_owned()
        };
        assert_eq!(priority(Level::ERROR), "PRIORITY=3\n");
        assert_eq!(priority(Level::WARN), "PRIORITY=4\n");
        assert_eq!(priority(Level::DEBUG), "PRIORITY=7\n");
        assert_eq!(priority(Level::TRACE), "PRIORITY=7\n");
    }

    #[test]
    fn a_value_with_a_newline_takes_the_binary_form() {
        let got = entry(&record("two\nlines"));
        let mut expected = b"SYSLOG_FACILITY=3\nMESSAGE\n".to_vec();
        expected.extend_from_slice(&9u64.to_le_bytes());
        expected.extend_from_slice(b"two\nlines\nDBUS_UNIQUE_NAME=:1.5\n");
        assert!(
            got.windows(expected.len()).any(|w| w == expected),
            "{:?}",
            String::from_utf8_lossy(&got)
        );
    }

    /// Entries sent to a socket the test binds: the datagrams, and the
    /// contents of the memfds that came instead of some.
    #[test]
    fn an_entry_larger_than_a_datagram_comes_in_a_sealed_memfd() {
        use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
        let dir = std::env::temp_dir().join(format!("qb-journal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("socket");
        let _ = std::fs::remove_file(&path);
        let server = UnixDatagram::bind(&path).unwrap();
        server
            .set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .unwrap();
        let journal = Journal::open_at(&path).expect("the test's journal listens");
        let mut buf = vec![0u8; 1 << 16];
        assert_eq!(server.recv(&mut buf).unwrap(), 0, "the probe is empty");

        journal.send(&record("short"));
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(buf[..n], entry(&record("short")));

        // Far beyond the largest datagram a socket sends (its send buffer).
        let long = record(&"x".repeat(8 << 20));
        journal.send(&long);
        let mut space = [0u8; rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(
            &server,
            &mut [io::IoSliceMut::new(&mut buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )
        .unwrap();
        assert_eq!(got.bytes, 0, "the descriptor comes alone");
        let memfd = control
            .drain()
            .find_map(|message| match message {
                RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
                _ => None,
            })
            .expect("a descriptor");
        let seals = rustix::fs::fcntl_get_seals(&memfd).unwrap();
        // journald takes a memfd only if it is sealed for good, SEAL
        // included (no seal can be taken off, nor another added).
        assert!(
            seals
                .contains(SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL),
            "{seals:?}"
        );
        // The sender's writes left the shared offset at the end.
        let mut file = std::fs::File::from(memfd);
        std::io::Seek::seek(&mut file, io::SeekFrom::Start(0)).unwrap();
        let mut contents = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut contents).unwrap();
        assert!(contents == entry(&long), "the memfd holds the entry");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_datagram_too_large_or_without_buffers_goes_in_a_memfd() {
        use rustix::io::Errno;
        let error = |errno: Errno| io::Error::from_raw_os_error(errno.raw_os_error());
        assert!(too_large_for_a_datagram(&error(Errno::MSGSIZE)));
        assert!(too_large_for_a_datagram(&error(Errno::NOBUFS)));
        assert!(!too_large_for_a_datagram(&error(Errno::CONNREFUSED)));
        assert!(!too_large_for_a_datagram(&error(Errno::AGAIN)));
    }

    #[test]
    fn field_names_are_upper_case_without_what_the_journal_refuses() {
        assert_eq!(field_name("dbus_peer_comm"), "DBUS_PEER_COMM");
        assert_eq!(field_name("log.target"), "LOG_TARGET");
        assert_eq!(field_name("_private-x"), "PRIVATEX");
    }
}
