//! What each filtered connection may see of its peers: flatpak-proxy.c's
//! per-client `unique_id_policy` and `unique_id_owned_names`, kept by the
//! bus.
//!
//! A peer's level is the highest of what it was granted directly (TALK
//! for the app itself, SEE for a peer whose message the app received) and
//! of the levels of the well-known names it became primary owner of while
//! the app was connected. As in the proxy, a peer keeps what a name gave
//! it after releasing the name. The level is updated when a name changes
//! owner and cached, so judging a message costs one lookup.
//!
//! Owns: every filtered connection's filter and view of its peers.
//! May touch: nothing else (the router tells it what happened).

use std::sync::Arc;

use super::rules::MessageFacts;
use super::{AppFilter, Level};
use crate::{ConnId, FastMap};

/// One peer as a filtered connection sees it.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Peer {
    /// Granted directly: TALK for the app itself, SEE for a sender.
    granted: Level,
    /// The visible well-known names it owned (or owns) as primary owner.
    names: Vec<String>,
    /// The highest of `granted` and the levels of `names`.
    level: Level,
}

/// One filtered connection: its filter and its view of its peers.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct AppView {
    filter: Arc<AppFilter>,
    peers: FastMap<ConnId, Peer>,
}

impl AppView {
    pub fn new(filter: Arc<AppFilter>, own_id: ConnId) -> AppView {
        let mut view = AppView {
            filter,
            peers: FastMap::default(),
        };
        view.grant(own_id, Level::Talk);
        view
    }

    pub fn filter(&self) -> &AppFilter {
        &self.filter
    }

    /// Raise what `peer` was granted directly.
    pub fn grant(&mut self, peer: ConnId, level: Level) {
        let entry = self.peers.entry(peer).or_default();
        entry.granted = entry.granted.max(level);
        entry.level = entry.level.max(level);
    }

    /// `peer` became primary owner of the well-known `name`.
    pub fn owner_gained(&mut self, peer: ConnId, name: &str) {
        let level = self.filter.level_of_name(name);
        if level == Level::None {
            return;
        }
        let entry = self.peers.entry(peer).or_default();
        if !entry.names.iter().any(|n| n == name) {
            entry.names.push(name.to_owned());
        }
        entry.level = entry.level.max(level);
    }

    /// The level of the connection `peer` (its unique name).
    pub fn peer_level(&self, peer: ConnId) -> Level {
        self.peers.get(&peer).map_or(Level::None, |p| p.level)
    }

    /// Whether a message with these facts may go to `peer` (whose level
    /// is TALK at least): OWN, or a call rule of one of its names.
    pub fn call_allowed_to_peer(&self, peer: ConnId, msg: &MessageFacts<'_>) -> bool {
        self.peer_allows(peer, |filter, name| filter.call_allowed(name, msg))
    }

    /// Whether a broadcast with these facts from `peer` may come in.
    pub fn broadcast_allowed_from_peer(&self, peer: ConnId, msg: &MessageFacts<'_>) -> bool {
        self.peer_allows(peer, |filter, name| filter.broadcast_allowed(name, msg))
    }

    fn peer_allows(&self, peer: ConnId, allowed: impl Fn(&AppFilter, &str) -> bool) -> bool {
        let Some(p) = self.peers.get(&peer) else {
            return false;
        };
        // A level granted directly comes with flatpak-proxy.c's
        // match-all filter of that level: TALK and OWN allow everything.
        p.level == Level::Own
            || p.granted >= Level::Talk
            || p.names.iter().any(|name| allowed(&self.filter, name))
    }

    /// Share `filter` (its instance's, compiled from the same options)
    /// instead of this view's own copy: a restart in place deserializes
    /// one per view.
    pub fn share_filter(&mut self, filter: &Arc<AppFilter>) {
        if self.filter.options() == filter.options() {
            self.filter = Arc::clone(filter);
        }
    }

    /// `peer` left the bus.
    pub fn forget(&mut self, peer: ConnId) {
        self.peers.remove(&peer);
    }
}

/// Every filtered connection's view, by connection.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct AppViews {
    views: FastMap<ConnId, AppView>,
}

impl AppViews {
    /// Whether nobody is filtered: the one branch an unfiltered bus pays
    /// per message.
    pub fn is_empty(&self) -> bool {
        self.views.is_empty()
    }

    pub fn get(&self, conn: ConnId) -> Option<&AppView> {
        if self.views.is_empty() {
            return None;
        }
        self.views.get(&conn)
    }

    pub fn get_mut(&mut self, conn: ConnId) -> Option<&mut AppView> {
        if self.views.is_empty() {
            return None;
        }
        self.views.get_mut(&conn)
    }

    pub fn insert(&mut self, conn: ConnId, view: AppView) {
        self.views.insert(conn, view);
    }

    pub fn iter(&self) -> impl Iterator<Item = (&ConnId, &AppView)> {
        self.views.iter()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&ConnId, &mut AppView)> {
        self.views.iter_mut()
    }

    /// `conn` left: its view goes, and every view forgets it.
    pub fn remove_connection(&mut self, conn: ConnId) {
        if self.views.is_empty() {
            return;
        }
        self.views.remove(&conn);
        for view in self.views.values_mut() {
            view.forget(conn);
        }
    }
}
