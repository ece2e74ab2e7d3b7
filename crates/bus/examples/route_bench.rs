//! Routing cost per message, with and without many unrelated match rules
//! installed: the index should keep both flat.
//!
//! `cargo run --release -p quickbus-bus --example route_bench [rules]`
//!
//! Prints ns per message for a unicast call + reply, and for a broadcast
//! signal with one matching subscriber, first with no other rules, then
//! with `rules` (default 100000) rules that do not match. Compare the two
//! columns; absolute numbers on a shared machine mean little.

use std::time::Instant;

use bytes::Bytes;
use quickbus_bus::{Action, Bus, BusOptions, ConnId, Credentials};
use quickbus_wire::{Message, MessageBuilder, Value};

const ROUNDS: u32 = 20_000;

fn parse(builder: MessageBuilder, serial: u32) -> Message {
    let raw: Bytes = builder.build(serial).expect("builds");
    Message::parse(raw).expect("parses")
}

fn hello(bus: &mut Bus, out: &mut Vec<Action>) -> (ConnId, String) {
    let id = bus.add_connection(Credentials::default(), true);
    let call = MessageBuilder::method_call("/org/freedesktop/DBus", "Hello")
        .destination("org.freedesktop.DBus");
    bus.receive(id, parse(call, 1), Vec::new(), Instant::now(), out);
    out.clear();
    (id, bus.unique_name(id).expect("named").to_owned())
}

fn add_match(bus: &mut Bus, id: ConnId, rule: &str, out: &mut Vec<Action>) {
    let call = MessageBuilder::method_call("/org/freedesktop/DBus", "AddMatch")
        .interface("org.freedesktop.DBus")
        .destination("org.freedesktop.DBus")
        .flags(quickbus_wire::flags::NO_REPLY_EXPECTED)
        .body(vec![Value::String(rule.into())]);
    bus.receive(id, parse(call, 2), Vec::new(), Instant::now(), out);
    out.clear();
}

/// (unicast round trip ns, broadcast ns)
fn measure(extra_rules: usize) -> (f64, f64) {
    let mut bus = Bus::new(BusOptions::default());
    let mut out = Vec::new();
    let (a, name_a) = hello(&mut bus, &mut out);
    let (b, name_b) = hello(&mut bus, &mut out);
    let (c, _) = hello(&mut bus, &mut out);
    add_match(
        &mut bus,
        c,
        "type='signal',interface='org.example.Bench',member='Tick'",
        &mut out,
    );
    // Unrelated rules spread over many connections, as a desktop has.
    let mut holders = Vec::new();
    for i in 0..extra_rules {
        if i % 100 == 0 {
            holders.push(hello(&mut bus, &mut out).0);
        }
        let holder = *holders.last().expect("a holder");
        let rule = format!("type='signal',interface='org.example.Other{i}',member='Changed'");
        add_match(&mut bus, holder, &rule, &mut out);
    }

    let call = parse(
        MessageBuilder::method_call("/obj", "Ping")
            .destination(name_b)
            .body(vec![Value::Uint32(7)]),
        10,
    );
    let reply = parse(MessageBuilder::method_return(10).destination(name_a), 11);
    let start = Instant::now();
    for _ in 0..ROUNDS {
        bus.receive(a, call.clone(), Vec::new(), Instant::now(), &mut out);
        bus.receive(b, reply.clone(), Vec::new(), Instant::now(), &mut out);
        out.clear();
    }
    let unicast = start.elapsed().as_nanos() as f64 / f64::from(ROUNDS);

    let signal = parse(
        MessageBuilder::signal("/obj", "org.example.Bench", "Tick").body(vec![Value::Uint32(1)]),
        12,
    );
    let start = Instant::now();
    for _ in 0..ROUNDS {
        bus.receive(a, signal.clone(), Vec::new(), Instant::now(), &mut out);
        assert_eq!(out.len(), 1, "exactly the one subscriber");
        out.clear();
    }
    let broadcast = start.elapsed().as_nanos() as f64 / f64::from(ROUNDS);
    (unicast, broadcast)
}

fn main() {
    let rules: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("a number of rules"))
        .unwrap_or(100_000);
    let (u0, b0) = measure(0);
    let (u1, b1) = measure(rules);
    println!(
        "{:<28}{:>14}{:>18}",
        "ns per message",
        "0 other rules",
        format!("{rules} other rules")
    );
    println!("{:<28}{:>16.0}{:>22.0}", "unicast call + reply", u0, u1);
    println!("{:<28}{:>16.0}{:>22.0}", "broadcast, 1 subscriber", b0, b1);
}
