//! quickbus's own traffic counters, per connection and bus-wide, reported
//! by Debug.Stats beside dbus-daemon's keys. The bus core counts what it
//! routes and, with flow control ([`crate::overflow`]), what it queued,
//! dropped and held back; queue depth is read from the queue itself
//! ([`crate::outbox`]).
//!
//! Owns: one [`Traffic`] value (a peer keeps one, the bus one more for
//! the totals; `bus::counting` keeps the two in step). May touch:
//! nothing else.

use quickbus_wire::Value;

/// Running totals since a connection (or the bus) started. Each stops at
/// `u64::MAX` rather than wrapping (or, in a debug build, panicking):
/// no bus lives to count that far, but a restart in place takes the
/// counts from its state as they are, and a corrupt one may be that high
/// (docs/restart.md, "Failure paths").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Traffic {
    /// Messages the peer sent to the bus, and their bytes.
    pub messages_in: u64,
    pub bytes_in: u64,
    /// Messages the bus routed to the peer (including its own replies and
    /// signals), and their bytes.
    pub messages_out: u64,
    pub bytes_out: u64,
    /// Error replies the bus itself sent to the peer.
    pub errors: u64,
    /// Signals for the peer dropped because its queue was full.
    pub dropped: u64,
    /// The most bytes waiting in the peer's outgoing queue before a
    /// write (what waits now is the queue's: `Bus::queued_bytes`).
    pub peak_queued_bytes: u64,
    /// Times the bus held the peer back because a receiver of its
    /// signal was full (`Holds`), or paced it (`Pauses`), and the time it
    /// spent so held, in microseconds.
    pub holds: u64,
    pub pauses: u64,
    pub held_micros: u64,
}

impl Traffic {
    #[inline]
    pub(crate) fn count_in(&mut self, bytes: usize) {
        self.messages_in = self.messages_in.saturating_add(1);
        self.bytes_in = self.bytes_in.saturating_add(bytes as u64);
    }

    /// The most bytes queued before a write, or now if more.
    pub fn peak(&self, queued: u64) -> u64 {
        self.peak_queued_bytes.max(queued)
    }

    #[inline]
    pub(crate) fn count_out(&mut self, bytes: usize) {
        self.messages_out = self.messages_out.saturating_add(1);
        self.bytes_out = self.bytes_out.saturating_add(bytes as u64);
    }

    /// `count` messages of `bytes` each routed out (the copies of one
    /// broadcast).
    #[inline]
    pub(crate) fn count_out_many(&mut self, count: usize, bytes: usize) {
        // usize to u64: lossless on every target.
        let (count, bytes) = (count as u64, bytes as u64);
        self.messages_out = self.messages_out.saturating_add(count);
        self.bytes_out = self.bytes_out.saturating_add(count.saturating_mul(bytes));
    }

    /// quickbus's keys for Debug.Stats (dbus-daemon has none of these, so
    /// clients that only know its keys are not confused).
    /// `queued`: the bytes waiting in the peer's queue now.
    pub(crate) fn stats_entries(&self, queued: u64) -> Vec<(&'static str, Value)> {
        vec![
            ("MessagesIn", Value::Uint64(self.messages_in)),
            ("BytesIn", Value::Uint64(self.bytes_in)),
            ("MessagesOut", Value::Uint64(self.messages_out)),
            ("BytesOut", Value::Uint64(self.bytes_out)),
            ("Errors", Value::Uint64(self.errors)),
            ("Dropped", Value::Uint64(self.dropped)),
            ("QueuedBytes", Value::Uint64(queued)),
            ("PeakQueuedBytes", Value::Uint64(self.peak(queued))),
            ("Holds", Value::Uint64(self.holds)),
            ("Pauses", Value::Uint64(self.pauses)),
            ("HeldMicroseconds", Value::Uint64(self.held_micros)),
        ]
    }

    /// A signal for the peer dropped: its queue was full.
    #[inline]
    pub(crate) fn count_dropped(&mut self) {
        self.dropped = self.dropped.saturating_add(1);
    }

    /// The peer held back for a full receiver (or, with `paced`, for
    /// pacing).
    #[inline]
    pub(crate) fn count_hold(&mut self, paced: bool) {
        if paced {
            self.pauses = self.pauses.saturating_add(1);
        } else {
            self.holds = self.holds.saturating_add(1);
        }
    }

    /// A hold or pause of the peer ended after `micros`.
    #[inline]
    pub(crate) fn count_held(&mut self, micros: u64) {
        self.held_micros = self.held_micros.saturating_add(micros);
    }

    /// An error the bus itself sent to the peer.
    #[inline]
    pub(crate) fn count_error(&mut self) {
        self.errors = self.errors.saturating_add(1);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Every counter at its end.
    pub(crate) const AT_THE_END: Traffic = Traffic {
        messages_in: u64::MAX,
        bytes_in: u64::MAX,
        messages_out: u64::MAX,
        bytes_out: u64::MAX,
        errors: u64::MAX,
        dropped: u64::MAX,
        peak_queued_bytes: u64::MAX,
        holds: u64::MAX,
        pauses: u64::MAX,
        held_micros: u64::MAX,
    };

    /// Every counter at its end (as a corrupt handed-over state may have
    /// it) stays there: adding to one panicked in a debug build and
    /// wrapped it to 0 in a release one.
    #[test]
    fn counters_at_their_end_stay_there() {
        let mut t = AT_THE_END;
        t.count_in(100);
        t.count_out(100);
        t.count_out_many(10, 100);
        t.count_dropped();
        t.count_hold(false);
        t.count_hold(true);
        t.count_held(1000);
        t.count_error();
        assert_eq!(t, AT_THE_END);
        assert_eq!(t.peak(5), u64::MAX);
    }
}
