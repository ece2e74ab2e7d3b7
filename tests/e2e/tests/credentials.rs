//! GetConnectionCredentials' `ProcessFD`: a pidfd of the named connection's
//! process, passed only to callers that negotiated fd passing, and released
//! by the daemon when the connection goes.
//!
//! dbus-daemon 1.14 (the reference installed here) has no ProcessFD, so
//! these tests return early against it.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Instant;

use quickbus_client::{bus_call, sasl, Connection, Message, MessageBuilder, MessageType, Value};
use quickbus_e2e::{read_raw_message, skip, Bus, POLL_INTERVAL, TIMEOUT};

fn credentials_call(name: &str) -> MessageBuilder {
    bus_call("GetConnectionCredentials").body(vec![Value::String(name.into())])
}

/// The value of `key` in a GetConnectionCredentials reply.
fn entry(reply: &Message, key: &str) -> Option<Value> {
    let Some(Value::Array { items, .. }) = reply.body_values().unwrap().into_iter().next() else {
        panic!("GetConnectionCredentials returned no a{{sv}}: {reply:?}")
    };
    items.into_iter().find_map(|item| match item {
        Value::DictEntry(k, v) if *k == Value::String(key.into()) => match *v {
            Value::Variant(inner) => Some(*inner),
            other => Some(other),
        },
        _ => None,
    })
}

/// The pid a pidfd refers to, from the "Pid:" line of our fdinfo of it.
fn pid_of_pidfd(fd: &OwnedFd) -> u32 {
    let path = format!("/proc/self/fdinfo/{}", fd.as_raw_fd());
    let info = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let line = info
        .lines()
        .find(|l| l.starts_with("Pid:"))
        .unwrap_or_else(|| panic!("{path} has no Pid line: {info}"));
    line["Pid:".len()..].trim().parse().expect("a pid")
}

/// The pid behind the ProcessFD that GetConnectionCredentials(name) returns.
fn process_fd_pid(conn: &mut Connection, name: &str) -> u32 {
    let (reply, fds) = conn
        .call_with_fds(credentials_call(name), &[])
        .unwrap_or_else(|e| panic!("GetConnectionCredentials({name}): {e}"));
    let Some(Value::UnixFd(index)) = entry(&reply, "ProcessFD") else {
        panic!("no ProcessFD for {name}: {reply:?}");
    };
    assert_eq!(reply.unix_fds(), 1);
    pid_of_pidfd(&fds[index as usize])
}

fn connect(bus: &Bus) -> Connection {
    let mut conn = Connection::connect(bus.address()).expect("connect to the bus");
    conn.set_timeout(Some(TIMEOUT)).unwrap();
    conn
}

#[test]
fn process_fd_pins_the_named_connections_process() {
    if skip::quickbus_only("ProcessFD") {
        return;
    }
    let bus = Bus::start();
    let other = bus.peer(); // a dbus-python process
    let mut me = connect(&bus);
    assert!(me.can_pass_fds());
    let own = me.unique_name().to_owned();
    assert_eq!(process_fd_pid(&mut me, &own), std::process::id());
    assert_eq!(process_fd_pid(&mut me, other.unique_name()), other.pid());
    assert_eq!(
        process_fd_pid(&mut me, "org.freedesktop.DBus"),
        bus.pid(),
        "the bus's own entry pins the daemon"
    );
}

/// A socket that authenticated without NEGOTIATE_UNIX_FD and said Hello.
fn connect_without_fd_passing(bus: &Bus) -> UnixStream {
    let path = bus
        .address()
        .strip_prefix("unix:path=")
        .and_then(|rest| rest.split(',').next())
        .expect("the test bus listens on a unix path");
    let mut stream = UnixStream::connect(path).expect("connect");
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    stream
        .write_all(&sasl::pipelined_external(sasl::current_uid(), false))
        .unwrap();
    let mut ok = Vec::new();
    BufReader::new(&mut stream)
        .read_until(b'\n', &mut ok)
        .expect("the bus answered AUTH");
    assert!(ok.starts_with(b"OK "), "{:?}", String::from_utf8_lossy(&ok));
    send(&mut stream, bus_call("Hello"), 1);
    assert_eq!(
        read_raw_message(&mut stream).msg_type(),
        MessageType::MethodReturn
    );
    stream
}

fn send(stream: &mut UnixStream, builder: MessageBuilder, serial: u32) {
    stream.write_all(&builder.build(serial).unwrap()).unwrap();
}

#[test]
fn no_process_fd_for_a_caller_without_fd_passing() {
    if skip::quickbus_only("ProcessFD") {
        return;
    }
    let bus = Bus::start();
    let other = bus.peer();
    let mut stream = connect_without_fd_passing(&bus);
    send(&mut stream, credentials_call(other.unique_name()), 2);
    let reply = loop {
        let msg = read_raw_message(&mut stream);
        if msg.reply_serial() == Some(2) {
            break msg;
        }
    };
    assert_eq!(reply.msg_type(), MessageType::MethodReturn, "{reply:?}");
    assert_eq!(reply.unix_fds(), 0);
    assert_eq!(entry(&reply, "ProcessFD"), None);
    assert_eq!(entry(&reply, "ProcessID"), Some(Value::Uint32(other.pid())));
}

/// How many pidfds the daemon holds.
fn daemon_pidfds(bus: &Bus) -> usize {
    let dir = format!("/proc/{}/fd", bus.pid());
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().contains("pidfd"))
        .count()
}

/// Waits (bounded) until the daemon holds `expected` pidfds: a dup it
/// attached to a reply may be closed a moment after the reply arrived.
fn wait_for_daemon_pidfds(bus: &Bus, expected: usize) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let held = daemon_pidfds(bus);
        if held == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon holds {held} pidfds, {expected} expected"
        );
        std::thread::sleep(POLL_INTERVAL);
    }
}

#[test]
fn the_daemon_holds_no_pidfd_per_connection_and_none_after_replies() {
    if skip::quickbus_only("holding no pidfd per connection") {
        return;
    }
    let bus = Bus::start();
    let mut me = connect(&bus);
    // None: every pidfd (the bus's own too) is opened when asked for and
    // leaves with the reply, so connections cost one fd each.
    wait_for_daemon_pidfds(&bus, 0);
    let peers: Vec<Connection> = (0..3).map(|_| connect(&bus)).collect();
    wait_for_daemon_pidfds(&bus, 0);
    for peer in &peers {
        assert_eq!(
            process_fd_pid(&mut me, peer.unique_name()),
            std::process::id()
        );
    }
    let own = process_fd_pid(&mut me, "org.freedesktop.DBus");
    assert_eq!(own, bus.pid());
    wait_for_daemon_pidfds(&bus, 0);
}
