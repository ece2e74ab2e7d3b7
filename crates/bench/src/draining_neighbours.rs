//! The "draining neighbours" workload (issue 24, item 5): another user
//! opens many connections subscribed to this user's signals, lets their
//! queues fill without reading, then drains them one at a time. How long
//! does a well-behaved client of this user wait meanwhile, and how long
//! does a new connection take?
//!
//! On each bus, started fresh with `max_outgoing_bytes` 1 MiB (dbus-broker
//! has its own quotas instead):
//! - the well-behaved client (this user) emits a small signal and makes a
//!   round trip to an echo peer (this user) every 20 ms; the time those
//!   take is its waiting time;
//! - a publisher (this user) emits a 16 KiB signal every 10 ms;
//! - a newcomer (this user) connects (and says Hello) every 200 ms;
//! - the hostile user's 255 receivers (nobody's, when the bench runs as
//!   root) subscribe to the publisher's and the client's signals and read
//!   nothing for the first quarter of the run; then they drain in turn,
//!   one at a time, each read until it is quiet for 20 ms or for at most
//!   200 ms, and left unread again until its next turn.
//!
//! At the end every receiver reads until the bus is quiet, and counts
//! what it received and what it was told it lost (`MessagesLost`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use quickbus_client::{Connection, Error, Message, MessageBuilder, Value};

use super::buses::{BusKind, RunningBus};
use super::hostile_neighbour::{
    as_user, connect, messages_lost, start_echo, well_behaved, ClientWaits, INNOCENT_INTERFACE,
    IO_TIMEOUT, MAX_OUTGOING_BYTES, NOBODY,
};

/// The hostile user's receivers: one less than dbus-daemon's
/// `max_connections_per_user` on a system bus.
pub const RECEIVERS: usize = 255;
const PUBLISH_INTERFACE: &str = "org.quickbus.Bench.Publish";
const PUBLISH_PERIOD: Duration = Duration::from_millis(10);
const PUBLISH_PAYLOAD: usize = 16 * 1024;
const NEWCOMER_PERIOD: Duration = Duration::from_millis(200);
/// A receiver whose turn it is reads until nothing came for this long...
const DRAIN_QUIET: Duration = Duration::from_millis(20);
/// ...or for at most this long.
const DRAIN_TURN: Duration = Duration::from_millis(200);

/// One run on one bus.
#[derive(Clone, Debug, Default)]
pub struct DrainSample {
    pub client: ClientWaits,
    /// New connections made during the run, and the longest one took.
    pub connects: u64,
    pub worst_connect_ms: f64,
    /// Receivers' turns at draining.
    pub turns: u64,
    /// Signals every receiver subscribed to (the publisher's and the
    /// well-behaved client's).
    pub sent: u64,
    /// Over the receivers the bus kept: signals received, and told lost
    /// (MessagesLost).
    pub received: u64,
    pub told_lost: u64,
    /// Signals that never reached a receiver the bus kept, and that
    /// nobody told it of.
    pub lost_silently: u64,
    /// Receivers the bus disconnected.
    pub cut_off: usize,
    /// The hostile clients ran as another user (nobody).
    pub other_user: bool,
    pub errors: Vec<String>,
}

/// Start `kind` for this workload and run it for `duration`.
pub fn run(kind: BusKind, quickbus_daemon: &std::path::Path, duration: Duration) -> DrainSample {
    let limits = [
        ("max_outgoing_bytes", MAX_OUTGOING_BYTES),
        // The receivers, the newcomer's connections and a few more.
        ("max_connections_per_user", 1024),
    ];
    let bus = match RunningBus::start_with_limits(kind, quickbus_daemon, &limits) {
        Ok(bus) => bus,
        Err(e) => {
            return DrainSample {
                errors: vec![format!("not started: {e}")],
                ..DrainSample::default()
            }
        }
    };
    match run_on(&bus, duration) {
        Ok(sample) => sample,
        Err(e) => DrainSample {
            errors: vec![e],
            ..DrainSample::default()
        },
    }
}

fn run_on(bus: &RunningBus, duration: Duration) -> Result<DrainSample, String> {
    let mut innocent = connect(bus, "the well-behaved client")?;
    let echo_thread = start_echo(bus)?;
    let publisher = connect(bus, "the publisher")?;
    let (receivers, other_user) = hostile_receivers(bus)?;

    let stop = Arc::new(AtomicBool::new(false));
    let publish_stop = stop.clone();
    let publish_thread = thread::spawn(move || publish(publisher, &publish_stop));
    let newcomer_stop = stop.clone();
    let address = bus.address.clone();
    let newcomer_thread = thread::spawn(move || connect_often(&address, &newcomer_stop));
    let drain_stop = stop.clone();
    let fill_for = duration / 4;
    let drain_thread = thread::spawn(move || drain_in_turn(receivers, fill_for, &drain_stop));

    let (client, error) = well_behaved(&mut innocent, duration);
    let mut sample = DrainSample {
        client,
        other_user,
        errors: error.into_iter().collect(),
        ..DrainSample::default()
    };
    stop.store(true, Ordering::Relaxed);
    drop(innocent);
    let published = publish_thread
        .join()
        .unwrap_or_else(|_| Err("panicked".into()));
    let connected = newcomer_thread.join().unwrap_or_default();
    let drained = drain_thread.join().unwrap_or_default();
    let _ = echo_thread.join();
    match published {
        Ok(sent) => sample.sent = sample.client.round_trips + sent,
        Err(e) => sample.errors.push(format!("publisher: {e}")),
    }
    sample.connects = connected.connects;
    sample.worst_connect_ms = connected.worst.as_secs_f64() * 1e3;
    sample.errors.extend(connected.error);
    sample.turns = drained.turns;
    for receiver in &drained.receivers {
        if receiver.cut_off {
            sample.cut_off += 1;
            continue;
        }
        sample.received += receiver.received;
        sample.told_lost += receiver.told_lost;
        sample.lost_silently += sample
            .sent
            .saturating_sub(receiver.received + receiver.told_lost);
    }
    Ok(sample)
}

/// The hostile user's receivers, each subscribed to the publisher's and
/// the well-behaved client's signals, as
/// nobody if we may.
fn hostile_receivers(bus: &RunningBus) -> Result<(Vec<Connection>, bool), String> {
    let address = bus.address.clone();
    let open = move || -> Result<Vec<Connection>, String> {
        (0..RECEIVERS)
            .map(|i| {
                let mut c = Connection::connect_with_timeout(&address, IO_TIMEOUT)
                    .map_err(|e| format!("receiver {i} cannot connect: {e}"))?;
                c.set_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
                for interface in [PUBLISH_INTERFACE, INNOCENT_INTERFACE] {
                    c.add_match(&format!("type='signal',interface='{interface}'"))
                        .map_err(|e| format!("receiver {i}: AddMatch: {e}"))?;
                }
                Ok(c)
            })
            .collect()
    };
    if rustix::process::geteuid().is_root() {
        Ok((as_user(NOBODY, open)?, true))
    } else {
        Ok((open()?, false))
    }
}

/// Emit the publisher's signals until told to stop; returns how many.
fn publish(mut publisher: Connection, stop: &AtomicBool) -> Result<u64, String> {
    let payload = "p".repeat(PUBLISH_PAYLOAD);
    let mut sent = 0;
    while !stop.load(Ordering::Relaxed) {
        let signal = MessageBuilder::signal("/org/quickbus/Bench", PUBLISH_INTERFACE, "Publish")
            .body(vec![Value::String(payload.clone())]);
        publisher.send(signal, &[]).map_err(|e| e.to_string())?;
        sent += 1;
        thread::sleep(PUBLISH_PERIOD);
    }
    Ok(sent)
}

#[derive(Default)]
struct Connected {
    connects: u64,
    worst: Duration,
    error: Option<String>,
}

/// Connect (and say Hello) every [`NEWCOMER_PERIOD`] until told to stop.
fn connect_often(address: &str, stop: &AtomicBool) -> Connected {
    let mut out = Connected::default();
    while !stop.load(Ordering::Relaxed) {
        let began = Instant::now();
        match Connection::connect_with_timeout(address, IO_TIMEOUT) {
            Ok(conn) => drop(conn),
            Err(e) => {
                out.error = Some(format!("newcomer: {e}"));
                return out;
            }
        }
        out.worst = out.worst.max(began.elapsed());
        out.connects += 1;
        thread::sleep(NEWCOMER_PERIOD);
    }
    out
}

#[derive(Default)]
struct Receiver {
    received: u64,
    told_lost: u64,
    /// The bus disconnected it.
    cut_off: bool,
}

#[derive(Default)]
struct Drained {
    receivers: Vec<Receiver>,
    turns: u64,
}

/// Read nothing for `fill_for`, then give each receiver its turn at
/// draining, one at a time, round and round until told to stop; then
/// read every receiver until the bus is quiet.
fn drain_in_turn(mut conns: Vec<Connection>, fill_for: Duration, stop: &AtomicBool) -> Drained {
    let mut out = Drained {
        receivers: conns.iter().map(|_| Receiver::default()).collect(),
        turns: 0,
    };
    let started = Instant::now();
    while started.elapsed() < fill_for && !stop.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(10));
    }
    for conn in &mut conns {
        let _ = conn.set_timeout(Some(DRAIN_QUIET));
    }
    'turns: loop {
        for (conn, receiver) in conns.iter_mut().zip(&mut out.receivers) {
            if stop.load(Ordering::Relaxed) {
                break 'turns;
            }
            if receiver.cut_off {
                continue;
            }
            out.turns += 1;
            let turn = Instant::now();
            while turn.elapsed() < DRAIN_TURN && read_one(conn, receiver) {}
        }
    }
    // Whatever is still queued, and the MessagesLost that come once the
    // queues drain: passes over every receiver until one brings nothing
    // (a pass waits a read timeout on each of them, seconds in all).
    let mut brought = true;
    while brought {
        brought = false;
        for (conn, receiver) in conns.iter_mut().zip(&mut out.receivers) {
            let before = (receiver.received, receiver.told_lost);
            while !receiver.cut_off && read_one(conn, receiver) {}
            brought |= (receiver.received, receiver.told_lost) != before;
        }
    }
    out
}

/// Read one message; false when none came within the time-out or the
/// connection is gone.
fn read_one(conn: &mut Connection, receiver: &mut Receiver) -> bool {
    match conn.receive() {
        Ok((message, _)) => {
            count(&message, receiver);
            true
        }
        Err(Error::Timeout) => false,
        Err(_) => {
            receiver.cut_off = true;
            false
        }
    }
}

fn count(message: &Message, receiver: &mut Receiver) {
    if matches!(
        message.interface(),
        Some(INNOCENT_INTERFACE | PUBLISH_INTERFACE)
    ) {
        receiver.received += 1;
    } else if let Some(n) = messages_lost(message) {
        receiver.told_lost += n;
    }
}
