//! A bus whose senders get held back with messages their worker threads
//! read and parsed ahead (issue 27): ten senders write bursts into a
//! stopped daemon while one receiver's queue is full, so that the daemon's
//! first turn after it goes on reads every sender at once (the workers'
//! read-ahead) and holds each at its first signal, everything else it
//! sent unrouted. Shared by threads.rs and restart/parsed_ahead.rs.

use quickbus_client::{bus_call, Connection, MessageBuilder, Value};
use quickbus_e2e::{connection_stat, Bus, Listen, Stopped};

const INTERFACE: &str = "com.example.HeldSenders";
pub const SENDERS: usize = 10;
/// A long burst: about 10 KiB, which a sender's socket takes while the
/// daemon is stopped, and more than one read-ahead's 4 KiB window holds
/// (the read says more may wait).
pub const LONG_BURST: u32 = 20;
/// A short burst: about 3.4 KiB, less than one read-ahead's window (the
/// read says the socket is empty).
pub const SHORT_BURST: u32 = 6;
const PADDING: usize = 480;
/// The receiver's queue bound (`max_outgoing_bytes`): filled to it before
/// the bursts, so that every sender's first signal finds it full and the
/// sender is held with all it sent still unrouted.
const MAX_OUTGOING_BYTES: u64 = 64 * 1024;

pub struct HeldSenders {
    pub bus: Bus,
    /// Reads nothing until the test says.
    pub receiver: Connection,
    pub senders: Vec<Connection>,
    /// Asks what the filler may not be answered: the queue's size, and
    /// when the daemon's turn after a stop is over.
    observer: Connection,
    /// Signals sent before the bursts so that the receiver's queue is
    /// full, by one more connection, the sender numbered `SENDERS`.
    prefill: u32,
}

impl HeldSenders {
    /// The bus, the receiver's queue full.
    pub fn start() -> HeldSenders {
        let limits: String = [
            ("threads", 4),
            ("socket_buffer_bytes", 16384),
            ("max_outgoing_bytes", MAX_OUTGOING_BYTES),
            // Held senders wait as long as the test needs: nothing is lost.
            ("overflow_hold_timeout", 600_000),
            ("max_hold_per_user_per_minute", 60_000),
            ("pacing_bytes", 0),
        ]
        .iter()
        .map(|(name, value)| format!(r#"<limit name="{name}">{value}</limit>"#))
        .collect();
        let bus = Bus::start_with_config(Listen::UnixPath, &limits);
        let mut receiver = bus.connect();
        receiver
            .add_match(&format!("type='signal',interface='{INTERFACE}'"))
            .expect("AddMatch");
        let senders = (0..SENDERS).map(|_| bus.connect()).collect();
        // Filled until full: the filler is held back itself then, and the
        // rest of what it sends waits with it (an observer asks for the
        // queue's size, as the filler may not be answered).
        let mut filler = bus.connect();
        let mut observer = bus.connect();
        let receiver_name = receiver.unique_name().to_owned();
        let mut prefill = 0;
        while connection_stat(&mut observer, &receiver_name, "QueuedBytes") < MAX_OUTGOING_BYTES {
            for _ in 0..5 {
                filler.send(signal(SENDERS, prefill), &[]).expect("prefill");
                prefill += 1;
            }
        }
        HeldSenders {
            bus,
            receiver,
            senders,
            observer,
            prefill,
        }
    }

    /// Every sender writes signals `first..first + count` while the
    /// daemon is stopped; `while_stopped` runs before it goes on. Returns
    /// once the daemon's first turn after it went on is over: the
    /// observer's call, written last into the stopped daemon, was read in
    /// that turn and is answered at its end.
    pub fn burst_into_the_stopped_daemon(
        &mut self,
        first: u32,
        count: u32,
        while_stopped: impl FnOnce(&Bus),
    ) {
        let probe = {
            let _stopped = Stopped::process(self.bus.pid());
            self.burst(first, count);
            let probe = self.observer.send(bus_call("GetId"), &[]).expect("GetId");
            while_stopped(&self.bus);
            probe
        };
        self.observer.wait_reply(probe).expect("the turn is over");
    }

    /// Every sender writes signals `first..first + count`.
    pub fn burst(&mut self, first: u32, count: u32) {
        for (i, sender) in self.senders.iter_mut().enumerate() {
            for seq in first..first + count {
                sender.send(signal(i, seq), &[]).expect("a burst signal");
            }
        }
    }

    /// The receiver gets every sender's `per_sender` signals and the
    /// prefill, each sender's in order, none lost.
    pub fn receive_all(&mut self, per_sender: u32) {
        let mut counts = vec![per_sender; SENDERS];
        counts.push(self.prefill);
        let mut next = vec![0u32; counts.len()];
        while next != counts {
            let (msg, _) = self.receiver.receive().expect("a signal");
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
        // And the bus serves on: every sender is read again.
        for sender in &mut self.senders {
            sender.get_id().expect("GetId");
        }
    }
}

fn signal(sender: usize, seq: u32) -> MessageBuilder {
    MessageBuilder::signal("/burst", INTERFACE, "Seq").body(vec![
        Value::Uint32(sender as u32),
        Value::Uint32(seq),
        Value::String("x".repeat(PADDING)),
    ])
}
