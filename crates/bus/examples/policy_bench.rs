//! Policy cost per message: the same traffic under a policy of 10 rules
//! and of 10,000 (issue 4: checking must cost the same).
//!
//! `cargo run --release -p quickbus-bus --example policy_bench [rules...]`
//!
//! For each policy size (default 10 and 10000) it prints ns per message
//! for a unicast call + reply and for a broadcast signal to one
//! subscriber, every message checked against the sender's send rules and
//! the receiver's receive rules. The rules are what system.d files hold:
//! per-service `send_destination` + `send_interface` allows, `own` allows,
//! `receive_sender` allows, and `send_interface` + `send_member` denies,
//! none naming the benchmark's traffic, so every check must look past all
//! of them. Compare the columns; absolute numbers on a shared machine mean
//! little.

mod common;

use common::{three_peers, time_unicast_and_broadcast};
use quickbus_bus::policy::{MessageRule, NameMatch, PolicyRule, RuleKind};
use quickbus_bus::{Bus, BusOptions, PolicyConfig};
use quickbus_wire::MessageType;

/// system.conf's shape (allow everything the benchmark sends), then
/// `count` rules about other services.
fn policy(count: usize) -> PolicyConfig {
    let mut config = PolicyConfig::allow_all();
    let rules = &mut config.default;
    for i in 0..count {
        let service = format!("org.example.Service{}", i / 4);
        let rule = match i % 4 {
            0 => PolicyRule::allow(RuleKind::Send(MessageRule {
                name: NameMatch::Exact(service.clone()),
                interface: Some(format!("{service}.Manager")),
                ..MessageRule::default()
            })),
            1 => PolicyRule::allow(RuleKind::Own(NameMatch::Exact(service))),
            2 => PolicyRule::allow(RuleKind::Receive(MessageRule {
                name: NameMatch::Exact(service),
                ..MessageRule::default()
            })),
            _ => PolicyRule::deny(RuleKind::Send(MessageRule {
                msg_type: Some(MessageType::MethodCall),
                interface: Some(format!("{service}.Admin")),
                member: Some("Reboot".into()),
                ..MessageRule::default()
            })),
        };
        rules.push(rule);
    }
    config
}

/// (unicast round trip ns, broadcast ns)
fn measure(rules: usize) -> (f64, f64) {
    let mut bus = Bus::new(BusOptions::default());
    bus.set_policy(policy(rules));
    let peers = three_peers(&mut bus, &mut Vec::new());
    time_unicast_and_broadcast(&mut bus, &peers)
}

fn main() {
    let mut sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse().expect("a number of rules"))
        .collect();
    if sizes.is_empty() {
        sizes = vec![10, 10_000];
    }
    print!("{:<28}", "ns per message");
    for size in &sizes {
        print!("{:>14}", format!("{size} rules"));
    }
    println!();
    let results: Vec<(f64, f64)> = sizes.iter().map(|&n| measure(n)).collect();
    print!("{:<28}", "unicast call + reply");
    for (unicast, _) in &results {
        print!("{unicast:>14.0}");
    }
    println!();
    print!("{:<28}", "broadcast, 1 subscriber");
    for (_, broadcast) in &results {
        print!("{broadcast:>14.0}");
    }
    println!();
}
