//! The sides of the sandbox comparison: a bus daemon and the socket the
//! filtered app connects to, made either by xdg-dbus-proxy in front of the
//! bus or by the bus itself (a Containers1 server with the filter as a
//! named argument). Everything a side starts (daemon, proxy, container
//! socket, scratch directories) is stopped and removed when it is dropped.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

use crate::daemon::{Daemon, Scratch};
use crate::TIMEOUT;

/// The xdg-dbus-proxy the reference uses (Debian's package).
pub const XDG_DBUS_PROXY: &str = "/usr/bin/xdg-dbus-proxy";

/// Which bus, and what stands between it and the filtered app.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The reference: xdg-dbus-proxy in front of dbus-daemon.
    ProxyOnDbusDaemon,
    /// xdg-dbus-proxy in front of quickbus-daemon: must agree with the
    /// reference whatever quickbus's own filter does (a check of the
    /// harness and of quickbus's routing).
    ProxyOnQuickbus,
    /// quickbus-daemon alone: a Containers1 server whose
    /// `org.quickbus.Filter` named argument carries the same rules.
    QuickbusContainer,
}

impl Side {
    /// Its name in reports and in `QUICKBUS_SANDBOX_SIDE`.
    pub fn name(self) -> &'static str {
        match self {
            Side::ProxyOnDbusDaemon => "proxy-on-dbus-daemon",
            Side::ProxyOnQuickbus => "proxy-on-quickbus",
            Side::QuickbusContainer => "quickbus-container",
        }
    }

    pub fn from_name(name: &str) -> Option<Side> {
        [
            Side::ProxyOnDbusDaemon,
            Side::ProxyOnQuickbus,
            Side::QuickbusContainer,
        ]
        .into_iter()
        .find(|side| side.name() == name)
    }

    fn uses_proxy(self) -> bool {
        self != Side::QuickbusContainer
    }
}

/// The programs the sides run.
#[derive(Clone, Debug)]
pub struct Programs {
    pub dbus_daemon: PathBuf,
    pub quickbus_daemon: PathBuf,
    pub proxy: PathBuf,
}

/// A running xdg-dbus-proxy, stopped when dropped.
pub struct Proxy {
    child: Child,
    socket: PathBuf,
    // Dropped after the child is stopped (field order).
    _scratch: Scratch,
}

impl Proxy {
    /// `xdg-dbus-proxy ADDRESS SOCKET --filter RULES...`, returned once
    /// its socket accepts connections.
    pub fn start(program: &Path, bus_address: &str, rules: &[String]) -> Proxy {
        let scratch = Scratch::new();
        let socket = scratch.path().join("proxy");
        let stderr = std::fs::File::create(scratch.path().join("proxy.stderr")).expect("log");
        let child = Command::new(program)
            .arg(bus_address)
            .arg(&socket)
            .arg("--filter")
            .args(rules)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        let mut proxy = Proxy {
            child,
            socket,
            _scratch: scratch,
        };
        proxy.wait_listening();
        proxy
    }

    /// The proxy binds and listens in one go, but only after it parsed its
    /// arguments: a connection that succeeds says it is ready (the proxy
    /// opens a bus connection for it, which ends unauthenticated and
    /// unseen when this one closes).
    fn wait_listening(&mut self) {
        let deadline = Instant::now() + TIMEOUT;
        while Instant::now() < deadline {
            if UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("xdg-dbus-proxy exited ({status}): {}", self.log());
            }
            thread::sleep(Duration::from_millis(5));
        }
        panic!("xdg-dbus-proxy did not listen in time: {}", self.log());
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._scratch.path().join("proxy.stderr")).unwrap_or_default()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// SIGTERM, then SIGKILL if the process lingers; always reaped.
fn stop(child: &mut Child) {
    let _ = kill_process(Pid::from_child(child), Signal::Term);
    let deadline = Instant::now() + TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The daemon a side runs, with the harness's session configuration.
pub fn start_daemon(side: Side, programs: &Programs, services: &[(String, String)]) -> Daemon {
    let program = match side {
        Side::ProxyOnDbusDaemon => &programs.dbus_daemon,
        Side::ProxyOnQuickbus | Side::QuickbusContainer => &programs.quickbus_daemon,
    };
    Daemon::start(program, "", services)
}

/// Starts the proxy of a side that has one.
pub fn start_proxy(
    side: Side,
    programs: &Programs,
    daemon: &Daemon,
    rules: &[String],
) -> Option<Proxy> {
    side.uses_proxy()
        .then(|| Proxy::start(&programs.proxy, daemon.address(), rules))
}
