//! quickbus's own traffic counters, per connection and bus-wide, reported
//! by Debug.Stats beside dbus-daemon's keys. The bus core counts what it
//! routes and, with flow control ([`crate::overflow`]), what it queued,
//! dropped and held back; queue depth is as of the daemon's last write.

use quickbus_wire::Value;

use crate::bus::Bus;
use crate::ConnId;

/// Running totals since a connection (or the bus) started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
    /// Bytes waiting in the peer's outgoing queue after the daemon's last
    /// write, and the most there were before one.
    pub queued_bytes: u64,
    pub peak_queued_bytes: u64,
    /// Times the bus held the peer back because a receiver of its
    /// signal was full (`Holds`), or paced it (`Pauses`), and the time it
    /// spent so held, in microseconds.
    pub holds: u64,
    pub pauses: u64,
    pub held_micros: u64,
}

impl Traffic {
    pub(crate) fn count_in(&mut self, bytes: usize) {
        self.messages_in += 1;
        self.bytes_in += bytes as u64;
    }

    pub(crate) fn count_out(&mut self, bytes: usize) {
        self.messages_out += 1;
        self.bytes_out += bytes as u64;
    }

    /// quickbus's keys for Debug.Stats (dbus-daemon has none of these, so
    /// clients that only know its keys are not confused).
    pub(crate) fn stats_entries(&self) -> Vec<(&'static str, Value)> {
        vec![
            ("MessagesIn", Value::Uint64(self.messages_in)),
            ("BytesIn", Value::Uint64(self.bytes_in)),
            ("MessagesOut", Value::Uint64(self.messages_out)),
            ("BytesOut", Value::Uint64(self.bytes_out)),
            ("Errors", Value::Uint64(self.errors)),
            ("Dropped", Value::Uint64(self.dropped)),
            ("QueuedBytes", Value::Uint64(self.queued_bytes)),
            ("PeakQueuedBytes", Value::Uint64(self.peak_queued_bytes)),
            ("Holds", Value::Uint64(self.holds)),
            ("Pauses", Value::Uint64(self.pauses)),
            ("HeldMicroseconds", Value::Uint64(self.held_micros)),
        ]
    }
}

impl Bus {
    /// A message for `conn` was dropped: its queue was full.
    pub(crate) fn record_dropped(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.traffic.dropped += 1;
            self.traffic.dropped += 1;
        }
    }

    /// `conn` is held back for a full receiver (or, with `paced`, for
    /// pacing).
    pub(crate) fn record_hold(&mut self, conn: ConnId, paced: bool) {
        if let Some(c) = self.conns.get_mut(&conn) {
            for t in [&mut c.traffic, &mut self.traffic] {
                if paced {
                    t.pauses += 1;
                } else {
                    t.holds += 1;
                }
            }
        }
    }

    /// A hold or pause of `conn` ended after `held`.
    pub(crate) fn record_held(&mut self, conn: ConnId, held: std::time::Duration) {
        if let Some(c) = self.conns.get_mut(&conn) {
            let micros = u64::try_from(held.as_micros()).unwrap_or(u64::MAX);
            c.traffic.held_micros = c.traffic.held_micros.saturating_add(micros);
            self.traffic.held_micros = self.traffic.held_micros.saturating_add(micros);
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
            c.traffic.errors += 1;
            self.traffic.errors += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use quickbus_wire::MessageBuilder;

    use crate::tests::{call_bus, Harness};
    use crate::{Action, ConnId, Traffic};

    /// Total size of every delivery in `out` addressed to `to`.
    fn bytes_to(out: &[Action], to: ConnId) -> (u64, u64) {
        out.iter().fold((0, 0), |(n, bytes), a| match a {
            Action::Deliver { to: t, msg } if *t == to => (
                n + 1,
                bytes + (msg.frame.header.len() + msg.frame.body.len()) as u64,
            ),
            _ => (n, bytes),
        })
    }

    #[test]
    fn routed_messages_are_counted_both_ways() {
        let mut h = Harness::new();
        let (a, _) = h.client();
        let (b, name_b) = h.client();
        let before_a = h.bus.traffic(a).unwrap();
        let before_b = h.bus.traffic(b).unwrap();
        let call = MessageBuilder::method_call("/x", "Ping")
            .interface("org.example.Test")
            .destination(name_b);
        let size = call.build(100).unwrap().len() as u64;
        h.send(a, call);
        let (n, bytes) = bytes_to(&h.out, b);
        assert_eq!(n, 1);
        let after_a = h.bus.traffic(a).unwrap();
        let after_b = h.bus.traffic(b).unwrap();
        assert_eq!(after_a.messages_in - before_a.messages_in, 1);
        assert_eq!(after_a.bytes_in - before_a.bytes_in, size);
        assert_eq!(after_b.messages_out - before_b.messages_out, 1);
        // The stamped copy carries the sender field, so it is larger.
        assert_eq!(after_b.bytes_out - before_b.bytes_out, bytes);
        assert!(bytes > size);
        let total = h.bus.total_traffic();
        assert!(total.messages_in >= 3 && total.messages_out >= 3);
    }

    #[test]
    fn bus_errors_drops_and_queue_depth_are_counted() {
        let mut h = Harness::new();
        let (a, _) = h.client();
        let err = h.driver_error(
            a,
            call_bus("GetNameOwner", vec![crate::tests::s("org.nope")]),
        );
        assert_eq!(err.0, crate::errors::NAME_HAS_NO_OWNER);
        assert_eq!(h.bus.traffic(a).unwrap().errors, 1);
        let mut out = Vec::new();
        let (signal, _) = h
            .bus
            .build(MessageBuilder::signal("/", "org.example.T", "S"))
            .unwrap();
        h.bus.queue_for(a, signal, false, &mut out);
        // Nothing written yet: everything the bus sent it is queued.
        h.bus.flushed(a, 0, 0, h.now, &mut out);
        let queued = h.bus.traffic(a).unwrap().queued_bytes as usize;
        assert_eq!(queued as u64, h.bus.traffic(a).unwrap().bytes_out);
        h.bus.flushed(a, queued - 20, 0, h.now, &mut out);
        h.bus.record_dropped(a);
        h.bus.record_dropped(a);
        let t: Traffic = h.bus.traffic(a).unwrap();
        assert_eq!(
            (t.queued_bytes, t.peak_queued_bytes, t.dropped),
            (20, queued as u64, 2)
        );
        assert_eq!(h.bus.total_traffic().dropped, 2);
        assert_eq!(h.bus.total_traffic().errors, 1);
        // Unknown connections are ignored, not a panic.
        h.bus.flushed(ConnId(999), 1, 0, h.now, &mut out);
        h.bus.record_dropped(ConnId(999));
        assert!(h.bus.traffic(ConnId(999)).is_none());
    }

    #[test]
    fn holds_pauses_and_held_time_are_counted_for_the_sender() {
        let mut h = Harness::new();
        let (a, _) = h.client();
        h.bus.record_hold(a, false);
        h.bus.record_hold(a, true);
        h.bus.record_hold(a, true);
        h.bus.record_held(a, std::time::Duration::from_millis(3));
        let t = h.bus.traffic(a).unwrap();
        assert_eq!((t.holds, t.pauses, t.held_micros), (1, 2, 3000));
        let total = h.bus.total_traffic();
        assert_eq!((total.holds, total.pauses, total.held_micros), (1, 2, 3000));
        h.bus.record_hold(ConnId(999), false);
        h.bus
            .record_held(ConnId(999), std::time::Duration::from_secs(1));
        assert_eq!(h.bus.total_traffic().holds, 1);
    }
}
