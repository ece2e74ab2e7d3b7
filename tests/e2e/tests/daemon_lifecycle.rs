//! How other programs start and stop the daemon: the spawn contract test
//! harnesses rely on (`--config-file=/proc/self/fd/N --print-address=FD`),
//! `--fork` with `--print-pid`, sockets handed over by systemd
//! (`LISTEN_FDS`), and SIGINT.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use quickbus_e2e::{
    assert_guid_suffix, daemon_path, driver_call, run_bounded, running, skip, terminate_and_wait,
    write_config, Background, Listen, TempDir, TIMEOUT,
};
use rustix::process::{kill_process, Pid, Signal};

fn list_names(address: &str) -> String {
    driver_call(address, "ListNames").success().stdout
}

fn wait_until(mut done: impl FnMut() -> bool, what: &str) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < TIMEOUT, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The contract: config read from an inherited fd, the address written to
/// another fd in one write followed by a newline, then that fd closed (the
/// reader sees EOF while the daemon keeps running).
#[test]
fn config_from_an_inherited_fd_and_address_to_a_pipe_that_is_then_closed() {
    let dir = TempDir::new();
    let config = write_config(dir.path(), Listen::UnixPath);
    let script = format!(
        "exec {} --config-file=/proc/self/fd/5 --print-address=6 --nofork 5<'{}' 6>&1 1>&2",
        daemon_path().display(),
        config.display()
    );
    let mut daemon = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = daemon.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut all = String::new();
        let _ = stdout.read_to_string(&mut all);
        let _ = tx.send(all); // sent only at EOF
    });
    let everything = rx
        .recv_timeout(TIMEOUT)
        .expect("the address fd was never closed");
    let pid = daemon.id();
    assert!(running(pid), "the daemon exited instead of closing the fd");
    let address = everything
        .strip_suffix('\n')
        .expect("address ends in a newline");
    assert!(
        !address.contains('\n'),
        "more than one line: {everything:?}"
    );
    assert_guid_suffix(address);
    assert!(list_names(address).contains("org.freedesktop.DBus"));
    terminate_and_wait(pid);
    assert!(daemon.wait().unwrap().success());
}

#[test]
fn fork_prints_address_and_pid_then_the_parent_exits_zero() {
    let dir = TempDir::new();
    let config = write_config(dir.path(), Listen::UnixPath);
    let address_file = dir.path().join("address");
    let pid_file = dir.path().join("pid");
    let script = format!(
        "{} --config-file='{}' --fork --print-address=8 --print-pid=9 8>'{}' 9>'{}'",
        daemon_path().display(),
        config.display(),
        address_file.display(),
        pid_file.display()
    );
    // The parent returns once the child is ready.
    run_bounded(Command::new("bash").arg("-c").arg(&script)).success();
    let address = std::fs::read_to_string(&address_file).unwrap();
    let pid_text = std::fs::read_to_string(&pid_file).unwrap();
    assert!(address.ends_with('\n') && pid_text.ends_with('\n'));
    assert_guid_suffix(address.trim_end());
    let pid: u32 = pid_text.trim().parse().unwrap();
    assert!(running(pid), "the forked daemon {pid} is not running");
    assert!(list_names(address.trim_end()).contains("org.freedesktop.DBus"));
    terminate_and_wait(pid);
}

/// quickbus's promise (dbus-daemon itself dies of SIGINT, leaving its
/// socket file behind).
#[test]
fn sigint_stops_the_daemon_with_status_zero() {
    if skip::quickbus_only("stopping cleanly on SIGINT") {
        return;
    }
    let dir = TempDir::new();
    let config = write_config(dir.path(), Listen::UnixPath);
    let mut daemon = Background::spawn(
        Command::new(daemon_path())
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"]),
    );
    let address = daemon.read_line();
    list_names(&address);
    kill_process(Pid::from_raw(daemon.pid() as i32).unwrap(), Signal::Int).unwrap();
    assert!(daemon.wait().success());
    assert!(
        !dir.path().join("bus").exists(),
        "socket file left behind after a clean stop"
    );
}

/// `systemd-socket-activate` binds the socket and starts the daemon on the
/// first connection with LISTEN_FDS=1: the daemon serves that socket.
#[test]
fn serves_a_socket_handed_over_by_systemd() {
    // dbus-daemon takes LISTEN_FDS only with --systemd-activation.
    if skip::quickbus_only("LISTEN_FDS without --systemd-activation") {
        return;
    }
    let installed = Command::new("systemd-socket-activate")
        .arg("--help")
        .output()
        .is_ok();
    if skip::unless(installed, "systemd-socket-activate is not installed") {
        return;
    }
    let dir = TempDir::new();
    let config = write_config(dir.path(), Listen::UnixTmpdir);
    let socket = dir.path().join("activated");
    let mut launcher = Background::spawn(
        Command::new("systemd-socket-activate")
            .arg("-l")
            .arg(&socket)
            .arg(daemon_path())
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"]),
    );
    wait_until(|| socket.exists(), "the activation socket");
    let address = format!("unix:path={}", socket.display());
    assert!(list_names(&address).contains("org.freedesktop.DBus"));
    // The printed address is the handed-over socket, not the configured tmpdir.
    let printed = launcher.read_line();
    assert!(
        printed.starts_with(&format!("{address},guid=")),
        "{printed}"
    );
    terminate_and_wait(launcher.pid());
}

/// `--address=` with `unix:dir=` (a fresh socket file in the directory) and
/// `unix:runtime=yes` (`$XDG_RUNTIME_DIR/bus`): the printed address works.
#[test]
fn listens_on_unix_dir_and_unix_runtime() {
    let dir = TempDir::new();
    let config = write_config(dir.path(), Listen::UnixPath);
    let runtime = dir.path().join("runtime");
    let sockets = dir.path().join("sockets");
    std::fs::create_dir_all(&runtime).unwrap();
    std::fs::create_dir_all(&sockets).unwrap();
    for (address, expected_prefix) in [
        (
            format!("unix:dir={}", sockets.display()),
            format!("unix:path={}/dbus-", sockets.display()),
        ),
        (
            "unix:runtime=yes".to_string(),
            format!("unix:path={}/bus,", runtime.display()),
        ),
    ] {
        let mut daemon = Background::spawn(
            Command::new(daemon_path())
                .env("XDG_RUNTIME_DIR", &runtime)
                .arg(format!("--config-file={}", config.display()))
                .arg(format!("--address={address}"))
                .args(["--nofork", "--print-address"]),
        );
        let printed = daemon.read_line();
        assert!(printed.starts_with(&expected_prefix), "{printed}");
        assert_guid_suffix(&printed);
        assert!(list_names(&printed).contains("org.freedesktop.DBus"));
        terminate_and_wait(daemon.pid());
    }
}

/// Several `<listen>` elements: the bus listens on each, and prints (and
/// gives the services it starts) all their addresses, `;`-separated, the
/// last configured first, as dbus-daemon does. Within one element or
/// `--address=`, the entries are alternatives: the first that can be bound
/// is the one listened on.
#[test]
fn every_listen_is_printed_and_alternatives_fall_back() {
    let dir = TempDir::new();
    let second = dir.path().join("second");
    let extra = format!("<listen>unix:path={}</listen>", second.display());
    let config = quickbus_e2e::write_config_with(dir.path(), Listen::UnixPath, &extra);
    let mut daemon = Background::spawn(
        Command::new(daemon_path())
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"]),
    );
    let printed = daemon.read_line();
    let addresses: Vec<&str> = printed.split(';').collect();
    assert_eq!(addresses.len(), 2, "{printed}");
    let first = format!("unix:path={},guid=", second.display());
    let then = format!("unix:path={}/bus,guid=", dir.path().display());
    assert!(addresses[0].starts_with(&first), "{printed}");
    assert!(addresses[1].starts_with(&then), "{printed}");
    for address in &addresses {
        assert_guid_suffix(address);
        assert!(list_names(address).contains("org.freedesktop.DBus"));
    }
    terminate_and_wait(daemon.pid());

    // A directory that does not exist gives way to the next entry, which
    // is the only one listened on.
    let fallback = dir.path().join("fallback");
    let unused = dir.path().join("unused");
    let mut daemon = Background::spawn(
        Command::new(daemon_path())
            .arg(format!("--config-file={}", config.display()))
            .arg(format!(
                "--address=unix:path={};unix:path={};unix:path={}",
                dir.path().join("missing/bus").display(),
                fallback.display(),
                unused.display()
            ))
            .args(["--nofork", "--print-address"]),
    );
    let printed = daemon.read_line();
    assert!(
        printed.starts_with(&format!("unix:path={},guid=", fallback.display())),
        "{printed}"
    );
    assert!(!printed.contains(';'), "{printed}");
    assert!(list_names(&printed).contains("org.freedesktop.DBus"));
    assert!(!unused.exists());
    terminate_and_wait(daemon.pid());
}

fn activatable_names(address: &str) -> String {
    driver_call(address, "ListActivatableNames")
        .success()
        .stdout
}

fn reload_config(address: &str) -> quickbus_e2e::Finished {
    driver_call(address, "ReloadConfig")
}

/// ReloadConfig and SIGHUP re-read the configuration and the service
/// files; a broken new configuration is refused and the bus keeps serving.
#[test]
fn reload_picks_up_new_service_files_and_refuses_a_broken_config() {
    let dir = TempDir::new();
    let services = dir.path().join("services");
    std::fs::create_dir_all(&services).unwrap();
    let extra = format!("<servicedir>{}</servicedir>", services.display());
    let config = quickbus_e2e::write_config_with(dir.path(), Listen::UnixPath, &extra);
    let mut daemon = Background::spawn(
        Command::new(daemon_path())
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"]),
    );
    let address = daemon.read_line();
    assert!(!activatable_names(&address).contains("org.example.Reloaded"));

    std::fs::write(
        services.join("reloaded.service"),
        "[D-BUS Service]\nName=org.example.Reloaded\nExec=/bin/false\n",
    )
    .unwrap();
    reload_config(&address).success();
    assert!(activatable_names(&address).contains("org.example.Reloaded"));

    // SIGHUP does the same.
    std::fs::write(
        services.join("hup.service"),
        "[D-BUS Service]\nName=org.example.Hup\nExec=/bin/false\n",
    )
    .unwrap();
    kill_process(Pid::from_raw(daemon.pid() as i32).unwrap(), Signal::Hup).unwrap();
    wait_until(
        || activatable_names(&address).contains("org.example.Hup"),
        "the service added before SIGHUP",
    );

    // A broken configuration is refused; the old one stays in force.
    std::fs::write(&config, "<busconfig><listen>").unwrap();
    std::fs::remove_file(services.join("reloaded.service")).unwrap();
    let _ = reload_config(&address); // dbus-daemon answers with an error here
    assert!(
        activatable_names(&address).contains("org.example.Reloaded"),
        "the refused configuration replaced the old one"
    );
    assert!(list_names(&address).contains("org.freedesktop.DBus"));
    terminate_and_wait(daemon.pid());
    assert!(daemon.wait().success());
}

/// The soft and hard "Max open files" of process `pid`.
fn open_file_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("read limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a Max open files line");
    let fields: Vec<&str> = line["Max open files".len()..].split_whitespace().collect();
    (fields[0].to_owned(), fields[1].to_owned())
}

/// Like dbus-daemon, the daemon raises its open-file limit at start-up (to
/// 65,536 when allowed, and, unlike dbus-daemon, at least the soft limit
/// to the hard one when not): each connection costs an fd.
#[test]
fn the_daemon_raises_its_soft_open_file_limit_to_the_hard_one() {
    if skip::quickbus_only("raising the soft open-file limit to the hard one") {
        return;
    }
    // The tests' own limit, which the daemon inherits: keep it below the
    // hard one so the raise is visible.
    let ours = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let (Some(_), Some(hard)) = (ours.current, ours.maximum) else {
        skip::cannot_run("this process's open files are unlimited: no raise to see");
        return;
    };
    let dir = TempDir::new();
    let config = write_config(dir.path(), Listen::UnixPath);
    // prlimit sets a low soft limit and execs the daemon (same pid).
    let mut daemon = Background::spawn(
        Command::new("prlimit")
            .arg(format!("--nofile=256:{hard}"))
            .arg("--")
            .arg(daemon_path())
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"]),
    );
    let address = daemon.read_line();
    assert!(list_names(&address).contains("org.freedesktop.DBus"));
    let (soft, daemon_hard) = open_file_limits(daemon.pid());
    assert_ne!(soft, "256", "the soft limit was not raised");
    assert_eq!(soft, daemon_hard);
    assert!(daemon_hard.parse::<u64>().unwrap() >= hard);
    terminate_and_wait(daemon.pid());
}
