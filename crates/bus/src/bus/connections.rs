//! A connection's life as the bus sees it: an id when the daemon accepts
//! a socket, credentials when it has authenticated, a unique name at
//! Hello (see `before_hello`), and on leaving its rules, names, pending
//! calls and queue let go of in that order.
//!
//! Owns: nothing; it adds and removes entries of `Peers`. May touch:
//! peers, the policy (a newcomer's client policy), queues (its user's
//! share), and on removal subscriptions, monitors, the registry and the
//! reply table, announcing through `announce` and `outgoing`.

use std::time::Instant;

use crate::errors::{self, BusError};
use crate::{Action, Bus, ConnId, Credentials};

use super::Routing;

impl Bus {
    /// The unique name of `id`, once it said Hello.
    pub fn unique_name(&self, id: ConnId) -> Option<&str> {
        self.conns.get(&id)?.unique().as_deref()
    }

    /// Number of connections (with or without Hello).
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }

    /// A new connection's id: the daemon takes one when it accepts a
    /// socket (its mio token is the same number), and it names the
    /// connection to the bus once authenticated ([`Bus::add_connection_as`]).
    /// Ids are never given twice, so nothing the bus says about a
    /// connection that left can reach another.
    pub fn next_connection_id(&mut self) -> ConnId {
        self.conns.next_id()
    }

    /// A peer finished authenticating: a new id for it, and
    /// [`Bus::add_connection_as`].
    pub fn add_connection(&mut self, creds: Credentials, unix_fds: bool) -> ConnId {
        let id = self.next_connection_id();
        self.add_connection_as(id, creds, unix_fds);
        id
    }

    /// The peer `id` (from [`Bus::next_connection_id`]) finished
    /// authenticating as `creds`; `unix_fds`: it negotiated fd passing.
    /// From here on the bus owns its identity and credentials.
    pub fn add_connection_as(&mut self, id: ConnId, creds: Credentials, unix_fds: bool) {
        if self.conns.contains_key(&id) {
            return;
        }
        let policy = self.policy.client(&creds);
        let queue = self.queues.join(creds.uid);
        self.conns.add(id, creds, unix_fds, policy, queue);
    }

    /// What the kernel (and authentication) said about connection `id`.
    pub fn credentials(&self, id: ConnId) -> Option<&Credentials> {
        self.conns.get(&id).map(|c| c.creds())
    }

    /// The peer is gone (hung up, or the daemon dropped it): its match
    /// rules go first (so it hears nothing more), then its names (queues
    /// move on and NameOwnerChanged goes out), then callers waiting on it
    /// get NoReply.
    pub fn remove_connection(&mut self, id: ConnId, now: Instant, out: &mut Vec<Action>) {
        self.assert_none_lent();
        let routing = Routing::by_bus(now);
        if !self.conns.contains_key(&id) {
            return;
        }
        self.subs.remove_connection(id);
        if let Some(unique) = self.unique_name(id) {
            let unique = unique.to_owned();
            self.subs.remove_rules_naming(&unique);
        }
        self.monitors.remove(id);
        let mut events = Vec::new();
        self.registry.remove_connection(id, &mut events);
        // Signals name the departed connection, so it stays known until
        // they are built; emit() shows its NameLost to monitors only.
        self.emit(&events, Some(id), routing, out);
        self.app_views.remove_connection(id);
        for (caller, serial) in self.replies.remove_connection(id) {
            let err = BusError::new(
                errors::NO_REPLY,
                "Message recipient disconnected from message bus without replying",
            );
            self.send_no_reply(caller, serial, err, routing, out);
        }
        if let Some(conn) = self.conns.remove(&id) {
            self.queue_gone(id, &conn.queue, now, out);
        }
        self.containers_lose(id, routing, out);
    }

    pub(super) fn accepts_fds(&self, id: ConnId) -> bool {
        self.conns.get(&id).is_some_and(|c| c.unix_fds())
    }
}
