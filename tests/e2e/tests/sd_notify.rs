//! The daemon under a service manager: the test binds the datagram socket
//! systemd would (`NOTIFY_SOCKET`) and reads what the daemon tells it:
//! `READY=1` once the bus answers, `RELOADING=1` then `READY=1` around
//! ReloadConfig, `STOPPING=1` on SIGTERM (as dbus-daemon sends them), and
//! quickbus's `STATUS=`, `MONOTONIC_USEC=` and watchdog pings.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::Path;
use std::process::Command;

use quickbus_e2e::{
    daemon_path, driver_call, run_bounded, skip, testing_quickbus, write_config_with, Background,
    Listen, TempDir, TIMEOUT,
};
use rustix::process::{kill_process, Pid, Signal};

/// The service manager's end: a bound datagram socket.
struct Manager {
    socket: UnixDatagram,
    /// What the daemon gets as `NOTIFY_SOCKET`.
    name: String,
}

impl Manager {
    /// A socket file in `dir`.
    fn at_path(dir: &Path) -> Manager {
        let path = dir.join("notify");
        let socket = UnixDatagram::bind(&path).expect("bind the notify socket");
        Manager::with(socket, path.display().to_string())
    }

    /// A socket in the abstract namespace (`NOTIFY_SOCKET=@name`).
    fn abstract_socket() -> Manager {
        let name = format!(
            "quickbus-e2e-notify-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        );
        let address = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let socket = UnixDatagram::bind_addr(&address).expect("bind the abstract notify socket");
        Manager::with(socket, format!("@{name}"))
    }

    fn with(socket: UnixDatagram, name: String) -> Manager {
        socket.set_read_timeout(Some(TIMEOUT)).unwrap();
        Manager { socket, name }
    }

    /// The next datagram, as its `KEY=value` lines.
    fn next(&self) -> Vec<String> {
        let mut buf = vec![0u8; 4096];
        let n = self
            .socket
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("no notification within {TIMEOUT:?}: {e}"));
        String::from_utf8(buf[..n].to_vec())
            .expect("notifications are text")
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The next datagram, which must carry `line`.
    fn expect(&self, line: &str) -> Vec<String> {
        let message = self.next();
        assert!(
            message.iter().any(|l| l == line),
            "expected {line} in the next notification, got {message:?}"
        );
        message
    }
}

/// A daemon on a fresh `unix:path=` bus told of `manager`, with `extra`
/// in its configuration and `env` added to its environment.
fn start(dir: &TempDir, manager: &Manager, extra: &str, env: &[(&str, &str)]) -> Background {
    let config = write_config_with(dir.path(), Listen::UnixPath, extra);
    let mut cmd = Command::new(daemon_path());
    cmd.arg(format!("--config-file={}", config.display()))
        .args(["--nofork", "--print-address"])
        .env("NOTIFY_SOCKET", &manager.name)
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID");
    for (key, value) in env {
        cmd.env(key, value);
    }
    Background::spawn(&mut cmd)
}

fn terminate(pid: u32) {
    kill_process(Pid::from_raw(pid as i32).unwrap(), Signal::Term).unwrap();
}

fn has_key(message: &[String], key: &str) -> bool {
    message.iter().any(|l| l.starts_with(&format!("{key}=")))
}

#[test]
fn ready_once_the_bus_answers_then_reloading_ready_and_stopping() {
    let dir = TempDir::new();
    let manager = Manager::at_path(dir.path());
    let mut daemon = start(&dir, &manager, "", &[]);
    let ready = manager.expect("READY=1");
    // READY=1 came first: from now on the bus answers.
    let address = daemon.read_line();
    driver_call(&address, "ListNames").success();
    if testing_quickbus() {
        assert!(has_key(&ready, "STATUS"), "{ready:?}");
        assert!(!has_key(&ready, "MAINPID"), "not forked: {ready:?}");
    }

    driver_call(&address, "ReloadConfig").success();
    let reloading = manager.expect("RELOADING=1");
    if testing_quickbus() {
        // systemd's Type=notify-reload wants the clock with RELOADING=1.
        assert!(has_key(&reloading, "MONOTONIC_USEC"), "{reloading:?}");
    }
    manager.expect("READY=1");

    terminate(daemon.pid());
    manager.expect("STOPPING=1");
    assert!(daemon.wait().success());
}

#[test]
fn a_restart_in_place_is_reloading_then_ready_from_the_same_pid() {
    if skip::quickbus_only("restarting in place (docs/restart.md)") {
        return;
    }
    let dir = TempDir::new();
    let manager = Manager::at_path(dir.path());
    let mut daemon = start(&dir, &manager, "", &[]);
    manager.expect("READY=1");
    let address = daemon.read_line();
    kill_process(Pid::from_raw(daemon.pid() as i32).unwrap(), Signal::Usr2).unwrap();
    let reloading = manager.expect("RELOADING=1");
    assert!(has_key(&reloading, "MONOTONIC_USEC"), "{reloading:?}");
    assert!(
        reloading.iter().any(|l| l == "STATUS=Restarting in place"),
        "{reloading:?}"
    );
    // The new image's READY=1; the pid is the same process all along
    // (the test's child), which systemd's NotifyAccess=main requires.
    let ready = manager.expect("READY=1");
    assert!(has_key(&ready, "STATUS"), "{ready:?}");
    driver_call(&address, "ListNames").success();
    terminate(daemon.pid());
    manager.expect("STOPPING=1");
    assert!(daemon.wait().success());
}

#[test]
fn an_abstract_notify_socket_is_reached() {
    let dir = TempDir::new();
    let manager = Manager::abstract_socket();
    let mut daemon = start(&dir, &manager, "", &[]);
    manager.expect("READY=1");
    let address = daemon.read_line();
    driver_call(&address, "ListNames").success();
    terminate(daemon.pid());
    manager.expect("STOPPING=1");
    assert!(daemon.wait().success());
}

/// quickbus's promise: `WATCHDOG_USEC` is honoured from the event loop.
#[test]
fn the_watchdog_is_pinged_when_the_manager_asks() {
    if skip::quickbus_only("WATCHDOG_USEC") {
        return;
    }
    let dir = TempDir::new();
    let manager = Manager::at_path(dir.path());
    // 200 ms: pings every 100 ms, with nothing else happening on the bus.
    let mut daemon = start(&dir, &manager, "", &[("WATCHDOG_USEC", "200000")]);
    manager.expect("READY=1");
    for _ in 0..3 {
        assert_eq!(manager.next(), ["WATCHDOG=1"]);
    }
    terminate(daemon.pid());
    assert!(daemon.wait().success());
}

/// quickbus's promise: a watchdog meant for another process is not ours.
#[test]
fn the_watchdog_of_another_pid_is_ignored() {
    if skip::quickbus_only("WATCHDOG_PID") {
        return;
    }
    let dir = TempDir::new();
    let manager = Manager::at_path(dir.path());
    let mut daemon = start(
        &dir,
        &manager,
        "",
        &[("WATCHDOG_USEC", "200000"), ("WATCHDOG_PID", "1")],
    );
    manager.expect("READY=1");
    let address = daemon.read_line();
    driver_call(&address, "ListNames").success();
    terminate(daemon.pid());
    // Nothing came between READY=1 and STOPPING=1.
    manager.expect("STOPPING=1");
    assert!(daemon.wait().success());
}

/// quickbus's promise: after `--fork` only the serving child notifies,
/// once, naming itself as the main process.
#[test]
fn a_forked_daemon_notifies_once_from_the_child() {
    if skip::quickbus_only("sd_notify after --fork") {
        return;
    }
    let dir = TempDir::new();
    let manager = Manager::at_path(dir.path());
    let config = write_config_with(dir.path(), Listen::UnixPath, "");
    let address_file = dir.path().join("address");
    let pid_file = dir.path().join("pid");
    let script = format!(
        "{} --config-file='{}' --fork --print-address=8 --print-pid=9 8>'{}' 9>'{}'",
        daemon_path().display(),
        config.display(),
        address_file.display(),
        pid_file.display()
    );
    // The parent has exited when this returns.
    run_bounded(
        Command::new("bash")
            .arg("-c")
            .arg(&script)
            .env("NOTIFY_SOCKET", &manager.name),
    )
    .success();
    let address = std::fs::read_to_string(&address_file).unwrap();
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let ready = manager.expect("READY=1");
    assert!(
        ready.contains(&format!("MAINPID={pid}")),
        "READY=1 of the child {pid}: {ready:?}"
    );
    // The next one is the reload's: no second READY=1 from the parent.
    driver_call(address.trim_end(), "ReloadConfig").success();
    manager.expect("RELOADING=1");
    manager.expect("READY=1");
    terminate(pid);
    manager.expect("STOPPING=1");
}

/// `NOTIFY_SOCKET` is the daemon's: a service it starts does not get it
/// (it would otherwise speak for the bus to the service manager).
#[test]
fn activated_services_do_not_inherit_notify_socket() {
    let dir = TempDir::new();
    let manager = Manager::at_path(dir.path());
    let services = dir.path().join("services");
    std::fs::create_dir(&services).unwrap();
    let env_dump = dir.path().join("service.env");
    std::fs::write(
        services.join("org.example.Env.service"),
        format!(
            "[D-BUS Service]\nName=org.example.Env\nExec=/bin/sh -c \"env > {}; exit 3\"\n",
            env_dump.display()
        ),
    )
    .unwrap();
    let extra = format!("<servicedir>{}</servicedir>", services.display());
    let mut daemon = start(&dir, &manager, &extra, &[]);
    manager.expect("READY=1");
    let address = daemon.read_line();
    // The service exits without taking its name: the start fails, after
    // it wrote its environment.
    let out = run_bounded(
        Command::new("dbus-send")
            .env("DBUS_SESSION_BUS_ADDRESS", &address)
            .args([
                "--session",
                "--print-reply",
                "--dest=org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus.StartServiceByName",
                "string:org.example.Env",
                "uint32:0",
            ]),
    );
    assert!(!out.status.success(), "{out:#?}");
    let env = std::fs::read_to_string(&env_dump).expect("the service ran");
    assert!(env.contains("DBUS_STARTER_ADDRESS="), "{env}");
    assert!(!env.contains("NOTIFY_SOCKET"), "{env}");
    terminate(daemon.pid());
    manager.expect("STOPPING=1");
    assert!(daemon.wait().success());
}
