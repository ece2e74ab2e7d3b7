//! The event loop: edge-triggered epoll (mio) over the listening sockets,
//! every connection and the signal pipe. On each wake-up it reads what the
//! sockets have, hands each complete message to the sans-I/O [`Bus`], queues
//! the resulting deliveries, and flushes every touched connection once.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};
use quickbus_bus::{Action, Bus, ConnId, Credentials};
use quickbus_wire::{frame_length, ErrorKind, Message};
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;
use tracing::{debug, info, warn};

use crate::accounting::{UserTally, Users};
use crate::activation::Launcher;
use crate::auth::{AuthConfig, AuthProgress, SaslServer};
use crate::flow::{self, OutBounds};
use crate::idle_buffers::IdleBuffers;
use crate::nonce::NONCE_LEN;
use crate::service_file::ServiceFile;
use crate::socket::{ListenSocket, Listening};
use crate::transport::{OutItem, ReadStatus, Transport};

mod admission;
mod backpressure;

const SIGNALS: Token = Token(0);
const FIRST_LISTENER: usize = 1;
/// Connections get tokens from here up; listeners sit below.
const FIRST_CONNECTION: usize = 1 << 20;
/// `recvmsg` calls per connection per wake-up before others get a turn.
const READS_PER_TURN: usize = 32;
/// Token and ConnId maps are looked up several times per message: foldhash,
/// not std's SipHash (callgrind: SipHash was 14 % of the instructions per
/// round trip, with the bus's maps).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The close reason of a peer that simply went away (not worth a warning).
const HUNG_UP: &str = "peer closed the connection";

/// A peer that exits with its connection open resets it: as normal an end
/// as a close, not worth a warning.
fn is_hang_up(e: rustix::io::Errno) -> bool {
    e == rustix::io::Errno::CONNRESET || e == rustix::io::Errno::PIPE
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
    pub limits: quickbus_bus::Limits,
    /// `<servicehelper>`, for new activations.
    pub servicehelper: Option<std::path::PathBuf>,
    /// The SELinux mediator for the new `<associate>` list (None without
    /// SELinux).
    pub mediator: Option<Box<dyn quickbus_bus::mac::Mediator>>,
}

/// What the loop needs beyond the bus itself.
pub struct ServerOptions {
    pub auth: AuthConfig,
    pub auth_timeout: Duration,
    pub max_incomplete_connections: usize,
    pub max_connections: usize,
    pub max_message_size: usize,
    /// Bounds of each connection's outgoing queue and how long a signal's
    /// sender is held back for a full receiver (see [`flow`]).
    pub out_bounds: OutBounds,
    /// Most fds a connection may have sent ahead of the message that
    /// carries them (`max_incoming_unix_fds`).
    pub max_incoming_unix_fds: usize,
    /// How long such fds may wait for their message (`pending_fd_timeout`).
    pub pending_fd_timeout: Duration,
    /// SO_SNDBUF/SO_RCVBUF asked for on accepted connections; 0 keeps the
    /// kernel's default.
    pub socket_buffer_bytes: usize,
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
}

enum Phase {
    /// nonce-tcp: the 16 bytes of the nonce file must come first.
    Nonce {
        expected: [u8; NONCE_LEN],
        sasl: SaslServer,
    },
    Authenticating {
        sasl: SaslServer,
    },
    Running {
        id: ConnId,
    },
}

struct Conn {
    transport: Transport,
    phase: Phase,
    /// Not past Hello yet: counts toward `max_incomplete_connections` and
    /// is closed at `auth_timeout` (see [`admission`]).
    incomplete: bool,
    creds: Credentials,
    /// Its outgoing queue's overflow state.
    flow: flow::Receiver,
    /// What all connections of its user have queued.
    user: Rc<UserTally>,
    /// Set while the daemon does not read it: it sent a signal to a
    /// receiver whose queue is full, or it is paced (see crate::flow).
    hold: Option<Hold>,
    /// When the fds it sent ahead of their message must have it.
    fd_deadline: Option<Instant>,
    /// Registered for writability too (see `Server::watch_writable`).
    watching_writable: bool,
    /// The loop turn of its last read (see `IdleBuffers`).
    last_read_turn: u64,
}

/// A sender held back for one receiver.
struct Hold {
    on: Token,
    why: flow::HoldReason,
    /// When it started (a hold that replaced a pause keeps the pause's).
    since: Instant,
    until: Instant,
    /// The peer hung up meanwhile: read it to EOF once released.
    hung_up: bool,
    /// The receiving user whose hold budget pays for it (None: the
    /// sender's own user, which has no budget; see crate::hold_budget).
    charged_to: Option<Rc<UserTally>>,
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
    listeners: Vec<(Listening, Option<[u8; NONCE_LEN]>)>,
    conns: FastMap<Token, Conn>,
    tokens: FastMap<ConnId, Token>,
    next_token: usize,
    bus: Bus,
    opts: ServerOptions,
    signals: Signals,
    auth_deadlines: BinaryHeap<Reverse<(Instant, Token)>>,
    /// pending_fd_timeout deadlines (stale entries are skipped).
    fd_deadlines: BinaryHeap<Reverse<(Instant, Token)>>,
    /// Senders held back (see [`Hold`]).
    held: Vec<Token>,
    /// The connection whose message is being routed, if any, and its uid:
    /// the sender to hold back when a receiver is full (the uid says whose
    /// hold budget pays, without a lookup per delivery).
    routing_from: Option<(Token, u32)>,
    users: Users,
    /// `opts.out_bounds` for all of one user's queues together.
    user_bounds: OutBounds,
    /// Connections not past Hello (see [`admission`]).
    incomplete: usize,
    /// Repeated warnings are summed up rather than flooding the log.
    log_limiter: crate::log_limit::Limiter,
    /// Connections with data possibly left unread after their turn.
    unfinished_reads: Vec<(Token, bool)>,
    /// Connections with queued output to flush at the end of the turn.
    dirty: Vec<Token>,
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
}

#[derive(Default)]
struct Spare {
    ready: Vec<(Token, bool)>,
    flushing: Vec<Token>,
    applying: Vec<Action>,
}

impl Server {
    pub fn new(
        listeners: Vec<(ListenSocket, Option<[u8; NONCE_LEN]>)>,
        bus: Bus,
        mut opts: ServerOptions,
    ) -> io::Result<Server> {
        let late_users = crate::late_users::LateUsers::new(std::mem::take(&mut opts.policies));
        let poll = Poll::new()?;
        // SIGCHLD: an activated service exited (see reap_services).
        let mut signals = Signals::new([SIGTERM, SIGINT, SIGHUP, SIGCHLD])?;
        poll.registry()
            .register(&mut signals, SIGNALS, Interest::READABLE)?;
        let mut registered = Vec::with_capacity(listeners.len());
        for (i, (l, nonce)) in listeners.into_iter().enumerate() {
            let mut l = l.into_mio()?;
            poll.registry()
                .register(&mut l, Token(FIRST_LISTENER + i), Interest::READABLE)?;
            registered.push((l, nonce));
        }
        let user_bounds = opts.out_bounds.per_user();
        Ok(Server {
            poll,
            listeners: registered,
            conns: FastMap::default(),
            tokens: FastMap::default(),
            next_token: FIRST_CONNECTION,
            bus,
            opts,
            signals,
            auth_deadlines: BinaryHeap::new(),
            fd_deadlines: BinaryHeap::new(),
            held: Vec::new(),
            routing_from: None,
            users: Users::default(),
            user_bounds,
            incomplete: 0,
            log_limiter: crate::log_limit::Limiter::default(),
            unfinished_reads: Vec::new(),
            dirty: Vec::new(),
            actions: Vec::new(),
            spare: Spare::default(),
            idle_buffers: IdleBuffers::default(),
            user_db: crate::userdb::CachedUserDb::system(),
            late_users,
        })
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
                return Err(e);
            }
            // (token, the peer hung up): a hung-up peer is read until EOF.
            let mut ready = std::mem::take(&mut self.spare.ready);
            ready.append(&mut self.unfinished_reads);
            for event in events.iter() {
                let token = event.token();
                if token == SIGNALS {
                    if let Some(exit) = self.handle_signals() {
                        return Ok(exit);
                    }
                } else if token.0 < FIRST_CONNECTION {
                    self.accept(token.0 - FIRST_LISTENER);
                } else {
                    if event.is_writable() && self.conns.contains_key(&token) {
                        self.dirty.push(token);
                    }
                    if event.is_readable() || event.is_read_closed() || event.is_error() {
                        ready.push((token, event.is_read_closed() || event.is_error()));
                    }
                }
            }
            // Oldest connection first, whatever order epoll listed them in:
            // when a caller's new calls and a callee's replies arrive in the
            // same wake-up, the calls are seen first, as dbus-daemon (which
            // walks its connections in order) sees them; the pending-reply
            // limit depends on that order (dbus-tests
            // /limits/max-replies-per-connection).
            ready.sort_unstable_by_key(|&(token, _)| token);
            for &(token, hung_up) in &ready {
                self.read_connection(token, hung_up);
            }
            ready.clear();
            self.spare.ready = ready;
            self.drop_stale_deadlines();
            // Every turn, deadlines or not: the bus also keeps this time
            // as its clock for what it does between messages.
            let now = Instant::now();
            self.opts.notifier.keep_alive(now);
            self.expire_incomplete(now);
            self.log_limiter.summarize(now);
            self.expire_pending_fds(now);
            self.bus.handle_timeouts(now, &mut self.actions);
            self.apply_actions();
            self.flush_dirty();
            if !self.held.is_empty() {
                self.release_holds(Instant::now());
            }
            let conns = &mut self.conns;
            self.idle_buffers.end_turn(|token, emptied_at| {
                if let Some(conn) = conns.get_mut(&token) {
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
        while let Some(&Reverse((deadline, token))) = self.fd_deadlines.peek() {
            if self
                .conns
                .get(&token)
                .is_some_and(|c| c.fd_deadline == Some(deadline))
            {
                break;
            }
            self.fd_deadlines.pop();
        }
    }

    fn poll_timeout(&self) -> Option<Duration> {
        if !self.unfinished_reads.is_empty() {
            return Some(Duration::ZERO);
        }
        let auth = self.auth_deadlines.peek().map(|Reverse((t, _))| *t);
        let fds = self.fd_deadlines.peek().map(|Reverse((t, _))| *t);
        let holds = self
            .held
            .iter()
            .filter_map(|t| Some(self.conns.get(t)?.hold.as_ref()?.until))
            .min();
        let logs = self.log_limiter.next_summary();
        let watchdog = self.opts.notifier.next_deadline();
        let deadline = [auth, fds, holds, logs, watchdog, self.bus.next_deadline()]
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
                    self.opts.notifier.stopping();
                    return Some(Exit::Terminated);
                }
                SIGHUP => self.reload("SIGHUP"),
                SIGCHLD => self.reap_services(),
                _ => {}
            }
        }
        None
    }

    /// Re-read the configuration: the policy and the bus's limits apply
    /// to every connection at once (none is dropped), and the set of
    /// activatable services is replaced (ActivatableServicesChanged goes
    /// out). Listen addresses and the socket-level limits keep their
    /// start-up values.
    fn reload(&mut self, why: &str) {
        self.opts.notifier.reloading();
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
                self.opts
                    .launcher
                    .set_services(reloaded.service_dirs, services);
                self.opts.launcher.set_helper(reloaded.servicehelper);
                self.user_db.forget();
                self.late_users = crate::late_users::LateUsers::new(reloaded.policies);
                self.bus.set_policy(reloaded.policy);
                self.bus.set_mediator(reloaded.mediator);
                self.bus.set_limits(reloaded.limits);
                self.bus.set_activatable_names(names, &mut self.actions);
                Ok(())
            }
            Err(e) => {
                warn!("Unable to reload configuration: {e}");
                debug!("{why}: new configuration refused, keeping the old one");
                Err(e)
            }
        }
    }

    /// The bus asked for `name` to be started.
    fn activate(&mut self, name: &str, requested_by: Option<&quickbus_bus::Requester>) {
        let started =
            self.opts
                .launcher
                .start(name, requested_by, self.bus.activation_environment());
        if let Err(error) = started {
            self.bus.activation_failed(name, error, &mut self.actions);
        }
    }

    /// Services that died before taking their name fail their activation,
    /// and those of every name the same program provides.
    fn reap_services(&mut self) {
        for (name, error) in self.opts.launcher.reap() {
            for other in self.opts.launcher.same_program(&name) {
                self.bus
                    .activation_failed(&other, error.clone(), &mut self.actions);
            }
            self.bus.activation_failed(&name, error, &mut self.actions);
        }
    }

    fn accept(&mut self, index: usize) {
        loop {
            let (accepted, nonce) = match self.listeners.get(index) {
                Some((l, nonce)) => (l.accept(), *nonce),
                None => return,
            };
            let stream = match accepted {
                Ok(stream) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: the listener stays, we retry later.
                    self.log_limiter
                        .warn("accept failed", format_args!("accept failed: {e}"));
                    return;
                }
            };
            self.add_connection(stream, nonce);
        }
    }

    /// Read and process what one connection has, up to its per-turn budget.
    fn read_connection(&mut self, token: Token, hung_up: bool) {
        for _ in 0..READS_PER_TURN {
            let Some(conn) = self.conns.get_mut(&token) else {
                return;
            };
            if let Some(hold) = &mut conn.hold {
                // Held back: its input waits in the kernel until released.
                hold.hung_up |= hung_up;
                return;
            }
            let status = match conn.transport.read_once() {
                Ok(s) => s,
                Err(e) if is_hang_up(e) => {
                    self.close(token, HUNG_UP);
                    return;
                }
                Err(e) => {
                    self.close(token, &format!("read error: {e}"));
                    return;
                }
            };
            if let Err(reason) = self.process_input(token) {
                self.close(token, &reason);
                return;
            }
            if let Err(reason) = self.check_pending_fds(token) {
                self.close(token, &reason);
                return;
            }
            match status {
                // A short read says the socket is empty, but when the peer
                // also hung up no further event will come: read on to EOF.
                ReadStatus::Short if hung_up => {}
                ReadStatus::Short | ReadStatus::Drained => {
                    if let Some(conn) = self.conns.get_mut(&token) {
                        conn.last_read_turn = self.idle_buffers.turn();
                        if conn.transport.input().is_empty() {
                            self.idle_buffers.emptied(token);
                        }
                    }
                    return;
                }
                ReadStatus::Closed => {
                    self.close(token, HUNG_UP);
                    return;
                }
                ReadStatus::Budget => {}
            }
        }
        self.unfinished_reads.push((token, hung_up));
    }

    /// Consume whatever complete units (SASL lines, messages) the input has.
    fn process_input(&mut self, token: Token) -> Result<(), String> {
        loop {
            let Some(conn) = self.conns.get_mut(&token) else {
                return Ok(());
            };
            match &mut conn.phase {
                Phase::Nonce { expected, sasl } => {
                    let input = conn.transport.input();
                    if input.len() < NONCE_LEN {
                        return Ok(());
                    }
                    if input[..NONCE_LEN] != expected[..] {
                        return Err("the nonce-tcp nonce does not match".into());
                    }
                    conn.transport.consume(NONCE_LEN);
                    let sasl = sasl.clone();
                    conn.phase = Phase::Authenticating { sasl };
                }
                Phase::Authenticating { sasl } => {
                    let mut reply = Vec::new();
                    let progress = sasl
                        .feed(conn.transport.input(), &mut reply)
                        .map_err(|e| format!("authentication failed: {e}"))?;
                    if !reply.is_empty() {
                        conn.user.queued(reply.len(), 0);
                        conn.transport.queue(OutItem::raw(reply.into()));
                        self.dirty.push(token);
                    }
                    match progress {
                        AuthProgress::NeedMore { consumed } => {
                            conn.transport.consume(consumed);
                            return Ok(());
                        }
                        AuthProgress::Begin { consumed } => {
                            conn.transport.consume(consumed);
                            let unix_fds = sasl.unix_fd_negotiated();
                            conn.transport.set_fd_passing(unix_fds);
                            match sasl.authenticated() {
                                Some(crate::auth::AuthIdentity::Anonymous) => {
                                    conn.creds.anonymous = true;
                                }
                                // DBUS_COOKIE_SHA1 proved who the peer is
                                // where the socket could not (tcp): the
                                // bus knows it by that uid, as dbus-daemon.
                                Some(crate::auth::AuthIdentity::Uid(uid))
                                    if uid != conn.creds.uid =>
                                {
                                    conn.creds.uid = uid;
                                    conn.creds.user_groups = self.user_db.groups_of(uid);
                                }
                                _ => {}
                            }
                            let id = self.bus.add_connection(conn.creds.clone(), unix_fds);
                            conn.phase = Phase::Running { id };
                            self.tokens.insert(id, token);
                        }
                    }
                }
                Phase::Running { id } => {
                    let id = *id;
                    if conn.hold.is_some() {
                        // The rest of its input waits for the release.
                        return Ok(());
                    }
                    let input = conn.transport.input();
                    let total = match frame_length(input) {
                        Ok(Some(total)) => total,
                        Ok(None) => return Ok(()),
                        Err(e) => return Err(format!("invalid message framing: {e}")),
                    };
                    if total > self.opts.max_message_size {
                        return Err(format!(
                            "message of {total} bytes exceeds max_message_size ({})",
                            self.opts.max_message_size
                        ));
                    }
                    if input.len() < total {
                        conn.transport.reserve_frame(total);
                        return Ok(());
                    }
                    let frame = conn.transport.take_frame(total);
                    let msg = match Message::parse(frame) {
                        Ok(msg) => msg,
                        // The spec: messages of unknown type must be ignored.
                        Err(e) if matches!(e.kind(), ErrorKind::UnknownMessageType(_)) => {
                            debug!("ignoring a message of unknown type from {id:?}");
                            continue;
                        }
                        Err(e) => return Err(format!("invalid message: {e}")),
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
                    let hello = before_hello && quickbus_bus::bus::is_hello(&msg);
                    let uid = conn.creds.uid;
                    self.bus
                        .receive(id, msg, fds, Instant::now(), &mut self.actions);
                    self.routing_from = Some((token, uid));
                    self.apply_actions();
                    self.routing_from = None;
                    if before_hello {
                        self.after_message_before_hello(token, hello);
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
                    Action::Deliver { to, msg } => self.deliver(to, msg),
                    Action::Disconnect { conn, reason } => {
                        if let Some(&token) = self.tokens.get(&conn) {
                            self.close(token, &reason);
                        }
                    }
                    Action::Activate { name, requested_by } => {
                        self.activate(&name, requested_by.as_ref())
                    }
                    Action::CancelActivation { name } => self.opts.launcher.stop(&name),
                    Action::ReloadConfig => self.reload("ReloadConfig"),
                    Action::OpenPidfd { pid, started } => {
                        // Answered before anything else reaches the bus.
                        let pidfd = crate::sys::open_pidfd_verified(pid, started)
                            .map_err(|e| debug!("ProcessFD of pid {pid} left out: {e}"))
                            .ok();
                        self.bus.pidfd_opened(pidfd, &mut self.actions);
                    }
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
        dirty.sort_unstable();
        dirty.dedup();
        for &token in &dirty {
            let Some(conn) = self.conns.get_mut(&token) else {
                continue;
            };
            // Debug.Stats shows the queue at its fullest (before the write)
            // and what the socket did not take.
            let id = match conn.phase {
                Phase::Running { id } => Some(id),
                Phase::Nonce { .. } | Phase::Authenticating { .. } => None,
            };
            let before = (conn.transport.queued_bytes(), conn.transport.queued_fds());
            let flushed = conn.transport.flush();
            let after = (conn.transport.queued_bytes(), conn.transport.queued_fds());
            conn.user.sent(before.0 - after.0, before.1 - after.1);
            if let Some(id) = id {
                self.bus.set_queue_depth(id, before.0);
                self.bus.set_queue_depth(id, after.0);
            }
            match flushed {
                Ok(emptied) => self.watch_writable(token, !emptied),
                Err(e) => {
                    let reason = if is_hang_up(e) {
                        HUNG_UP.to_owned()
                    } else {
                        format!("write error: {e}")
                    };
                    self.close(token, &reason);
                    continue;
                }
            }
            self.note_drained(token);
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
    fn watch_writable(&mut self, token: Token, watch: bool) {
        let Some(conn) = self.conns.get_mut(&token) else {
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
            .reregister(&mut conn.transport.stream, token, interest)
        {
            Ok(()) => conn.watching_writable = watch,
            Err(e) => self.close(token, &format!("cannot watch the socket: {e}")),
        }
    }

    fn close(&mut self, token: Token, reason: &str) {
        let Some(mut conn) = self.conns.remove(&token) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut conn.transport.stream);
        if let Some(hold) = conn.hold.take() {
            hold.give_back(Instant::now());
        }
        // Its whole queue leaves its user's tally, written or not.
        let held = (conn.transport.queued_bytes(), conn.transport.queued_fds());
        if conn.incomplete {
            self.incomplete -= 1;
            conn.user.incomplete_closed();
        }
        match conn.phase {
            Phase::Nonce { .. } | Phase::Authenticating { .. } => {
                debug!(
                    uid = conn.creds.uid,
                    "connection closed during authentication: {reason}"
                );
            }
            Phase::Running { id } => {
                self.tokens.remove(&id);
                if reason == HUNG_UP {
                    debug!(uid = conn.creds.uid, "connection {id:?} closed");
                } else {
                    let name = self.bus.unique_name(id).unwrap_or("(before Hello)");
                    let creds = &conn.creds;
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
                // Best effort: anything already queued for it (an error
                // reply explaining the disconnect) goes out before the close.
                let _ = conn.transport.flush();
                self.bus.remove_connection(id, &mut self.actions);
            }
        }
        conn.user.sent(held.0, held.1);
        // The tests run debug builds: a tally that leaks fails them.
        debug_assert!(
            Rc::strong_count(&conn.user) > 1
                || (conn.user.out_bytes() == 0 && conn.user.out_fds() == 0),
            "uid {}'s last connection left {} bytes, {} fds in its tally",
            conn.user.uid,
            conn.user.out_bytes(),
            conn.user.out_fds()
        );
        let uid = conn.user.uid;
        drop(conn);
        self.users.forget_unused(uid);
    }
}
