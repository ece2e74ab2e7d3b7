//! The event loop: edge-triggered epoll (mio) over the listening sockets,
//! every connection and the signal pipe. On each wake-up (a turn) it hands
//! at most one budget of each connection's complete messages to the
//! sans-I/O [`Bus`] ([`turns`], [`fair_share`]), queues the resulting
//! deliveries, and flushes every touched connection once.
//!
//! A connection is known by one [`ConnId`], given by the bus at accept and
//! used as its mio token; the bus owns its identity and credentials once
//! it has authenticated, the loop only its I/O state. docs/architecture.md
//! ("A connection's life") has the whole life of a connection.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};
use quickbus_bus::{Action, Bus, ConnId, Credentials};
use quickbus_wire::{frame_length, ErrorKind, Message};
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM, SIGUSR2};
use signal_hook_mio::v1_0::Signals;
use tracing::{debug, info, warn};

use crate::activation::Launcher;
use crate::auth::{AuthConfig, AuthProgress, SaslServer};
use crate::flow::OutBounds;
use crate::idle_buffers::IdleBuffers;
use crate::nonce::NONCE_LEN;
use crate::service_file::ServiceFile;
use crate::socket::{ListenSocket, Listening};
use crate::transport::{OutItem, ReadStatus, Transport};
use fair_share::{Exchange, FairShare};
use hand_off::HandOff;
use listed::Listed;
use turns::{Contention, TurnBudget, READS_PER_TURN};
use workers::{Workers, WriteResult};

mod admission;
mod backpressure;
mod containers;
mod fair_share;
mod hand_off;
mod listed;
mod restarting;
mod turns;
mod workers;

pub use restarting::{LoopState, Unbuilt};
pub use workers::{LEAST_PARALLEL_FOR_TESTS, THREADS_FOR_TESTS};

/// A connection's mio token is its [`ConnId`], which counts up from 1;
/// the signal pipe and the listeners sit at the top of the token space.
const SIGNALS: Token = Token(usize::MAX);
/// Listener `i` has the token `LAST_LISTENER - i`.
const LAST_LISTENER: usize = usize::MAX - 1;
/// At most this many listeners (far more than any configuration has).
const MAX_LISTENERS: usize = 1 << 16;
/// Tokens above this are not connections.
const LAST_CONNECTION: usize = LAST_LISTENER - MAX_LISTENERS;
/// The connection map is looked up several times per message: foldhash,
/// not std's SipHash (callgrind: SipHash was 14 % of the instructions per
/// round trip, with the bus's maps).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The close reason of a peer that simply went away (not worth a warning).
const HUNG_UP: &str = "peer closed the connection";

/// The close reason of a peer some of whose fds the bus could not take in
/// (`sys::recv_appending`): its messages can no longer be matched with
/// their fds.
const FDS_LOST: &str = "fds it sent were lost: the bus is at its open-file limit (RLIMIT_NOFILE)";

/// A peer that exits with its connection open resets it: as normal an end
/// as a close, not worth a warning.
fn is_hang_up(e: rustix::io::Errno) -> bool {
    e == rustix::io::Errno::CONNRESET || e == rustix::io::Errno::PIPE
}

/// The mio token of connection `id`: the same number. Accepting made sure
/// it fits (see `admission`); Token(0), which nothing registers, stands
/// for one that could not.
fn token(id: ConnId) -> Token {
    Token(usize::try_from(id.0).unwrap_or(0))
}

/// Re-reads the configuration (SIGHUP, ReloadConfig) and returns what the
/// bus takes from it, or why the new configuration was refused (the old
/// one then stays in force).
pub type Reloader = Box<dyn FnMut() -> Result<Reloaded, String>>;

/// The parts of a reloaded configuration applied to the running bus.
pub struct Reloaded {
    /// The service directories, and the service files they hold.
    pub service_dirs: Vec<std::path::PathBuf>,
    pub services: Vec<ServiceFile>,
    pub policy: quickbus_bus::PolicyConfig,
    /// The `<policy>` elements `policy` was resolved from (see
    /// [`crate::late_users`]).
    pub policies: Vec<crate::config::Policy>,
    /// `<servicehelper>`, for new activations.
    pub servicehelper: Option<std::path::PathBuf>,
    /// The SELinux mediator for the new `<associate>` list (None without
    /// SELinux).
    pub mediator: Option<Box<dyn quickbus_bus::mac::Mediator>>,
    /// The whole configuration, for a restart in place to build the
    /// mediators from.
    pub config: crate::config::BusConfig,
}

/// What the loop needs beyond the bus itself.
pub struct ServerOptions {
    pub auth: AuthConfig,
    /// The `<limit>`s the loop applies itself.
    pub limits: ServerLimits,
    /// Bounds of each connection's outgoing queue and how long a signal's
    /// sender is held back for a full receiver (see [`crate::flow`]; the
    /// bus applies them: handed to it when the loop is built, and by a
    /// reload directly).
    pub out_bounds: OutBounds,
    pub reload: Reloader,
    /// Starts the services the bus activates.
    pub launcher: Launcher,
    /// The service manager, told of readiness, reloads and shutdown.
    pub notifier: crate::notify::Notifier,
    /// The `STATUS=` text while the bus serves.
    pub status: String,
    /// The `<policy>` elements the bus's policy was resolved from at
    /// start-up (see [`crate::late_users`]).
    pub policies: Vec<crate::config::Policy>,
    /// What a restart in place keeps of the start-up (docs/restart.md).
    pub setup: crate::restart::Setup,
    /// The binary a restart executes; None if /proc/self/exe could not be
    /// opened (a restart is then refused).
    pub binary: Option<crate::restart::Binary>,
}

/// The `<limit>`s the event loop applies itself (the others land in the
/// bus core; `config::limit_table` says where each goes and how a reload
/// applies it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    pub auth_timeout: Duration,
    pub max_incomplete_connections: usize,
    /// `max_completed_connections`: with `max_incomplete_connections`,
    /// the connections accepted at most.
    pub max_connections: usize,
    /// The largest frame read, judged by its header.
    pub max_message_size: usize,
    /// Most fds a connection may have sent ahead of the message that
    /// carries them (`max_incoming_unix_fds`).
    pub max_incoming_unix_fds: usize,
    /// How long such fds may wait for their message (`pending_fd_timeout`).
    pub pending_fd_timeout: Duration,
    /// SO_SNDBUF/SO_RCVBUF asked for on accepted connections; 0 keeps the
    /// kernel's default.
    pub socket_buffer_bytes: usize,
    /// Connections one container instance's socket takes at once,
    /// authenticating or not (`max_connections_per_container`).
    pub max_connections_per_container: usize,
    /// Threads for the sockets' reads and writes (`threads`; 0: from the
    /// core count, see [`workers`]).
    pub threads: usize,
}

/// Where a connection is in its life (docs/architecture.md, "A
/// connection's life"). Until it is `Running` the bus does not know it,
/// and its credentials wait here; then the bus owns them.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) enum Phase {
    /// nonce-tcp: the 16 bytes of the nonce file must come first.
    Nonce {
        expected: [u8; NONCE_LEN],
        sasl: SaslServer,
        creds: Box<Credentials>,
    },
    Authenticating {
        sasl: SaslServer,
        creds: Box<Credentials>,
    },
    /// Authenticated: the bus knows it by the same [`ConnId`].
    Running,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Conn {
    transport: Transport,
    phase: Phase,
    /// Not past Hello yet: counts toward `max_incomplete_connections` and
    /// is closed at `auth_timeout` (see [`admission`]).
    incomplete: bool,
    /// Its uid as the socket said at accept: what its incomplete
    /// connection counts against, and how logs name it until the bus
    /// knows it.
    uid: u32,
    /// The bus holds it back (see [`Action::HoldSender`]): its input
    /// waits in the kernel.
    held: bool,
    /// It hung up while held: read it to EOF once released.
    hung_up_while_held: bool,
    /// When the fds it sent ahead of their message must have it.
    #[serde(with = "quickbus_bus::handover::optional_instant")]
    fd_deadline: Option<Instant>,
    /// Registered for writability too (see `Server::watch_writable`).
    watching_writable: bool,
    /// Listed in `Server::dirty`, to be written this turn.
    #[serde(skip)]
    listed: Listed,
    /// The container instance whose socket it came through (see
    /// [`containers`]).
    contained: Option<containers::Contained>,
    /// The loop turn of its last read (see `IdleBuffers`); a restart
    /// starts counting turns anew.
    #[serde(skip)]
    last_read_turn: u64,
    /// It spent its whole budget in its last turn (see [`turns`]): it
    /// sits out while a light connection's call is in flight (see
    /// [`fair_share`]).
    #[serde(skip)]
    heavy: bool,
    /// A call that expects a reply was delivered to it and it has not
    /// replied since: it never sits out, its reply may be what a caller
    /// waits for.
    #[serde(skip)]
    answering: bool,
    /// A read made ahead by a worker thread, for the loop to take where it
    /// would have read in the same turn (see [`workers`]). Not carried by
    /// a restart: the data is in the input buffer, and the new image's
    /// registration raises the edges again.
    #[serde(skip)]
    read_ahead: Option<workers::ReadAhead>,
}

impl Conn {
    /// A connection just accepted: not past Hello, nothing done yet.
    fn accepted(
        stream: crate::socket::Stream,
        phase: Phase,
        uid: u32,
        contained: Option<containers::Contained>,
    ) -> Conn {
        Conn {
            transport: Transport::new(stream),
            phase,
            incomplete: true,
            uid,
            held: false,
            hung_up_while_held: false,
            fd_deadline: None,
            watching_writable: false,
            listed: Listed::default(),
            contained,
            last_read_turn: 0,
            heavy: false,
            answering: false,
            read_ahead: None,
        }
    }

    /// Whether its input holds a message to route without reading (SASL
    /// text is not framed: before BEGIN it always reads).
    fn has_whole_message(&self) -> bool {
        matches!(self.phase, Phase::Running) && self.transport.has_complete_frame()
    }
}

/// What an `accept` on a listener gave the loop.
enum Accepted {
    Stream(crate::socket::Stream),
    /// Interrupted: accept again.
    Again,
    /// Nothing more waits (or accepting failed; retried on the next edge).
    NoMore,
}

/// Why the loop stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum Exit {
    Terminated,
}

pub struct Server {
    poll: Poll,
    /// Each listening socket, with the nonce its peers must send first
    /// (nonce-tcp).
    listeners: Vec<Listen>,
    /// Every connection, by the id the bus gave it (its mio token too).
    conns: FastMap<ConnId, Conn>,
    bus: Bus,
    opts: ServerOptions,
    signals: Signals,
    auth_deadlines: BinaryHeap<Reverse<(Instant, ConnId)>>,
    /// pending_fd_timeout deadlines (stale entries are skipped).
    fd_deadlines: BinaryHeap<Reverse<(Instant, ConnId)>>,
    /// Connections not past Hello (see [`admission`]), and how many of
    /// them each uid has.
    incomplete: usize,
    incomplete_by_uid: FastMap<u32, usize>,
    /// Repeated warnings are summed up rather than flooding the log.
    log_limiter: crate::log_limit::Limiter,
    /// Connections with data possibly left unread after their turn.
    unfinished_reads: Vec<(ConnId, bool)>,
    /// Heavy senders sitting out while a light connection's call is in
    /// flight, read again once it is answered (see [`fair_share`]).
    deferred_reads: Vec<(ConnId, bool)>,
    fair_share: FairShare,
    /// Whether a turn ends with yielding the CPU to the peer it woke (see
    /// [`hand_off`]).
    hand_off: HandOff,
    /// Whether connections contend, which sets the turn's budgets.
    contention: Contention,
    /// The threads that make a turn's reads and writes side by side.
    workers: Workers,
    /// Connections with queued output to flush at the end of the turn.
    dirty: Vec<ConnId>,
    actions: Vec<Action>,
    /// Emptied vectors kept for the next turn (what is ready to read, being
    /// flushed, being applied), so the loop allocates nothing per turn or
    /// per message once warm (callgrind: a fresh actions vector per message
    /// and two per turn).
    spare: Spare,
    /// Emptied read buffers waiting to be freed if their connection stays
    /// quiet.
    idle_buffers: IdleBuffers,
    /// Groups of each new peer's uid (group policies).
    user_db: crate::userdb::CachedUserDb,
    /// Policy names that were unknown at load, resolved again when a
    /// dynamic user bearing one connects.
    late_users: crate::late_users::LateUsers,
    /// A restart asked for in this turn, done at its end.
    restart: Option<restarting::Pending>,
    /// Container instances' sockets, by slot (see [`containers`]).
    container_listeners: Vec<Option<containers::ContainerListen>>,
    /// The `max_connections_per_container` places taken, by instance:
    /// kept as connections come and go, counted again from the
    /// connections after a restart.
    container_places: FastMap<String, usize>,
}

/// A listening socket registered with the loop.
#[derive(serde::Serialize, serde::Deserialize)]
struct Listen {
    #[serde(with = "crate::handover_fields::listening")]
    socket: Listening,
    /// nonce-tcp: what its peers must send first.
    nonce: Option<[u8; NONCE_LEN]>,
}

#[derive(Default)]
struct Spare {
    ready: Vec<(ConnId, bool)>,
    /// Connections out of the map while workers read them.
    reading: Vec<(ConnId, Conn)>,
    flushing: Vec<ConnId>,
    applying: Vec<Action>,
}

impl Server {
    pub fn new(
        listeners: Vec<(ListenSocket, Option<[u8; NONCE_LEN]>)>,
        bus: Bus,
        mut opts: ServerOptions,
    ) -> io::Result<Server> {
        if listeners.len() > containers::FIRST_CONTAINER_SLOT {
            return Err(io::Error::other(format!(
                "{} listening sockets, more than {}",
                listeners.len(),
                containers::FIRST_CONTAINER_SLOT
            )));
        }
        let late_users = crate::late_users::LateUsers::new(std::mem::take(&mut opts.policies));
        let mut listening = Vec::with_capacity(listeners.len());
        for (socket, nonce) in listeners {
            listening.push(Listen {
                socket: socket.into_mio()?,
                nonce,
            });
        }
        let state = LoopState::fresh(listening, late_users);
        Server::with_state(state, bus, opts).map_err(|unbuilt| unbuilt.error)
    }

    /// The loop over `state`'s listeners and connections (all of them
    /// registered here), at start-up or after a restart in place.
    fn with_state(
        state: LoopState,
        mut bus: Bus,
        opts: ServerOptions,
    ) -> Result<Server, restarting::Unbuilt> {
        bus.set_out_bounds(opts.out_bounds);
        let (poll, signals) = match Server::poll_and_signals() {
            Ok(both) => both,
            Err(e) => return Err(restarting::Unbuilt::keeping(e, (state, bus, opts))),
        };
        // Blocked by the image that executed this one, until handlers
        // were in place.
        crate::restart::unblock_handled_signals();
        let workers = Workers::new(opts.limits.threads);
        let mut server = Server {
            poll,
            listeners: Vec::new(),
            conns: FastMap::default(),
            bus,
            opts,
            signals,
            auth_deadlines: BinaryHeap::new(),
            fd_deadlines: BinaryHeap::new(),
            incomplete: 0,
            incomplete_by_uid: FastMap::default(),
            log_limiter: crate::log_limit::Limiter,
            unfinished_reads: Vec::new(),
            deferred_reads: Vec::new(),
            fair_share: FairShare::default(),
            hand_off: HandOff::default(),
            contention: Contention::default(),
            workers,
            dirty: Vec::new(),
            actions: Vec::new(),
            spare: Spare::default(),
            idle_buffers: IdleBuffers::default(),
            user_db: crate::userdb::CachedUserDb::system(),
            late_users: crate::late_users::LateUsers::new(Vec::new()),
            restart: None,
            container_listeners: Vec::new(),
            container_places: FastMap::default(),
        };
        server.put_back(state);
        if let Err(e) = server.register_all() {
            return Err(restarting::Unbuilt::keeping(e, server));
        }
        Ok(server)
    }

    /// The loop's epoll instance, with the signals registered.
    fn poll_and_signals() -> io::Result<(Poll, Signals)> {
        let poll = Poll::new()?;
        // SIGCHLD: an activated service exited (see reap_services);
        // SIGUSR2: restart in place (docs/restart.md).
        let mut signals = Signals::new([SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGUSR2])?;
        poll.registry()
            .register(&mut signals, SIGNALS, Interest::READABLE)?;
        Ok((poll, signals))
    }

    pub fn run(&mut self) -> io::Result<Exit> {
        let mut events = Events::with_capacity(1024);
        // Every listener is registered: a connection made from now on is
        // accepted by the first turn of the loop.
        self.opts.notifier.ready(&self.opts.status);
        loop {
            let timeout = self.poll_timeout();
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // The bus exits: no container socket file stays behind.
                self.remove_container_sockets();
                return Err(e);
            }
            // (id, the peer hung up): a hung-up peer is read until EOF.
            let mut ready = std::mem::take(&mut self.spare.ready);
            ready.append(&mut self.unfinished_reads);
            let mut container_accepts = Vec::new();
            for event in events.iter() {
                let token = event.token();
                if token == SIGNALS {
                    if let Some(exit) = self.handle_signals() {
                        return Ok(exit);
                    }
                } else if token.0 > LAST_CONNECTION {
                    match (LAST_LISTENER - token.0).checked_sub(containers::FIRST_CONTAINER_SLOT) {
                        // After this turn's reads: a connection to the
                        // same socket that hung up meanwhile must free
                        // its place first.
                        Some(slot) => container_accepts.push(slot),
                        None => self.accept(LAST_LISTENER - token.0),
                    }
                } else {
                    // usize to u64: lossless on every target.
                    let id = ConnId(token.0 as u64);
                    if let Some(conn) = self.conns.get_mut(&id).filter(|_| event.is_writable()) {
                        conn.listed.list(id, &mut self.dirty);
                    }
                    if event.is_readable() || event.is_read_closed() || event.is_error() {
                        ready.push((id, event.is_read_closed() || event.is_error()));
                    }
                }
            }
            let turn_began = Instant::now();
            self.order_turn(&mut ready, turn_began);
            self.read_ahead(&ready);
            let limits = self.contention.limits(turn_began);
            let contended = limits == turns::CONTENDED;
            for &(id, hung_up) in &ready {
                let mut budget = TurnBudget::new(limits);
                self.read_connection(id, hung_up, &mut budget);
                self.contention.served(&budget, turn_began);
            }
            ready.clear();
            self.spare.ready = ready;
            for slot in container_accepts {
                self.accept_container(slot);
            }
            self.drop_stale_deadlines();
            // Every turn, deadlines or not: one clock read, and the
            // daemon's and the bus's time-outs are checked with it. (The
            // bus keeps no clock: each event brings its own time.)
            let now = Instant::now();
            self.opts.notifier.keep_alive(now);
            self.expire_incomplete(now);
            self.log_limiter.summarize(now);
            self.expire_pending_fds(now);
            self.bus.handle_timeouts(now, &mut self.actions);
            self.apply_actions();
            self.flush_dirty();
            if self.hand_off.should_yield(contended, now) {
                // The caller or callee just woken runs before our next
                // turn (see `hand_off`).
                let began = Instant::now();
                rustix::process::sched_yield();
                self.hand_off.yielded(began.elapsed());
            }
            // With everything routed and written as far as the sockets
            // took it: what is left crosses in the handover.
            self.restart_if_requested();
            let conns = &mut self.conns;
            self.idle_buffers.end_turn(|id, emptied_at| {
                if let Some(conn) = conns.get_mut(&id) {
                    if conn.last_read_turn == emptied_at {
                        conn.transport.release_idle_buffer();
                    }
                }
            });
        }
    }

    /// Forget the deadlines of connections that authenticated, left, or
    /// got their fds' message in time, so that they do not keep the loop
    /// waking up for nothing.
    fn drop_stale_deadlines(&mut self) {
        self.drop_stale_auth_deadlines();
        while let Some(&Reverse((deadline, id))) = self.fd_deadlines.peek() {
            if self
                .conns
                .get(&id)
                .is_some_and(|c| c.fd_deadline == Some(deadline))
            {
                break;
            }
            self.fd_deadlines.pop();
        }
    }

    fn poll_timeout(&self) -> Option<Duration> {
        let deferred_until = match self.fair_share.deadline() {
            _ if self.deferred_reads.is_empty() => None,
            None => return Some(Duration::ZERO),
            Some(until) => Some(until),
        };
        if !self.unfinished_reads.is_empty() {
            return Some(Duration::ZERO);
        }
        let auth = self.auth_deadlines.peek().map(|Reverse((t, _))| *t);
        let fds = self.fd_deadlines.peek().map(|Reverse((t, _))| *t);
        let logs = self.log_limiter.next_summary();
        let watchdog = self.opts.notifier.next_deadline();
        let deadline = [
            auth,
            fds,
            logs,
            watchdog,
            deferred_until,
            self.bus.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()?;
        Some(deadline.saturating_duration_since(Instant::now()))
    }

    fn handle_signals(&mut self) -> Option<Exit> {
        for signal in self.signals.pending() {
            match signal {
                SIGTERM | SIGINT => {
                    info!("signal {signal}: shutting down");
                    self.remove_container_sockets();
                    self.opts.notifier.stopping();
                    return Some(Exit::Terminated);
                }
                SIGHUP => self.reload("SIGHUP"),
                SIGCHLD => self.reap_services(),
                SIGUSR2 => self.request_restart(None, "SIGUSR2"),
                _ => {}
            }
        }
        None
    }

    /// Re-read the configuration: the policy applies to every connection
    /// at once (none is dropped), each limit as `config::limit_table`
    /// says, and the set of activatable services is replaced
    /// (ActivatableServicesChanged goes out). Listen addresses and
    /// authentication mechanisms keep their start-up values.
    fn reload(&mut self, why: &str) {
        self.opts.notifier.reloading("Reloading configuration");
        let outcome = self.apply_reload(why);
        // READY=1 ends the reload either way: a refused configuration
        // leaves the bus serving with the old one.
        let status = match outcome {
            Ok(()) => self.opts.status.clone(),
            Err(e) => format!(
                "{}; {why}: new configuration refused: {e}",
                self.opts.status
            ),
        };
        self.opts.notifier.ready(&status);
    }

    fn apply_reload(&mut self, why: &str) -> Result<(), String> {
        match (self.opts.reload)() {
            Ok(reloaded) => {
                let services = reloaded.services;
                // dbus-daemon's line, then what changed.
                info!("Reloaded configuration");
                debug!("{why}: {} activatable services", services.len());
                let names = services.iter().map(|s| s.name.clone()).collect();
                self.bus
                    .set_systemd_units(crate::service_file::systemd_units(&services));
                self.bus
                    .set_assumed_apparmor_labels(crate::service_file::assumed_apparmor_labels(
                        &services,
                    ));
                self.opts
                    .launcher
                    .set_services(reloaded.service_dirs, services);
                self.opts.launcher.set_helper(reloaded.servicehelper);
                self.user_db.forget();
                self.late_users = crate::late_users::LateUsers::new(reloaded.policies);
                self.bus.set_policy(reloaded.policy);
                self.bus.set_mediator(reloaded.mediator);
                self.set_limits(&reloaded.config.limits);
                self.opts.setup.reloaded = Some(reloaded.config);
                self.bus
                    .set_activatable_names(names, Instant::now(), &mut self.actions);
                Ok(())
            }
            Err(e) => {
                warn!("Unable to reload configuration: {e}");
                debug!("{why}: new configuration refused, keeping the old one");
                Err(e)
            }
        }
    }

    /// Put every limit of a reloaded configuration where it applies
    /// (`config::limit_table` says how each takes effect), and say which
    /// changed, once.
    fn set_limits(&mut self, new: &crate::config::Limits) {
        let landed = crate::landed_limits::LandedLimits::from_config(new);
        self.bus.set_limits(landed.bus);
        self.bus.set_out_bounds(landed.out_bounds);
        self.retime_auth_deadlines(self.opts.limits.auth_timeout, landed.server.auth_timeout);
        if landed.server.threads != self.opts.limits.threads {
            self.rebuild_workers(landed.server.threads);
        }
        self.opts.limits = landed.server;
        let old = &self.opts.setup.current_config().limits;
        if let Some(report) = crate::landed_limits::reload_report(old, new) {
            info!("{report}");
        }
    }

    /// The bus asked for `name` to be started.
    fn activate(&mut self, name: &str, requested_by: Option<&quickbus_bus::Requester>) {
        let started =
            self.opts
                .launcher
                .start(name, requested_by, self.bus.activation_environment());
        if let Err(error) = started {
            self.bus
                .activation_failed(name, error, Instant::now(), &mut self.actions);
        }
    }

    /// Services that could not be spawned or died before taking their
    /// name fail their activation (the spawner raises SIGCHLD when a
    /// spawn ended, as a child's exit does).
    fn reap_services(&mut self) {
        let failed = self.opts.launcher.reap();
        self.activations_failed(failed);
    }

    /// Fail each activation, and those of every name the same program
    /// provides.
    fn activations_failed(&mut self, failed: Vec<(String, quickbus_bus::errors::BusError)>) {
        let now = Instant::now();
        for (name, error) in failed {
            for other in self.opts.launcher.same_program(&name) {
                self.bus
                    .activation_failed(&other, error.clone(), now, &mut self.actions);
            }
            self.bus
                .activation_failed(&name, error, now, &mut self.actions);
        }
    }

    fn accept(&mut self, index: usize) {
        loop {
            let (accepted, nonce) = match self.listeners.get(index) {
                Some(l) => (l.socket.accept(), l.nonce),
                None => return,
            };
            match self.accepted(accepted) {
                Accepted::Stream(stream) => self.add_connection(stream, nonce, None),
                Accepted::Again => {}
                Accepted::NoMore => return,
            }
        }
    }

    /// What one `accept` on a listener gave.
    fn accepted(&mut self, result: io::Result<crate::socket::Stream>) -> Accepted {
        match result {
            Ok(stream) => Accepted::Stream(stream),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Accepted::NoMore,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Accepted::Again,
            Err(e) => {
                // EMFILE and friends: the listener stays, we retry later.
                self.log_limiter
                    .warn("accept failed", format_args!("accept failed: {e}"));
                Accepted::NoMore
            }
        }
    }

    /// Who is served in a turn beginning at `now`, in what order: each
    /// connection with input once, oldest first, the heavy senders only
    /// if no pause keeps them out ([`fair_share`]).
    fn order_turn(&mut self, ready: &mut Vec<(ConnId, bool)>, now: Instant) {
        let pausing = self.fair_share.pausing(now);
        if !pausing {
            ready.append(&mut self.deferred_reads);
        }
        // Oldest connection first, whatever order epoll listed them in:
        // when a caller's new calls and a callee's replies arrive in the
        // same wake-up, the calls are seen first, as dbus-daemon (which
        // walks its connections in order) sees them; the pending-reply
        // limit depends on that order (dbus-tests
        // /limits/max-replies-per-connection).
        ready.sort_unstable_by_key(|&(id, _)| id);
        // One turn per connection however often it was listed (left
        // unfinished and raising a new edge): one budget each.
        ready.dedup_by(|later, first| {
            let same = later.0 == first.0;
            if same {
                first.1 |= later.1;
            }
            same
        });
        if pausing {
            self.defer_heavy(ready);
        }
    }

    /// Move the heavy senders out of this turn's `ready` list until the
    /// pause ends (see [`fair_share`]).
    fn defer_heavy(&mut self, ready: &mut Vec<(ConnId, bool)>) {
        let conns = &self.conns;
        let deferred = &mut self.deferred_reads;
        ready.retain(|&(id, hung_up)| {
            let heavy = conns.get(&id).is_some_and(|c| c.heavy && !c.answering);
            if heavy {
                deferred.push((id, hung_up));
            }
            !heavy
        });
    }

    /// Route what one connection has, up to its budget for the turn
    /// ([`turns`]); what is left waits for its next turn.
    fn read_connection(&mut self, id: ConnId, hung_up: bool, budget: &mut TurnBudget) {
        let mut reads = 0;
        loop {
            let Some(conn) = self.conns.get_mut(&id) else {
                return;
            };
            if conn.held {
                // Held back: its input waits in the kernel until released.
                conn.hung_up_while_held |= hung_up;
                return;
            }
            // Messages already read go first: reading more before they
            // are routed would only move a flood from the kernel, where
            // it pushes back on its sender, into the bus's memory.
            let status = if conn.has_whole_message() {
                None
            } else if reads == READS_PER_TURN {
                self.unfinished_reads.push((id, hung_up));
                return;
            } else {
                reads += 1;
                let turn = self.idle_buffers.turn();
                let read = match conn.read_ahead.take().and_then(|r| r.of_turn(turn)) {
                    Some(made_ahead) => made_ahead,
                    None => conn.transport.read_once(),
                };
                match read {
                    Ok(s) => Some(s),
                    Err(e) if is_hang_up(e) => {
                        self.close(id, HUNG_UP);
                        return;
                    }
                    Err(rustix::io::Errno::MFILE) => {
                        self.close(id, FDS_LOST);
                        return;
                    }
                    Err(e) => {
                        self.close(id, &format!("read error: {e}"));
                        return;
                    }
                }
            };
            if let Err(reason) = self.process_input(id, budget) {
                self.close(id, &reason);
                return;
            }
            if let Err(reason) = self.check_pending_fds(id) {
                self.close(id, &reason);
                return;
            }
            let emptied = matches!(status, Some(ReadStatus::Short | ReadStatus::Drained));
            if let Some(conn) = self.conns.get_mut(&id) {
                conn.heavy = budget.spent();
            }
            if budget.spent() {
                // Its turn is over. With the socket emptied and no whole
                // message left, nothing waits: a new edge will come.
                let left = self.conns.get(&id).is_some_and(Conn::has_whole_message);
                if !emptied || left || hung_up {
                    self.unfinished_reads.push((id, hung_up));
                    return;
                }
            }
            match status {
                // Routed what was buffered, with budget left: read on.
                None => {}
                // A short read says the socket is empty, but when the peer
                // also hung up no further event will come: read on to EOF.
                Some(ReadStatus::Short) if hung_up => {}
                Some(ReadStatus::Short | ReadStatus::Drained) => {
                    if let Some(conn) = self.conns.get_mut(&id) {
                        conn.last_read_turn = self.idle_buffers.turn();
                        if conn.transport.input().is_empty() {
                            self.idle_buffers.emptied(id);
                        }
                    }
                    return;
                }
                Some(ReadStatus::Closed) => {
                    self.close(id, HUNG_UP);
                    return;
                }
                Some(ReadStatus::Budget) => {}
            }
        }
    }

    /// Consume whatever complete units (SASL lines, messages) the input has.
    fn process_input(&mut self, id: ConnId, budget: &mut TurnBudget) -> Result<(), String> {
        loop {
            let Some(conn) = self.conns.get_mut(&id) else {
                return Ok(());
            };
            match &mut conn.phase {
                Phase::Nonce {
                    expected,
                    sasl,
                    creds,
                } => {
                    let input = conn.transport.input();
                    if input.len() < NONCE_LEN {
                        return Ok(());
                    }
                    if input[..NONCE_LEN] != expected[..] {
                        return Err("the nonce-tcp nonce does not match".into());
                    }
                    conn.transport.consume(NONCE_LEN);
                    let sasl = sasl.clone();
                    let creds = std::mem::take(creds);
                    conn.phase = Phase::Authenticating { sasl, creds };
                }
                Phase::Authenticating { sasl, creds } => {
                    let mut reply = Vec::new();
                    let fed = sasl.feed(conn.transport.input(), &mut reply);
                    // Queued even when the exchange failed: the last word
                    // (the sixth REJECTED) goes out before the close.
                    if !reply.is_empty() {
                        conn.transport.queue(OutItem::raw(reply.into()));
                        conn.listed.list(id, &mut self.dirty);
                    }
                    let progress = fed.map_err(|e| format!("authentication failed: {e}"))?;
                    match progress {
                        AuthProgress::NeedMore { consumed } => {
                            conn.transport.consume(consumed);
                            return Ok(());
                        }
                        AuthProgress::Begin { consumed } => {
                            conn.transport.consume(consumed);
                            let unix_fds = sasl.unix_fd_negotiated();
                            conn.transport.set_fd_passing(unix_fds);
                            let mut creds = std::mem::take(creds);
                            match sasl.authenticated() {
                                Some(crate::auth::AuthIdentity::Anonymous) => {
                                    creds.anonymous = true;
                                }
                                // DBUS_COOKIE_SHA1 proved who the peer is
                                // where the socket could not (tcp): the
                                // bus knows it by that uid, as dbus-daemon.
                                Some(crate::auth::AuthIdentity::Uid(uid)) if uid != creds.uid => {
                                    creds.uid = uid;
                                    creds.user_groups = self.user_db.groups_of(uid);
                                }
                                _ => {}
                            }
                            match &conn.contained {
                                None => self.bus.add_connection_as(id, *creds, unix_fds),
                                // Only the creator's uid, as dbus-daemon's
                                // allow_same_uid_only.
                                Some(c) if c.uid != creds.uid || creds.anonymous => {
                                    return Err(format!(
                                        "uid {} may not connect to container instance {} of uid {}",
                                        creds.uid, c.instance, c.uid
                                    ));
                                }
                                Some(c) => {
                                    if !self.bus.add_contained_connection(
                                        id,
                                        *creds,
                                        unix_fds,
                                        &c.instance,
                                    ) {
                                        return Err(format!(
                                            "container instance {} is gone",
                                            c.instance
                                        ));
                                    }
                                }
                            }
                            conn.phase = Phase::Running;
                        }
                    }
                }
                Phase::Running => {
                    if conn.held || budget.spent() {
                        // The rest of its input waits for the release, or
                        // for its next turn.
                        return Ok(());
                    }
                    let msg = if let Some(msg) = conn.transport.take_parsed() {
                        // Parsed by a worker (see `workers`). Were
                        // `max_message_size` lowered by a reload since,
                        // the core refuses it (`Bus::over_message_limits`).
                        budget.charge(msg.raw().len());
                        msg
                    } else {
                        let input = conn.transport.input();
                        let total = match frame_length(input) {
                            Ok(Some(total)) => total,
                            Ok(None) => return Ok(()),
                            Err(e) => return Err(format!("invalid message framing: {e}")),
                        };
                        if total > self.opts.limits.max_message_size {
                            return Err(format!(
                                "message of {total} bytes exceeds max_message_size ({})",
                                self.opts.limits.max_message_size
                            ));
                        }
                        if input.len() < total {
                            conn.transport.reserve_frame(total);
                            return Ok(());
                        }
                        budget.charge(total);
                        let frame = conn.transport.take_frame(total);
                        match Message::parse(frame) {
                            Ok(msg) => msg,
                            // The spec: messages of unknown type must be ignored.
                            Err(e) if matches!(e.kind(), ErrorKind::UnknownMessageType(_)) => {
                                debug!("ignoring a message of unknown type from {id:?}");
                                continue;
                            }
                            Err(e) => return Err(format!("invalid message: {e}")),
                        }
                    };
                    let nfds = msg.unix_fds() as usize;
                    if nfds > 0 && !conn.transport.fd_passing() {
                        return Err(format!(
                            "message declares {nfds} fds but the connection did not negotiate fd passing"
                        ));
                    }
                    let fds = conn.transport.take_fds(nfds).ok_or_else(|| {
                        format!(
                            "message declares {nfds} fds but {} arrived",
                            conn.transport.pending_fds()
                        )
                    })?;
                    let before_hello = conn.incomplete;
                    let light = !conn.heavy;
                    let exchange = Exchange::of(&msg);
                    if exchange == Exchange::Reply {
                        conn.answering = false;
                    }
                    let now = Instant::now();
                    self.bus.receive(id, msg, fds, now, &mut self.actions);
                    if light {
                        self.fair_share.routed(exchange, now);
                    }
                    self.apply_actions();
                    if before_hello {
                        self.after_message_before_hello(id);
                    }
                }
            }
        }
    }

    /// Carry out what the bus decided: queue deliveries, drop connections.
    fn apply_actions(&mut self) {
        while !self.actions.is_empty() {
            let mut actions =
                std::mem::replace(&mut self.actions, std::mem::take(&mut self.spare.applying));
            for action in actions.drain(..) {
                match action {
                    Action::Queued { to, kind, behind } => self.deliver(to, kind, behind),
                    Action::Disconnect { conn, reason } => self.close(conn, &reason),
                    Action::HoldSender { conn } => self.hold(conn),
                    Action::ReleaseSender { conn } => self.release(conn),
                    Action::Warn {
                        about,
                        kind,
                        message,
                    } => self.warn_about(about, kind, &message),
                    Action::Activate { name, requested_by } => {
                        self.activate(&name, requested_by.as_ref())
                    }
                    Action::CancelActivation { name } => self.opts.launcher.stop(&name),
                    Action::ReloadConfig => self.reload("ReloadConfig"),
                    Action::Restart { requester } => self.request_restart(requester, "Restart"),
                    Action::OpenPidfd { pid, started } => {
                        // Answered before anything else reaches the bus.
                        let pidfd = crate::sys::open_pidfd_verified(pid, started)
                            .map_err(|e| debug!("ProcessFD of pid {pid} left out: {e}"))
                            .ok();
                        self.bus
                            .pidfd_opened(pidfd, Instant::now(), &mut self.actions);
                    }
                    Action::ListenContainer { path, uid } => self.listen_container(path, uid),
                    Action::StopContainer {
                        path,
                        close_connections,
                    } => self.stop_container(&path, close_connections),
                    Action::LookUpService { name } => {
                        // Answered before anything else reaches the bus,
                        // so the held message keeps its place.
                        let found = self.opts.launcher.look_up(&name);
                        self.bus
                            .service_looked_up(&name, found, Instant::now(), &mut self.actions);
                    }
                }
            }
            self.spare.applying = actions;
        }
    }

    fn flush_dirty(&mut self) {
        let mut dirty =
            std::mem::replace(&mut self.dirty, std::mem::take(&mut self.spare.flushing));
        // Each listed once (`Listed::list`). Written oldest connection
        // first, whatever order their messages came in.
        dirty.sort_unstable();
        debug_assert!(dirty.windows(2).all(|pair| pair[0] != pair[1]));
        let mut written_ahead = self.write_ahead(&dirty).into_iter().peekable();
        for &id in &dirty {
            let first = written_ahead.next_if(|(ahead, _)| *ahead == id);
            let Some(conn) = self.conns.get_mut(&id) else {
                continue;
            };
            // What this write leads to is listed again.
            conn.listed.taken();
            let first = first.map(|(_, result)| result);
            match write_out(&mut self.bus, id, conn, first, &mut self.actions) {
                Ok(emptied) => self.watch_writable(id, !emptied),
                Err(e) => {
                    let reason = if is_hang_up(e) {
                        HUNG_UP.to_owned()
                    } else {
                        format!("write error: {e}")
                    };
                    self.close(id, &reason);
                    continue;
                }
            }
        }
        dirty.clear();
        self.spare.flushing = dirty;
        self.apply_actions();
        if !self.dirty.is_empty() {
            // Closing a connection produced new deliveries: flush them too.
            self.flush_dirty();
        }
    }

    /// Register for writability only while output waits for room. With
    /// EPOLLOUT always registered, every read a peer made of what we sent
    /// raised an edge and woke the loop for nothing (perf stat, 1-byte
    /// round trips: 1.13 epoll_wait returns per message, 1.0 without).
    /// Re-registering re-arms the edge, so room that appeared meanwhile
    /// is still reported.
    fn watch_writable(&mut self, id: ConnId, watch: bool) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if conn.watching_writable == watch {
            return;
        }
        let interest = if watch {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        };
        match self
            .poll
            .registry()
            .reregister(&mut conn.transport.stream, token(id), interest)
        {
            Ok(()) => conn.watching_writable = watch,
            Err(e) => self.close(id, &format!("cannot watch the socket: {e}")),
        }
    }

    fn close(&mut self, id: ConnId, reason: &str) {
        let Some(mut conn) = self.conns.remove(&id) else {
            return;
        };
        if let Some(c) = conn.contained.as_ref().filter(|c| c.counted) {
            self.container_places_taken(&c.instance, -1);
        }
        let _ = self.poll.registry().deregister(&mut conn.transport.stream);
        // Best effort: what is already queued for it (a last SASL reply, an
        // error reply explaining the disconnect) goes out before the close.
        let _ = write_out(&mut self.bus, id, &mut conn, None, &mut self.actions);
        if conn.incomplete {
            self.incomplete_closed(conn.uid);
        }
        match conn.phase {
            Phase::Nonce { .. } | Phase::Authenticating { .. } => {
                debug!(
                    uid = conn.uid,
                    "connection closed during authentication: {reason}"
                );
            }
            Phase::Running => {
                if reason == HUNG_UP {
                    let uid = self.bus.credentials(id).map_or(conn.uid, |c| c.uid);
                    debug!(uid, "connection {id:?} closed");
                } else if let Some(creds) = self.bus.credentials(id) {
                    let name = self.bus.unique_name(id).unwrap_or("(before Hello)");
                    if self.log_limiter.admits("disconnecting") {
                        warn!(
                            dbus_unique_name = name,
                            dbus_peer_uid = creds.uid,
                            dbus_peer_pid = creds.pid,
                            dbus_peer_comm = creds.comm.as_deref(),
                            "disconnecting {name} ({id:?}, {}): {reason}",
                            quickbus_bus::loginfo(creds.uid, creds.pid, creds.comm.as_deref())
                        );
                    }
                }
                self.bus
                    .remove_connection(id, Instant::now(), &mut self.actions);
            }
        }
    }
}

/// Write what waits for `id` as far as its socket takes it: its SASL
/// replies, then what the bus queued for it (the bus sees its queue go
/// down), the first write's result being `written_ahead` when a worker
/// made it from the outbox the bus lent it (see [`workers`]), whose
/// counts this flush settles. Ok(true) when nothing is left.
fn write_out(
    bus: &mut Bus,
    id: ConnId,
    conn: &mut Conn,
    written_ahead: Option<WriteResult>,
    actions: &mut Vec<Action>,
) -> Result<bool, rustix::io::Errno> {
    if !conn.transport.flush()? || !matches!(conn.phase, Phase::Running) {
        // A write made ahead would go unsettled: none is made for such a
        // connection (`write_ahead`).
        assert!(written_ahead.is_none(), "a write made ahead left unsettled");
        return Ok(!conn.transport.has_output());
    }
    let transport = &conn.transport;
    bus.write_queue(id, Instant::now(), actions, written_ahead, |outbox| {
        transport.write_once(outbox)
    })
    .unwrap_or(Ok(true))
}
