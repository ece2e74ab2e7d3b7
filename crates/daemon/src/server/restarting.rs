//! The loop's side of a restart in place (docs/restart.md): a SIGUSR2 or
//! a Restart call asks for one; at the end of the turn the loop checks
//! the binary, hands its whole state to the binary's new image and execs
//! it. If any step fails the state goes back into the loop, the bus
//! serves on, and the caller hears why. The new image rebuilds the loop
//! from the same state ([`Server::resume`]).
//!
//! Owns: the restart asked for in this turn, and the loop's state as it
//! crosses ([`LoopState`]). May touch: the whole server.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::os::fd::AsRawFd;
use std::time::Instant;

use mio::{Interest, Token};
use quickbus_bus::{errors, Bus, ConnId, RestartRequester};
use serde::{Deserialize, Serialize};
use tracing::{debug, info, warn};

use super::{token, Conn, FastMap, Listen, Phase, Server, ServerOptions, LAST_LISTENER};
use crate::late_users::LateUsers;
use crate::restart::{self, write_handover, Handover};

/// A loop that could not be built from handed-over state, keeping what it
/// was built from: forgetting it leaves every descriptor open for the
/// previous binary to take back (see `restart::resume`).
pub struct Unbuilt {
    pub error: std::io::Error,
    keep: Box<dyn std::any::Any>,
}

impl Unbuilt {
    pub(super) fn keeping(error: std::io::Error, keep: impl std::any::Any) -> Unbuilt {
        Unbuilt {
            error,
            keep: Box::new(keep),
        }
    }

    /// Never drop what was kept (the process execs the previous binary
    /// next).
    pub fn forget(self) {
        std::mem::forget(self.keep);
    }
}

/// A restart asked for in this turn.
pub(super) struct Pending {
    requesters: Vec<RestartRequester>,
    why: &'static str,
}

/// A time-out of one connection.
#[derive(Serialize, Deserialize)]
struct Deadline {
    #[serde(with = "quickbus_bus::handover::instant")]
    at: Instant,
    conn: ConnId,
}

/// Everything of the loop that crosses a restart: the listeners, the
/// connections (socket, authentication, buffers, queues), their
/// time-outs and counts.
#[derive(Default, Serialize, Deserialize)]
pub struct LoopState {
    conns: FastMap<ConnId, Conn>,
    listeners: Vec<Listen>,
    auth_deadlines: Vec<Deadline>,
    fd_deadlines: Vec<Deadline>,
    incomplete: usize,
    incomplete_by_uid: FastMap<u32, usize>,
    late_users: Option<LateUsers>,
    unfinished_reads: Vec<(ConnId, bool)>,
    /// Container instances' sockets, in their slots.
    container_listeners: Vec<Option<super::containers::ContainerListen>>,
}

impl LoopState {
    /// A new loop's: its listeners, no connection yet.
    pub(super) fn fresh(listeners: Vec<Listen>, late_users: LateUsers) -> LoopState {
        LoopState {
            listeners,
            late_users: Some(late_users),
            ..LoopState::default()
        }
    }
}

impl LoopState {
    /// The incomplete connections, counted again from the connections:
    /// the counts crossed as numbers beside them, and one below them made
    /// a Hello or a departure count below zero (and, wrapped, refused
    /// every connection after as over `max_incomplete_connections`).
    fn count_incomplete_again(&mut self) {
        let mut by_uid: FastMap<u32, usize> = FastMap::default();
        for conn in self.conns.values().filter(|conn| conn.incomplete) {
            *by_uid.entry(conn.uid).or_default() += 1;
        }
        self.incomplete = by_uid.values().sum();
        self.incomplete_by_uid = by_uid;
    }

    /// Whether the connections add up with `bus`'s, which crossed beside
    /// them: each id one the bus gave (the loop would give it again, and
    /// the next accepted socket would replace the connection holding it),
    /// each authenticated connection known to the bus and each one past
    /// Hello named by it, and no connection of the bus without one here
    /// ([`Bus::check_daemon_connections`]). Returns why not. Part of
    /// reading a state (`restart::check`), so the read-back and the check
    /// in a child make it too.
    pub(crate) fn check_against(&self, bus: &Bus) -> Result<(), String> {
        let conns = self.conns.iter().map(|(&id, conn)| {
            let authenticated = matches!(conn.phase, Phase::Running);
            (id, authenticated, !conn.incomplete)
        });
        bus.check_daemon_connections(conns)
    }
}

fn deadlines(heap: &mut BinaryHeap<Reverse<(Instant, ConnId)>>) -> Vec<Deadline> {
    std::mem::take(heap)
        .into_iter()
        .map(|Reverse((at, conn))| Deadline { at, conn })
        .collect()
}

fn heap(deadlines: Vec<Deadline>) -> BinaryHeap<Reverse<(Instant, ConnId)>> {
    deadlines
        .into_iter()
        .map(|d| Reverse((d.at, d.conn)))
        .collect()
}

impl Server {
    /// The loop of a new image, from the state the previous one handed
    /// over; `requesters` hear `outcome`: done, or why not (this is the
    /// previous binary, back because the new one could not resume).
    pub fn resume(
        state: LoopState,
        bus: Bus,
        opts: ServerOptions,
        requesters: Vec<RestartRequester>,
        began_ns: u64,
        outcome: Result<(), String>,
    ) -> Result<Server, Unbuilt> {
        let mut server = Server::with_state(state, bus, opts)?;
        let pause_ms = restart::since_ms(began_ns);
        let kept = server.conns.len();
        match &outcome {
            Ok(()) => info!(
                "restarted in place: {kept} connections kept, serving again after {pause_ms:.1} ms"
            ),
            Err(why) => warn!(
                "restart failed: {why}; {kept} connections kept, serving again after {pause_ms:.1} ms"
            ),
        }
        for requester in requesters {
            let answer = outcome.clone().map_err(|why| {
                errors::BusError::new(errors::FAILED, format!("Restart failed: {why}"))
            });
            server
                .bus
                .restart_answered(requester, answer, Instant::now(), &mut server.actions);
        }
        server.apply_actions();
        server.flush_dirty();
        Ok(server)
    }

    /// Register every listener and connection of a new loop, and queue a
    /// flush of whatever output the previous image had not written yet.
    pub(super) fn register_all(&mut self) -> std::io::Result<()> {
        for (i, listen) in self.listeners.iter_mut().enumerate() {
            self.poll.registry().register(
                &mut listen.socket,
                Token(LAST_LISTENER - i),
                Interest::READABLE,
            )?;
        }
        self.register_container_listeners()?;
        for (&id, conn) in self.conns.iter_mut() {
            // Readable only; the flush below watches writability again
            // where output is left.
            conn.watching_writable = false;
            self.poll.registry().register(
                &mut conn.transport.stream,
                token(id),
                Interest::READABLE,
            )?;
            if conn.transport.has_output() || self.bus.queued_bytes(id) > 0 {
                conn.listed.list(id, &mut self.dirty);
            }
        }
        Ok(())
    }

    /// SIGUSR2 or a Restart call: restart at the end of this turn. A
    /// second request before then is refused.
    pub(super) fn request_restart(
        &mut self,
        requester: Option<RestartRequester>,
        why: &'static str,
    ) {
        if self.restart.is_some() {
            warn!("restart refused: {why} while another restart is in progress");
            if let Some(requester) = requester {
                let error = errors::BusError::new(
                    errors::FAILED,
                    "Restart refused: another restart is in progress",
                );
                self.bus
                    .restart_answered(requester, Err(error), Instant::now(), &mut self.actions);
            }
            return;
        }
        self.restart = Some(Pending {
            requesters: requester.into_iter().collect(),
            why,
        });
    }

    /// Do the restart asked for in this turn. Returns only if it did not
    /// happen; the bus then serves on as before.
    pub(super) fn restart_if_requested(&mut self) {
        let Some(pending) = self.restart.take() else {
            return;
        };
        info!("{}: restarting in place", pending.why);
        let why = self.restart_in_place(&pending);
        warn!("restart refused: {why}");
        for requester in pending.requesters {
            let error = errors::BusError::new(errors::FAILED, format!("Restart refused: {why}"));
            self.bus
                .restart_answered(requester, Err(error), Instant::now(), &mut self.actions);
        }
        self.apply_actions();
        self.flush_dirty();
    }

    /// Check the binary, write the handover, exec. Returns why not.
    fn restart_in_place(&mut self, pending: &Pending) -> String {
        let began = restart::clock_now().monotonic_ns;
        // Until the exec, or the return if the restart fails, the signals
        // the loop handles wait in the kernel, which keeps them across
        // the exec: the new image (or this loop) handles a SIGUSR2, a
        // SIGTERM or a child's exit that came meanwhile. Those that came
        // earlier in this turn wait there too.
        let _held = restart::hold_handled_signals();
        self.requeue_pending_signals();
        match &self.opts.binary {
            None => return "the running binary could not be opened at start-up".into(),
            Some(binary) => {
                if let Err(why) = binary.check() {
                    return why;
                }
            }
        }
        // The children the spawner started are handed over, and the
        // activations whose spawn failed are answered; a child still
        // being spawned could not be handed over (docs/restart.md,
        // "Services being started").
        match self.opts.launcher.end_spawns() {
            Ok(failed) => {
                self.activations_failed(failed);
                self.apply_actions();
            }
            Err(why) => return why,
        }
        self.opts.notifier.reloading("Restarting in place");
        // The read-back forks, which wants the loop's thread alone (the
        // exec would end the workers anyway).
        self.workers.stop();
        let state = self.take_state();
        let why = self.hand_over(&state, pending, began);
        self.put_back(state);
        self.workers.start_again();
        self.opts.notifier.ready(&self.opts.status);
        why
    }

    fn hand_over(&self, state: &LoopState, pending: &Pending, began: u64) -> String {
        let Some(binary) = &self.opts.binary else {
            return "no binary".into();
        };
        let handover = Handover {
            began,
            setup: &self.opts.setup,
            launcher: &self.opts.launcher,
            requesters: &pending.requesters,
            state,
            bus: &self.bus,
            dumpable: restart::dumpable::current(),
        };
        let (memfd, fds) = match write_handover(&handover) {
            Ok(written) => written,
            Err(e) => return format!("cannot write the handover: {e}"),
        };
        debug!(
            "handover written: {} bytes, {} descriptors, {:.1} ms after the restart began",
            rustix::fs::fstat(&memfd).map_or(0, |st| st.st_size),
            fds.len(),
            restart::since_ms(began)
        );
        // A state the new image would refuse is refused here, while this
        // loop can serve on: going back to this binary after the exec
        // would not help, since this binary refuses it too if it has the
        // same checks (docs/restart.md, "Failure paths").
        match restart::read_back(&memfd) {
            Ok(()) => {}
            Err(restart::CheckFailure::Refused(why)) => {
                return format!("the new image would refuse the state: {why}");
            }
            Err(not_tried) => return format!("the state could not be read back: {not_tried}"),
        }
        debug!(
            "handover read back in a child, {:.1} ms after the restart began",
            restart::since_ms(began)
        );
        let passed = fds
            .iter()
            .copied()
            .chain([memfd.as_raw_fd(), binary.running.as_raw_fd()]);
        let mut cleared = Vec::new();
        let mut why = None;
        for fd in passed {
            match crate::sys::set_close_on_exec(fd, false) {
                Ok(()) => cleared.push(fd),
                Err(e) => {
                    why = Some(format!("cannot pass descriptor {fd} on: {e}"));
                    break;
                }
            }
        }
        let why = why.unwrap_or_else(|| {
            let error = binary.exec(&[
                (restart::HANDOVER_FD, memfd.as_raw_fd().to_string()),
                (
                    restart::PREVIOUS_BINARY_FD,
                    binary.running.as_raw_fd().to_string(),
                ),
            ]);
            format!("cannot execute {}: {error}", binary.path.display())
        });
        // Still here: nothing of it may leak into the services we start.
        for fd in cleared {
            let _ = crate::sys::set_close_on_exec(fd, true);
        }
        why
    }

    /// The signals the handler has already taken in but the loop has
    /// not handled yet, sent again to this process: with the handled
    /// signals held (`restart::hold_handled_signals`), they wait in the
    /// kernel for the image that handles them.
    fn requeue_pending_signals(&mut self) {
        let me = rustix::process::getpid();
        for number in self.signals.pending() {
            let Some(signal) = rustix::process::Signal::from_raw(number) else {
                continue;
            };
            if let Err(e) = rustix::process::kill_process(me, signal) {
                warn!("signal {number} is lost in the restart: {e}");
            }
        }
    }

    fn take_state(&mut self) -> LoopState {
        // What workers parsed ahead crosses as the bytes it was read as.
        for conn in self.conns.values_mut() {
            conn.transport.unparse();
        }
        LoopState {
            conns: std::mem::take(&mut self.conns),
            listeners: std::mem::take(&mut self.listeners),
            auth_deadlines: deadlines(&mut self.auth_deadlines),
            fd_deadlines: deadlines(&mut self.fd_deadlines),
            incomplete: self.incomplete,
            incomplete_by_uid: std::mem::take(&mut self.incomplete_by_uid),
            late_users: Some(std::mem::replace(
                &mut self.late_users,
                LateUsers::new(Vec::new()),
            )),
            container_listeners: std::mem::take(&mut self.container_listeners),
            unfinished_reads: {
                // Heavy senders sitting out are read again at once by the
                // new image (a pause is far shorter than a restart). If
                // the restart is refused, this loop's next turn sits
                // them out again while its pause lasts: `fair_share` and
                // each connection's `heavy` are left as they were.
                let mut unfinished = std::mem::take(&mut self.unfinished_reads);
                unfinished.append(&mut self.deferred_reads);
                unfinished
            },
        }
    }

    pub(super) fn put_back(&mut self, mut state: LoopState) {
        state.count_incomplete_again();
        self.conns = state.conns;
        self.listeners = state.listeners;
        self.auth_deadlines = heap(state.auth_deadlines);
        self.fd_deadlines = heap(state.fd_deadlines);
        self.incomplete = state.incomplete;
        self.incomplete_by_uid = state.incomplete_by_uid;
        if let Some(late_users) = state.late_users {
            self.late_users = late_users;
        }
        self.unfinished_reads = state.unfinished_reads;
        self.container_listeners = state.container_listeners;
        self.count_container_places();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::Stream;

    fn conn(uid: u32, incomplete: bool) -> Conn {
        let (ours, _) = std::os::unix::net::UnixStream::pair().unwrap();
        let stream = Stream::Unix(mio::net::UnixStream::from_std(ours));
        Conn {
            incomplete,
            ..Conn::accepted(stream, Phase::Running, uid, None)
        }
    }

    /// A connection of `uid` still authenticating.
    fn authenticating(uid: u32) -> Conn {
        let sasl =
            crate::auth::SaslServer::new(&crate::auth::AuthConfig::new("0".repeat(32)), Some(uid));
        let phase = Phase::Authenticating {
            sasl,
            creds: Box::default(),
        };
        Conn {
            phase,
            ..conn(uid, true)
        }
    }

    /// A bus and a loop that add up: connection 1 past Hello, 2
    /// authenticated before it, 3 authenticating (the bus does not know
    /// it yet).
    fn bus_and_loop() -> (Bus, LoopState) {
        let mut bus = Bus::new(quickbus_bus::BusOptions::default());
        let creds = quickbus_bus::Credentials {
            uid: 1000,
            ..Default::default()
        };
        let ids: Vec<ConnId> = (0..3).map(|_| bus.next_connection_id()).collect();
        for &id in &ids[..2] {
            bus.add_connection_as(id, creds.clone(), false);
        }
        let hello = quickbus_wire::MessageBuilder::method_call(quickbus_bus::BUS_PATH, "Hello")
            .interface(quickbus_bus::BUS_INTERFACE)
            .destination(quickbus_bus::BUS_NAME)
            .build(1)
            .unwrap();
        let hello = quickbus_wire::Message::parse(hello).unwrap();
        bus.receive(ids[0], hello, Vec::new(), Instant::now(), &mut Vec::new());
        assert!(bus.unique_name(ids[0]).is_some());
        let mut state = LoopState::default();
        state.conns.insert(ids[0], conn(1000, false));
        state.conns.insert(ids[1], conn(1000, true));
        state.conns.insert(ids[2], authenticating(1000));
        (bus, state)
    }

    /// A loop whose connections do not add up with the bus's: an id at or
    /// past the bus's next (the next accepted socket would replace it), a
    /// connection past Hello or authenticated that the bus does not know
    /// or did not name, one the bus knows still authenticating, and a
    /// connection of the bus the loop has none for.
    #[test]
    fn handed_over_connections_must_be_the_buss() {
        let (mut bus, mut state) = bus_and_loop();
        assert_eq!(state.check_against(&bus), Ok(()));
        let refused = |state: &LoopState, bus: &Bus| state.check_against(bus).unwrap_err();
        // Not yet given: the next socket accepted would get id 4.
        state.conns.insert(ConnId(4), authenticating(1000));
        assert_eq!(
            refused(&state, &bus),
            "the daemon's connection 4 not below the next id to give, 4"
        );
        state.conns.remove(&ConnId(4));
        // Given, but authenticated (or past Hello) without the bus.
        let given = bus.next_connection_id();
        for incomplete in [true, false] {
            state.conns.insert(given, conn(1000, incomplete));
            assert_eq!(
                refused(&state, &bus),
                format!(
                    "connection {} authenticated, but the bus does not know it",
                    given.0
                )
            );
        }
        state.conns.remove(&given);
        // Past Hello in the loop, not in the bus; and the other way.
        state.conns.get_mut(&ConnId(2)).unwrap().incomplete = false;
        assert_eq!(
            refused(&state, &bus),
            "connection 2 said Hello as the daemon sees it, but the bus gave it no unique name"
        );
        state.conns.get_mut(&ConnId(2)).unwrap().incomplete = true;
        state.conns.get_mut(&ConnId(1)).unwrap().incomplete = true;
        assert_eq!(
            refused(&state, &bus),
            "connection 1 has not said Hello as the daemon sees it, but the bus gave it its unique name"
        );
        state.conns.get_mut(&ConnId(1)).unwrap().incomplete = false;
        // Known to the bus, authenticating in the loop.
        let running = state.conns.insert(ConnId(2), authenticating(1000)).unwrap();
        assert_eq!(
            refused(&state, &bus),
            "connection 2 is authenticating, but the bus knows it"
        );
        // Known to the bus, not to the loop.
        state.conns.remove(&ConnId(2));
        assert_eq!(
            refused(&state, &bus),
            "connection 2 of the bus has no connection in the daemon"
        );
        state.conns.insert(ConnId(2), running);
        assert_eq!(state.check_against(&bus), Ok(()));
    }

    #[test]
    fn handed_over_incomplete_connections_are_counted_again() {
        let mut state = LoopState::default();
        state.conns.insert(ConnId(1), conn(1000, true));
        state.conns.insert(ConnId(2), conn(1000, true));
        state.conns.insert(ConnId(3), conn(1001, true));
        state.conns.insert(ConnId(4), conn(1002, false));
        // What the state claimed: fewer than it holds, and a uid without
        // any.
        state.incomplete = 0;
        state.incomplete_by_uid = [(1000, 1), (7, usize::MAX)].into_iter().collect();
        state.count_incomplete_again();
        assert_eq!(state.incomplete, 3);
        let mut by_uid: Vec<(u32, usize)> = state.incomplete_by_uid.into_iter().collect();
        by_uid.sort_unstable();
        assert_eq!(by_uid, [(1000, 2), (1001, 1)]);
    }
}
