//! Connections until they are active: accepting them, the deadline until
//! Hello, and the bound on incomplete connections.
//!
//! As in dbus-daemon, a connection is *incomplete* from accept until its
//! Hello succeeds: while it authenticates and while it has authenticated
//! but not said Hello. Incomplete connections count toward
//! `max_incomplete_connections`, and each is closed when `auth_timeout`
//! has passed since it was accepted. A connection whose Hello is refused
//! (`max_connections_per_user`, `max_completed_connections`) gets the
//! error and is then disconnected; dbus-daemon leaves it incomplete until
//! `auth_timeout`, so that it may try Hello again (docs/reliability.md).
//!
//! quickbus's own: when every incomplete slot is taken, a new connection
//! takes the slot of the oldest incomplete connection of the user who
//! holds the most, if that user holds more than the newcomer's user does.
//! So no user can keep another out by holding slots; dbus-daemon stops
//! accepting instead, and the flooding user's queued connections then
//! come first.

use std::cmp::Reverse;
use std::time::{Duration, Instant};

use mio::Interest;
use quickbus_bus::ConnId;
use tracing::{debug, info, warn};

use super::{Conn, Phase, Server};
use crate::auth::{AuthConfig, SaslServer};
use crate::nonce::NONCE_LEN;
use crate::socket::Stream;

impl Server {
    /// A socket accepted on a configured listener, or on a container
    /// instance's (`contained`: EXTERNAL only, then the creator's uid).
    pub(super) fn add_connection(
        &mut self,
        mut stream: Stream,
        nonce: Option<[u8; NONCE_LEN]>,
        contained: Option<super::containers::Contained>,
    ) {
        // Completed connections are bounded by the bus at Hello (with the
        // LimitsExceeded reply dbus-daemon gives); here only what could
        // exhaust fds: the incomplete ones and an overall cap.
        if self.conns.len()
            >= self.opts.limits.max_connections + self.opts.limits.max_incomplete_connections
        {
            self.refuse_connection(None);
            return;
        }
        let creds = if stream.is_unix() {
            match crate::peer::identify(&stream, &mut self.user_db) {
                Ok(c) => c,
                Err(e) => {
                    self.log_limiter.warn(
                        "refusing connection: no peer credentials",
                        format_args!("refusing connection: no peer credentials: {e}"),
                    );
                    return;
                }
            }
        } else {
            crate::peer::unidentified()
        };
        if stream.is_unix() {
            self.resolve_late_policy_users(creds.uid);
        }
        if self.incomplete >= self.opts.limits.max_incomplete_connections
            && !self.make_room_for(creds.uid)
        {
            self.refuse_connection(Some(creds.uid));
            return;
        }
        if let Err(e) = crate::socket_buffers::apply(&stream, self.opts.limits.socket_buffer_bytes)
        {
            // The connection works with the kernel's default buffers.
            self.log_limiter.warn(
                "cannot set socket buffers",
                format_args!(
                    "cannot set socket buffers to {} bytes: {e}",
                    self.opts.limits.socket_buffer_bytes
                ),
            );
        }
        // One id for the bus and the loop: it is the mio token too.
        let id = self.bus.next_connection_id();
        let token = super::token(id);
        if token.0 == 0 || token.0 > super::LAST_CONNECTION {
            self.log_limiter.warn(
                "refusing connection: out of ids",
                format_args!("refusing connection: no token left for {id:?}"),
            );
            return;
        }
        if let Err(e) = self
            .poll
            .registry()
            .register(&mut stream, token, Interest::READABLE)
        {
            self.log_limiter.warn(
                "refusing connection: cannot register it",
                format_args!("refusing connection: cannot register it: {e}"),
            );
            return;
        }
        let sasl = if contained.is_some() {
            // bus/containers.c: "We only accept EXTERNAL authentication".
            let auth = AuthConfig {
                mechanisms: vec![crate::auth::Mechanism::External],
                allow_anonymous: false,
                keyring: None,
                ..self.opts.auth.clone()
            };
            SaslServer::new(&auth, Some(creds.uid))
        } else if stream.is_unix() {
            SaslServer::new(&self.opts.auth, Some(creds.uid))
        } else {
            // Over tcp: no uid for EXTERNAL, no fds to pass.
            let auth = AuthConfig {
                unix_fd_supported: false,
                ..self.opts.auth.clone()
            };
            SaslServer::new(&auth, None)
        };
        let uid = creds.uid;
        *self.incomplete_by_uid.entry(uid).or_default() += 1;
        debug!(uid, pid = ?creds.pid, "new connection");
        let creds = Box::new(creds);
        let phase = match nonce {
            Some(expected) => Phase::Nonce {
                expected,
                sasl,
                creds,
            },
            None => Phase::Authenticating { sasl, creds },
        };
        if let Some(c) = contained.as_ref().filter(|c| c.counted) {
            self.container_places_taken(&c.instance, 1);
        }
        self.conns
            .insert(id, Conn::accepted(stream, phase, uid, contained));
        self.incomplete += 1;
        self.auth_deadlines.push(Reverse((
            Instant::now() + self.opts.limits.auth_timeout,
            id,
        )));
    }

    /// A dynamic user whose name the loaded policy could not resolve (the
    /// unit started after the bus) connects, or a uid the policy gave a
    /// dynamic user now belongs to another: the policy is resolved again
    /// first, so that the right rules apply to this connection (see
    /// [`crate::late_users`]).
    fn resolve_late_policy_users(&mut self, uid: u32) {
        use crate::late_users::Change;
        let Some((change, policy)) = self.late_users.new_policy_for(uid, &mut |w| warn!("{w}"))
        else {
            return;
        };
        let why = match change {
            Change::Appeared { name } => format!("dynamic user \"{name}\" (uid {uid}) appeared"),
            Change::Released { name } => {
                format!("uid {uid} is no longer dynamic user \"{name}\"")
            }
        };
        match policy {
            Ok(policy) => {
                info!("Policy resolved again: {why}");
                self.bus.set_policy(policy);
            }
            Err(e) => warn!("Unable to resolve the policy again ({why}): {e}"),
        }
    }

    fn refuse_connection(&mut self, uid: Option<u32>) {
        let uid = uid.map_or_else(|| "?".to_owned(), |u| u.to_string());
        self.log_limiter.warn(
            "refusing connection",
            format_args!(
                "refusing connection from uid {uid}: {} connections, {} incomplete \
                 (max_completed_connections={}, max_incomplete_connections={})",
                self.conns.len(),
                self.incomplete,
                self.opts.limits.max_connections,
                self.opts.limits.max_incomplete_connections
            ),
        );
    }

    /// Every incomplete slot is taken: close the oldest incomplete
    /// connection of the user holding the most slots, if that user holds
    /// more than `uid` does. True if a slot was freed.
    fn make_room_for(&mut self, uid: u32) -> bool {
        let holds_of = |uid: u32| self.incomplete_by_uid.get(&uid).copied().unwrap_or(0);
        let newcomer_holds = holds_of(uid);
        let heaviest = self
            .conns
            .iter()
            .filter(|(_, c)| c.incomplete)
            // Most slots first, then the oldest (lowest id).
            .max_by_key(|(id, c)| (holds_of(c.uid), Reverse(**id)))
            .map(|(id, c)| (*id, c.uid, holds_of(c.uid)));
        let Some((id, victim_uid, holds)) = heaviest else {
            return false;
        };
        if holds <= newcomer_holds {
            return false;
        }
        self.log_limiter.warn(
            "closing an incomplete connection to make room",
            format_args!(
                "closing an incomplete connection of uid {victim_uid} to make room for \
                 uid {uid}: it holds {holds} of max_incomplete_connections={}, uid {uid} \
                 {newcomer_holds}",
                self.opts.limits.max_incomplete_connections
            ),
        );
        self.close(id, "closed to make room for another user's connection");
        true
    }

    /// `auth_timeout` changed from `old` to `new` (a reload): the deadline
    /// of every connection not yet past Hello moves by the difference, as
    /// dbus-daemon measures each against the current value. One moved into
    /// the past is closed at the end of this turn.
    pub(super) fn retime_auth_deadlines(&mut self, old: Duration, new: Duration) {
        if old == new {
            return;
        }
        let moved = |deadline: Instant| match new.checked_sub(old) {
            Some(later) => deadline + later,
            // Never before the monotonic clock's start, where it could
            // not be represented.
            None => deadline.checked_sub(old - new).unwrap_or(deadline),
        };
        self.auth_deadlines = std::mem::take(&mut self.auth_deadlines)
            .into_iter()
            .map(|Reverse((deadline, id))| Reverse((moved(deadline), id)))
            .collect();
    }

    /// Close connections that are still incomplete `auth_timeout` after
    /// they were accepted.
    pub(super) fn expire_incomplete(&mut self, now: Instant) {
        while let Some(Reverse((deadline, id))) = self.auth_deadlines.peek().copied() {
            if deadline > now {
                break;
            }
            self.auth_deadlines.pop();
            let Some(conn) = self.conns.get(&id).filter(|c| c.incomplete) else {
                continue;
            };
            let authenticating = matches!(
                conn.phase,
                Phase::Nonce { .. } | Phase::Authenticating { .. }
            );
            let stage = if authenticating {
                "authenticated"
            } else {
                "said Hello"
            };
            // dbus-daemon's words, with the stage it did not reach.
            let reason = format!(
                "Connection has not {stage} soon enough, closing it (auth_timeout={}ms)",
                self.opts.limits.auth_timeout.as_millis()
            );
            if authenticating {
                // (close() logs the others, naming the connection.)
                self.log_limiter.warn(
                    "connection not authenticated within auth_timeout",
                    format_args!("{reason} (uid {})", conn.uid),
                );
            }
            self.close(id, &reason);
        }
    }

    /// Forget the deadlines of connections that completed or left, so
    /// that they do not keep the loop waking up for nothing.
    pub(super) fn drop_stale_auth_deadlines(&mut self) {
        while let Some(&Reverse((_, id))) = self.auth_deadlines.peek() {
            if self.conns.get(&id).is_some_and(|c| c.incomplete) {
                break;
            }
            self.auth_deadlines.pop();
        }
    }

    /// After the bus handled a message of a connection that had not said
    /// Hello: if its Hello succeeded, it is complete now. (A refused Hello
    /// is the bus's Disconnect after the error; anything else it sent the
    /// bus answered or disconnected it for, and it stays incomplete, under
    /// its deadline.)
    pub(super) fn after_message_before_hello(&mut self, id: ConnId) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        let Phase::Running = conn.phase else {
            return;
        };
        if self.bus.unique_name(id).is_some() {
            conn.incomplete = false;
            let uid = conn.uid;
            self.incomplete_closed(uid);
        }
    }

    /// A connection of `uid` is no longer incomplete (it said Hello, or
    /// it is gone).
    pub(super) fn incomplete_closed(&mut self, uid: u32) {
        self.incomplete -= 1;
        if let Some(count) = self.incomplete_by_uid.get_mut(&uid) {
            *count -= 1;
            if *count == 0 {
                self.incomplete_by_uid.remove(&uid);
            }
        }
    }
}
