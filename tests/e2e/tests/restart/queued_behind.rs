//! A broadcast signal queued behind unwritten ones (the receiver's socket
//! full, so it waits in the bus) is still written once the receiver
//! reads, with no other event to wake the daemon for it: without a
//! restart, across a restart by SIGUSR2 or by the Restart call (the new
//! image must watch every connection with output queued, the bus's
//! queues included: crates/daemon/src/server/restarting.rs
//! `register_all`), and across a refused restart. Then the same with
//! worker threads writing, while receivers that hold names hang up in
//! the middle of the stream.

use quickbus_client::{Connection, Message, MessageBuilder, Value};
use quickbus_e2e::{connection_stat, skip, Bus, Listen};

use super::refused_state::{bus_whose_state_is_refused, REFUSED};
use super::support::{
    quickbus_restart, restart_by_call, restart_by_signal, signal_restart, wait_for_log,
};
use super::{bus_that_queues, SMALL_SOCKET_BUFFERS};

const IFACE: &str = "com.example.QueuedBehind";
/// Large signals sent before the restart, which fill the receivers'
/// sockets and wait in the bus.
const BULK: u32 = 10;
/// Small ones sent after it, queued behind those.
const LATER: u32 = 40;

fn receiver(bus: &Bus) -> Connection {
    let mut r = bus.connect();
    r.add_match(&format!("type='signal',interface='{IFACE}'"))
        .expect("AddMatch");
    r
}

/// Signal number `i`, carrying `size` bytes.
fn emit(sender: &mut Connection, i: u32, size: usize) {
    let signal = MessageBuilder::signal("/q", IFACE, "S").body(vec![
        Value::Uint32(i),
        Value::Array {
            elem_sig: "y".into(),
            items: vec![Value::Byte(i as u8); size],
        },
    ]);
    sender.send(signal, &[]).expect("send a signal");
}

/// The signal's number, if `msg` is one of this test's signals.
fn number(msg: &Message) -> Option<Value> {
    (msg.member() == Some("S")).then(|| msg.body_values().unwrap().remove(0))
}

/// `r` reads signals 0 to `total`, whole and in order.
fn reads_all(r: &mut Connection, total: u32) {
    let mut next = 0;
    while next < total {
        let (msg, _) = r
            .receive()
            .unwrap_or_else(|e| panic!("signal {next} of {total} did not come: {e}"));
        if let Some(n) = number(&msg) {
            assert_eq!(n, Value::Uint32(next));
            next += 1;
        }
    }
}

/// Two receivers that do not read while a burst fills their sockets;
/// `restart`; more signals queued behind the burst; then only the
/// receivers read, and get everything.
fn signals_behind_unwritten_ones_arrive(bus: &Bus, restart: impl Fn(&Bus)) {
    let mut receivers = [receiver(bus), receiver(bus)];
    let mut sender = bus.connect();
    for i in 0..BULK {
        emit(&mut sender, i, 60_000);
    }
    // The bus routed the burst before this call's reply.
    sender.get_id().expect("GetId");
    let name = receivers[0].unique_name().to_owned();
    assert!(
        connection_stat(&mut sender, &name, "QueuedBytes") > 0,
        "nothing waits in the bus for the receiver"
    );
    restart(bus);
    for i in BULK..BULK + LATER {
        emit(&mut sender, i, 100);
    }
    sender.get_id().expect("GetId");
    for r in &mut receivers {
        reads_all(r, BULK + LATER);
    }
}

#[test]
fn signals_queued_behind_unwritten_ones_arrive_without_a_restart() {
    if skip::quickbus_only("the socket_buffer_bytes limit") {
        return;
    }
    let bus = bus_that_queues();
    signals_behind_unwritten_ones_arrive(&bus, |_| {});
}

#[test]
fn signals_queued_behind_unwritten_ones_arrive_across_a_restart_by_signal() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = bus_that_queues();
    signals_behind_unwritten_ones_arrive(&bus, restart_by_signal);
}

#[test]
fn signals_queued_behind_unwritten_ones_arrive_across_a_restart_by_call() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = bus_that_queues();
    signals_behind_unwritten_ones_arrive(&bus, restart_by_call);
}

#[test]
fn signals_queued_behind_unwritten_ones_arrive_across_refused_restarts() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = bus_whose_state_is_refused("1", SMALL_SOCKET_BUFFERS);
    signals_behind_unwritten_ones_arrive(&bus, |bus| {
        quickbus_restart(bus).failure();
        signal_restart(bus);
        wait_for_log(bus, REFUSED, 2);
    });
}

/// Receivers that hold names, each one's departure a NameOwnerChanged.
const DEPARTING: usize = 6;

/// With worker threads writing ahead (8 or more connections to write to),
/// receivers that hold names hang up while the others' output waits:
/// their departures queue NameOwnerChanged behind unwritten signals,
/// possibly in the middle of a flush. The survivors read everything.
fn survivors_read_everything_as_others_hang_up(restart: impl Fn(&Bus)) {
    let bus = Bus::start_with_config(
        Listen::UnixPath,
        &format!(r#"{SMALL_SOCKET_BUFFERS}<limit name="threads">4</limit>"#),
    );
    let mut survivors: Vec<Connection> = (0..10).map(|_| receiver(&bus)).collect();
    for r in &mut survivors {
        r.add_match("type='signal',member='NameOwnerChanged'")
            .expect("AddMatch");
    }
    let mut departing: Vec<Connection> = (0..DEPARTING)
        .map(|i| {
            let mut r = receiver(&bus);
            r.request_name(&format!("com.example.Departing{i}"), 0)
                .expect("RequestName");
            r
        })
        .collect();
    let mut sender = bus.connect();
    for i in 0..BULK {
        emit(&mut sender, i, 30_000);
    }
    sender.get_id().expect("GetId");
    restart(&bus);
    let mut total = BULK;
    for round in 0..DEPARTING {
        for _ in 0..5 {
            emit(&mut sender, total, 3_000);
            total += 1;
        }
        drop(departing.pop());
        if round % 2 == 0 {
            // Let some departures land between the daemon's turns rather
            // than all in one (any interleaving is correct).
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    sender.get_id().expect("GetId");
    let readers: Vec<_> = survivors
        .into_iter()
        .map(|mut r| std::thread::spawn(move || reads_all_and_departures(&mut r, total)))
        .collect();
    for reader in readers {
        reader.join().expect("a survivor read everything");
    }
}

/// `r` reads signals 0 to `total` in order, and every departure.
fn reads_all_and_departures(r: &mut Connection, total: u32) {
    let (mut next, mut departed) = (0, 0);
    while next < total || departed < DEPARTING {
        let (msg, _) = r.receive().unwrap_or_else(|e| {
            panic!("signal {next} of {total} ({departed} departures) did not come: {e}")
        });
        if let Some(n) = number(&msg) {
            assert_eq!(n, Value::Uint32(next));
            next += 1;
        } else if msg.member() == Some("NameOwnerChanged") {
            let departed_name = matches!(
                &msg.body_values().unwrap()[0],
                Value::String(n) if n.starts_with("com.example.Departing")
            );
            departed += usize::from(departed_name);
        }
    }
}

#[test]
fn with_worker_threads_survivors_read_everything_as_name_holders_hang_up() {
    if skip::quickbus_only("the socket_buffer_bytes limit") {
        return;
    }
    for _ in 0..5 {
        survivors_read_everything_as_others_hang_up(|_| {});
    }
}

#[test]
fn with_worker_threads_survivors_read_everything_as_name_holders_hang_up_across_restarts() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    for _ in 0..3 {
        survivors_read_everything_as_others_hang_up(restart_by_signal);
    }
}
