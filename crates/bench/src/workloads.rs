//! The signal workloads: bursts to one or many receivers, and the same
//! burst peer to peer (round trips are in `round_trip`).
//! Every wait is bounded, so a bus that drops or stalls ends the run with
//! errors recorded instead of hanging it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use quickbus_client::Error;

use super::buses::RunningBus;
use super::cpu_window::CpuWindow;
use super::endpoint::{Endpoint, Peer};
use super::messages::{self, now_ns, Template};

/// Bound of every single blocking read or write.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a waiting receiver wakes up to look at the clock.
const POLL: Duration = Duration::from_millis(100);
/// A receiver gives up when nothing arrives this long after the sender is done.
const IDLE_AFTER_SEND: Duration = Duration::from_secs(3);

/// One measured run.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    /// Deliveries the run should have made (messages × receivers).
    pub expected: u64,
    /// Deliveries made (signals received, or round trips completed).
    pub delivered: u64,
    /// Messages the bus carried (a round trip is two).
    pub bus_messages: u64,
    /// First send to last receive.
    pub seconds: f64,
    pub latency_mean_us: f64,
    pub latency_p99_us: f64,
    /// Every error a client saw, one line each.
    pub errors: Vec<String>,
    /// Daemon CPU time (user + system) during the run.
    pub daemon_cpu_seconds: Option<f64>,
    /// The wall seconds `daemon_cpu_seconds` was counted over, where a
    /// workload reads it over one stretch (a burst: from its first send
    /// to the moment every receiver is done); 0 where it does not (round
    /// trips read it in turns).
    pub daemon_cpu_wall_seconds: f64,
    /// quickbus's loop thread's part of `daemon_cpu_seconds` (None: not
    /// read, or another bus: [`RunningBus::loop_cpu_seconds`]). Read for
    /// every burst on quickbus (two /proc reads); only the many-clients
    /// tables report it.
    pub loop_cpu_seconds: Option<f64>,
}

impl Sample {
    pub fn rate(&self) -> f64 {
        if self.seconds > 0.0 {
            self.delivered as f64 / self.seconds
        } else {
            0.0
        }
    }

    pub fn received_percent(&self) -> f64 {
        if self.expected == 0 {
            100.0
        } else {
            100.0 * self.delivered as f64 / self.expected as f64
        }
    }

    pub fn daemon_cpu_us_per_message(&self) -> Option<f64> {
        let cpu = self.daemon_cpu_seconds?;
        (self.bus_messages > 0).then(|| cpu * 1e6 / self.bus_messages as f64)
    }

    pub(crate) fn with_latencies(mut self, mut latencies_ns: Vec<u64>) -> Sample {
        if !latencies_ns.is_empty() {
            latencies_ns.sort_unstable();
            let sum: u128 = latencies_ns.iter().map(|&l| l as u128).sum();
            self.latency_mean_us = sum as f64 / latencies_ns.len() as f64 / 1e3;
            self.latency_p99_us = percentile(&latencies_ns, 0.99) as f64 / 1e3;
        }
        self
    }
}

/// Sleep until `at` (at once if it has passed).
pub fn sleep_until(at: Instant) {
    let now = Instant::now();
    if at > now {
        std::thread::sleep(at - now);
    }
}

/// The value below which `q` of the sorted values lie (nearest rank).
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

struct Received {
    count: u64,
    latencies_ns: Vec<u64>,
    last_at_ns: u64,
    errors: Vec<String>,
    /// The receiver's connection, kept open until the CPU is read: its
    /// disconnect is no part of the burst.
    conn: Option<quickbus_client::Connection>,
}

/// Where a burst's clients connect and what the receivers subscribe to.
pub struct BurstRoute<'a> {
    pub sender_address: &'a str,
    /// A well-known name the sender owns before it sends (a filter in
    /// front of the receivers lets through only a name it was told of).
    pub sender_name: Option<&'a str>,
    pub receiver_address: &'a str,
    pub match_rule: &'a str,
    /// CPU seconds so far of what carries the signals (the bus, and a
    /// proxy in front of it), read right before the first send and again
    /// once every receiver is done, before any client disconnects (None:
    /// nothing is measured).
    pub cpu_seconds: Option<&'a dyn Fn() -> f64>,
    /// The same for quickbus's loop thread alone, read within the
    /// readings of `cpu_seconds` (None: not read, nor where
    /// `cpu_seconds` is None).
    pub loop_cpu_seconds: Option<&'a dyn Fn() -> Option<f64>>,
}

/// `count` signals of `size` payload bytes sent back to back by one
/// client to `receivers` clients on `bus` that each added a match rule,
/// with the bus's CPU over them.
pub fn signal_burst(bus: &RunningBus, receivers: usize, size: usize, count: u32) -> Sample {
    let cpu_seconds = || bus.cpu_seconds();
    let loop_cpu_seconds = || bus.loop_cpu_seconds();
    let route = BurstRoute {
        sender_address: &bus.address,
        sender_name: None,
        receiver_address: &bus.address,
        match_rule: messages::MATCH_RULE,
        cpu_seconds: Some(&cpu_seconds),
        loop_cpu_seconds: Some(&loop_cpu_seconds),
    };
    signal_burst_routed(&route, receivers, size, count)
}

/// [`signal_burst`] with the sender and the receivers on the ends of
/// `route`.
pub fn signal_burst_routed(
    route: &BurstRoute<'_>,
    receivers: usize,
    size: usize,
    count: u32,
) -> Sample {
    let mut sample = Sample {
        expected: count as u64 * receivers as u64,
        ..Sample::default()
    };
    let ready = Arc::new(Barrier::new(receivers + 1));
    // 0 while sending; then the time the sender finished (ns).
    let sender_done = Arc::new(AtomicU64::new(0));
    let gave_up = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..receivers)
        .map(|_| {
            let address = route.receiver_address.to_owned();
            let rule = route.match_rule.to_owned();
            let ready = ready.clone();
            let sender_done = sender_done.clone();
            let gave_up = gave_up.clone();
            std::thread::spawn(move || {
                receive_burst(&address, &rule, count, &ready, &sender_done, &gave_up)
            })
        })
        .collect();
    let sender = connect_sender(route);
    ready.wait();
    let cpu = route
        .cpu_seconds
        .map(|meter| CpuWindow::open_with_loop(meter, route.loop_cpu_seconds));
    let start_ns = now_ns();
    let sender = match sender {
        Ok(mut sender) => {
            let mut signal = Template::signal(size);
            for _ in 0..count {
                let serial = sender.next_serial();
                signal.with_serial(serial).with_timestamp(now_ns());
                if let Err(e) = sender.send_raw(signal.bytes(), &[]) {
                    sample.errors.push(format!("sender: {e}"));
                    break;
                }
                if gave_up.load(Ordering::Relaxed) {
                    sample
                        .errors
                        .push("sender: stopped, a receiver failed".into());
                    break;
                }
            }
            Some(sender)
        }
        Err(e) => {
            sample.errors.push(e);
            None
        }
    };
    sender_done.store(now_ns().max(1), Ordering::SeqCst);
    // Keep the sender connected until the receivers are done: some buses
    // drop what a departed sender left queued.
    let received = join_all(threads);
    // The CPU window closes here, every receiver done and every client
    // still connected: the disconnects that follow are no part of the
    // burst, and the window's wall time ends where its CPU was read. (The
    // CPU cannot be read at the last receive itself: which receive is the
    // last is known only once every receiver is done, and reading /proc
    // in a receiver would slow the burst it measures.)
    let cpu = cpu.map(CpuWindow::close);
    drop(sender);
    let mut measured = finish_burst(&mut sample, start_ns, received);
    if let Some(span) = cpu {
        measured.daemon_cpu_seconds = Some(span.cpu_seconds);
        measured.daemon_cpu_wall_seconds = span.wall_seconds;
        measured.loop_cpu_seconds = span.loop_cpu_seconds;
    }
    measured
}

/// The burst's sender, owning the route's name if it has one.
fn connect_sender(route: &BurstRoute<'_>) -> Result<quickbus_client::Connection, String> {
    let mut sender =
        quickbus_client::Connection::connect_with_timeout(route.sender_address, IO_TIMEOUT)
            .map_err(|e| format!("sender: connect: {e}"))?;
    if let Some(name) = route.sender_name {
        own_name(&mut sender, name).map_err(|e| format!("sender: {e}"))?;
    }
    Ok(sender)
}

/// RequestName's DBUS_NAME_FLAG_DO_NOT_QUEUE and its first answer.
const DO_NOT_QUEUE: u32 = 4;
const PRIMARY_OWNER: u32 = 1;

/// Makes `conn` the owner of `name` (not queueing: a name someone else
/// owns is an error).
pub(crate) fn own_name(conn: &mut quickbus_client::Connection, name: &str) -> Result<(), String> {
    match conn.request_name(name, DO_NOT_QUEUE) {
        Ok(PRIMARY_OWNER) => Ok(()),
        Ok(other) => Err(format!("RequestName {name}: answer {other}")),
        Err(e) => Err(format!("RequestName {name}: {e}")),
    }
}

fn join_all(threads: Vec<std::thread::JoinHandle<Received>>) -> Vec<Received> {
    threads
        .into_iter()
        .map(|t| {
            t.join().unwrap_or_else(|_| Received {
                count: 0,
                latencies_ns: Vec::new(),
                last_at_ns: 0,
                errors: vec!["receiver thread panicked".into()],
                conn: None,
            })
        })
        .collect()
}

fn finish_burst(sample: &mut Sample, start_ns: u64, received: Vec<Received>) -> Sample {
    let mut latencies = Vec::new();
    let mut last_ns = start_ns;
    for r in received {
        sample.delivered += r.count;
        latencies.extend(r.latencies_ns);
        last_ns = last_ns.max(r.last_at_ns);
        sample.errors.extend(r.errors);
        // Hangs up only now, after the CPU was read.
        drop(r.conn);
    }
    sample.bus_messages = sample.delivered;
    sample.seconds = (last_ns - start_ns) as f64 / 1e9;
    std::mem::take(sample).with_latencies(latencies)
}

fn receive_burst(
    address: &str,
    match_rule: &str,
    count: u32,
    ready: &Barrier,
    sender_done: &AtomicU64,
    gave_up: &AtomicBool,
) -> Received {
    let mut received = Received {
        count: 0,
        latencies_ns: Vec::with_capacity(count as usize),
        last_at_ns: 0,
        errors: Vec::new(),
        conn: None,
    };
    let setup = (|| {
        // Step by step, as libdbus and GDBus authenticate: a filtering
        // proxy in front of the bus may take nothing else (the sandbox
        // workload); connecting is not timed.
        let mut conn = quickbus_client::Connection::connect_step_by_step(address, IO_TIMEOUT)?;
        conn.add_match(match_rule)
            .map_err(|e| Error::Protocol(format!("AddMatch: {e}")))?;
        conn.set_timeout(Some(POLL))?;
        Ok::<_, Error>(conn)
    })();
    ready.wait();
    let mut conn = match setup {
        Ok(conn) => conn,
        Err(e) => {
            received.errors.push(format!("receiver: setup: {e}"));
            gave_up.store(true, Ordering::Relaxed);
            return received;
        }
    };
    let mut last_progress = Instant::now();
    while received.count < count as u64 {
        match conn.receive() {
            Ok((message, _)) => {
                if messages::is_burst(&message) {
                    let at = now_ns();
                    if let Some(sent) = messages::timestamp_of(&message) {
                        received.latencies_ns.push(at.saturating_sub(sent));
                    }
                    received.count += 1;
                    received.last_at_ns = at;
                    last_progress = Instant::now();
                }
            }
            Err(Error::Timeout) => {
                let done = sender_done.load(Ordering::SeqCst) != 0;
                if done && last_progress.elapsed() > IDLE_AFTER_SEND {
                    received.errors.push(format!(
                        "receiver: gave up after {} of {count}: nothing more arrived",
                        received.count
                    ));
                    break;
                }
            }
            Err(e) => {
                received.errors.push(format!("receiver: {e}"));
                gave_up.store(true, Ordering::Relaxed);
                break;
            }
        }
    }
    received.conn = Some(conn);
    received
}

/// The same burst from the same sender code to one receiver over a
/// socketpair, no bus: the most these clients can move on this machine
/// (the sender's and the receiver's copies alone), a ceiling for the buses.
pub fn peer_signal_burst(size: usize, count: u32) -> Sample {
    let mut sample = Sample {
        expected: count as u64,
        ..Sample::default()
    };
    let (mut sender, mut receiver) = match Peer::pair(IO_TIMEOUT) {
        Ok(pair) => pair,
        Err(e) => {
            sample.errors.push(format!("socketpair: {e}"));
            return sample;
        }
    };
    let reader = std::thread::spawn(move || {
        let mut latencies_ns = Vec::with_capacity(count as usize);
        let mut last_at_ns = 0;
        for _ in 0..count {
            match receiver.receive() {
                Ok(message) => {
                    last_at_ns = now_ns();
                    if let Some(sent) = messages::timestamp_of(&message) {
                        latencies_ns.push(last_at_ns.saturating_sub(sent));
                    }
                }
                Err(e) => return Err(format!("receiver: {e}")),
            }
        }
        Ok((latencies_ns, last_at_ns))
    });
    let start_ns = now_ns();
    let mut signal = Template::signal(size);
    for serial in 1..=count {
        signal.with_serial(serial).with_timestamp(now_ns());
        if let Err(e) = sender.send(signal.bytes()) {
            sample.errors.push(format!("sender: {e}"));
            break;
        }
    }
    match reader.join() {
        Ok(Ok((latencies, last_at_ns))) => {
            sample.delivered = latencies.len() as u64;
            sample.seconds = last_at_ns.saturating_sub(start_ns) as f64 / 1e9;
            sample.with_latencies(latencies)
        }
        Ok(Err(e)) => {
            sample.errors.push(e);
            sample
        }
        Err(_) => {
            sample.errors.push("receiver thread panicked".into());
            sample
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&values, 0.99), 99);
        assert_eq!(percentile(&values, 1.0), 100);
        assert_eq!(percentile(&values, 0.0), 1);
        assert_eq!(percentile(&[], 0.5), 0);
    }

    #[test]
    fn peer_signal_bursts_all_arrive() {
        let sample = peer_signal_burst(40_000, 30);
        assert_eq!(sample.errors, Vec::<String>::new());
        assert_eq!(sample.delivered, 30);
        assert!(sample.rate() > 0.0);
        assert!(sample.latency_mean_us > 0.0);
    }

    #[test]
    fn derived_figures() {
        let sample = Sample {
            expected: 10,
            delivered: 5,
            bus_messages: 10,
            seconds: 0.5,
            daemon_cpu_seconds: Some(0.001),
            ..Sample::default()
        };
        assert_eq!(sample.rate(), 10.0);
        assert_eq!(sample.received_percent(), 50.0);
        assert_eq!(sample.daemon_cpu_us_per_message(), Some(100.0));
    }
}
