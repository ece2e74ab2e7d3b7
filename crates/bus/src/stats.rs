//! org.freedesktop.DBus.Debug.Stats: counts and peaks of what the bus
//! holds, with dbus-daemon's keys (memory pools have no counterpart), then
//! quickbus's own traffic counters (see [`crate::traffic`]).
//!
//! Owns the peaks; reads the other nouns through a [`View`] the bus lends
//! it, and changes nothing else.

use quickbus_wire::Value;

use crate::driver::{dict_sv, DriverResult};
use crate::errors::{self, BusError};
use crate::peers::Peers;
use crate::registry::NameRegistry;
use crate::replies::PendingReplies;
use crate::subscriptions::{Monitors, Subscriptions};
use crate::traffic::Traffic;
use crate::{ConnId, BUS_NAME};

/// What the statistics read: the bus's nouns, borrowed.
pub(crate) struct View<'a> {
    pub peers: &'a Peers,
    pub registry: &'a NameRegistry,
    pub subs: &'a Subscriptions,
    pub monitors: &'a Monitors,
    pub replies: &'a PendingReplies,
    /// Bus-wide totals of what was routed.
    pub traffic: &'a Traffic,
    pub peaks: &'a Peaks,
}

/// Highest counts seen since start-up, bus-wide.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Peaks {
    match_rules: usize,
    match_rules_per_connection: usize,
    names: usize,
    names_per_connection: usize,
}

/// Highest counts seen for one connection.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct ConnPeaks {
    match_rules: usize,
    names: usize,
}

fn u32_of(n: usize) -> Value {
    Value::Uint32(u32::try_from(n).unwrap_or(u32::MAX))
}

impl Peaks {
    /// Record new peaks after `conn` gained names or rules (O(1)).
    pub fn note(
        &mut self,
        conn: ConnId,
        peers: &mut Peers,
        subs: &Subscriptions,
        registry: &NameRegistry,
    ) {
        let rules = subs.count(conn);
        let names = registry.count(conn);
        if let Some(c) = peers.get_mut(&conn) {
            c.peaks.match_rules = c.peaks.match_rules.max(rules);
            c.peaks.names = c.peaks.names.max(names);
        }
        self.match_rules = self.match_rules.max(subs.len());
        self.match_rules_per_connection = self.match_rules_per_connection.max(rules);
        self.names = self.names.max(registry.len());
        self.names_per_connection = self.names_per_connection.max(names);
    }
}

impl View<'_> {
    pub fn get_stats(&self) -> DriverResult {
        let active = self.peers.registered();
        let p = self.peaks;
        let mut entries = vec![
            ("Serial", Value::Uint32(0)),
            ("ActiveConnections", u32_of(active)),
            ("IncompleteConnections", u32_of(self.peers.len() - active)),
            ("MatchRules", u32_of(self.subs.len())),
            ("PeakMatchRules", u32_of(p.match_rules)),
            (
                "PeakMatchRulesPerConnection",
                u32_of(p.match_rules_per_connection),
            ),
            ("BusNames", u32_of(self.registry.len())),
            ("PeakBusNames", u32_of(p.names)),
            ("PeakBusNamesPerConnection", u32_of(p.names_per_connection)),
        ];
        entries.extend(self.traffic.stats_entries(0));
        Ok(vec![dict_sv(entries)])
    }

    pub fn get_connection_stats(&self, name: &str) -> DriverResult {
        if name == BUS_NAME {
            return Err(BusError::new(
                errors::INVALID_ARGS,
                format!("GetConnectionStats is not meaningful for the message bus \"{BUS_NAME}\" itself"),
            ));
        }
        let id = self.registry.owner(name).ok_or_else(|| {
            BusError::new(
                errors::NAME_HAS_NO_OWNER,
                format!("Could not get statistics of name '{name}': no such name"),
            )
        })?;
        let conn = &self.peers[&id];
        let queued = conn.queue.bytes() as u64;
        let peak_queued = conn.traffic.peak(queued);
        let mut entries = vec![
            ("Serial", Value::Uint32(0)),
            ("MatchRules", u32_of(self.subs.count(id))),
            ("PeakMatchRules", u32_of(conn.peaks.match_rules)),
            ("BusNames", u32_of(self.registry.count(id))),
            ("PeakBusNames", u32_of(conn.peaks.names)),
            (
                "UniqueName",
                Value::String(conn.unique().clone().unwrap_or_default()),
            ),
            // dbus-daemon's names for its outgoing queue; quickbus routes
            // each message as soon as it is read, so nothing waits inbound.
            ("OutgoingBytes", u32_of(queued as usize)),
            ("PeakOutgoingBytes", u32_of(peak_queued as usize)),
            ("PendingReplies", u32_of(self.replies.waiting(id))),
        ];
        entries.extend(conn.traffic.stats_entries(queued));
        Ok(vec![dict_sv(entries)])
    }

    /// Every connection's rules, in their canonical text.
    pub fn get_all_match_rules(&self) -> DriverResult {
        let mut ids: Vec<ConnId> = self.peers.keys().copied().collect();
        ids.sort_unstable();
        let items = ids
            .into_iter()
            .filter_map(|id| {
                // Every registered connection, with no rules too, as
                // dbus-daemon lists them; monitors have no name any more.
                let conn = &self.peers[&id];
                if self.monitors.is_monitor(id) {
                    return None;
                }
                let unique = conn.unique().clone()?;
                let rules: Vec<Value> = self
                    .subs
                    .rules_of(id)
                    .map(|r| Value::String(r.to_string()))
                    .collect();
                Some(Value::DictEntry(
                    Box::new(Value::String(unique)),
                    Box::new(Value::Array {
                        elem_sig: "s".into(),
                        items: rules,
                    }),
                ))
            })
            .collect();
        Ok(vec![Value::Array {
            elem_sig: "{sas}".into(),
            items,
        }])
    }
}
