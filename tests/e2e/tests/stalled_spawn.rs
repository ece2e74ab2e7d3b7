//! A service whose child is stuck before it executes its program, or in
//! its exec: the bus serves on, a restart is refused until the spawn
//! ended, and the activation's timeout kills the child
//! (docs/reliability.md, "Services being started").
//!
//! A real child gets stuck in its exec when it inherited a descriptor
//! whose close blocks: a client's lingering socket, once the bus closed
//! its own copy between the fork and the exec (then the child's is the
//! last). No test can time that window; the daemon's hook
//! `QUICKBUS_TEST_STALL_SPAWN=<name>:<fifo>` holds the child of `<name>`
//! before its exec until the test writes to the FIFO (a minute at most),
//! which makes the window as wide as the test needs.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use quickbus_client::{Connection, MessageBuilder};
use quickbus_e2e::lingering::{lingering_socket, ping_with_fd, raw_client};
use quickbus_e2e::{
    daemon_path, skip, write_config_with, Bus, Listen, TempDir, POLL_INTERVAL, TIMEOUT,
};

/// The service whose child stalls.
const STUCK: &str = "org.example.Stuck";
const HOOK: &str = "QUICKBUS_TEST_STALL_SPAWN";
/// How long a client waits for an answer: well under the stall, so a bus
/// held up by the spawn fails the test rather than answering late.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);
/// More numbers than a spawn opens descriptors (two pipes, /dev/null)
/// and the caller's connection takes.
const SPACERS: usize = 8;

/// A bus with `STUCK`'s service file (a program that exits at once) in
/// `services`, the hook set, and `extra` in its configuration; and the
/// FIFO that releases the child.
fn stalling_bus(services: &TempDir, extra: &str) -> (Bus, PathBuf) {
    let fifo = services.path().join("gate");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::RWXU,
        0,
    )
    .expect("mkfifo");
    std::fs::write(
        services.path().join(format!("{STUCK}.service")),
        format!("[D-BUS Service]\nName={STUCK}\nExec=/bin/true\n"),
    )
    .expect("write the service file");
    let dir = TempDir::new();
    let extra = format!(
        "<servicedir>{}</servicedir>{extra}",
        services.path().display()
    );
    let config = write_config_with(dir.path(), Listen::UnixPath, &extra);
    let mut daemon = Command::new(daemon_path());
    let hook = format!("{STUCK}:{}", fifo.display());
    daemon.env(HOOK, &hook);
    let bus = Bus::start_command(
        dir,
        daemon,
        &[format!("--config-file={}", config.display())],
    );
    bus.assert_names_test_hook(&format!("{HOOK}={hook}"));
    (bus, fifo)
}

/// Let the child waiting on `fifo` go on to its exec.
fn release(fifo: &Path) {
    let mut gate = std::fs::OpenOptions::new()
        .write(true)
        .open(fifo)
        .expect("open the FIFO");
    gate.write_all(b"go").expect("write to the FIFO");
}

/// A client that waits for answers [`ANSWER_WITHIN`].
fn other_client(bus: &Bus) -> Connection {
    let mut other = bus.connect();
    other.set_timeout(Some(ANSWER_WITHIN)).expect("set timeout");
    other
}

/// A client that asks for `STUCK` (auto-start) without waiting; the
/// serial of its call.
fn ask_for_stuck(bus: &Bus) -> (Connection, u32) {
    let mut caller = bus.connect();
    caller
        .set_timeout(Some(ANSWER_WITHIN))
        .expect("set timeout");
    let call = MessageBuilder::method_call("/org/example/Stuck", "Hello")
        .interface("org.example.Stuck")
        .destination(STUCK);
    let serial = caller.send(call, &[]).expect("send the call");
    (caller, serial)
}

/// The bus's children (of any of its threads).
fn children(bus: &Bus) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{}/task", bus.pid())).expect("the bus's tasks");
    let mut children = Vec::new();
    for task in tasks.flatten() {
        let listed = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        children.extend(
            listed
                .split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    children
}

/// The child forked for `STUCK` that has not executed its program (it is
/// still the daemon's binary), once there is one.
fn stuck_child(bus: &Bus) -> u32 {
    let daemon = std::fs::canonicalize(daemon_path()).expect("the daemon's path");
    let not_executed = |pid: &u32| {
        std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| same_file(&exe, &daemon))
    };
    let began = Instant::now();
    loop {
        if let Some(pid) = children(bus).into_iter().find(not_executed) {
            return pid;
        }
        assert!(began.elapsed() < TIMEOUT, "no child of the bus stalled");
        std::thread::sleep(POLL_INTERVAL);
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    std::fs::canonicalize(a).is_ok_and(|a| a == b)
}

/// The error name of the reply to `serial`.
fn error_reply(caller: &mut Connection, serial: u32) -> String {
    match caller.wait_reply(serial) {
        Ok(reply) => format!("{reply:?}"),
        Err(e) => format!("{e:?}"),
    }
}

fn restart_call() -> MessageBuilder {
    MessageBuilder::method_call("/org/freedesktop/DBus", "Restart")
        .interface("org.quickbus.Daemon1")
        .destination("org.freedesktop.DBus")
}

/// While the child is stuck the bus answers others, and a restart is
/// refused (it could not hand the child over); once the child is gone,
/// its activation fails as a killed service's does, and a restart goes
/// through.
#[test]
fn a_spawn_stuck_before_the_exec_holds_up_neither_the_bus_nor_later_restarts() {
    if skip::quickbus_only("the spawner's test hook") {
        return;
    }
    let services = TempDir::new();
    // A timeout the test does not reach: the child goes when it kills it.
    let (bus, _fifo) = stalling_bus(
        &services,
        r#"<limit name="service_start_timeout">600000</limit>"#,
    );
    let mut other = other_client(&bus);
    let (mut caller, serial) = ask_for_stuck(&bus);
    let child = stuck_child(&bus);
    let id = other.get_id();
    assert!(id.is_ok(), "no answer while a spawn was stuck: {id:?}");
    let refused = other
        .call(restart_call())
        .expect_err("a restart while the spawn is stuck");
    let why = format!("{refused:?}");
    assert!(
        why.contains("Restart refused")
            && why.contains(&format!(
                "the spawn of service {STUCK} is still in progress"
            )),
        "{why}\nlog:\n{}",
        bus.log()
    );
    // What a lingering close's end (or the timeout) does: the child goes.
    let pid = rustix::process::Pid::from_raw(child as i32).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::Kill).expect("kill the child");
    let reply = error_reply(&mut caller, serial);
    assert!(
        reply.contains("org.freedesktop.DBus.Error.Spawn.ChildSignaled"),
        "{reply}\nlog:\n{}",
        bus.log()
    );
    if let Err(e) = other.call(restart_call()) {
        panic!("the restart after the spawn: {e:?}\nlog:\n{}", bus.log());
    }
    other.get_id().expect("the bus serves on after the restart");
}

/// The activation's timeout kills a child stuck before its exec, as any:
/// the caller gets TimedOut, and the child is gone.
#[test]
fn the_activation_timeout_kills_a_child_stuck_before_its_exec() {
    if skip::quickbus_only("the spawner's test hook") {
        return;
    }
    let services = TempDir::new();
    let (bus, _fifo) = stalling_bus(
        &services,
        r#"<limit name="service_start_timeout">500</limit>"#,
    );
    let (mut caller, serial) = ask_for_stuck(&bus);
    let reply = error_reply(&mut caller, serial);
    assert!(
        reply.contains("org.freedesktop.DBus.Error.TimedOut"),
        "{reply}\nlog:\n{}",
        bus.log()
    );
    let began = Instant::now();
    while !children(&bus).is_empty() {
        assert!(
            began.elapsed() < TIMEOUT,
            "the stuck child was not killed\nlog:\n{}",
            bus.log()
        );
        std::thread::sleep(POLL_INTERVAL);
    }
    // Gone because it was stopped: the hook would let it go on its own
    // after a minute, as long as the wait above may take. (Killed, the
    // usual way; or, on a machine so loaded that the fork took longer
    // than the time-out, told to exit before its exec.)
    assert!(
        bus.log()
            .contains("did not get to execute its program in time"),
        "the child was not stopped\nlog:\n{}",
        bus.log()
    );
}

/// The numbers below `top` free in the bus's descriptor table.
fn free_below(bus: &Bus, top: u32) -> usize {
    let fds = std::fs::read_dir(format!("/proc/{}/fd", bus.pid())).expect("the bus's fds");
    let used = fds
        .flatten()
        .filter_map(|fd| fd.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&n| n < top)
        .count();
    top as usize - used
}

/// The number of the bus's descriptor of the socket `inode`.
fn bus_fd_of(bus: &Bus, inode: u64) -> Option<u32> {
    let wanted = format!("socket:[{inode}]");
    let fds = std::fs::read_dir(format!("/proc/{}/fd", bus.pid())).expect("the bus's fds");
    fds.flatten().find_map(|fd| {
        let link = std::fs::read_link(fd.path()).ok()?;
        (link.as_os_str() == &*wanted).then(|| fd.file_name().to_str()?.parse().ok())?
    })
}

/// Whether the bus holds a descriptor of the socket `inode`.
fn bus_holds(bus: &Bus, inode: u64) -> bool {
    bus_fd_of(bus, inode).is_some()
}

/// The real thing, its window held open: a client's lingering socket (a
/// send queue nobody reads, SO_LINGER 120 s), held by the bus under a
/// Ping when a service is forked, so the child inherits a copy; the
/// client goes and the bus drops its copy (not the last: the child's
/// is); then the child executes, and the exec's close of that copy
/// lingers. The bus answers another client and refuses a restart
/// meanwhile; once the socket's peer resets, the exec ends, and a
/// restart goes through.
#[test]
fn an_exec_lingering_in_the_close_of_a_passed_socket_holds_up_neither_the_bus_nor_later_restarts() {
    if skip::quickbus_only("the spawner's test hook") {
        return;
    }
    let services = TempDir::new();
    let (bus, fifo) = stalling_bus(
        &services,
        r#"<limit name="service_start_timeout">600000</limit>"#,
    );
    let mut other = other_client(&bus);
    // The bus holds the socket: a Ping's fd, waiting for a message that
    // declares it (the test's own copy closed).
    let (mut sender, _) = raw_client(&bus);
    // Connections whose numbers, below the socket's, are free again when
    // the service is forked: the exec releases the descriptors it closes
    // highest first, and std's spawn returns once the pipe it made for
    // the spawn is released, so that pipe must have a lower number than
    // the socket for the spawn to wait for the socket's close.
    let spacers: Vec<Connection> = (0..SPACERS).map(|_| bus.connect()).collect();
    let (ours, mut socket) = lingering_socket();
    ping_with_fd(&mut sender, ours);
    let (_, inode) = socket.row().expect("the socket in /proc/net/tcp");
    let number = bus_fd_of(&bus, inode).expect("the bus holds the socket");
    drop(spacers);
    let began = Instant::now();
    while free_below(&bus, number) < SPACERS {
        assert!(
            began.elapsed() < TIMEOUT,
            "the spacers' numbers never came free"
        );
        std::thread::sleep(POLL_INTERVAL);
    }
    // Forked with a copy of it; held before its exec.
    let (_caller, _serial) = ask_for_stuck(&bus);
    stuck_child(&bus);
    // The bus drops its copy with the sender's connection.
    drop(sender);
    let began = Instant::now();
    while bus_holds(&bus, inode) {
        assert!(began.elapsed() < TIMEOUT, "the bus kept the socket");
        std::thread::sleep(POLL_INTERVAL);
    }
    assert!(
        !socket.still_closing(),
        "the bus's close was the last: {:?}",
        socket.row()
    );
    // The child's exec closes the last copy, which lingers.
    release(&fifo);
    socket.wait_until_closing();
    let id = other.get_id();
    assert!(id.is_ok(), "no answer while an exec lingered: {id:?}");
    let refused = other
        .call(restart_call())
        .expect_err("a restart while the exec lingers");
    let why = format!("{refused:?}");
    assert!(
        why.contains(&format!(
            "the spawn of service {STUCK} is still in progress"
        )),
        "{why}\nlog:\n{}",
        bus.log()
    );
    assert!(
        socket.still_closing(),
        "the close ended before the answers came: {:?}",
        socket.row()
    );
    // The peer goes: its reset ends the lingering close, and the exec.
    socket.close_peer();
    socket.wait_until_closed();
    if let Err(e) = other.call(restart_call()) {
        panic!("the restart after the exec: {e:?}\nlog:\n{}", bus.log());
    }
    other.get_id().expect("the bus serves on after the restart");
}
