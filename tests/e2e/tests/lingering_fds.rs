//! An fd a client passes whose close blocks must not stall the bus
//! (docs/reliability.md, "Fds clients pass"). The client passes a
//! loopback TCP socket with SO_LINGER on (120 s) and a send queue its
//! peer never reads, and closes its own copy: the bus's copy is the
//! last, and closing it waits until the linger ends. The bus drops it (a
//! message to a name nobody owns; fds sent ahead of any message, dropped
//! with their connection; the fds of large messages, dropped after the
//! write that ends the last of them, with and without a pool); then
//! another client's GetId must be answered while that close still waits.
//!
//! No timing is measured: the test waits until the close has begun (the
//! socket is in FIN_WAIT1 in /proc/net/tcp), asks, and checks that when
//! the answer came the close had not ended (the socket still has its
//! inode: the kernel orphans it only once the lingering close returns).
//! A bus that closes on its loop answers only after the linger, and the
//! client's time-out (well under it) fails the test instead. Each test
//! closes its own copy while the bus is sure to hold one it has not yet
//! dropped (the last close must be the bus's, whatever the scheduling):
//! under an incomplete message, beside a message whose answer came, or
//! on messages nobody has read yet.
//!
//! Fds from a connection that did not negotiate fd passing are closed as
//! the bus reads them, which no order of the test's can follow; that
//! path has its unit test (`transport::tests`), as has a connection cut
//! off with fds in its unread input (`socket::tests`).

use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::{Duration, Instant};

use quickbus_client::{Connection, MessageBuilder, Value};
use quickbus_e2e::lingering::{
    lingering_socket, ping_with_fd, raw_client, send_with_fd, Lingering, FIN_WAIT1,
};
use quickbus_e2e::{
    daemon_path, forced_threads, skip, write_config_with, Bus, Listen, TempDir, POLL_INTERVAL,
    TIMEOUT,
};

/// How long the other client waits for its answer: well under
/// [`LINGER`](quickbus_e2e::lingering::LINGER), so a bus stuck in the close fails the test, not hangs it.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);
/// Another client, connected before the socket is passed.
fn other_client(bus: &Bus) -> Connection {
    let mut other = bus.connect();
    other.set_timeout(Some(ANSWER_WITHIN)).expect("set timeout");
    other
}

/// After the bus began to close `socket`, `other` is answered while the
/// close still lingers.
fn answered_while_closing(socket: &Lingering, other: &mut Connection) {
    socket.wait_until_closing();
    let id = other.get_id();
    assert!(
        id.is_ok(),
        "no answer while the bus closed a lingering socket: {id:?}"
    );
    assert!(
        socket.still_closing(),
        "the close ended before the answer came: {:?}",
        socket.row()
    );
}

#[test]
fn a_lingering_socket_in_a_message_to_nobody_does_not_stall_the_bus() {
    if skip::quickbus_only("dbus-daemon closes passed fds on its loop") {
        return;
    }
    let bus = Bus::start();
    let mut other = other_client(&bus);
    let socket = passed_to_nobody(&bus);
    answered_while_closing(&socket, &mut other);
}

/// A lingering socket passed in a call to a name nobody owns (the bus
/// drops the call and its fd), the test's own copy closed while the bus
/// holds the call's first byte and the fd, waiting for the rest.
fn passed_to_nobody(bus: &Bus) -> Lingering {
    let (mut sender, _) = raw_client(bus);
    let (ours, socket) = lingering_socket();
    let call = MessageBuilder::method_call("/org/example/Nobody", "Take")
        .interface("org.example.Nobody")
        .destination("org.example.Nobody")
        .unix_fds(1)
        .body(vec![Value::UnixFd(0)])
        .build(2)
        .expect("build");
    send_with_fd(&sender, &call[..1], ours);
    sender.write_all(&call[1..]).expect("the rest of the call");
    socket
}

/// Fds sent under a message that declares none wait for a later message
/// (`pending_fd_timeout`); the connection goes, and the bus drops them
/// with it.
#[test]
fn a_lingering_socket_sent_ahead_of_its_message_does_not_stall_the_bus_when_its_sender_goes() {
    if skip::quickbus_only("dbus-daemon closes passed fds on its loop") {
        return;
    }
    let bus = Bus::start();
    let mut other = other_client(&bus);
    let (mut sender, _) = raw_client(&bus);
    let (ours, socket) = lingering_socket();
    ping_with_fd(&mut sender, ours);
    drop(sender);
    answered_while_closing(&socket, &mut other);
}

/// A bus whose pool reads and writes every connection ahead
/// (`QUICKBUS_TEST_LEAST_PARALLEL=1`).
fn bus_with_pool() -> Bus {
    let dir = TempDir::new();
    let threads = forced_threads::forced_threads().unwrap_or(2);
    let config = write_config_with(
        dir.path(),
        Listen::UnixPath,
        &format!(r#"<limit name="threads">{threads}</limit>"#),
    );
    let mut daemon = Command::new(daemon_path());
    daemon.env(forced_threads::LEAST_PARALLEL_HOOK, "1");
    Bus::start_command(
        dir,
        daemon,
        &[format!("--config-file={}", config.display())],
    )
}

/// The socket rides on messages to [`RECEIVERS`] receivers, each far
/// larger than a socket takes at once (the kernel's default send buffer,
/// about 200 KiB, is the bus's); the receivers read their start (the
/// kernel closes their copies of the fd: they read without room for
/// SCM_RIGHTS), then the rest. So the bus holds the last copy until the
/// write that ends the last of the messages, and drops it there: with a
/// pool, on the thread that wrote, when that write fell to a worker
/// (several connections written in one turn make that likely, not
/// certain; either way no thread of the bus may close it).
fn dropped_after_the_last_write_does_not_stall(bus: &Bus) {
    const BODY: usize = 4 << 20;
    const RECEIVERS: usize = 4;
    let mut other = other_client(bus);
    let mut receivers: Vec<(UnixStream, String)> =
        (0..RECEIVERS).map(|_| raw_client(bus)).collect();
    let mut sender = bus.connect();
    let (ours, socket) = lingering_socket();
    for (_, name) in &receivers {
        let call = MessageBuilder::method_call("/org/example/Receiver", "Take")
            .interface("org.example.Receiver")
            .destination(name.as_str())
            .flags(quickbus_wire::flags::NO_REPLY_EXPECTED)
            .unix_fds(1)
            .body(vec![Value::UnixFd(0), Value::String("x".repeat(BODY))]);
        sender.send(call, &[ours.as_fd()]).expect("send the socket");
    }
    // Nobody read: the bus holds every message.
    drop(ours);
    for (raw, _) in &receivers {
        raw.set_nonblocking(true).unwrap();
    }
    let began = Instant::now();
    let mut buf = vec![0u8; 1 << 16];
    while socket.row().map(|(state, _)| state) != Some(FIN_WAIT1) {
        assert!(began.elapsed() < TIMEOUT, "the bus never closed the socket");
        let mut read_any = false;
        for (raw, _) in &mut receivers {
            match raw.read(&mut buf) {
                Ok(0) => panic!("the bus hung up on a receiver"),
                Ok(_) => read_any = true,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("reading: {e}"),
            }
        }
        if !read_any {
            std::thread::sleep(POLL_INTERVAL);
        }
    }
    answered_while_closing(&socket, &mut other);
}

#[test]
fn a_lingering_socket_dropped_after_its_last_write_does_not_stall_the_bus() {
    if skip::quickbus_only("dbus-daemon closes passed fds on its loop") {
        return;
    }
    dropped_after_the_last_write_does_not_stall(&Bus::start());
}

#[test]
fn a_lingering_socket_dropped_after_a_write_on_the_pool_does_not_stall_the_bus() {
    if skip::quickbus_only("quickbus's pool") {
        return;
    }
    dropped_after_the_last_write_does_not_stall(&bus_with_pool());
}

/// A restart in place while a close lingers is refused, saying why (its
/// check forks, which wants the closing threads ended, and the exec must
/// not close the fds that wait: docs/restart.md); the bus serves on, and
/// once the close ended a restart goes through.
#[test]
fn a_restart_while_a_close_lingers_is_refused_and_goes_through_after() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = Bus::start();
    let mut other = other_client(&bus);
    let mut socket = passed_to_nobody(&bus);
    socket.wait_until_closing();
    let refused = other.call(restart_call()).expect_err("a restart meanwhile");
    let why = format!("{refused:?}");
    assert!(
        why.contains("Restart refused") && why.contains("closing the fds clients passed is stuck"),
        "{why}\nlog:\n{}",
        bus.log()
    );
    assert!(socket.still_closing(), "{:?}", socket.row());
    other.get_id().expect("the bus serves on");
    // The peer goes: its reset ends the lingering close.
    socket.close_peer();
    socket.wait_until_closed();
    if let Err(e) = other.call(restart_call()) {
        panic!("the restart after the close: {e:?}\nlog:\n{}", bus.log());
    }
}

/// The `org.quickbus.Daemon1.Restart` call (what `quickbus restart` sends).
fn restart_call() -> MessageBuilder {
    MessageBuilder::method_call("/org/freedesktop/DBus", "Restart")
        .interface("org.quickbus.Daemon1")
        .destination("org.freedesktop.DBus")
}
