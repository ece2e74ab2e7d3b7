//! A tiny run of `quickbus-bench restart`: every case (idle, loaded, and
//! a small shared backlog) is measured and reported, the bus holding everything after every restart
//! (the bench fails otherwise). No timing is checked. quickbus-daemon is
//! built by quickbus-e2e's `quickbus_daemon_path`.

mod support;

use std::time::Duration;

use support::{against_quickbus, run_bench};

#[test]
fn a_tiny_restart_run_reports_every_case() {
    let args = against_quickbus(&[
        "restart",
        "--connections",
        "20",
        "--names",
        "50",
        "--rules",
        "50",
        "--reps",
        "2",
        "--backlog-mib",
        "4",
        "--backlog-signal-kib",
        "64",
        "--backlog-receivers",
        "2",
    ]);
    let output = run_bench(args, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let idle = stdout.lines().find(|l| l.starts_with("idle"));
    let loaded = stdout.lines().find(|l| l.starts_with("loaded"));
    assert!(
        idle.is_some_and(|l| l.contains(" 0 ")),
        "{stdout}\n{stderr}"
    );
    let loaded = loaded.unwrap_or_else(|| panic!("no loaded row:\n{stdout}"));
    let columns: Vec<&str> = loaded.split_whitespace().collect();
    assert_eq!(&columns[1..5], ["20", "50", "50", "2"], "{loaded}");
    // Each restart was checked (counts, owners) and logged by the daemon.
    assert_eq!(stderr.matches("loaded: restart ").count(), 2, "{stderr}");
    // The backlog: 2 receivers and their sender, one rule each receiver.
    let backlog = stdout.lines().find(|l| l.starts_with("backlog"));
    let backlog = backlog.unwrap_or_else(|| panic!("no backlog row:\n{stdout}"));
    let columns: Vec<&str> = backlog.split_whitespace().collect();
    assert_eq!(&columns[1..5], ["3", "0", "2", "2"], "{backlog}");
    assert_eq!(stderr.matches("backlog: restart ").count(), 2, "{stderr}");
    assert!(
        stdout.contains("4 MiB of distinct signals queued for each of 2 receivers"),
        "{stdout}"
    );
    assert!(stdout.contains("cannot restart in place"), "{stdout}");
}

#[test]
fn a_restart_that_does_not_happen_fails_the_run() {
    // The daemon's test switch (QUICKBUS_TEST_FAIL_RESTORE): the new image
    // refuses to resume and the previous binary takes the bus back, so
    // the Restart call gets an error. The bench must stop, not report.
    let args = against_quickbus(&[
        "restart",
        "--connections",
        "2",
        "--names",
        "2",
        "--rules",
        "2",
        "--reps",
        "1",
    ]);
    let output = support::run_bench_with(
        args,
        &[("QUICKBUS_TEST_FAIL_RESTORE", "1")],
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("idle "), "no report:\n{stdout}");
    assert!(stderr.contains("idle: Restart: "), "{stderr}");
}
