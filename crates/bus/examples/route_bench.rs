//! Routing cost per message, with and without many unrelated match rules
//! installed: the index should keep both flat.
//!
//! `cargo run --release -p quickbus-bus --example route_bench [rules]`
//!
//! Prints ns per message for a unicast call + reply, and for a broadcast
//! signal with one matching subscriber, first with no other rules, then
//! with `rules` (default 100000) rules that do not match. Compare the two
//! columns; absolute numbers on a shared machine mean little.

mod common;

use common::{add_match, hello_as, three_peers, time_unicast_and_broadcast};
use quickbus_bus::{Bus, BusOptions, Credentials};

/// (unicast round trip ns, broadcast ns)
fn measure(extra_rules: usize) -> (f64, f64) {
    let mut bus = Bus::new(BusOptions::default());
    let mut out = Vec::new();
    let peers = three_peers(&mut bus, &mut out);
    // Unrelated rules spread over many connections, as a desktop has.
    let mut holders = Vec::new();
    for i in 0..extra_rules {
        if i % 100 == 0 {
            // Each holder its own user: one user may not have them all.
            let creds = Credentials {
                uid: 2000 + (i / 100) as u32,
                ..Credentials::default()
            };
            holders.push(hello_as(&mut bus, creds, &mut out).0);
        }
        let holder = *holders.last().expect("a holder");
        let rule = format!("type='signal',interface='org.example.Other{i}',member='Changed'");
        add_match(&mut bus, holder, &rule, &mut out);
    }
    time_unicast_and_broadcast(&mut bus, &peers)
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
