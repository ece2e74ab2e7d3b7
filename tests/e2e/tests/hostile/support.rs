//! A bus for the hostile-peer tests: started like the harness starts it, but
//! with extra `<limit>` elements in its configuration (a short auth_timeout,
//! ...), plus the healthy peers that must keep working and the raw sockets
//! the hostile peers write their bad bytes to.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use quickbus_client::{bus_call, Received, Value, BUS_NAME};
use quickbus_client::{sasl, Connection, Error, Message, MessageBuilder, MessageType};
use quickbus_e2e::{Bus, Listen, POLL_INTERVAL, TIMEOUT};

/// The well-known names of the two healthy peers of every scene.
pub const VICTIM_NAME: &str = "org.example.Victim";
pub const WITNESS_NAME: &str = "org.example.Witness";
const WITNESS_PATH: &str = "/org/example/Witness";

/// A bus daemon under test with a configuration of our own: the harness's
/// [`Bus`], whose drop sends SIGTERM and (unless the test already failed)
/// checks that it exits with status 0: a daemon that a hostile peer
/// damaged would not.
pub struct TestDaemon {
    bus: Bus,
}

impl TestDaemon {
    /// `extra` goes inside `<busconfig>` (e.g. `<limit>` elements).
    pub fn start(extra: &str) -> TestDaemon {
        let mut daemon = TestDaemon {
            bus: Bus::start_with_config(Listen::UnixPath, extra),
        };
        daemon.assert_alive();
        daemon
    }

    pub fn pid(&self) -> u32 {
        self.bus.pid()
    }

    /// The address the daemon printed.
    #[allow(dead_code)] // used by reliability.rs, not hostile.rs
    pub fn address(&self) -> &str {
        self.bus.address()
    }

    pub fn socket_path(&self) -> PathBuf {
        self.bus.dir().join("bus")
    }

    /// What the daemon wrote to stderr so far.
    #[allow(dead_code)] // used by reliability.rs, not hostile.rs
    pub fn log(&self) -> String {
        self.bus.log()
    }

    pub fn assert_alive(&mut self) {
        self.bus.assert_alive();
    }

    /// A healthy client: authenticated, said Hello, every wait bounded.
    pub fn connect(&self) -> Connection {
        let mut conn = self.bus.connect();
        conn.set_timeout(Some(TIMEOUT)).expect("set timeout");
        conn
    }

    /// A bare socket to the bus, nothing sent yet; reads and writes bounded.
    pub fn raw(&self) -> UnixStream {
        let stream = UnixStream::connect(self.socket_path()).expect("connect to the bus socket");
        stream
            .set_read_timeout(Some(TIMEOUT))
            .expect("read timeout");
        stream
            .set_write_timeout(Some(TIMEOUT))
            .expect("write timeout");
        stream
    }

    /// A socket that passed SASL EXTERNAL (with fd passing) but did not say
    /// Hello.
    pub fn authenticated_raw(&self) -> UnixStream {
        self.authenticated_raw_with(true)
    }

    /// A socket that passed SASL EXTERNAL, with or without agreeing on fd
    /// passing, but did not say Hello.
    pub fn authenticated_raw_with(&self, unix_fds: bool) -> UnixStream {
        let mut stream = self.raw();
        let uid = sasl::current_uid();
        stream
            .write_all(&sasl::pipelined_external(uid, unix_fds))
            .expect("send SASL");
        let ok = read_line(&mut stream).expect("the bus answered AUTH");
        assert!(ok.starts_with("OK "), "AUTH answered {ok:?}");
        if unix_fds {
            let agree = read_line(&mut stream).expect("the bus answered NEGOTIATE_UNIX_FD");
            assert_eq!(agree, "AGREE_UNIX_FD");
        }
        stream
    }

    /// How many fds the daemon has open now.
    pub fn fd_count(&self) -> usize {
        let dir = format!("/proc/{}/fd", self.pid());
        std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("reading {dir}: {e}"))
            .count()
    }

    /// Waits (bounded) until the daemon holds at most `limit` fds: it may
    /// close what it received a little after the peer saw its last message.
    pub fn wait_fds_at_most(&self, limit: usize) {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let count = self.fd_count();
            if count <= limit {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the daemon still holds {count} fds (at most {limit} expected): it leaks fds"
            );
            thread::sleep(POLL_INTERVAL);
        }
    }
}

/// One `\r\n`-terminated SASL line (without it), or None at end of stream.
/// Panics if the bus says nothing for TIMEOUT.
pub fn read_line(stream: &mut UnixStream) -> Option<String> {
    let mut line = Vec::new();
    let mut byte = [0u8];
    loop {
        match stream.read(&mut byte) {
            Ok(0) => return None,
            Ok(_) => line.push(byte[0]),
            Err(e) if is_reset(&e) => return None,
            Err(e) => panic!("reading a SASL line: {e} (so far {line:?})"),
        }
        if line.ends_with(b"\r\n") {
            line.truncate(line.len() - 2);
            return Some(String::from_utf8_lossy(&line).into_owned());
        }
    }
}

fn is_reset(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ConnectionReset | ErrorKind::BrokenPipe | ErrorKind::ConnectionAborted
    )
}

/// Writes `bytes`, ignoring a peer that hung up meanwhile (the bus may cut
/// a hostile peer off before it has written everything).
pub fn write_ignoring_hangup(stream: &mut UnixStream, bytes: &[u8]) {
    match stream.write_all(bytes) {
        Ok(()) => {}
        Err(e) if is_reset(&e) => {}
        Err(e) => panic!("writing {} bytes: {e}", bytes.len()),
    }
}

/// Asserts that the bus closes `stream` (end of stream or reset) within
/// TIMEOUT; returns whatever it sent before closing.
pub fn expect_raw_closed(stream: &mut UnixStream) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return seen,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(e) if is_reset(&e) => return seen,
            Err(e) => panic!(
                "the bus did not close the hostile connection ({e}); it sent {:?}",
                String::from_utf8_lossy(&seen)
            ),
        }
    }
}

/// Asserts that the bus closes `conn` within TIMEOUT; returns the messages
/// it sent before (e.g. an error explaining why).
pub fn expect_closed(conn: &mut Connection) -> Vec<Message> {
    let mut seen = Vec::new();
    loop {
        match conn.receive() {
            Ok((message, _fds)) => seen.push(message),
            Err(Error::Closed) => return seen,
            Err(Error::Io(e)) if is_reset(&e) => return seen,
            Err(e) => panic!(
                "the bus did not close the hostile connection: {e}; messages before: {}",
                describe_all(&seen)
            ),
        }
    }
}

/// What the bus did with a message it should not accept.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// It closed the connection.
    Closed,
    /// It answered the call with this error and kept the connection.
    ErrorReply(String),
}

/// Waits for the bus to refuse the call `serial` just sent: an error reply
/// to it or the end of the connection. A GetId sent right after it probes
/// whether the bus let it through: the bus handles a connection's messages
/// in order, so a GetId reply before any refusal means the call was
/// accepted (and forwarded), which fails the test at once.
pub fn expect_refused(conn: &mut Connection, serial: u32) -> Refusal {
    let probe = conn.send(bus_call("GetId"), &[]).ok();
    let mut seen = Vec::new();
    loop {
        match conn.receive() {
            Ok((message, _fds)) if message.reply_serial() == Some(serial) => {
                match message.msg_type() {
                    MessageType::Error => {
                        return Refusal::ErrorReply(message.error_name().unwrap_or("").into())
                    }
                    _ => panic!("the bus accepted the call: {}", describe(&message)),
                }
            }
            Ok((message, _fds)) if probe.is_some() && message.reply_serial() == probe => {
                panic!("the bus accepted the call: it answered the GetId sent after it")
            }
            Ok((message, _fds)) => seen.push(message),
            Err(Error::Closed) => return Refusal::Closed,
            Err(Error::Io(e)) if is_reset(&e) => return Refusal::Closed,
            Err(e) => panic!(
                "the bus neither refused the call nor closed: {e}; messages: {}",
                describe_all(&seen)
            ),
        }
    }
}

pub fn describe(message: &Message) -> String {
    format!(
        "{:?} member={:?} error={:?} sender={:?} reply_serial={:?}",
        message.msg_type(),
        message.member(),
        message.error_name(),
        message.sender(),
        message.reply_serial()
    )
}

fn describe_all(messages: &[Message]) -> String {
    let all: Vec<String> = messages.iter().map(describe).collect();
    format!("[{}]", all.join("; "))
}

/// A method call to the victim that a hostile peer sends (or mangles).
pub fn call_to_victim(member: &str) -> MessageBuilder {
    MessageBuilder::method_call("/org/example/Victim", member)
        .interface("org.example.Victim")
        .destination(VICTIM_NAME)
        .body(vec![Value::String("from the hostile peer".into())])
}

/// A bus with two healthy peers owning names, so a test can check that a
/// hostile peer harmed neither them nor the bus.
pub struct Scene {
    pub victim: Connection,
    pub witness: Connection,
    pub bus: TestDaemon,
}

impl Scene {
    pub fn start() -> Scene {
        Scene::start_with("")
    }

    pub fn start_with(extra: &str) -> Scene {
        let bus = TestDaemon::start(extra);
        let mut victim = bus.connect();
        let mut witness = bus.connect();
        assert_eq!(victim.request_name(VICTIM_NAME, 0).expect("RequestName"), 1);
        assert_eq!(
            witness.request_name(WITNESS_NAME, 0).expect("RequestName"),
            1
        );
        Scene {
            victim,
            witness,
            bus,
        }
    }

    /// The daemon lives, the victim still owns its name, can call the bus
    /// and another peer, and newcomers can still connect.
    pub fn assert_unharmed(&mut self) {
        self.bus.assert_alive();
        assert!(!self.victim.get_id().expect("GetId").is_empty());
        let owner = self
            .victim
            .get_name_owner(VICTIM_NAME)
            .expect("GetNameOwner");
        assert_eq!(owner, self.victim.unique_name());
        assert_eq!(
            ping(&mut self.victim, &mut self.witness, "ping"),
            "pong: ping"
        );
        let mut newcomer = self.bus.connect();
        assert_eq!(ping(&mut newcomer, &mut self.witness, "hi"), "pong: hi");
        self.bus.assert_alive();
    }

    /// [`Scene::assert_unharmed`], and nothing from the hostile peer reached
    /// the victim.
    pub fn assert_unharmed_and_untouched(&mut self) {
        self.assert_unharmed();
        let unsolicited = self.victim_unsolicited();
        assert!(unsolicited.is_empty(), "the victim got {unsolicited:?}");
    }

    /// The messages from peers the victim received that nobody asked it for. Call after
    /// `assert_unharmed`: the bus writes in order, so anything forwarded to
    /// the victim before its last reply already sits in its queue.
    pub fn victim_unsolicited(&mut self) -> Vec<String> {
        self.victim
            .set_timeout(Some(Duration::from_millis(1)))
            .expect("set timeout");
        let mut seen = Vec::new();
        loop {
            match self.victim.receive() {
                // NameAcquired and the like: the bus's own signals.
                Ok((message, _)) if message.sender() == Some(BUS_NAME) => {}
                Ok((message, _)) => seen.push(describe(&message)),
                Err(Error::Timeout) => break,
                Err(e) => panic!("the victim's connection broke: {e}"),
            }
        }
        self.victim.set_timeout(Some(TIMEOUT)).expect("set timeout");
        seen
    }
}

/// `caller` calls the witness's Ping(s); the witness answers "pong: <s>".
pub fn ping(caller: &mut Connection, witness: &mut Connection, text: &str) -> String {
    let call = MessageBuilder::method_call(WITNESS_PATH, "Ping")
        .interface(WITNESS_NAME)
        .destination(WITNESS_NAME)
        .body(vec![Value::String(text.into())]);
    let serial = caller.send(call, &[]).expect("send Ping");
    answer_ping(witness);
    let (reply, _) = caller.wait_reply(serial).expect("Ping reply");
    match reply.body_values().expect("reply body").as_slice() {
        [Value::String(s)] => s.clone(),
        other => panic!("Ping reply body {other:?}"),
    }
}

/// The witness answers the next Ping it receives.
pub fn answer_ping(witness: &mut Connection) {
    loop {
        let (call, _): Received = witness.receive().expect("the witness receives Ping");
        if call.msg_type() != MessageType::MethodCall || call.member() != Some("Ping") {
            continue;
        }
        let text = match call.body_values().expect("Ping body").as_slice() {
            [Value::String(s)] => s.clone(),
            other => panic!("Ping body {other:?}"),
        };
        let mut reply = MessageBuilder::method_return(call.serial())
            .body(vec![Value::String(format!("pong: {text}"))]);
        if let Some(sender) = call.sender() {
            reply = reply.destination(sender);
        }
        witness.send(reply, &[]).expect("send the Ping reply");
        return;
    }
}

/// An fd to pass around.
pub fn dev_null() -> File {
    File::open("/dev/null").expect("open /dev/null")
}

/// Sends `bytes` with `fds` attached, in as many `sendmsg` calls as the
/// kernel needs (it takes at most 253 fds per call): each call carries a
/// slice of the bytes and the next fds. Returns false if the bus hung up
/// before everything was sent.
pub fn send_with_many_fds(socket: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> bool {
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    const MAX_FDS_PER_SENDMSG: usize = 253;
    let chunks: Vec<&[BorrowedFd<'_>]> = fds.chunks(MAX_FDS_PER_SENDMSG).collect();
    assert!(
        bytes.len() >= chunks.len(),
        "need one byte per sendmsg at least"
    );
    let per_chunk = bytes.len() / chunks.len().max(1);
    let mut offset = 0;
    for (index, chunk) in chunks.iter().enumerate() {
        let end = if index + 1 == chunks.len() {
            bytes.len()
        } else {
            offset + per_chunk
        };
        let mut space = vec![0u8; rustix::cmsg_space!(ScmRights(chunk.len()))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        assert!(control.push(SendAncillaryMessage::ScmRights(chunk)));
        let mut sent = 0;
        while offset + sent < end {
            let slice = [std::io::IoSlice::new(&bytes[offset + sent..end])];
            let result = if sent == 0 {
                sendmsg(socket, &slice, &mut control, SendFlags::NOSIGNAL)
            } else {
                sendmsg(
                    socket,
                    &slice,
                    &mut SendAncillaryBuffer::default(),
                    SendFlags::NOSIGNAL,
                )
            };
            match result {
                Ok(n) => sent += n,
                Err(rustix::io::Errno::PIPE | rustix::io::Errno::CONNRESET) => return false,
                Err(e) => panic!("sendmsg with {} fds: {e}", chunk.len()),
            }
        }
        offset = end;
    }
    true
}

/// The socket of a connection, to send bytes the client would not.
pub fn socket_of(conn: &Connection) -> BorrowedFd<'_> {
    conn.as_fd()
}
