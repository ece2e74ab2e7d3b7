//! Round trips (seed 001): Echo calls and their replies through every bus,
//! and, as the floors, the same client peer to peer over a socketpair, the
//! same client through a relay that only moves bytes (the least any bus
//! adds), and a bare socket ping-pong.
//!
//! All of them take turns every [`SLICE`] calls rather than running one
//! after the other. On a virtual machine the cost of a wake-up jumps
//! between regimes far more than the buses differ (one sequential run
//! measured the bare ping-pong at 13 µs for one size and 52 µs for the
//! next); taking turns every few milliseconds, no row of a size is
//! measured in a different stretch of time from the others. What the
//! scheduler does with each process still differs (docs/performance.md).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use quickbus_client::{Connection, Error};
use quickbus_wire::MessageType;

use super::buses::RunningBus;
use super::cpu_window::CpuWindow;
use super::endpoint::{Endpoint, Peer};
use super::messages::{self, Template};
use super::relay::Relay;
use super::workloads::{own_name, Sample};

/// Calls per turn.
const SLICE: u32 = 50;
/// Bound of every single blocking read or write.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// What one run measured: one sample per bus (in the order given), and
/// the floors.
pub struct RoundTrips {
    pub buses: Vec<Sample>,
    pub peer_to_peer: Sample,
    pub relay: Sample,
    pub socket: Sample,
}

/// `count` round trips of `size` bytes each way through every bus in
/// `buses`, peer to peer and over a bare socket, taking turns.
pub fn interleaved(buses: &[RunningBus], size: usize, count: u32) -> RoundTrips {
    let mut lanes: Vec<Lane> = buses.iter().map(|bus| Lane::through(bus, size)).collect();
    lanes.push(Lane::peer_to_peer(size));
    lanes.push(Lane::relayed(size));
    lanes.push(Lane::socket(size));
    let mut samples = take_turns(lanes, count);
    let socket = samples.pop().expect("the socket lane");
    let relay = samples.pop().expect("the relay lane");
    let peer_to_peer = samples.pop().expect("the peer-to-peer lane");
    RoundTrips {
        buses: samples,
        peer_to_peer,
        relay,
        socket,
    }
}

/// A way from a caller to an echo server that owns a well-known name,
/// each end on its own address (e.g. the caller behind a filtering proxy,
/// the server on the bus itself).
pub struct CallPath<'a> {
    pub caller_address: &'a str,
    pub server_address: &'a str,
    /// The name the server owns and the caller calls.
    pub server_name: &'a str,
    /// CPU seconds so far of everything between the two (the daemon, and
    /// a proxy if any).
    pub cpu_seconds: &'a dyn Fn() -> f64,
}

/// `count` round trips of `size` bytes each way along every path, taking
/// turns; one sample per path, in order.
pub fn interleaved_paths(paths: &[CallPath<'_>], size: usize, count: u32) -> Vec<Sample> {
    let lanes = paths.iter().map(|path| Lane::along(path, size)).collect();
    take_turns(lanes, count)
}

/// Runs the lanes [`SLICE`] calls at a time each until every one made
/// `count` calls (or failed), then their samples in order.
fn take_turns(mut lanes: Vec<Lane<'_>>, count: u32) -> Vec<Sample> {
    let turns = count.div_ceil(SLICE);
    for turn in 0..turns {
        let calls = SLICE.min(count - turn * SLICE);
        // Rotate who goes first, so none always follows the same one.
        let n = lanes.len();
        for i in 0..n {
            lanes[(i + turn as usize) % n].run(calls);
        }
    }
    lanes.into_iter().map(|l| l.finish(count)).collect()
}

/// One caller and its echo server, and what it measured so far.
struct Lane<'a> {
    pinger: Option<Pinger>,
    /// What sits between caller and server and whose CPU time is counted.
    between: Option<Between<'a>>,
    rtts_ns: Vec<u64>,
    seconds: f64,
    daemon_cpu_seconds: f64,
    errors: Vec<String>,
}

/// A bus's daemon, the relay, or whatever a [`CallPath`] measures.
enum Between<'a> {
    Bus(&'a RunningBus),
    Relay(Relay),
    Path(&'a dyn Fn() -> f64),
}

impl Between<'_> {
    fn cpu_seconds(&self) -> f64 {
        match self {
            Between::Bus(bus) => bus.cpu_seconds(),
            Between::Relay(relay) => relay.cpu_seconds(),
            Between::Path(cpu_seconds) => cpu_seconds(),
        }
    }
}

enum Pinger {
    /// D-Bus method calls, through a bus or peer to peer.
    Calls {
        client: Box<dyn Endpoint>,
        call: Template,
        serial: u32,
        server_name: String,
        server: JoinHandle<Vec<String>>,
    },
    /// `buf.len()` bytes there and back, no D-Bus at all.
    Bytes {
        stream: UnixStream,
        buf: Vec<u8>,
        echo: JoinHandle<()>,
    },
}

impl<'a> Lane<'a> {
    fn new(pinger: Result<Pinger, String>, between: Option<Between<'a>>) -> Lane<'a> {
        let (pinger, errors) = match pinger {
            Ok(p) => (Some(p), Vec::new()),
            Err(e) => (None, vec![e]),
        };
        Lane {
            pinger,
            between,
            rtts_ns: Vec::new(),
            seconds: 0.0,
            daemon_cpu_seconds: 0.0,
            errors,
        }
    }

    /// A caller and an echo server, both clients of `bus`.
    fn through(bus: &'a RunningBus, size: usize) -> Lane<'a> {
        let connected = (|| {
            let server = bus.connect(IO_TIMEOUT)?;
            let client = bus.connect(IO_TIMEOUT)?;
            Ok::<_, Error>((client, server))
        })();
        let pinger = connected
            .map(|(client, server)| {
                let name = server.unique_name().to_owned();
                Pinger::calls(Box::new(client), server, &name, size)
            })
            .map_err(|e| format!("connect: {e}"));
        Lane::new(pinger, Some(Between::Bus(bus)))
    }

    /// A caller on `path`'s caller address calling the name its echo
    /// server took on the server address.
    fn along(path: &CallPath<'a>, size: usize) -> Lane<'a> {
        let connected = (|| {
            let mut server = Connection::connect_with_timeout(path.server_address, IO_TIMEOUT)
                .map_err(|e| format!("server: connect: {e}"))?;
            own_name(&mut server, path.server_name).map_err(|e| format!("server: {e}"))?;
            // Step by step, as libdbus and GDBus: a proxy on the way may
            // take nothing else.
            let client = Connection::connect_step_by_step(path.caller_address, IO_TIMEOUT)
                .map_err(|e| format!("caller: connect: {e}"))?;
            Ok((client, server))
        })();
        let pinger = connected.map(|(mut client, server)| {
            // Serials go on from the connection's own (Hello's): a proxy
            // on the way drops a client that reuses one.
            let used = client.next_serial();
            let mut pinger = Pinger::calls(Box::new(client), server, path.server_name, size);
            if let Pinger::Calls { serial, .. } = &mut pinger {
                *serial = used;
            }
            pinger
        });
        Lane::new(pinger, Some(Between::Path(path.cpu_seconds)))
    }

    /// The same client and server peer to peer: the floor without a bus.
    fn peer_to_peer(size: usize) -> Lane<'static> {
        let pinger = Peer::pair(IO_TIMEOUT)
            .map(|(client, server)| Pinger::calls(Box::new(client), server, ":1.0", size))
            .map_err(|e| format!("socketpair: {e}"));
        Lane::new(pinger, None)
    }

    /// The same client and server with a relay between them.
    fn relayed(size: usize) -> Lane<'static> {
        match Relay::start() {
            Ok((relay, near, far)) => {
                let client = Peer::new(near, IO_TIMEOUT);
                let server = Peer::new(far, IO_TIMEOUT);
                let pinger = Pinger::calls(Box::new(client), server, ":1.0", size);
                Lane::new(Ok(pinger), Some(Between::Relay(relay)))
            }
            Err(e) => Lane::new(Err(format!("relay: {e}")), None),
        }
    }

    /// Bare bytes over a socketpair.
    fn socket(size: usize) -> Lane<'static> {
        Lane::new(Pinger::bytes(size.max(1)), None)
    }

    /// `calls` round trips, unless an earlier one failed.
    fn run(&mut self, calls: u32) {
        let Some(pinger) = &mut self.pinger else {
            return;
        };
        let cpu = self
            .between
            .as_ref()
            .map(|between| CpuWindow::open(|| between.cpu_seconds()));
        let start = Instant::now();
        for _ in 0..calls {
            let sent = Instant::now();
            if let Err(e) = pinger.ping() {
                self.errors.push(e);
                stop(&mut self.pinger, &mut self.errors);
                break;
            }
            self.rtts_ns.push(sent.elapsed().as_nanos() as u64);
        }
        self.seconds += start.elapsed().as_secs_f64();
        if let Some(span) = cpu.map(CpuWindow::close) {
            self.daemon_cpu_seconds += span.cpu_seconds;
        }
    }

    fn finish(mut self, count: u32) -> Sample {
        stop(&mut self.pinger, &mut self.errors);
        let delivered = self.rtts_ns.len() as u64;
        let measured_cpu = self.between.is_some();
        if let Some(Between::Relay(relay)) = self.between.take() {
            relay.join(); // it ends when the echo server hangs up
        }
        let sample = Sample {
            expected: count as u64,
            delivered,
            // A round trip is two messages through the bus (or relay).
            bus_messages: if measured_cpu { 2 * delivered } else { 0 },
            seconds: self.seconds,
            errors: self.errors,
            daemon_cpu_seconds: measured_cpu.then_some(self.daemon_cpu_seconds),
            ..Sample::default()
        };
        sample.with_latencies(self.rtts_ns)
    }
}

/// Tell the echo server of `pinger` to stop and wait for it, keeping what
/// went wrong in `errors`. (Apart from the lane: a lane's CPU window
/// borrows what sits between while its pinger stops.)
fn stop(pinger: &mut Option<Pinger>, errors: &mut Vec<String>) {
    if let Some(pinger) = pinger.take() {
        errors.extend(pinger.stop());
    }
}

impl Pinger {
    fn calls(
        client: Box<dyn Endpoint>,
        server: impl Endpoint + 'static,
        server_name: &str,
        size: usize,
    ) -> Pinger {
        Pinger::Calls {
            client,
            call: Template::call(server_name, messages::METHOD, size),
            serial: 0,
            server_name: server_name.to_owned(),
            server: std::thread::spawn(move || serve_echo(server)),
        }
    }

    fn bytes(size: usize) -> Result<Pinger, String> {
        let (stream, mut echo_end) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
        for s in [&stream, &echo_end] {
            let _ = s.set_read_timeout(Some(IO_TIMEOUT));
            let _ = s.set_write_timeout(Some(IO_TIMEOUT));
        }
        let echo = std::thread::spawn(move || {
            let mut buf = vec![0u8; size];
            // Until the caller hangs up.
            while echo_end.read_exact(&mut buf).is_ok() && echo_end.write_all(&buf).is_ok() {}
        });
        Ok(Pinger::Bytes {
            stream,
            buf: vec![7u8; size],
            echo,
        })
    }

    /// One round trip.
    fn ping(&mut self) -> Result<(), String> {
        match self {
            Pinger::Calls {
                client,
                call,
                serial,
                ..
            } => {
                *serial = serial.wrapping_add(1).max(1);
                call_once(client.as_mut(), call, *serial)
            }
            Pinger::Bytes { stream, buf, .. } => stream
                .write_all(buf)
                .and_then(|_| stream.read_exact(buf))
                .map_err(|e| format!("ping-pong: {e}")),
        }
    }

    /// Stop the echo server; its errors, if any.
    fn stop(self) -> Vec<String> {
        match self {
            Pinger::Calls {
                mut client,
                server,
                server_name,
                serial,
                ..
            } => {
                // A serial not used before: a proxy on the way (the sandbox
                // workload's xdg-dbus-proxy) drops a client that reuses one.
                let mut quit = Template::call(&server_name, messages::QUIT, 0);
                let _ = client.send(quit.with_serial(serial.wrapping_add(1).max(1)).bytes());
                server
                    .join()
                    .unwrap_or_else(|_| vec!["echo server panicked".into()])
            }
            Pinger::Bytes { stream, echo, .. } => {
                drop(stream);
                match echo.join() {
                    Ok(()) => Vec::new(),
                    Err(_) => vec!["echo thread panicked".into()],
                }
            }
        }
    }
}

/// Sends `call` with `serial` and waits for its reply (skipping whatever
/// else arrives); an error reply is an error.
pub(crate) fn call_once(
    client: &mut dyn Endpoint,
    call: &mut Template,
    serial: u32,
) -> Result<(), String> {
    client
        .send(call.with_serial(serial).bytes())
        .map_err(|e| format!("caller: {e}"))?;
    loop {
        let reply = client.receive().map_err(|e| format!("caller: {e}"))?;
        if reply.reply_serial() != Some(serial) {
            continue;
        }
        if reply.msg_type() == MessageType::Error {
            return Err(format!("caller: {}", quickbus_client::error_of(&reply)));
        }
        return Ok(());
    }
}

/// Answers Echo calls with a reply of the same size until Quit.
pub(crate) fn serve_echo(mut server: impl Endpoint) -> Vec<String> {
    let mut replies: HashMap<(String, usize), Template> = HashMap::new();
    let mut serial = 0u32;
    loop {
        let message = match server.receive() {
            Ok(m) => m,
            Err(Error::Closed) => return Vec::new(),
            Err(e) => return vec![format!("echo server: {e}")],
        };
        if message.msg_type() != MessageType::MethodCall {
            continue;
        }
        if message.member() == Some(messages::QUIT) {
            return Vec::new();
        }
        let caller = message.sender().unwrap_or(":0.0").to_owned();
        let size = messages::payload_len(&message);
        let reply = replies
            .entry((caller, size))
            .or_insert_with_key(|(caller, size)| Template::reply(caller, *size));
        serial = serial.wrapping_add(1).max(1);
        reply
            .with_serial(serial)
            .with_reply_serial(message.serial());
        if let Err(e) = server.send(reply.bytes()) {
            return vec![format!("echo server: {e}")];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_buses_every_floor_completes_every_round_trip() {
        // 120 calls: two full turns of 50 and a last one of 20.
        let trips = interleaved(&[], 3000, 120);
        assert!(trips.buses.is_empty());
        // The relay's CPU time is measured like a daemon's.
        assert_eq!(trips.relay.errors, Vec::<String>::new());
        assert_eq!(trips.relay.delivered, 120);
        assert_eq!(trips.relay.bus_messages, 240);
        assert!(trips.relay.daemon_cpu_seconds.is_some_and(|s| s > 0.0));
        for sample in [&trips.peer_to_peer, &trips.socket] {
            assert_eq!(sample.errors, Vec::<String>::new());
            assert_eq!(sample.delivered, 120);
            assert_eq!(sample.received_percent(), 100.0);
            assert_eq!(sample.bus_messages, 0);
            assert_eq!(sample.daemon_cpu_seconds, None);
            assert!(sample.latency_mean_us > 0.0 && sample.seconds > 0.0);
        }
    }

    #[test]
    fn a_failing_lane_stops_with_its_error_and_the_others_go_on() {
        let mut lane = Lane::new(Err("connect: refused".into()), None);
        lane.run(SLICE);
        let sample = lane.finish(SLICE);
        assert_eq!(sample.delivered, 0);
        assert_eq!(sample.errors, ["connect: refused"]);
        let mut socket = Lane::socket(8);
        socket.run(3);
        socket.run(2);
        assert_eq!(socket.finish(5).delivered, 5);
    }
}
