//! quickbus-bus: the broker's brain, sans-I/O.
//!
//! Input: authenticated peers' validated messages and connection events.
//! Output: [`Action`]s (deliveries and disconnects). No sockets in here, so
//! every routing and policy rule is testable in microseconds.
//!
//! One module per noun: [`registry`] (names and their queues), [`replies`]
//! (calls waiting for a reply), [`driver`] (the `org.freedesktop.DBus`
//! object), [`bus`] (connections and routing), [`limits`].

pub mod activation;
mod before_hello;
pub mod bus;
pub mod driver;
pub mod errors;
mod introspect;
pub mod limits;
pub mod mac;
pub mod match_index;
pub mod match_rule;
pub mod overflow;
mod peerless;
pub mod policy;
pub mod registry;
pub mod replies;
mod stats;
mod subscriptions;
mod traffic;

#[cfg(test)]
mod fuzz_regressions;
#[cfg(test)]
mod tests;

use std::os::fd::OwnedFd;
use std::sync::Arc;

/// The maps looked up for every message (connections, names, pending
/// replies) hash with foldhash: several times faster than std's SipHash on
/// these short keys (callgrind: SipHash was 14 % of the daemon's
/// instructions per round trip), and still seeded per map.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
pub(crate) type FastSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;

pub use bus::Bus;
pub use limits::{
    Limits, DEFAULT_ACTIVATION_ENVIRONMENT_BYTES, DEFAULT_ACTIVATION_ENVIRONMENT_VARIABLES,
};
pub use policy::PolicyConfig;
pub use quickbus_wire::Frame;
pub use traffic::Traffic;

/// The bus's name for itself, also the sender of every message it makes.
pub const BUS_NAME: &str = "org.freedesktop.DBus";
/// The driver's canonical object path.
pub const BUS_PATH: &str = "/org/freedesktop/DBus";
/// The driver's main interface.
pub const BUS_INTERFACE: &str = "org.freedesktop.DBus";

/// A connection, as the daemon and the bus both know it. Never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// What the kernel says about a peer (never what the peer says).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<u32>,
    /// The process's groups at connect time as the kernel reports them
    /// (`SO_PEERGROUPS`), with the primary group; empty when the kernel
    /// cannot tell (then GetConnectionCredentials has no UnixGroupIDs and
    /// group policies use [`Credentials::user_groups`], as in dbus-daemon).
    pub groups: Vec<u32>,
    /// The LSM label (`SO_PEERSEC`), without a trailing NUL.
    pub security_label: Option<Vec<u8>>,
    /// How to open a pidfd of the peer's process, reported as `ProcessFD`.
    pub process_fd: Option<ProcessFd>,
    /// What the user database says about the uid's groups: `group=`
    /// connect rules use these, and group policies when the kernel gave no
    /// groups, as dbus-daemon does.
    pub user_groups: UserGroups,
    /// Authenticated with ANONYMOUS: the bus reports no uid, pid or groups
    /// for it (dbus-daemon's driver knows only the authenticated identity).
    pub anonymous: bool,
    /// The peer's command line as dbus-daemon quotes it in log lines and
    /// AccessDenied texts (`comm="..."`), when the daemon could read it.
    pub comm: Option<String>,
}

/// How to get a pidfd of a peer's process when GetConnectionCredentials
/// asks for one. Opened on demand rather than held: a pidfd per connection
/// would double the daemon's open files, and with them the fd limit a bus
/// of 10,000 connections needs. The daemon and the bus core each keep a
/// copy of a connection's credentials, so the handle is shared.
#[derive(Clone)]
pub struct ProcessFd(Arc<dyn Fn() -> std::io::Result<OwnedFd> + Send + Sync>);

impl ProcessFd {
    /// A handle that hands out duplicates of `fd`.
    pub fn new(fd: OwnedFd) -> ProcessFd {
        ProcessFd::opener(move || fd.try_clone())
    }

    /// A handle that calls `open` for each pidfd it hands out; `open` must
    /// fail rather than return a pidfd of another process.
    pub fn opener(
        open: impl Fn() -> std::io::Result<OwnedFd> + Send + Sync + 'static,
    ) -> ProcessFd {
        ProcessFd(Arc::new(open))
    }

    /// A new pidfd of the process, owned by the caller.
    pub fn open(&self) -> std::io::Result<OwnedFd> {
        (self.0)()
    }
}

impl std::fmt::Debug for ProcessFd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProcessFd")
    }
}

/// Two copies are equal when they are one handle: fd numbers say nothing
/// about which process a pidfd pins.
impl PartialEq for ProcessFd {
    fn eq(&self, other: &ProcessFd) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.0), Arc::as_ptr(&other.0))
    }
}

impl Eq for ProcessFd {}

/// A uid's groups according to the user database.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum UserGroups {
    /// Nobody looked them up (the bus core's own tests): the socket's
    /// groups stand in.
    #[default]
    Unresolved,
    /// The database has no such user. dbus-daemon cannot tell its groups
    /// and refuses it whenever the policy is consulted at connection time.
    UnknownUser,
    /// Primary and supplementary groups.
    Known(Vec<u32>),
}

/// One message ready to go out: the stamped header and shared body, and the
/// fds that travel with it. Cloning is cheap (reference counts only), so
/// every receiver of a broadcast gets a clone of the same `OutMessage`.
#[derive(Clone, Debug)]
pub struct OutMessage {
    pub frame: Frame,
    pub fds: Arc<Vec<OwnedFd>>,
}

/// What the daemon must do after the bus handled an event.
#[derive(Debug)]
pub enum Action {
    /// Queue `msg` on connection `to`'s socket.
    Deliver { to: ConnId, msg: OutMessage },
    /// Close connection `conn`, logging `reason`. The daemon then calls
    /// [`Bus::remove_connection`].
    Disconnect { conn: ConnId, reason: String },
    /// Start the service that provides `name` (its `.service` file's
    /// Exec line, with [`Bus::activation_environment`]). Success is the
    /// name getting an owner; failure goes back through
    /// [`Bus::activation_failed`].
    Activate {
        name: String,
        /// The connection whose message or StartServiceByName caused the
        /// start (None when the bus itself needs the name), for the log.
        requested_by: Option<Requester>,
    },
    /// The activation of `name` timed out: stop the program started for
    /// it, as dbus-daemon does.
    CancelActivation { name: String },
}

/// A connection as log lines name it: dbus-daemon's `requested by ':1.5'
/// (uid=0 pid=123 comm="hostnamectl")`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requester {
    pub unique_name: String,
    pub uid: u32,
    pub pid: Option<u32>,
    pub comm: Option<String>,
}

impl Requester {
    /// dbus-daemon's "loginfo" of the connection: `uid=0 pid=123
    /// comm="hostnamectl"`.
    pub fn loginfo(&self) -> String {
        loginfo(self.uid, self.pid, self.comm.as_deref())
    }
}

/// dbus-daemon's "loginfo": who a connection is, for people. As there,
/// `comm` comes with the pid, empty when the command line was unreadable.
pub fn loginfo(uid: u32, pid: Option<u32>, comm: Option<&str>) -> String {
    let mut info = format!("uid={uid}");
    if let Some(pid) = pid {
        let comm = comm.unwrap_or("");
        info.push_str(&format!(" pid={pid} comm=\"{comm}\""));
    }
    info
}

/// How the bus is set up.
#[derive(Clone, Debug, Default)]
pub struct BusOptions {
    /// The server GUID (`GetId`, the SASL `OK` line).
    pub guid: String,
    /// This machine's id (`org.freedesktop.DBus.Peer.GetMachineId`).
    pub machine_id: String,
    pub limits: Limits,
    /// Names a `.service` file can start (`ListActivatableNames`).
    pub activatable_names: Vec<String>,
    /// "session", "system", or whatever the configuration says.
    pub bus_type: String,
    /// `--systemd-activation`: services with a `SystemdService=` are
    /// started by asking systemd.
    pub systemd_activation: bool,
    /// Activatable name -> its `SystemdService=` unit.
    pub systemd_units: std::collections::HashMap<String, String>,
}

/// The driver's introspection XML at `path` (also `quickbus-daemon --introspect`).
pub fn introspection_xml(path: &str) -> String {
    introspect::introspect(path)
}
