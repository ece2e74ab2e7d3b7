//! Traffic counters (Debug.Stats' quickbus keys) as routing keeps them.

use quickbus_wire::MessageBuilder;

use crate::tests::{call_bus, Harness};
use crate::{Action, ConnId, Traffic};

/// Total size of every delivery in `out` addressed to `to`.
fn bytes_to(out: &[Action], to: ConnId) -> (u64, u64) {
    out.iter().fold((0, 0), |(n, bytes), a| match a {
        Action::Queued { to: t, msg, .. } if *t == to => {
            (n + 1, bytes + (msg.header.len() + msg.body.len()) as u64)
        }
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
    h.bus.queue_for(
        a,
        signal,
        false,
        crate::bus::Routing::by_bus(h.now),
        &mut out,
    );
    // Nothing written yet: everything the bus sent it is queued.
    h.bus.write_up_to(a, 0, h.now, &mut out);
    let queued = h.bus.queued_bytes(a);
    assert_eq!(queued as u64, h.bus.traffic(a).unwrap().bytes_out);
    h.bus.write_up_to(a, queued - 20, h.now, &mut out);
    h.bus.record_dropped(a);
    h.bus.record_dropped(a);
    let t: Traffic = h.bus.traffic(a).unwrap();
    assert_eq!(
        (h.bus.queued_bytes(a) as u64, t.peak_queued_bytes, t.dropped),
        (20, queued as u64, 2)
    );
    assert_eq!(h.bus.total_traffic().dropped, 2);
    assert_eq!(h.bus.total_traffic().errors, 1);
    // Unknown connections are ignored, not a panic.
    h.bus.write_up_to(ConnId(999), 1, h.now, &mut out);
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
