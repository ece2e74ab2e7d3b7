//! A bus started as root that switched to its `<user>` holds the same
//! privileges after restarts in place as when it was fresh: not dumpable
//! (its /proc files belong to root, so its user's other processes cannot
//! read its memory or take its sockets), the same ids, capabilities,
//! no_new_privs and seccomp state.

use std::os::unix::fs::MetadataExt;
use std::process::Command;

use quickbus_e2e::{copy_executable, quickbus_daemon_path, skip, Bus, TempDir};

use super::restart;

/// The lines of /proc/PID/status that say what the process may do.
const PRIVILEGE_FIELDS: &[&str] = &[
    "Uid:",
    "Gid:",
    "Groups:",
    "CapInh:",
    "CapPrm:",
    "CapEff:",
    "CapBnd:",
    "CapAmb:",
    "NoNewPrivs:",
    "Seccomp:",
    "Seccomp_filters:",
];

/// What process `pid` may do: its status lines of [`PRIVILEGE_FIELDS`],
/// and the owner of its memory file (root unless it is dumpable).
fn privileges(pid: u32) -> Vec<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let mut lines: Vec<String> = status
        .lines()
        .filter(|l| PRIVILEGE_FIELDS.iter().any(|f| l.starts_with(f)))
        .map(str::to_owned)
        .collect();
    let mem = std::fs::metadata(format!("/proc/{pid}/mem")).unwrap();
    lines.push(format!("/proc/{pid}/mem owned by uid {}", mem.uid()));
    lines
}

#[test]
fn a_bus_that_switched_user_keeps_its_privileges_and_stays_non_dumpable_across_restarts() {
    if skip::quickbus_only("restarting in place")
        || skip::unless(
            quickbus_e2e::can_change_user(),
            "needs root, to start a bus that switches to <user>",
        )
    {
        return;
    }
    // The binary in a directory every user may read: the restart
    // executes it as nobody (the checkout may be under /root, mode 0700).
    let dir = TempDir::new();
    let daemon = dir.path().join("quickbus-daemon");
    copy_executable(&quickbus_daemon_path(), &daemon);
    let config = quickbus_e2e::write_config_with(
        dir.path(),
        quickbus_e2e::Listen::UnixPath,
        "<user>nobody</user>",
    );
    let bus = Bus::start_command(
        dir,
        Command::new(&daemon),
        &[format!("--config-file={}", config.display())],
    );
    // Its loop runs, so it has switched (after printing its address).
    let mut client = bus.connect();
    let fresh = privileges(bus.pid());
    assert!(
        fresh.iter().any(|l| l.starts_with("Uid:\t65534")),
        "the bus did not switch to nobody: {fresh:#?}"
    );
    assert!(
        fresh.last().unwrap().ends_with("owned by uid 0"),
        "a fresh bus running as nobody is dumpable: {fresh:#?}"
    );
    for i in 0..3 {
        restart(&bus, i);
        assert_eq!(
            privileges(bus.pid()),
            fresh,
            "after {} restarts; log:\n{}",
            i + 1,
            bus.log()
        );
        client.get_id().expect("the bus serves");
    }
}
