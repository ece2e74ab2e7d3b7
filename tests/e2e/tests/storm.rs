//! Bounded turns (issue 25, crates/daemon/src/server/turns.rs): a call
//! that arrives while another connection's flood waits in the bus's read
//! buffers is routed within one budget of that flood, not after all of
//! it; and the order the bus gives is kept across turns: each sender's
//! messages in the order sent, and a reply after the signals its sender
//! sent first.
//!
//! Deterministic: the daemon is stopped (SIGSTOP) while the clients write,
//! so that when it resumes the whole flood and the call are in its
//! sockets at once; what the tests count is the order the messages
//! arrive in, never time.
//!
//! The same bound with the thread pool reading the turn
//! (`with_a_pool_...`): eight flooders and the caller are enough
//! connections for the pool to take the turn's reads whatever the
//! configuration (crates/daemon/src/server/workers.rs, `LEAST_PARALLEL`).

use std::collections::HashMap;

use bytes::Bytes;
use quickbus_client::{Connection, Message, MessageBuilder, MessageType, Value};
use quickbus_e2e::{become_monitor, skip, Bus, Listen, Stopped};

const INTERFACE: &str = "org.example.Storm";
/// Small signals, so that the whole flood fits in a socket's buffer
/// (about 80 bytes each, 120 KiB in all) while the daemon is stopped.
const FLOOD: u32 = 1500;
/// A connection that has the bus to itself routes at most this many
/// messages per turn (`turns::ALONE`): the most a call may wait behind.
const ALONE_MESSAGES: u32 = 1024;

/// Flooders in the pool's test: with the caller, nine connections to read
/// in one turn, more than the eight from which the pool takes a turn.
const FLOODERS: usize = 8;

/// `count` Tick signals numbered from 0, marshalled one after another
/// (one write: a batch of separate iovecs would pass IOV_MAX).
fn ticks(conn: &mut Connection, count: u32) -> Vec<u8> {
    tick_frames(conn, count).concat()
}

fn tick_frames(conn: &mut Connection, count: u32) -> Vec<Bytes> {
    (0..count)
        .map(|i| {
            let serial = conn.next_serial();
            MessageBuilder::signal("/storm", INTERFACE, "Tick")
                .body(vec![Value::Uint32(i)])
                .build(serial)
                .expect("a tick marshals")
        })
        .collect()
}

fn tick_number(message: &Message) -> Option<u32> {
    if message.msg_type() != MessageType::Signal || message.member() != Some("Tick") {
        return None;
    }
    match message.body_values().ok()?.as_slice() {
        [Value::Uint32(n)] => Some(*n),
        _ => None,
    }
}

/// A Ping call from `caller` to `to`, and its serial.
fn ping(caller: &mut Connection, to: &str) -> (Bytes, u32) {
    let serial = caller.next_serial();
    let call = MessageBuilder::method_call("/storm", "Ping")
        .interface(INTERFACE)
        .destination(to)
        .build(serial)
        .expect("the call marshals");
    (call, serial)
}

/// `callee` answers `the_call`, and `caller` gets the answer to its call
/// `serial`.
fn answer(callee: &mut Connection, the_call: &Message, caller: &mut Connection, serial: u32) {
    let reply = MessageBuilder::method_return(the_call.serial())
        .destination(the_call.sender().expect("the call's sender"));
    callee.send(reply, &[]).expect("reply");
    let answer = loop {
        let message = receive(caller);
        if message.reply_serial() == Some(serial) {
            break message;
        }
    };
    assert_eq!(answer.msg_type(), MessageType::MethodReturn);
}

fn receive(conn: &mut Connection) -> Message {
    conn.receive().expect("a message arrives").0
}

#[test]
fn a_call_is_routed_within_one_budget_of_a_flood_that_waits_in_the_read_buffers() {
    if skip::quickbus_only("bounded turns") {
        return;
    }
    let bus = Bus::start();
    // Oldest first: the flooder is served before the caller in a turn.
    let mut flooder = bus.connect();
    let mut caller = bus.connect();
    let mut callee = bus.connect();
    callee
        .add_match(&format!("type='signal',interface='{INTERFACE}'"))
        .expect("AddMatch");
    let flood = ticks(&mut flooder, FLOOD);
    let (call, serial) = ping(&mut caller, callee.unique_name());
    {
        let _stopped = Stopped::process(bus.pid());
        flooder.send_raw(&flood, &[]).expect("the flood is written");
        caller.send_raw(&call, &[]).expect("the call is written");
    }

    // The callee sees the bus's routing order: the ticks routed before
    // the call, then the call, then the rest of the flood.
    let mut next_tick = 0;
    let the_call = loop {
        let message = receive(&mut callee);
        if let Some(n) = tick_number(&message) {
            assert_eq!(n, next_tick, "ticks out of order");
            next_tick += 1;
        } else if message.member() == Some("Ping") {
            break message;
        }
    };
    assert!(
        next_tick < FLOOD,
        "the call waited for the whole flood ({next_tick} ticks first)"
    );
    assert!(
        next_tick <= ALONE_MESSAGES,
        "the call waited for {next_tick} ticks, more than one turn's budget"
    );
    answer(&mut callee, &the_call, &mut caller, serial);
    // The rest of the flood, in order, none lost.
    while next_tick < FLOOD {
        let message = receive(&mut callee);
        if let Some(n) = tick_number(&message) {
            assert_eq!(n, next_tick, "ticks out of order");
            next_tick += 1;
        }
    }
}

#[test]
fn a_reply_never_overtakes_the_signals_its_sender_sent_first_across_turns() {
    if skip::quickbus_only("bounded turns") {
        return;
    }
    let bus = Bus::start();
    let mut caller = bus.connect();
    let mut service = bus.connect();
    caller
        .add_match(&format!("type='signal',interface='{INTERFACE}'"))
        .expect("AddMatch");
    let (call, serial) = ping(&mut caller, service.unique_name());
    caller.send_raw(&call, &[]).expect("the call is written");
    let the_call = loop {
        let message = receive(&mut service);
        if message.member() == Some("Ping") {
            break message;
        }
    };
    // More signals than one turn routes, then the reply, in one write:
    // the bus takes them in several turns.
    let mut batch = tick_frames(&mut service, FLOOD);
    let reply_serial = service.next_serial();
    batch.push(
        MessageBuilder::method_return(the_call.serial())
            .destination(caller.unique_name())
            .build(reply_serial)
            .expect("the reply marshals"),
    );
    {
        let _stopped = Stopped::process(bus.pid());
        service
            .send_raw(&batch.concat(), &[])
            .expect("signals and reply written");
    }
    let mut next_tick = 0;
    loop {
        let message = receive(&mut caller);
        if let Some(n) = tick_number(&message) {
            assert_eq!(n, next_tick, "signals out of order");
            next_tick += 1;
        } else if message.reply_serial() == Some(serial) {
            assert_eq!(
                next_tick, FLOOD,
                "the reply overtook signals its sender sent before it"
            );
            break;
        }
    }
}

/// Each flooder's ticks as the bus routed them: checked in order per
/// sender, counted.
struct TickCounts(HashMap<String, u32>);

impl TickCounts {
    fn of(flooders: &[Connection]) -> TickCounts {
        TickCounts(
            flooders
                .iter()
                .map(|f| (f.unique_name().to_owned(), 0))
                .collect(),
        )
    }

    /// Counts `message` if it is a flooder's tick; whether it was.
    fn count(&mut self, message: &Message) -> bool {
        let Some(n) = tick_number(message) else {
            return false;
        };
        let sender = message.sender().expect("a tick's sender");
        let next = self.0.get_mut(sender).expect("a flooder's tick");
        assert_eq!(n, *next, "{sender}'s ticks out of order");
        *next += 1;
        true
    }

    fn of_flooder(&self, flooder: &Connection) -> u32 {
        self.0[flooder.unique_name()]
    }

    fn all_in(&self) -> bool {
        self.0.values().all(|&n| n == FLOOD)
    }
}

#[test]
fn with_a_pool_a_call_is_routed_within_one_budget_of_each_of_eight_floods() {
    if skip::quickbus_only("bounded turns with a thread pool") {
        return;
    }
    let bus = Bus::start_with_config(Listen::UnixPath, r#"<limit name="threads">4</limit>"#);
    // The bus's routing order, seen whole by a monitor. Not by a callee
    // that matches the ticks: eight floods (some 1.2 MB) would pace every
    // sender to it, the caller included (pacing.rs's subject); a monitor
    // paces nobody, and the caller calls a callee that no flood reaches,
    // as in seed 000.
    let mut monitor = bus.connect();
    become_monitor(&mut monitor, &[]);
    // Oldest first: every flooder is served before the caller in a turn.
    let mut flooders: Vec<Connection> = (0..FLOODERS).map(|_| bus.connect()).collect();
    let mut caller = bus.connect();
    let mut callee = bus.connect();
    let floods: Vec<Vec<u8>> = flooders.iter_mut().map(|f| ticks(f, FLOOD)).collect();
    let (call, serial) = ping(&mut caller, callee.unique_name());
    {
        let _stopped = Stopped::process(bus.pid());
        for (flooder, flood) in flooders.iter_mut().zip(&floods) {
            flooder.send_raw(flood, &[]).expect("a flood is written");
        }
        caller.send_raw(&call, &[]).expect("the call is written");
    }

    let mut routed = TickCounts::of(&flooders);
    loop {
        let message = receive(&mut monitor);
        if !routed.count(&message)
            && message.member() == Some("Ping")
            && message.sender() == Some(caller.unique_name())
        {
            break;
        }
    }
    let before_the_call: Vec<u32> = flooders.iter().map(|f| routed.of_flooder(f)).collect();
    assert!(
        before_the_call.iter().all(|&ticks| ticks <= ALONE_MESSAGES),
        "the call waited for more than one turn's budget of a flooder's ticks: {before_the_call:?}"
    );
    let the_call = loop {
        let message = receive(&mut callee);
        if message.member() == Some("Ping") {
            break message;
        }
    };
    answer(&mut callee, &the_call, &mut caller, serial);
    // The rest of the floods, each in order, none lost.
    while !routed.all_in() {
        routed.count(&receive(&mut monitor));
    }
}
