//! Telling the service manager how the bus is doing: the sd_notify protocol
//! (`sd_notify(3)`), as dbus-daemon does under systemd. `READY=1` once the
//! listeners are bound and the loop runs, `RELOADING=1` then `READY=1`
//! around a configuration reload, `STOPPING=1` on the way out, `STATUS=`
//! text for `systemctl status`, and `WATCHDOG=1` pings when the manager
//! set `WATCHDOG_USEC`. Nothing is sent when `NOTIFY_SOCKET` is not set.
//!
//! The protocol is one datagram of `KEY=value` lines to a unix socket, so
//! this is a std `UnixDatagram` rather than the `sd-notify` crate: its
//! current release (0.5) cannot reach an abstract-namespace socket
//! (`NOTIFY_SOCKET=@name`, which service managers and containers use),
//! reads the environment and opens a new socket on every call, and needs a
//! newer Rust than this workspace's minimum.
//!
//! The variables stay in the daemon's environment (changing it is unsound
//! once threads run); the launcher leaves them out of every activated
//! service's environment (`activation::DAEMON_ONLY_VARIABLES`).

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

use tracing::{debug, warn};

const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";
const WATCHDOG_USEC: &str = "WATCHDOG_USEC";
const WATCHDOG_PID: &str = "WATCHDOG_PID";

/// The connection to the service manager, or nothing to say to.
pub struct Notifier {
    socket: Option<UnixDatagram>,
    watchdog: Option<Watchdog>,
    /// Set after `--fork`: the manager started our parent, so `READY=1`
    /// names the process that serves (`MAINPID=`).
    main_pid: Option<u32>,
}

/// `WATCHDOG=1` is due every half interval, as `sd_watchdog_enabled(3)`
/// advises, so one late turn of the loop does not get the bus killed.
struct Watchdog {
    every: Duration,
    next: Instant,
}

impl Notifier {
    /// A notifier that says nothing (no service manager, or tests).
    pub fn disabled() -> Notifier {
        Notifier {
            socket: None,
            watchdog: None,
            main_pid: None,
        }
    }

    /// The service manager named by this process's environment. Called in
    /// the process that serves (after `--fork`), `forked` telling whether
    /// it is a child of the one the manager started. An unusable
    /// `NOTIFY_SOCKET` is logged and then ignored: the bus still serves.
    pub fn from_env(forked: bool) -> Notifier {
        let Some(path) = std::env::var_os(NOTIFY_SOCKET).filter(|p| !p.is_empty()) else {
            return Notifier::disabled();
        };
        let socket = match connect(&path) {
            Ok(socket) => socket,
            Err(e) => {
                warn!(
                    "cannot reach the service manager at NOTIFY_SOCKET={}: {e}",
                    path.to_string_lossy()
                );
                return Notifier::disabled();
            }
        };
        let watchdog = watchdog_interval(
            std::env::var(WATCHDOG_USEC).ok().as_deref(),
            std::env::var(WATCHDOG_PID).ok().as_deref(),
            std::process::id(),
        )
        .map(|every| Watchdog {
            every,
            next: Instant::now(),
        });
        Notifier {
            socket: Some(socket),
            watchdog,
            main_pid: forked.then(std::process::id),
        }
    }

    /// The bus serves: every listener is bound and the loop is about to run.
    pub fn ready(&self, status: &str) {
        let mut message = String::from("READY=1\n");
        if let Some(pid) = self.main_pid {
            message.push_str(&format!("MAINPID={pid}\n"));
        }
        message.push_str(&status_line(status));
        self.send(&message);
    }

    /// A reload (or a restart in place) starts, `what` says which;
    /// [`Notifier::ready`] must follow when it is done.
    pub fn reloading(&self, what: &str) {
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let usec = now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000;
        self.send(&format!(
            "RELOADING=1\nMONOTONIC_USEC={usec}\n{}",
            status_line(what)
        ));
    }

    /// The daemon is shutting down.
    pub fn stopping(&self) {
        self.send(&format!("STOPPING=1\n{}", status_line("Shutting down")));
    }

    /// When the loop must wake up next to ping the watchdog, if enabled.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.watchdog.as_ref().map(|w| w.next)
    }

    /// Pings the watchdog if a ping is due at `now`.
    pub fn keep_alive(&mut self, now: Instant) {
        let Some(watchdog) = &mut self.watchdog else {
            return;
        };
        if now < watchdog.next {
            return;
        }
        watchdog.next = now + watchdog.every;
        self.send("WATCHDOG=1\n");
    }

    fn send(&self, message: &str) {
        let Some(socket) = &self.socket else {
            return;
        };
        debug!("service manager: {}", message.trim_end().replace('\n', " "));
        if let Err(e) = socket.send(message.as_bytes()) {
            warn!("cannot notify the service manager: {e}");
        }
    }
}

/// A `STATUS=` line: one line of text, whatever `text` holds.
fn status_line(text: &str) -> String {
    format!("STATUS={}\n", text.replace('\n', " "))
}

/// `NOTIFY_SOCKET` is a path, or `@name` for the abstract namespace.
fn connect(path: &OsStr) -> io::Result<UnixDatagram> {
    let bytes = path.as_bytes();
    let address = match bytes.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name)?
        }
        None if bytes.starts_with(b"/") => SocketAddr::from_pathname(path)?,
        None => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "neither an absolute path nor @abstract",
            ))
        }
    };
    let socket = UnixDatagram::unbound()?;
    socket.connect_addr(&address)?;
    Ok(socket)
}

/// Half of `WATCHDOG_USEC`, if it is set for this process (`WATCHDOG_PID`
/// absent or ours), as `sd_watchdog_enabled(3)` decides.
fn watchdog_interval(usec: Option<&str>, pid: Option<&str>, own_pid: u32) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|&u| u > 0)?;
    if let Some(pid) = pid {
        if pid.trim().parse::<u32>().ok() != Some(own_pid) {
            return None;
        }
    }
    Some(Duration::from_micros(usec / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchdog_pings_at_half_the_interval() {
        assert_eq!(
            watchdog_interval(Some("2000000"), None, 7),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            watchdog_interval(Some("2000000"), Some("7"), 7),
            Some(Duration::from_secs(1))
        );
    }

    #[test]
    fn watchdog_of_another_process_or_unset_is_off() {
        assert_eq!(watchdog_interval(Some("2000000"), Some("8"), 7), None);
        assert_eq!(watchdog_interval(None, None, 7), None);
        assert_eq!(watchdog_interval(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval(Some("soon"), None, 7), None);
    }

    #[test]
    fn status_is_one_line() {
        assert_eq!(status_line("a\nb"), "STATUS=a b\n");
    }

    #[test]
    fn relative_socket_paths_are_refused() {
        assert!(connect(OsStr::new("notify")).is_err());
    }

    #[test]
    fn reaches_an_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("quickbus-notify-test-{}", std::process::id());
        let manager =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
                .unwrap();
        let notifier = Notifier {
            socket: Some(connect(OsStr::new(&format!("@{name}"))).unwrap()),
            watchdog: None,
            main_pid: Some(42),
        };
        notifier.ready("serving");
        let mut buf = [0u8; 256];
        let n = manager.recv(&mut buf).unwrap();
        assert_eq!(
            std::str::from_utf8(&buf[..n]).unwrap(),
            "READY=1\nMAINPID=42\nSTATUS=serving\n"
        );
    }
}
