//! The "hostile neighbour" workload (issue 17): how much of a
//! well-behaved client's time goes to waiting while another user's reader,
//! subscribed to every signal, stops reading until its queue overflows,
//! drains, and starts again; and whether any signal meant for that reader
//! was lost without anyone being told.
//!
//! Four clients per bus, each bus started fresh with `max_outgoing_bytes`
//! 1 MiB (dbus-broker has its own quotas instead):
//! - the well-behaved one (this user) emits a small signal and makes a
//!   round trip to an echo peer (this user) every 20 ms; the time those
//!   take is its waiting time;
//! - the hostile user's flooder emits 64 KiB signals every 25 ms, so the
//!   reader's queue fills within a second;
//! - the hostile user's reader cycles: 1.5 s without reading, 0.5 s
//!   draining.
//!
//! The hostile clients run as nobody when the bench runs as root (their
//! sockets are opened by a thread that took nobody's uid); otherwise as
//! this user, which the report notes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use quickbus_client::{CallError, Connection, Error, Message, MessageBuilder, Value};

use super::buses::{BusKind, RunningBus};

const ECHO_NAME: &str = "org.quickbus.Bench.Echo";
pub(crate) const INNOCENT_INTERFACE: &str = "org.quickbus.Bench.Innocent";
const FLOOD_INTERFACE: &str = "org.quickbus.Bench.Flood";
/// The queue bound every bus is started with for this workload.
pub const MAX_OUTGOING_BYTES: u64 = 1 << 20;
const INNOCENT_PERIOD: Duration = Duration::from_millis(20);
const FLOOD_PERIOD: Duration = Duration::from_millis(25);
const FLOOD_PAYLOAD: usize = 64 * 1024;
const READER_STOPS: Duration = Duration::from_millis(1500);
const READER_DRAINS: Duration = Duration::from_millis(500);
/// Longest single wait of any client: a bus that stalls longer ends the
/// run with an error instead of hanging it.
pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// At the end the reader reads until the bus is this quiet.
const QUIET: Duration = Duration::from_secs(1);
pub(crate) const NOBODY: (u32, u32) = (65534, 65534);

/// What its neighbours cost the well-behaved client.
#[derive(Clone, Debug, Default)]
pub struct ClientWaits {
    /// Its run, and the part of it spent in its signal and round trip
    /// (the rest is its 20 ms pauses).
    pub seconds: f64,
    pub waited_seconds: f64,
    pub worst_ms: f64,
    /// Its turns: each a signal every subscriber gets, and a round trip.
    pub round_trips: u64,
}

impl ClientWaits {
    pub fn waited_percent(&self) -> f64 {
        if self.seconds > 0.0 {
            100.0 * self.waited_seconds / self.seconds
        } else {
            0.0
        }
    }
}

/// One run on one bus.
#[derive(Clone, Debug, Default)]
pub struct NeighbourSample {
    pub client: ClientWaits,
    /// Overflow episodes the reader went through.
    pub episodes: u64,
    /// Signals meant for the reader: sent, received, and told lost
    /// (MessagesLost); the rest were lost silently.
    pub sent: u64,
    pub received: u64,
    pub told_lost: u64,
    /// The hostile clients ran as another user (nobody).
    pub other_user: bool,
    pub errors: Vec<String>,
}

impl NeighbourSample {
    pub fn lost_silently(&self) -> u64 {
        self.sent.saturating_sub(self.received + self.told_lost)
    }
}

/// Start `kind` for this workload and run it for `duration`.
pub fn run(
    kind: BusKind,
    quickbus_daemon: &std::path::Path,
    duration: Duration,
) -> NeighbourSample {
    let bus = match RunningBus::start_with_limits(
        kind,
        quickbus_daemon,
        &[("max_outgoing_bytes", MAX_OUTGOING_BYTES)],
    ) {
        Ok(bus) => bus,
        Err(e) => {
            return NeighbourSample {
                errors: vec![format!("not started: {e}")],
                ..NeighbourSample::default()
            }
        }
    };
    match run_on(&bus, duration) {
        Ok(sample) => sample,
        Err(e) => NeighbourSample {
            errors: vec![e],
            ..NeighbourSample::default()
        },
    }
}

fn run_on(bus: &RunningBus, duration: Duration) -> Result<NeighbourSample, String> {
    let mut innocent = connect(bus, "the well-behaved client")?;
    let echo_thread = start_echo(bus)?;
    let (mut reader, flooder, other_user) = hostile_pair(bus)?;
    reader
        .add_match("type='signal'")
        .map_err(|e| format!("AddMatch: {e}"))?;
    reader
        .set_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| e.to_string())?;

    let stop = Arc::new(AtomicBool::new(false));
    let flood_stop = stop.clone();
    let flood_thread = thread::spawn(move || flood(flooder, &flood_stop));
    let read_stop = stop.clone();
    let reader_thread = thread::spawn(move || read_in_cycles(reader, &read_stop));

    let (client, error) = well_behaved(&mut innocent, duration);
    let mut sample = NeighbourSample {
        client,
        other_user,
        errors: error.into_iter().collect(),
        ..NeighbourSample::default()
    };
    stop.store(true, Ordering::Relaxed);
    // The echo peer ends when its caller hangs up.
    drop(innocent);
    let flooded = flood_thread.join().unwrap_or_default();
    let read = reader_thread.join().unwrap_or_default();
    let _ = echo_thread.join();
    sample.sent = sample.client.round_trips + flooded.sent;
    sample.received = read.received;
    sample.told_lost = read.told_lost;
    sample.episodes = read.episodes;
    sample.errors.extend(flooded.errors);
    sample.errors.extend(read.errors);
    Ok(sample)
}

/// A connection of this user's to `bus`, each wait bounded by
/// [`IO_TIMEOUT`]; `what` names it in errors.
pub(crate) fn connect(bus: &RunningBus, what: &str) -> Result<Connection, String> {
    let mut conn = bus
        .connect(IO_TIMEOUT)
        .map_err(|e| format!("{what} cannot connect: {e}"))?;
    conn.set_timeout(Some(IO_TIMEOUT))
        .map_err(|e| format!("{what}: {e}"))?;
    Ok(conn)
}

/// The well-behaved client's turns, every [`INNOCENT_PERIOD`] for
/// `duration`, and the error that ended them early, if one did.
pub(crate) fn well_behaved(
    innocent: &mut Connection,
    duration: Duration,
) -> (ClientWaits, Option<String>) {
    let mut waits = ClientWaits::default();
    let start = Instant::now();
    let mut error = None;
    while start.elapsed() < duration {
        match signal_and_round_trip(innocent) {
            Ok(took) => {
                waits.round_trips += 1;
                waits.waited_seconds += took.as_secs_f64();
                waits.worst_ms = waits.worst_ms.max(took.as_secs_f64() * 1e3);
            }
            Err(e) => {
                error = Some(e);
                break;
            }
        }
        thread::sleep(INNOCENT_PERIOD);
    }
    waits.seconds = start.elapsed().as_secs_f64();
    (waits, error)
}

/// The well-behaved client's turn: a small signal, then a round trip to
/// the echo peer ([`serve_echo`], serving [`ECHO_NAME`]). Returns how long
/// the two took.
fn signal_and_round_trip(innocent: &mut Connection) -> Result<Duration, String> {
    let began = Instant::now();
    let signal = MessageBuilder::signal("/org/quickbus/Bench", INNOCENT_INTERFACE, "Tick")
        .body(vec![Value::String("tick".into())]);
    let emitted = innocent.send(signal, &[]);
    let call = MessageBuilder::method_call("/org/quickbus/Bench", "Ping")
        .interface(ECHO_NAME)
        .destination(ECHO_NAME);
    emitted
        .map_err(CallError::Connection)
        .and_then(|_| innocent.call(call))
        .map_err(|e| format!("well-behaved client: {e}"))?;
    Ok(began.elapsed())
}

/// The echo peer, serving [`ECHO_NAME`] on its own thread until its
/// caller hangs up.
pub(crate) fn start_echo(bus: &RunningBus) -> Result<thread::JoinHandle<()>, String> {
    let mut echo = connect(bus, "the echo peer")?;
    echo.request_name(ECHO_NAME, 0)
        .map_err(|e| format!("RequestName: {e}"))?;
    Ok(thread::spawn(move || serve_echo(echo)))
}

/// The hostile user's reader and flooder, as nobody if we may.
fn hostile_pair(bus: &RunningBus) -> Result<(Connection, Connection, bool), String> {
    let address = bus.address.clone();
    let open = move || -> Result<(Connection, Connection), String> {
        let conn = || {
            let mut c = Connection::connect_with_timeout(&address, IO_TIMEOUT)
                .map_err(|e| format!("a hostile client cannot connect: {e}"))?;
            c.set_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
            Ok::<_, String>(c)
        };
        Ok((conn()?, conn()?))
    };
    if rustix::process::geteuid().is_root() {
        let (reader, flooder) = as_user(NOBODY, open)?;
        Ok((reader, flooder, true))
    } else {
        let (reader, flooder) = open()?;
        Ok((reader, flooder, false))
    }
}

/// Runs `f` on a thread whose uid and gid are `ids`: Linux keeps them per
/// thread, and sockets connected there carry them (SO_PEERCRED).
pub(crate) fn as_user<T: Send + 'static>(
    (uid, gid): (u32, u32),
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    use rustix1::thread::{set_thread_groups, set_thread_res_gid, set_thread_res_uid, Gid, Uid};
    thread::spawn(move || {
        let (gid, uid) = (Gid::from_raw(gid), Uid::from_raw(uid));
        set_thread_groups(&[]).map_err(|e| format!("setgroups: {e}"))?;
        set_thread_res_gid(gid, gid, gid).map_err(|e| format!("setresgid: {e}"))?;
        set_thread_res_uid(uid, uid, uid).map_err(|e| format!("setresuid: {e}"))?;
        f()
    })
    .join()
    .map_err(|_| "the thread opening the hostile clients panicked".to_owned())?
}

fn serve_echo(mut echo: Connection) {
    while let Ok((call, _)) = echo.receive() {
        if call.member() != Some("Ping") {
            continue;
        }
        let mut reply = MessageBuilder::method_return(call.serial());
        if let Some(sender) = call.sender() {
            reply = reply.destination(sender);
        }
        if echo.send(reply, &[]).is_err() {
            return;
        }
    }
}

#[derive(Default)]
struct Flooded {
    sent: u64,
    errors: Vec<String>,
}

fn flood(mut flooder: Connection, stop: &AtomicBool) -> Flooded {
    let mut out = Flooded::default();
    let payload = "f".repeat(FLOOD_PAYLOAD);
    while !stop.load(Ordering::Relaxed) {
        let signal = MessageBuilder::signal("/org/quickbus/Bench", FLOOD_INTERFACE, "Flood")
            .body(vec![Value::String(payload.clone())]);
        match flooder.send(signal, &[]) {
            Ok(_) => out.sent += 1,
            Err(e) => {
                out.errors.push(format!("flooder: {e}"));
                break;
            }
        }
        thread::sleep(FLOOD_PERIOD);
    }
    out
}

#[derive(Default)]
struct Read {
    received: u64,
    told_lost: u64,
    episodes: u64,
    errors: Vec<String>,
}

/// Stop reading, drain, again, until told to stop; then read until the bus
/// is quiet (a MessagesLost comes once the queue drains).
fn read_in_cycles(mut reader: Connection, stop: &AtomicBool) -> Read {
    let mut read = Read::default();
    while !stop.load(Ordering::Relaxed) {
        thread::sleep(READER_STOPS);
        read.episodes += 1;
        let until = Instant::now() + READER_DRAINS;
        while Instant::now() < until {
            if !read_one(&mut reader, &mut read) {
                return read;
            }
        }
    }
    let mut last = Instant::now();
    while last.elapsed() < QUIET {
        let before = (read.received, read.told_lost);
        if !read_one(&mut reader, &mut read) {
            break;
        }
        if (read.received, read.told_lost) != before {
            last = Instant::now();
        }
    }
    read
}

/// Read one message (or time out); false when the connection is gone.
fn read_one(reader: &mut Connection, read: &mut Read) -> bool {
    match reader.receive() {
        Ok((message, _)) => {
            count(&message, read);
            true
        }
        Err(Error::Timeout) => true,
        Err(e) => {
            read.errors.push(format!("reader: {e}"));
            false
        }
    }
}

fn count(message: &Message, read: &mut Read) {
    if matches!(
        message.interface(),
        Some(INNOCENT_INTERFACE | FLOOD_INTERFACE)
    ) {
        read.received += 1;
    } else if let Some(n) = messages_lost(message) {
        read.told_lost += n;
    }
}

/// The count of quickbus's `MessagesLost` signal, if `message` is one.
pub(crate) fn messages_lost(message: &Message) -> Option<u64> {
    if (message.interface(), message.member()) != (Some("org.quickbus.Bus"), Some("MessagesLost")) {
        return None;
    }
    match message.body_values().ok()?.as_slice() {
        [Value::Uint32(n)] => Some(u64::from(*n)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_and_silent_losses_are_derived_from_the_counts() {
        let s = NeighbourSample {
            client: ClientWaits {
                seconds: 40.0,
                waited_seconds: 1.0,
                ..ClientWaits::default()
            },
            sent: 100,
            received: 60,
            told_lost: 30,
            ..NeighbourSample::default()
        };
        assert!((s.client.waited_percent() - 2.5).abs() < 1e-9);
        assert_eq!(s.lost_silently(), 10);
        assert_eq!(ClientWaits::default().waited_percent(), 0.0);
        // Told more than sent (MessagesLost may also count others'
        // signals): never negative.
        let over = NeighbourSample {
            sent: 1,
            told_lost: 5,
            ..NeighbourSample::default()
        };
        assert_eq!(over.lost_silently(), 0);
    }
}
