//! Messages that worker threads read and parsed ahead of routing, and
//! that were not routed yet when a restart came (their senders held back
//! for a full receiver), cross the restart and are routed afterwards:
//! whole, once, in order (issue 27, docs/architecture.md "Threads";
//! crates/daemon/src/transport.rs `parsed_ahead`).
//!
//! Deterministic: the daemon is stopped while the senders write their
//! bursts and the restart is asked for, so that its first turn after it
//! goes on reads every sender at once (the workers' read-ahead), fills
//! the receiver's queue, holds the senders whose signals found it full
//! with parsed messages left, and ends with the restart.

use std::thread;

use quickbus_client::{Connection, MessageBuilder, Value};
use quickbus_e2e::{skip, Bus, Listen, Stopped};

use super::support::{signal_restart, wait_for_log, RESTARTED};

const INTERFACE: &str = "com.example.ParsedAhead";
const SENDERS: usize = 10;
/// Each sender's burst: about 10 KiB, which its socket takes while the
/// daemon is stopped, and more than one read-ahead's 4 KiB window holds.
const BURST: u32 = 20;
const PADDING: usize = 480;
/// Signals sent before the bursts so that the receiver's queue is nearly
/// full (with 16 KiB socket buffers and a 64 KiB queue).
const PREFILL: u32 = 80;

fn limits() -> String {
    [
        ("threads", 4),
        ("socket_buffer_bytes", 16384),
        ("max_outgoing_bytes", 65536),
        // Held senders wait as long as the test needs: nothing is lost.
        ("overflow_hold_timeout", 600_000),
        ("max_hold_per_user_per_minute", 60_000),
        ("pacing_bytes", 0),
    ]
    .iter()
    .map(|(name, value)| format!(r#"<limit name="{name}">{value}</limit>"#))
    .collect()
}

fn signal(sender: usize, seq: u32) -> MessageBuilder {
    MessageBuilder::signal("/burst", INTERFACE, "Seq").body(vec![
        Value::Uint32(sender as u32),
        Value::Uint32(seq),
        Value::String("x".repeat(PADDING)),
    ])
}

/// Receives until every sender's signals up to its count arrived, each
/// sender's in order.
fn receive_all(receiver: &mut Connection, counts: &[u32]) {
    let mut next = vec![0u32; counts.len()];
    while next != counts {
        let (msg, _) = receiver.receive().expect("a signal");
        assert_ne!(
            msg.member(),
            Some("MessagesLost"),
            "the bus dropped signals"
        );
        if msg.member() != Some("Seq") {
            continue;
        }
        let body = msg.body_values().unwrap();
        let (Value::Uint32(sender), Value::Uint32(seq)) = (&body[0], &body[1]) else {
            panic!("Seq carries {body:?}");
        };
        let sender = *sender as usize;
        assert_eq!(*seq, next[sender], "sender {sender}'s signal out of order");
        next[sender] += 1;
    }
}

#[test]
fn messages_parsed_ahead_and_held_back_cross_a_restart_whole_and_in_order() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = Bus::start_with_config(Listen::UnixPath, &limits());
    let mut receiver = bus.connect();
    receiver
        .add_match(&format!("type='signal',interface='{INTERFACE}'"))
        .expect("AddMatch");
    // The receiver reads nothing until after the restart.
    let mut senders: Vec<Connection> = (0..SENDERS).map(|_| bus.connect()).collect();
    let mut prefill = bus.connect();
    for seq in 0..PREFILL {
        prefill.send(signal(SENDERS, seq), &[]).expect("prefill");
    }
    // A round trip: the bus has routed the prefill.
    prefill.get_id().expect("GetId after the prefill");
    let before = super::support::restarts_logged(&bus);
    {
        let _stopped = Stopped::process(bus.pid());
        for (i, sender) in senders.iter_mut().enumerate() {
            for seq in 0..BURST {
                sender.send(signal(i, seq), &[]).expect("a burst signal");
            }
        }
        signal_restart(&bus);
    }
    wait_for_log(&bus, RESTARTED, before + 1);
    let mut counts = vec![BURST; SENDERS];
    counts.push(PREFILL);
    let receiving = thread::spawn(move || {
        receive_all(&mut receiver, &counts);
        receiver
    });
    let mut receiver = receiving.join().expect("the receiver");
    // And the bus serves on: every sender is read again.
    for sender in &mut senders {
        sender.get_id().expect("GetId after the restart");
    }
    receiver.get_id().expect("the receiver's GetId");
}
