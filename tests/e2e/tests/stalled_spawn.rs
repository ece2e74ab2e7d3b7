//! A service whose child is stuck before it executes its program: the bus
//! serves on, a restart is refused until the spawn ended, and the
//! activation's timeout kills the child.
//!
//! A real child gets stuck there when it inherited a descriptor whose
//! close blocks (a client's lingering socket, once the bus closed its own
//! copy between the fork and the exec; a file on FUSE), which no test can
//! time: the daemon's hook `QUICKBUS_TEST_STALL_SPAWN=<name>` makes the
//! child of `<name>` sleep before its exec instead (up to a minute).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use quickbus_client::{Connection, MessageBuilder};
use quickbus_e2e::{
    daemon_path, skip, write_config_with, Bus, Listen, TempDir, POLL_INTERVAL, TIMEOUT,
};

/// The service whose child stalls.
const STUCK: &str = "org.example.Stuck";
const HOOK: &str = "QUICKBUS_TEST_STALL_SPAWN";
/// How long a client waits for an answer: well under the stall, so a bus
/// held up by the spawn fails the test rather than answering late.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// A bus with `STUCK`'s service file (any program: it is never reached)
/// in `services`, the hook set, and `extra` in its configuration.
fn stalling_bus(services: &TempDir, extra: &str) -> Bus {
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
    daemon.env(HOOK, STUCK);
    let bus = Bus::start_command(
        dir,
        daemon,
        &[format!("--config-file={}", config.display())],
    );
    bus.assert_names_test_hook(&format!("{HOOK}={STUCK}"));
    bus
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
    let bus = stalling_bus(
        &services,
        r#"<limit name="service_start_timeout">600000</limit>"#,
    );
    let mut other = bus.connect();
    other.set_timeout(Some(ANSWER_WITHIN)).expect("set timeout");
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
    let bus = stalling_bus(
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
}
