//! quickbus-bus: the broker's brain, sans-I/O.
//!
//! Input: authenticated peers' validated messages and connection events.
//! Output: [`Action`]s (deliveries and disconnects). No sockets in here, so
//! every routing and policy rule is testable in microseconds.
//!
//! Three layers. The nouns each own their state behind private fields
//! and do not know the bus: `peers` (connections and who they are),
//! [`registry`] (names and their queues), [`replies`] (calls waiting for a
//! reply), `subscriptions` (match rules and monitors), [`activation`]
//! (services being started), `traffic` and `stats` (counters and peaks),
//! [`overflow`] (what is queued for each connection and user, with
//! [`flow`], [`accounting`], [`hold_budget`]), [`policy`] (the rules),
//! [`app_filter`] (xdg-dbus-proxy's per-app rules, docs/containers.md),
//! [`limits`], [`containers`] (Containers1's instances). The router,
//! [`bus`], holds one of each and routes between
//! them; its children each do one job for it (making a bus, a
//! connection's life, the bus's own messages, name signals, activation,
//! flow control, the policy check, per-app filtering, counting). Above both, [`driver`] (the
//! `org.freedesktop.DBus` object, one method table for dispatch and
//! introspection) uses the nouns it needs; [`mac`] asks the security
//! module. docs/architecture.md has the table of who owns and may touch
//! what.
//!
//! No I/O and no clock: the time is an argument of every entry point, the
//! bus's own identity comes in [`BusOptions`], and what only the daemon can
//! do (start a program, open a pidfd, read the service directories, reload
//! the configuration, write to a socket, stop reading a sender) goes out
//! as an [`Action`].

#![forbid(unsafe_code)]

pub mod accounting;
pub mod activation;
pub mod app_filter;
pub mod bus;
pub mod containers;
pub mod driver;
pub mod errors;
pub mod fds;
pub mod flow;
pub mod handover;
pub mod hold_budget;
mod introspect;
pub mod limits;
pub mod mac;
pub mod match_index;
pub mod match_rule;
pub mod outbox;
pub mod overflow;
mod peers;
pub mod policy;
pub mod registry;
pub mod replies;
mod stats;
mod subscriptions;
mod traffic;

#[cfg(test)]
mod fuzz_regressions;
// Tests may use the clock and files (see clippy.toml).
#[cfg(test)]
#[allow(clippy::disallowed_methods)]
mod tests;

use crate::fds::PassedFd;
use std::sync::Arc;

/// The maps looked up for every message (connections, names, pending
/// replies) hash with foldhash: several times faster than std's SipHash on
/// these short keys (callgrind: SipHash was 14 % of the daemon's
/// instructions per round trip), and still seeded per map.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
pub(crate) type FastSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;

pub use app_filter::{AppFilter, AppFilterError};
pub use bus::Bus;
pub use driver::containers::{ContainerSocket, FILTER_ARGUMENT};
pub use limits::{
    Limits, DEFAULT_ACTIVATION_ENVIRONMENT_BYTES, DEFAULT_ACTIVATION_ENVIRONMENT_VARIABLES,
};
pub use policy::PolicyConfig;
pub use quickbus_wire::Frame;
pub use traffic::Traffic;

/// The driver's name, path and interface (defined once, in quickbus-wire).
pub use quickbus_wire::{BUS_INTERFACE, BUS_NAME, BUS_PATH, DAEMON_INTERFACE};

/// A connection, as the daemon and the bus both know it: the bus gives it
/// ([`Bus::next_connection_id`]) and the daemon uses the same number as
/// its mio token. Never reused.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct ConnId(pub u64);

/// What the kernel says about a peer (never what the peer says).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// When the peer's process started (clock ticks after boot, as
    /// `/proc/PID/stat` says): with `pid` it names the process for good,
    /// so the daemon can open a pidfd of it when GetConnectionCredentials
    /// asks ([`Action::OpenPidfd`]). None: no `ProcessFD` is offered.
    pub process_started: Option<u64>,
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

/// A uid's groups according to the user database.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct OutMessage {
    #[serde(with = "crate::handover::shared_frame")]
    pub frame: Frame,
    #[serde(with = "crate::handover::shared_fds")]
    pub fds: Arc<Vec<PassedFd>>,
    /// What it is to the receiver it is addressed to (copies for others
    /// are signals to flow control).
    pub kind: flow::Kind,
}

/// What the daemon must do after the bus handled an event.
#[derive(Debug)]
pub enum Action {
    /// A message went into connection `to`'s outgoing queue (the bus
    /// keeps it: [`Bus::write_queue`] writes it); `kind`: what it is to
    /// `to`: a call only for the receiver it is addressed to, which owes
    /// an answer (a monitor's or an eavesdropper's copy of a call is a
    /// signal); a reply for its caller and its copies alike. One per
    /// message, in the order they were queued.
    Queued {
        to: ConnId,
        kind: flow::Kind,
        /// It went in behind messages not written yet: the daemon, which
        /// lists a connection for writing when its queue gets a first
        /// message and watches it for room while a write leaves some
        /// behind, already knows there is something to write.
        behind: bool,
        /// The message (for the bus's own tests).
        #[cfg(test)]
        msg: outbox::OutItem,
    },
    /// Close connection `conn`, logging `reason`. The daemon then calls
    /// [`Bus::remove_connection`].
    Disconnect { conn: ConnId, reason: String },
    /// Stop reading connection `conn`: a receiver of its message is full,
    /// or paced it (see [`flow`]). Its input waits in the kernel, which
    /// pushes back on it, until [`Action::ReleaseSender`].
    HoldSender { conn: ConnId },
    /// Read connection `conn` again (its input may be waiting already).
    ReleaseSender { conn: ConnId },
    /// A warning about connection `about` that a peer can cause again and
    /// again: the daemon logs it, rate-limited per `kind`.
    Warn {
        about: ConnId,
        kind: &'static str,
        message: String,
    },
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
    /// A peer called ReloadConfig (its reply is already out): re-read the
    /// configuration and hand the bus the new policy, limits and services.
    ReloadConfig,
    /// A GetConnectionCredentials reply waits for a pidfd of process `pid`,
    /// which started at `started` (see [`Credentials::process_started`]):
    /// open one (none if that process is gone, the pid reused) and answer
    /// with [`Bus::pidfd_opened`] before handing the bus anything else.
    /// Opened on demand rather than held: a pidfd per connection would
    /// double the daemon's open files.
    OpenPidfd { pid: u32, started: u64 },
    /// A message waits for `name`, which no known `.service` file
    /// provides: read the service directories again, as dbus-daemon does
    /// on such a miss, and answer with [`Bus::service_looked_up`] before
    /// handing the bus anything else (the message keeps its place in its
    /// sender's order). Only with [`BusOptions::rescan_service_files`].
    LookUpService { name: String },
    /// A peer called `org.quickbus.Daemon1.Restart`: re-execute the daemon
    /// in place (docs/restart.md), then answer with
    /// [`Bus::restart_answered`] (None: the caller wants no reply).
    Restart { requester: Option<RestartRequester> },
    /// AddServer: listen on a new path socket for container instance
    /// `path`, taking connections of `uid` only, over EXTERNAL only (as
    /// dbus-daemon's bus/containers.c), and answer with
    /// [`Bus::container_listening`] before handing the bus anything else.
    /// Peers that authenticate on it join the bus with
    /// [`Bus::add_contained_connection`].
    ListenContainer { path: String, uid: u32 },
    /// Stop listening on instance `path`'s socket and remove its file;
    /// with `close_connections` (StopInstance), close every connection
    /// that came through it, authenticated or not (then
    /// [`Bus::remove_connection`] as for any close).
    StopContainer {
        path: String,
        close_connections: bool,
    },
}

/// Who waits for the answer to a Restart call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RestartRequester {
    pub conn: ConnId,
    pub serial: u32,
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
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct BusOptions {
    /// The bus's own id, answered by `GetId`: as in dbus-daemon, a UUID of
    /// its own, not the GUID its listeners give in SASL `OK` and in the
    /// address (dbus-daemon generates both, separately). It crosses a
    /// restart in place with the rest of the bus, so it never changes for
    /// the bus's lifetime.
    pub bus_id: String,
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
    /// Activatable name -> its `AssumedAppArmorLabel=`: what AppArmor
    /// judges a message that would start the service by (`mac`).
    pub assumed_apparmor_labels: std::collections::HashMap<String, String>,
    /// The bus process's own uid (GetConnectionUnixUser on
    /// org.freedesktop.DBus, and the privileged-caller check); None when
    /// unknown, then only root is privileged.
    pub own_uid: Option<u32>,
    /// The bus process's own pid (GetConnectionUnixProcessID on
    /// org.freedesktop.DBus).
    pub own_pid: u32,
    /// When the bus process started ([`Credentials::process_started`]):
    /// the `ProcessFD` of org.freedesktop.DBus. None: none is offered.
    pub own_process_started: Option<u64>,
    /// Ask the daemon to read the service directories again
    /// ([`Action::LookUpService`]) before answering that no `.service`
    /// file provides a name.
    pub rescan_service_files: bool,
}

/// The driver's introspection XML at `path` (also `quickbus-daemon --introspect`).
pub fn introspection_xml(path: &str) -> String {
    introspect::introspect(path)
}
