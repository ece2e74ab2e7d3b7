//! Seeded random event sequences, restarted at a random point: from then
//! on the original and the restored bus must act alike at every step.

use super::*;

/// One random event for the bus, from the connections alive in `h`.
fn random_step(h: &mut Harness, dice: &mut Dice, alive: &mut Vec<ConnId>) {
    const NAMES: [&str; 3] = ["org.example.X", "org.example.Y", "org.example.Activatable"];
    const RULES: [&str; 4] = [
        "type='signal'",
        "type='signal',member='A'",
        "eavesdrop='true'",
        "interface='org.example.I',arg0='x'",
    ];
    if alive.len() < 2 || dice.below(12) == 0 {
        // Two users, so that one's receivers hold the other's senders on
        // its hold budget.
        let uid = [1000, 1001][dice.below(2)];
        let id = h.bus.add_connection(creds(uid, 100), true);
        h.send(id, call_bus("Hello", vec![]));
        alive.push(id);
        return;
    }
    let from = alive[dice.below(alive.len())];
    let other = alive[dice.below(alive.len())];
    let other_name = h.bus.unique_name(other).unwrap().to_owned();
    match dice.below(13) {
        0 => {
            let member = ["A", "B"][dice.below(2)];
            let arg = ["x", "y"][dice.below(2)];
            h.send(
                from,
                MessageBuilder::signal("/p", "org.example.I", member).body(vec![s(arg)]),
            );
        }
        1 => {
            h.send(
                from,
                MessageBuilder::method_call("/", "Do").destination(other_name),
            );
        }
        2 => {
            // A reply to a recent serial, expected or not.
            let serial = h.next_serial.saturating_sub(dice.below(3) as u32).max(1);
            h.send(
                from,
                MessageBuilder::method_return(serial).destination(other_name),
            );
        }
        3 => {
            let name = NAMES[dice.below(NAMES.len())];
            let flags = [0, ALLOW_REPLACEMENT, DO_NOT_QUEUE, 0x2][dice.below(4)];
            h.send(
                from,
                call_bus("RequestName", vec![s(name), Value::Uint32(flags)]),
            );
        }
        4 => {
            let name = NAMES[dice.below(NAMES.len())];
            h.send(from, call_bus("ReleaseName", vec![s(name)]));
        }
        5 => {
            let rule = RULES[dice.below(RULES.len())];
            h.send(from, call_bus("AddMatch", vec![s(rule)]));
        }
        6 => {
            let rule = RULES[dice.below(RULES.len())];
            h.send(from, call_bus("RemoveMatch", vec![s(rule)]));
        }
        7 => {
            h.send(
                from,
                MessageBuilder::method_call("/", "Wake")
                    .destination(NAMES[dice.below(NAMES.len())]),
            );
        }
        8 => {
            h.now += Duration::from_secs(dice.below(20) as u64);
            h.bus.handle_timeouts(h.now, &mut h.out);
        }
        9 => {
            h.send(from, stats_call("GetStats", vec![]));
            h.send(from, stats_call("GetAllMatchRules", vec![]));
        }
        10 | 11 => {
            // The daemon wrote some of what was queued for `from`.
            let bytes = [200, 1000, usize::MAX][dice.below(3)];
            h.bus.write_up_to(from, bytes, h.now, &mut h.out);
        }
        _ => {
            alive.retain(|&c| c != from);
            h.bus.remove_connection(from, h.now, &mut h.out);
        }
    }
}

#[test]
fn a_restored_bus_answers_random_events_as_the_original_does() {
    // What the events after the restarts made the buses do, so that the
    // comparison is known to cover flow control and activation.
    let mut kinds = std::collections::BTreeSet::new();
    for seed in 1..=40u64 {
        let mut h = Harness::new();
        h.bus
            .set_limits(limits(Limits::default().max_replies_per_connection));
        if seed % 2 == 0 {
            // Small queues: senders are held and paced, receivers lose
            // signals, hold budgets are spent.
            h.bus.set_out_bounds(OutBounds {
                max_bytes: 1500,
                max_fds: 4,
                hold: Duration::from_secs(3),
                pacing: Pacing {
                    bytes: 600,
                    timeout: Duration::from_secs(2),
                },
                memory: Duration::from_secs(10),
                queues_per_user: 2,
                hold_budget: Duration::from_secs(4),
            });
        }
        let mut dice = Dice(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut alive = Vec::new();
        let restart_at = 20 + dice.below(60);
        for _ in 0..restart_at {
            random_step(&mut h, &mut dice, &mut alive);
        }
        h.out.clear();
        let mut r = restarted(&h);
        for n in 0..150 {
            // Both draw the same numbers and know the same connections.
            let (mut dice_r, mut alive_r) = (Dice(dice.0), alive.clone());
            random_step(&mut h, &mut dice, &mut alive);
            random_step(&mut r, &mut dice_r, &mut alive_r);
            let (a, b) = (
                seen(std::mem::take(&mut h.out)),
                seen(std::mem::take(&mut r.out)),
            );
            assert_eq!(a, b, "seed {seed}, step {n} after the restart");
            for seen in &a {
                let kind = match seen {
                    Seen::Deliver { bytes, .. } => {
                        let msg = Message::parse(Bytes::from(bytes.clone())).unwrap();
                        match msg.error_name() {
                            Some(name) => name.to_owned(),
                            None => msg.member().unwrap_or("return").to_owned(),
                        }
                    }
                    Seen::Other(text) => text.split([' ', '{']).next().unwrap().to_owned(),
                };
                kinds.insert(kind);
            }
            assert_eq!(alive, alive_r);
            assert_eq!(
                h.bus.next_deadline().map(|t| t + SHIFT),
                r.bus.next_deadline(),
                "seed {seed}, step {n}"
            );
        }
    }
    for kind in [
        "HoldSender",
        "ReleaseSender",
        "Activate",
        "CancelActivation",
        "MessagesLost",
        "NameOwnerChanged",
        errors::NO_REPLY,
        errors::LIMITS_EXCEEDED,
    ] {
        assert!(kinds.contains(kind), "no {kind} among {kinds:?}");
    }
}
