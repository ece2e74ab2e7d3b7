//! Helpers of the restart tests: restarting the bus under test by signal
//! or by `quickbus restart` and waiting until it serves again, the
//! `quickbus` tool, and the sd-bus client compiled from tests/e2e/c.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use quickbus_e2e::{run_bounded, Bus, Finished, POLL_INTERVAL, TIMEOUT};
use rustix::process::{kill_process, Pid, Signal};

/// What the daemon logs once a new image serves (docs/restart.md).
pub const RESTARTED: &str = "restarted in place";

/// How many times the daemon has logged [`RESTARTED`].
pub fn restarts_logged(bus: &Bus) -> usize {
    bus.log().matches(RESTARTED).count()
}

/// Waits (bounded) until the daemon's log has `count` lines containing
/// `text`.
pub fn wait_for_log(bus: &Bus, text: &str, count: usize) {
    let deadline = Instant::now() + TIMEOUT;
    while bus.log().matches(text).count() < count {
        assert!(
            Instant::now() < deadline,
            "the daemon did not log {text:?} {count} times within {TIMEOUT:?}; log:\n{}",
            bus.log()
        );
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// `kill -USR2` the daemon (an administrator's `systemctl kill -s USR2`).
pub fn signal_restart(bus: &Bus) {
    let pid = Pid::from_raw(bus.pid() as i32).expect("a daemon pid");
    kill_process(pid, Signal::Usr2).expect("SIGUSR2 the daemon");
}

/// What the daemon logs when it refuses a restart (docs/restart.md).
pub const REFUSED_ANY: &str = "restart refused";

/// Restarts the bus by SIGUSR2 and waits until the new image serves;
/// fails as soon as the daemon logs that it refused the restart, naming
/// the refusal, rather than when the wait runs out.
pub fn restart_by_signal(bus: &Bus) {
    let log = bus.log();
    let (restarts, refusals) = (
        log.matches(RESTARTED).count(),
        log.matches(REFUSED_ANY).count(),
    );
    signal_restart(bus);
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let log = bus.log();
        if log.matches(RESTARTED).count() > restarts {
            return;
        }
        assert_eq!(
            log.matches(REFUSED_ANY).count(),
            refusals,
            "the restart by signal was refused; log:\n{log}"
        );
        assert!(
            Instant::now() < deadline,
            "the daemon did not log {RESTARTED:?} within {TIMEOUT:?}; log:\n{log}"
        );
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// `quickbus restart` against the bus: returns when the new image serves
/// (or the restart was refused).
pub fn quickbus_restart(bus: &Bus) -> Finished {
    run_bounded(Command::new(tool()).args(["--address", bus.address(), "restart"]))
}

/// The `org.quickbus.Daemon1.Restart` call (what `quickbus restart` sends).
pub fn restart_call() -> quickbus_client::MessageBuilder {
    quickbus_client::MessageBuilder::method_call("/org/freedesktop/DBus", "Restart")
        .interface("org.quickbus.Daemon1")
        .destination("org.freedesktop.DBus")
}

/// Restarts the bus with `quickbus restart`, which must succeed.
pub fn restart_by_call(bus: &Bus) {
    let before = restarts_logged(bus);
    quickbus_restart(bus).success();
    // The reply comes from the new image once it serves: it has logged.
    assert_eq!(restarts_logged(bus), before + 1, "log:\n{}", bus.log());
}

/// Restart number `i` of a series: by signal and by call in turn.
pub fn restart(bus: &Bus, i: usize) {
    if i.is_multiple_of(2) {
        restart_by_signal(bus);
    } else {
        restart_by_call(bus);
    }
}

/// The `quickbus` tool built beside this test.
pub fn tool() -> PathBuf {
    beside_test("quickbus")
}

fn beside_test(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let path = profile_dir.join(name);
    assert!(
        path.is_file(),
        "no {} (run `cargo build --workspace` first, as scripts/test.sh does)",
        path.display()
    );
    path
}

/// tests/e2e/c/sd_bus_ping.c compiled against libsystemd (libsystemd-dev,
/// which scripts/test.sh installs), into `dir`.
pub fn sd_bus_ping(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("c/sd_bus_ping.c");
    let flags = run_bounded(Command::new("pkg-config").args(["--cflags", "--libs", "libsystemd"]))
        .success()
        .stdout;
    let program = dir.join("sd_bus_ping");
    run_bounded(
        Command::new("cc")
            .arg("-Wall")
            .arg("-Werror")
            .arg("-o")
            .arg(&program)
            .arg(&source)
            .args(flags.split_whitespace()),
    )
    .success();
    program
}

/// Where `/proc/<pid>/exe` points.
pub fn exe_of(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.display().to_string())
        .unwrap_or_else(|e| format!("(unreadable: {e})"))
}
