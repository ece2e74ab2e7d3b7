//! The runner's verdicts as a user sees them: exit status and lines.

use std::process::Command;

const RUNNER: &str = env!("CARGO_BIN_EXE_quickbus-conformance");
const INSTALLED: &str = "/usr/lib/dbus-1.0/installed-tests/dbus";

fn installed() -> bool {
    let there = std::path::Path::new(INSTALLED)
        .join("test-header-fields")
        .exists();
    if !there {
        eprintln!("dbus-tests is not installed; scripts/test.sh installs it");
    }
    there
}

/// A "daemon" that prints the address of a socket nobody listens on and
/// exits: every test that starts it fails at once.
fn broken_daemon() -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    // One file per call: tests run in parallel.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("qb-broken-bus-{}-{n}", std::process::id()));
    std::fs::write(
        &path,
        "#!/bin/sh\necho unix:path=/nonexistent/bus,guid=00000000000000000000000000000000\n",
    )
    .expect("write the broken daemon");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

#[test]
fn a_daemon_that_cannot_start_fails_every_subtest_and_the_run() {
    assert!(installed(), "dbus-tests missing");
    let daemon = broken_daemon();
    let logs = daemon.with_extension("logs");
    let out = Command::new(RUNNER)
        .arg(&daemon)
        .args(["--only", "test-header-fields", "--timeout", "30"])
        .arg("--log-dir")
        .arg(&logs)
        .output()
        .expect("run the runner");
    let _ = std::fs::remove_file(&daemon);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let fails = stdout.lines().filter(|l| l.starts_with("FAIL ")).count();
    assert!(fails >= 5, "{stdout}");
    assert!(!stdout.lines().any(|l| l.starts_with("PASS ")), "{stdout}");
    // A failure's log is kept where its line says.
    let first = stdout.lines().find(|l| l.starts_with("FAIL ")).unwrap();
    let log = first.rsplit_once("; log ").unwrap().1.trim_end_matches(')');
    assert!(std::path::Path::new(log).is_file(), "{first}");
    assert!(log.starts_with(logs.to_str().unwrap()), "{first}");
    let summary = stdout.lines().last().unwrap_or("");
    assert_eq!(summary, format!("0 passed, {fails} failed, 0 skipped"));
    std::fs::remove_dir_all(&logs).unwrap();
}

#[test]
fn the_reference_daemon_passes_a_sample() {
    assert!(installed(), "dbus-tests missing");
    let out = Command::new(RUNNER)
        .args([
            "/usr/bin/dbus-daemon",
            "--only",
            "test-dbus-daemon-fork.sh",
            "--only",
            "test-header-fields",
        ])
        .output()
        .expect("run the runner");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("PASS test-dbus-daemon-fork.sh #3"),
        "{stdout}"
    );
    assert!(stdout.contains("PASS test-header-fields /message/weird-header-field/none"));
    assert!(stdout.contains("logs: removed, nothing failed"), "{stdout}");
}

#[test]
fn a_missing_suite_or_daemon_is_a_setup_error() {
    let out = Command::new(RUNNER)
        .args(["/usr/bin/dbus-daemon", "--tests", "/nonexistent"])
        .output()
        .expect("run the runner");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("apt-get install dbus-tests"));
    let out = Command::new(RUNNER)
        .arg("/nonexistent/daemon")
        .output()
        .expect("run the runner");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an executable file"));
}

/// test-uid-permissions starts the daemon as messagebus: the runner gives
/// the suites a copy every user can run, so a daemon in a directory only
/// root may enter (a checkout in /root) passes as it would anywhere.
#[test]
fn a_daemon_in_a_private_directory_still_runs_as_another_user() {
    use std::os::unix::fs::PermissionsExt;
    assert!(installed(), "dbus-tests missing");
    if quickbus_e2e::skip::unless(
        quickbus_e2e::can_change_user(),
        "needs root: the subtests that start the daemon as messagebus skip otherwise",
    ) {
        return;
    }
    let private = std::env::temp_dir().join(format!("qb-private-{}", std::process::id()));
    std::fs::create_dir(&private).expect("create the private directory");
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let daemon = private.join("dbus-daemon");
    std::fs::copy("/usr/bin/dbus-daemon", &daemon).expect("copy the daemon");
    let out = Command::new(RUNNER)
        .arg(&daemon)
        .args(["--only", "test-uid-permissions"])
        .output()
        .expect("run the runner");
    std::fs::remove_dir_all(&private).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("PASS test-uid-permissions /uid-permissions/monitor/messagebus"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("# daemon: {}", daemon.display())),
        "{stdout}"
    );
}

/// dbus built with Containers1 by scripts/build-dbus-containers.sh (cached
/// after the first run; scripts/test.sh builds it before the tests).
fn containers_build() -> std::path::PathBuf {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/build-dbus-containers.sh"
    );
    let out = Command::new("bash")
        .arg(script)
        .output()
        .expect("run scripts/build-dbus-containers.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    std::path::PathBuf::from(stdout.lines().last().expect("the build directory"))
}

/// The reference against itself passes all 17 subtests twice, even when
/// the daemon under test lives in a directory only root may enter (the
/// wrong-uid subtests switch to `nobody` for their connections, which must
/// not need the daemon's directory).
#[test]
fn test_containers_pass_on_the_reference_against_itself_from_a_private_directory() {
    use std::os::unix::fs::PermissionsExt;
    if quickbus_e2e::skip::unless(
        quickbus_e2e::can_change_user(),
        "needs root: the wrong-uid subtests skip otherwise, which the runner counts as failures",
    ) {
        return;
    }
    let build = containers_build();
    let private = std::env::temp_dir().join(format!("qb-containers-{}", std::process::id()));
    std::fs::create_dir(&private).expect("create the private directory");
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    // The reference is a libtool wrapper, which only works where it was
    // built: the daemon under test is a script that runs it.
    let daemon = private.join("daemon");
    std::fs::write(
        &daemon,
        format!(
            "#!/bin/sh\nexec '{}' \"$@\"\n",
            build.join("bus/dbus-daemon").display()
        ),
    )
    .expect("write the daemon");
    std::fs::set_permissions(&daemon, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = Command::new(RUNNER)
        .arg("--containers-build")
        .arg(&build)
        .args(["--supported-arguments", ""])
        .arg(&daemon)
        .output()
        .expect("run the runner");
    std::fs::remove_dir_all(&private).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let passes = stdout.lines().filter(|l| l.starts_with("PASS ")).count();
    assert_eq!(passes, 2 * 17, "{stdout}");
    assert!(
        stdout.contains("PASS test-containers /containers/wrong-uid"),
        "{stdout}"
    );
    assert!(stdout.contains("# reference: 17 passed, 0 failed, 0 skipped"));
    assert!(stdout.contains("# tested: 17 passed, 0 failed, 0 skipped"));
    assert_eq!(
        stdout.lines().last().unwrap_or(""),
        format!(
            "test-containers: {} passed all 17 subtests the reference passed, none skipped",
            daemon.display()
        )
    );
}

/// The supported arguments expected of the daemon under test reach its
/// run only: the reference, which offers none, passes its own run and
/// falls short when it stands for a daemon that offers org.quickbus.Filter.
#[test]
fn a_daemon_without_the_expected_supported_arguments_falls_short() {
    let build = containers_build();
    let logs = std::env::temp_dir().join(format!("qb-containers-logs-{}", std::process::id()));
    let out = Command::new(RUNNER)
        .arg("--containers-build")
        .arg(&build)
        .args(["--filter", "/containers/get-supported-arguments"])
        .arg("--log-dir")
        .arg(&logs)
        .arg(build.join("bus/dbus-daemon"))
        .output()
        .expect("run the runner");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("DBUS_TEST_CONTAINERS_SUPPORTED_ARGUMENTS=\"org.quickbus.Filter\""),
        "{stdout}"
    );
    assert!(stdout.contains("# reference: 1 passed, 0 failed, 0 skipped"));
    assert!(stdout.contains("# tested: 0 passed, 1 failed, 0 skipped"));
    assert!(
        stdout.contains("SHORT test-containers /containers/get-supported-arguments: failed"),
        "{stdout}"
    );
    assert!(stdout
        .lines()
        .last()
        .unwrap_or("")
        .ends_with("fell short of the reference on 1 of its 1 subtests"));
    std::fs::remove_dir_all(&logs).unwrap();
}

#[test]
fn a_directory_that_is_no_containers_build_is_a_setup_error() {
    let out = Command::new(RUNNER)
        .args(["--containers-build", "/nonexistent", "/usr/bin/dbus-daemon"])
        .output()
        .expect("run the runner");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("scripts/build-dbus-containers.sh"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
