//! A SIGUSR2 that arrives while a restart is under way is not lost: it
//! waits in the kernel across the exec, and the new image restarts again.

use std::path::Path;

use quickbus_e2e::{skip, write_executable, POLL_INTERVAL, TIMEOUT};

use super::bus_from_a_copied_binary;
use super::support::{signal_restart, wait_for_log, RESTARTED};

/// Waits (bounded) until `path` exists.
fn wait_for_file(path: &Path) {
    let deadline = std::time::Instant::now() + TIMEOUT;
    while !path.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} did not appear within {TIMEOUT:?}",
            path.display()
        );
        std::thread::sleep(POLL_INTERVAL);
    }
}

#[test]
fn a_sigusr2_during_a_restart_makes_another_restart_after_it() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let (bus, bin, daemon) = bus_from_a_copied_binary();
    // The binary at the daemon's path holds the restart at its version
    // check until the test opens the gate; then it is the daemon.
    let real = bin.join("quickbus-daemon.real");
    std::fs::rename(&daemon, &real).unwrap();
    let checking = bin.join("checking");
    let gate = bin.join("gate");
    write_executable(
        &daemon,
        &format!(
            "#!/bin/sh\n\
             if [ \"$1\" = --handover-version ]; then\n\
             \ttouch {checking}\n\
             \twhile [ ! -e {gate} ]; do sleep 0.01; done\n\
             fi\n\
             exec {real} \"$@\"\n",
            checking = checking.display(),
            gate = gate.display(),
            real = real.display(),
        ),
    );
    signal_restart(&bus);
    wait_for_file(&checking);
    // The restart is under way: the second signal comes now.
    signal_restart(&bus);
    std::fs::write(&gate, b"open").unwrap();
    wait_for_log(&bus, RESTARTED, 2);
    assert_eq!(bus.log().matches("SIGUSR2: restarting in place").count(), 2);
}
