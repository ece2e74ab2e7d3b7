//! Shared by the bus examples (each example is its own crate): three peers
//! on a bus, and the traffic both benchmarks time.

// Benchmarks read the clock, which the bus itself may not (clippy.toml).
#![allow(clippy::disallowed_methods)]

use std::time::Instant;

use bytes::Bytes;
use quickbus_bus::{Action, Bus, ConnId, Credentials};
use quickbus_wire::{Message, MessageBuilder, Value};

/// Messages of each kind per measurement.
const ROUNDS: u32 = 20_000;

pub fn parse(builder: MessageBuilder, serial: u32) -> Message {
    let raw: Bytes = builder.build(serial).expect("builds");
    Message::parse(raw).expect("parses")
}

/// A new connection that has said Hello; its id and unique name.
pub fn hello(bus: &mut Bus, out: &mut Vec<Action>) -> (ConnId, String) {
    hello_as(bus, Credentials::default(), out)
}

/// [`hello`] with these credentials (a bus lets one user have at most
/// `max_connections_per_user` connections).
pub fn hello_as(bus: &mut Bus, creds: Credentials, out: &mut Vec<Action>) -> (ConnId, String) {
    let id = bus.add_connection(creds, true);
    let call = MessageBuilder::method_call("/org/freedesktop/DBus", "Hello")
        .destination("org.freedesktop.DBus");
    bus.receive(id, parse(call, 1), Vec::new(), Instant::now(), out);
    out.clear();
    (id, bus.unique_name(id).expect("named").to_owned())
}

pub fn add_match(bus: &mut Bus, id: ConnId, rule: &str, out: &mut Vec<Action>) {
    let call = MessageBuilder::method_call("/org/freedesktop/DBus", "AddMatch")
        .interface("org.freedesktop.DBus")
        .destination("org.freedesktop.DBus")
        .flags(quickbus_wire::flags::NO_REPLY_EXPECTED)
        .body(vec![Value::String(rule.into())]);
    bus.receive(id, parse(call, 2), Vec::new(), Instant::now(), out);
    out.clear();
}

/// A caller, a callee, and a third peer subscribed to the caller's
/// signal.
pub struct Peers {
    caller: (ConnId, String),
    callee: (ConnId, String),
    subscriber: ConnId,
}

pub fn three_peers(bus: &mut Bus, out: &mut Vec<Action>) -> Peers {
    let caller = hello(bus, out);
    let callee = hello(bus, out);
    let (subscriber, _) = hello(bus, out);
    add_match(
        bus,
        subscriber,
        "type='signal',interface='org.example.Bench',member='Tick'",
        out,
    );
    Peers {
        caller,
        callee,
        subscriber,
    }
}

/// Write everything queued for `conns`, as sockets that take it all
/// would: the bus queues what it routes, and a daemon writes it out.
fn write_all(bus: &mut Bus, conns: &[ConnId], out: &mut Vec<Action>) {
    for &conn in conns {
        let _ = bus.write_queue(conn, Instant::now(), out, None, |outbox| {
            let mut bytes = 0;
            outbox.next_write(|slice| bytes += slice.len());
            Ok::<_, ()>(Some(bytes))
        });
    }
    out.clear();
}

/// ns per message for a call and its reply, and for the signal to its one
/// subscriber, each written out as a daemon would.
pub fn time_unicast_and_broadcast(bus: &mut Bus, peers: &Peers) -> (f64, f64) {
    let mut out = Vec::new();
    let (a, name_a) = &peers.caller;
    let (b, name_b) = &peers.callee;
    let call = parse(
        MessageBuilder::method_call("/obj", "Ping")
            .interface("org.example.Bench")
            .destination(name_b.as_str())
            .body(vec![Value::Uint32(7)]),
        10,
    );
    let reply = parse(
        MessageBuilder::method_return(10).destination(name_a.as_str()),
        11,
    );
    let start = Instant::now();
    for _ in 0..ROUNDS {
        bus.receive(*a, call.clone(), Vec::new(), Instant::now(), &mut out);
        bus.receive(*b, reply.clone(), Vec::new(), Instant::now(), &mut out);
        assert_eq!(out.len(), 2, "call and reply both delivered");
        write_all(bus, &[*a, *b], &mut out);
    }
    let unicast = start.elapsed().as_nanos() as f64 / f64::from(ROUNDS);

    let signal = parse(
        MessageBuilder::signal("/obj", "org.example.Bench", "Tick").body(vec![Value::Uint32(1)]),
        12,
    );
    let start = Instant::now();
    for _ in 0..ROUNDS {
        bus.receive(*a, signal.clone(), Vec::new(), Instant::now(), &mut out);
        assert_eq!(out.len(), 1, "exactly the one subscriber");
        write_all(bus, &[peers.subscriber], &mut out);
    }
    let broadcast = start.elapsed().as_nanos() as f64 / f64::from(ROUNDS);
    (unicast, broadcast)
}
