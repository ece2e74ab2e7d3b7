//! A peer some of whose fds the bus could not take in (its process at its
//! open-file limit: the kernel closes what it cannot install and marks
//! the read MSG_CTRUNC) is disconnected, as dbus-daemon disconnects it:
//! the bytes that came can no longer be matched with their fds, and a
//! message delivered with fewer fds than it declares, or with fds that
//! belong to a later one, would be worse than none.

use std::io::ErrorKind;
use std::os::fd::{AsFd, OwnedFd};

use quickbus_client::{CallError, Error, MessageBuilder, Value};
use quickbus_e2e::Bus;
use rustix::process::{prlimit, Pid, Resource, Rlimit};

/// The fds the message carries: more than the room left for them.
const SENT: usize = 8;
/// Free fd numbers the bus is left with.
const ROOM: usize = 2;

/// The fd numbers `pid` has open.
fn open_fds(pid: u32) -> Vec<usize> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the daemon's fds")
        .flatten()
        .filter_map(|fd| fd.file_name().to_str()?.parse().ok())
        .collect()
}

/// The lowest limit under which `open` leaves exactly `room` fd numbers
/// free (a limit bounds fd numbers, and there may be holes below).
fn limit_leaving(open: &[usize], room: usize) -> u64 {
    let mut limit = 0;
    while limit - open.iter().filter(|&&fd| fd < limit).count() < room {
        limit += 1;
    }
    limit as u64
}

/// `pid`'s hard limit of open files.
fn hard_limit(pid: u32) -> u64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("its limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("its open-file limit");
    let hard = line.split_whitespace().nth(4).expect("the hard limit");
    hard.parse().unwrap_or(u64::MAX)
}

#[test]
fn a_sender_whose_fds_the_bus_could_not_take_in_is_disconnected() {
    let bus = Bus::start();
    let mut sender = bus.connect();
    assert!(sender.can_pass_fds());
    let mut receiver = bus.connect();
    let to = receiver.unique_name().to_owned();
    receiver.get_id().expect("GetId");
    sender.get_id().expect("GetId");
    let pid = Pid::from_raw(bus.pid() as i32).expect("a pid");
    let limit = limit_leaving(&open_fds(bus.pid()), ROOM);
    let lowered = Rlimit {
        current: Some(limit),
        maximum: Some(hard_limit(bus.pid())),
    };
    let before = prlimit(Some(pid), Resource::Nofile, lowered).expect("lower the bus's limit");

    let pipes: Vec<(OwnedFd, OwnedFd)> = (0..SENT)
        .map(|_| rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe"))
        .collect();
    let fds: Vec<_> = pipes.iter().map(|(read_end, _)| read_end.as_fd()).collect();
    let message = MessageBuilder::signal("/fds", "org.example.Fds", "Many")
        .destination(to)
        .unix_fds(SENT as u32)
        .body((0..SENT as u32).map(Value::UnixFd).collect());
    sender.send(message, &fds).expect("send");
    // Disconnected at once (not left waiting for the fds it lacks, until
    // pending_fd_timeout, while its later messages took their place).
    let answer = sender.get_id();
    prlimit(Some(pid), Resource::Nofile, before).expect("restore the bus's limit");
    let disconnected = match &answer {
        Err(CallError::Connection(Error::Closed)) => true,
        // Closed with the GetId unread: the kernel resets the connection.
        Err(CallError::Connection(Error::Io(e))) => e.kind() == ErrorKind::ConnectionReset,
        _ => false,
    };
    assert!(disconnected, "{answer:?}; log:\n{}", bus.log());
    // Nothing of it reached the receiver, and the bus serves on.
    receiver.get_id().expect("GetId after the disconnect");
    bus.connect().get_id().expect("a new connection's GetId");
    if !quickbus_e2e::skip::quickbus_only("quickbus's close reason") {
        assert!(bus.log().contains("fds it sent were lost"), "{}", bus.log());
    }
}
