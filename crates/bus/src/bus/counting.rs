//! Keeping each peer's [`Traffic`] and the bus-wide totals in step, and
//! reading them back for the daemon (`quickbus top`, the stats log).
//!
//! Owns: nothing. May touch: peers (their counters) and the bus's
//! totals.

use crate::{Bus, ConnId, Traffic};

impl Bus {
    /// A message for `conn` was dropped: its queue was full.
    pub(crate) fn record_dropped(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.traffic.count_dropped();
            self.traffic.count_dropped();
        }
    }

    /// `conn` is held back for a full receiver (or, with `paced`, for
    /// pacing).
    pub(crate) fn record_hold(&mut self, conn: ConnId, paced: bool) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.traffic.count_hold(paced);
            self.traffic.count_hold(paced);
        }
    }

    /// A hold or pause of `conn` ended after `held`.
    pub(crate) fn record_held(&mut self, conn: ConnId, held: std::time::Duration) {
        if let Some(c) = self.conns.get_mut(&conn) {
            let micros = u64::try_from(held.as_micros()).unwrap_or(u64::MAX);
            c.traffic.count_held(micros);
            self.traffic.count_held(micros);
        }
    }

    /// One connection's counters (None for an unknown connection).
    pub fn traffic(&self, conn: ConnId) -> Option<Traffic> {
        self.conns.get(&conn).map(|c| c.traffic)
    }

    /// Bus-wide totals (queue fields are unused there).
    pub fn total_traffic(&self) -> Traffic {
        self.traffic
    }

    pub(crate) fn count_in(&mut self, from: ConnId, bytes: usize) {
        if let Some(c) = self.conns.get_mut(&from) {
            c.traffic.count_in(bytes);
            self.traffic.count_in(bytes);
        }
    }

    pub(crate) fn count_error(&mut self, to: ConnId) {
        if let Some(c) = self.conns.get_mut(&to) {
            c.traffic.count_error();
            self.traffic.count_error();
        }
    }
}
