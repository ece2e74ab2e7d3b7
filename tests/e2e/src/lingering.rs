//! A loopback TCP socket whose last close lingers (SO_LINGER 120 s, a
//! send queue its peer never reads), to pass to the bus, and a raw
//! client to pass it with: the tests of fds whose close blocks
//! (`tests/lingering_fds.rs`, `tests/stalled_spawn.rs`).

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use quickbus_client::{bus_call, sasl, MessageBuilder, Value};

use crate::{read_raw_message, Bus, POLL_INTERVAL, TIMEOUT};

/// How long the passed socket's close lingers: far past any wait here.
pub const LINGER: Duration = Duration::from_secs(120);
/// The state of a TCP socket whose close has sent (or queued) its FIN.
pub const FIN_WAIT1: u8 = 0x04;

/// A loopback TCP socket whose last close lingers, as the test sees it
/// once it passed it: its peer (kept, never read), and the ports that
/// name it.
pub struct Lingering {
    peer: Option<TcpStream>,
    local_port: u16,
    remote_port: u16,
}

/// The socket to pass, and how to watch it.
pub fn lingering_socket() -> (OwnedFd, Lingering) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("listen on loopback");
    rustix::net::sockopt::set_socket_recv_buffer_size(&listener, 4096).expect("SO_RCVBUF");
    let mut ours = TcpStream::connect(listener.local_addr().unwrap()).expect("connect");
    let (peer, _) = listener.accept().expect("accept");
    rustix::net::sockopt::set_socket_send_buffer_size(&ours, 4096).expect("SO_SNDBUF");
    rustix::net::sockopt::set_socket_linger(&ours, Some(LINGER)).expect("SO_LINGER");
    // Its send queue full: the peer never reads, so the FIN never gets
    // through and the last close waits the whole linger.
    ours.set_nonblocking(true).unwrap();
    let chunk = [0u8; 65536];
    loop {
        match ours.write(&chunk) {
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("filling the socket: {e}"),
        }
    }
    let watched = Lingering {
        local_port: ours.local_addr().unwrap().port(),
        remote_port: listener.local_addr().unwrap().port(),
        peer: Some(peer),
    };
    (OwnedFd::from(ours), watched)
}

impl Lingering {
    /// Its state and inode in /proc/net/tcp (inode 0: orphaned, its last
    /// close returned).
    pub fn row(&self) -> Option<(u8, u64)> {
        let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
        let port = |address: &str| {
            let hex = address.rsplit(':').next()?;
            u16::from_str_radix(hex, 16).ok()
        };
        table.lines().skip(1).find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if port(fields.get(1)?)? != self.local_port || port(fields.get(2)?)? != self.remote_port
            {
                return None;
            }
            let state = u8::from_str_radix(fields.get(3)?, 16).ok()?;
            Some((state, fields.get(9)?.parse().ok()?))
        })
    }

    /// Wait until someone began its last close (the bus: the test passed
    /// its only other copy and closed its own).
    pub fn wait_until_closing(&self) {
        let began = Instant::now();
        while self.row().map(|(state, _)| state) != Some(FIN_WAIT1) {
            assert!(
                began.elapsed() < TIMEOUT,
                "the bus never closed the socket: {:?}",
                self.row()
            );
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Close its peer, unread: the reset ends the lingering close.
    pub fn close_peer(&mut self) {
        self.peer = None;
    }

    /// Wait until its last close returned (the socket orphaned).
    pub fn wait_until_closed(&self) {
        let began = Instant::now();
        while self.row().is_some_and(|(_, inode)| inode != 0) {
            assert!(began.elapsed() < TIMEOUT, "the close never ended");
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Whether its last close is still waiting (not yet orphaned).
    pub fn still_closing(&self) -> bool {
        matches!(self.row(), Some((FIN_WAIT1, inode)) if inode != 0)
    }
}

/// A raw connection that authenticated, with fd passing, and said Hello;
/// and its unique name.
pub fn raw_client(bus: &Bus) -> (UnixStream, String) {
    let mut raw = UnixStream::connect(bus.dir().join("bus")).expect("connect");
    raw.set_read_timeout(Some(TIMEOUT)).unwrap();
    raw.write_all(&sasl::pipelined_external(sasl::current_uid(), true))
        .expect("SASL");
    let mut read_line = || {
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            raw.read_exact(&mut byte).expect("the bus answered SASL");
            line.push(byte[0]);
        }
        String::from_utf8_lossy(&line).into_owned()
    };
    let ok = read_line();
    assert!(ok.starts_with("OK "), "{ok:?}");
    assert_eq!(read_line(), "AGREE_UNIX_FD\r\n");
    raw.write_all(&bus_call("Hello").build(1).expect("build"))
        .expect("Hello");
    let welcome = read_raw_message(&mut raw);
    let Some(Value::String(name)) = welcome
        .body_values()
        .ok()
        .and_then(|b| b.into_iter().next())
    else {
        panic!("no unique name in the reply to Hello");
    };
    (raw, name)
}

/// `bytes` with `fd` attached to the first, then the test's copy of `fd`
/// closed.
pub fn send_with_fd(raw: &UnixStream, bytes: &[u8], fd: OwnedFd) {
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let fds = [fd.as_fd()];
    let mut space = vec![0u8; rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
    let sent = sendmsg(
        raw,
        &[std::io::IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    )
    .expect("sendmsg");
    assert_eq!(sent, bytes.len());
}

/// A Ping with `fd` under it (the test's copy closed), answered: the bus
/// read the Ping, and the fd, which waits for a message that declares it
/// (`pending_fd_timeout`) until the connection goes.
pub fn ping_with_fd(raw: &mut UnixStream, fd: OwnedFd) {
    let ping = MessageBuilder::method_call("/org/freedesktop/DBus", "Ping")
        .interface("org.freedesktop.DBus.Peer")
        .destination("org.freedesktop.DBus")
        .build(2)
        .expect("build");
    send_with_fd(raw, &ping, fd);
    while read_raw_message(raw).reply_serial() != Some(2) {}
}
