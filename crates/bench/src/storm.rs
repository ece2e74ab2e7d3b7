//! The "storm" workload (issue 25, seed 000): how long a method call
//! waits while another client floods the bus with signals.
//!
//! Per bus and flood rate:
//! - a caller makes [`CALLS`] Echo calls of 64 B to a callee, one every
//!   millisecond (paced: a late call goes at once, the next keeps the
//!   schedule), and times each round trip;
//! - a flooder sends 1 KiB signals, as fast as the bus takes them (rate
//!   0) or at a paced rate, to [`RECEIVERS`] receivers that match them;
//! - the flood carried is what the receivers got per second while the
//!   calls ran (per receiver: signals/s), and the bus's CPU seconds are
//!   those of the same stretch.
//!
//! On a machine with few cores the clients compete with the bus for the
//! CPU: a bus that lets the flood take the machine leaves little to the
//! caller and the callee. The report gives both sides (call latency and
//! flood carried) so that neither is bought with the other unseen.

use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use quickbus_client::{Connection, Error};
use serde_json::{json, Value};

use super::buses::{BusKind, RunningBus};
use super::cpu_window::CpuWindow;
use super::messages::{self, Template};
use super::report::{median, ratio, write_qb_ratio_row};
use super::round_trip::{call_once, serve_echo};
use super::sampled::Sampled;
use super::workloads::{percentile, sleep_until};
use quickbus_chart::{Axis, Chart, Series};

/// Flood rates in signals/s: 0 is as fast as the bus takes them.
pub const FLOOD_RATES: [u32; 2] = [0, 10_000];
/// Calls per run (the workload), and with --quick.
pub const CALLS: u32 = 1_000;
pub const QUICK_CALLS: u32 = 200;
const CALL_PERIOD: Duration = Duration::from_millis(1);
const CALL_SIZE: usize = 64;
const SIGNAL_SIZE: usize = 1024;
pub const RECEIVERS: usize = 3;
/// The flood runs this long before the first call, so that every queue
/// on the way has filled.
const WARM_UP: Duration = Duration::from_millis(200);
/// Bound of every single blocking read or write.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How often an idle receiver looks at the stop flag.
const POLL: Duration = Duration::from_millis(50);

/// One run on one bus at one flood rate.
#[derive(Clone, Debug, Default)]
pub struct StormSample {
    /// Round-trip times of the calls made, sorted.
    pub rtts_ns: Vec<u64>,
    pub calls_expected: u32,
    /// Signals each receiver got per second while the calls ran.
    pub flood_carried_per_s: f64,
    /// Signals the flooder sent per second meanwhile.
    pub flood_sent_per_s: f64,
    /// The bus's CPU time (user + system) while the calls ran.
    pub bus_cpu_seconds: f64,
    /// From the first call to the last reply.
    pub seconds: f64,
    pub errors: Vec<String>,
}

impl StormSample {
    fn rtt_us(&self, q: f64) -> f64 {
        percentile(&self.rtts_ns, q) as f64 / 1e3
    }
    pub fn p50_us(&self) -> f64 {
        self.rtt_us(0.50)
    }
    pub fn p99_us(&self) -> f64 {
        self.rtt_us(0.99)
    }
    pub fn max_us(&self) -> f64 {
        self.rtt_us(1.0)
    }
}

/// Every storm run of a bench invocation.
pub struct Storms {
    runs: Sampled<(u32, BusKind), StormSample, StormSummary>,
}

impl Default for Storms {
    fn default() -> Self {
        Storms {
            runs: Sampled::new(|_, samples| summarize(samples)),
        }
    }
}

/// Medians over the repetitions of one (flood rate, bus).
struct StormSummary {
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
    flood_carried_per_s: f64,
    flood_sent_per_s: f64,
    bus_cpu_seconds: f64,
    calls: f64,
    calls_expected: u32,
    errors: Vec<String>,
}

fn summarize(samples: &[StormSample]) -> StormSummary {
    let med =
        |f: &dyn Fn(&StormSample) -> f64| median(&mut samples.iter().map(f).collect::<Vec<_>>());
    let mut errors: Vec<String> = samples.iter().flat_map(|s| s.errors.clone()).collect();
    errors.sort();
    errors.dedup();
    StormSummary {
        p50_us: med(&|s| s.p50_us()),
        p99_us: med(&|s| s.p99_us()),
        max_us: med(&|s| s.max_us()),
        flood_carried_per_s: med(&|s| s.flood_carried_per_s),
        flood_sent_per_s: med(&|s| s.flood_sent_per_s),
        bus_cpu_seconds: med(&|s| s.bus_cpu_seconds),
        calls: med(&|s| s.rtts_ns.len() as f64),
        calls_expected: samples.first().map_or(0, |s| s.calls_expected),
        errors,
    }
}

fn rate_text(rate: u32) -> String {
    if rate == 0 {
        "max".to_owned()
    } else {
        format!("{rate}/s")
    }
}

impl Storms {
    pub fn add(&mut self, flood_rate: u32, bus: BusKind, sample: StormSample) {
        self.runs.add((flood_rate, bus), sample);
    }

    /// The medians, one row per bus and flood rate, with quickbus's
    /// ratios to each other bus (below 1.00x: quickbus waits less, or
    /// carries less flood).
    pub fn table(&self) -> String {
        let mut out = String::new();
        if self.runs.is_empty() {
            return out;
        }
        let _ = writeln!(
            out,
            "\n== storm: calls of {CALL_SIZE} B, 1 ms apart, while a client floods \
             {SIGNAL_SIZE} B signals to {RECEIVERS} receivers (medians) =="
        );
        let _ = writeln!(
            out,
            "{:<8} {:>12} {:>10} {:>10} {:>10} {:>12} {:>12} {:>9} {:>9}  errors",
            "flood",
            "bus",
            "p50 µs",
            "p99 µs",
            "max µs",
            "carried/s",
            "sent/s",
            "bus cpu s",
            "calls"
        );
        let summaries = self.runs.summaries();
        for (&(rate, bus), s) in summaries {
            let errors = crate::report::errors_text(&s.errors);
            let _ = writeln!(
                out,
                "{:<8} {:>12} {:>10.0} {:>10.0} {:>10.0} {:>12.0} {:>12.0} {:>9.3} {:>4.0}/{:<4}  {}",
                rate_text(rate),
                bus.name(),
                s.p50_us,
                s.p99_us,
                s.max_us,
                s.flood_carried_per_s,
                s.flood_sent_per_s,
                s.bus_cpu_seconds,
                s.calls,
                s.calls_expected,
                errors
            );
            let Some(q) = summaries.get(&(rate, BusKind::Quickbus)) else {
                continue;
            };
            if bus == BusKind::Quickbus {
                continue;
            }
            write_qb_ratio_row(
                &mut out,
                &[8, 12, 10, 10, 10, 12, 12, 9],
                bus,
                &[
                    &ratio(q.p50_us, s.p50_us),
                    &ratio(q.p99_us, s.p99_us),
                    &ratio(q.max_us, s.max_us),
                    &ratio(q.flood_carried_per_s, s.flood_carried_per_s),
                    &ratio(q.flood_sent_per_s, s.flood_sent_per_s),
                    &ratio(q.bus_cpu_seconds, s.bus_cpu_seconds),
                ],
            );
        }
        out
    }

    /// One chart per flood rate: each bus's call round-trip time at every
    /// percentile (the median over repetitions), so that the tail shows.
    pub fn plots(&self) -> Vec<(String, String)> {
        let mut rates: Vec<u32> = self.runs.samples().keys().map(|&(rate, _)| rate).collect();
        rates.dedup();
        let mut charts = Vec::new();
        for rate in rates {
            let series: Vec<Series> = self
                .runs
                .samples()
                .iter()
                .filter(|((r, _), _)| *r == rate)
                .map(|(&(_, bus), samples)| Series {
                    name: bus.name().to_owned(),
                    points: (1..=100)
                        .map(|pct| {
                            let q = f64::from(pct) / 100.0;
                            let mut at: Vec<f64> = samples.iter().map(|s| s.rtt_us(q)).collect();
                            (f64::from(pct), median(&mut at))
                        })
                        .collect(),
                })
                .collect();
            let title = format!(
                "storm, flood {}: call round trip by percentile",
                rate_text(rate)
            );
            let chart = Chart {
                title: &title,
                x_label: "percentile of calls",
                y_label: "round trip µs",
                x: Axis::Linear,
                y: Axis::Log10,
                dots: false,
            };
            if let Some(svg) = chart.draw(&series) {
                let name = if rate == 0 {
                    "storm-flood-max-latency.svg".to_owned()
                } else {
                    format!("storm-flood-{rate}-latency.svg")
                };
                charts.push((name, svg));
            }
        }
        charts
    }

    pub fn json(&self) -> Value {
        let summaries = self.runs.summaries();
        let rows: Vec<Value> = self
            .runs
            .samples()
            .iter()
            .map(|(&(rate, bus), samples)| {
                let s = &summaries[&(rate, bus)];
                json!({
                    "flood_rate": rate,
                    "bus": bus.name(),
                    "median": {
                        "p50_us": s.p50_us,
                        "p99_us": s.p99_us,
                        "max_us": s.max_us,
                        "flood_carried_per_s": s.flood_carried_per_s,
                        "flood_sent_per_s": s.flood_sent_per_s,
                        "bus_cpu_seconds": s.bus_cpu_seconds,
                    },
                    "samples": samples.iter().map(|x| json!({
                        "calls": x.rtts_ns.len(),
                        "calls_expected": x.calls_expected,
                        "p50_us": x.p50_us(),
                        "p99_us": x.p99_us(),
                        "max_us": x.max_us(),
                        "flood_carried_per_s": x.flood_carried_per_s,
                        "flood_sent_per_s": x.flood_sent_per_s,
                        "bus_cpu_seconds": x.bus_cpu_seconds,
                        "seconds": x.seconds,
                        "errors": x.errors,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        Value::Array(rows)
    }
}

/// `calls` paced calls through `bus` while a flooder sends at
/// `flood_rate` signals/s (0: as fast as it can).
pub fn run(bus: &RunningBus, calls: u32, flood_rate: u32) -> StormSample {
    let mut sample = StormSample {
        calls_expected: calls,
        ..StormSample::default()
    };
    if let Err(e) = run_into(bus, calls, flood_rate, &mut sample) {
        sample.errors.push(e);
    }
    sample
}

/// A thread of the storm, named so that a scheduler trace
/// (scripts/sched-delay.sh) tells the parts apart; the caller is the
/// bench's main thread. Panics if it cannot start, as `thread::spawn` does.
fn spawn_named<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    thread::Builder::new()
        .name(name.to_owned())
        .spawn(work)
        .expect("start a storm thread")
}

fn run_into(
    bus: &RunningBus,
    calls: u32,
    flood_rate: u32,
    sample: &mut StormSample,
) -> Result<(), String> {
    let connect = |what: &str| {
        bus.connect(IO_TIMEOUT)
            .map_err(|e| format!("{what}: connect: {e}"))
    };
    let mut caller = connect("caller")?;
    let callee = connect("callee")?;
    let callee_name = callee.unique_name().to_owned();
    let flooder = connect("flooder")?;
    let mut receivers = Vec::new();
    for _ in 0..RECEIVERS {
        let mut receiver = connect("receiver")?;
        receiver
            .add_match(messages::MATCH_RULE)
            .map_err(|e| format!("receiver: AddMatch: {e}"))?;
        receiver
            .set_timeout(Some(POLL))
            .map_err(|e| format!("receiver: {e}"))?;
        receivers.push(receiver);
    }
    let echo = spawn_named("storm-callee", move || serve_echo(callee));
    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(RECEIVERS + 2));
    let receiver_threads: Vec<JoinHandle<Vec<String>>> = receivers
        .into_iter()
        .map(|receiver| {
            let (stop, received, start) = (stop.clone(), received.clone(), start.clone());
            spawn_named("storm-receiver", move || {
                start.wait();
                receive_flood(receiver, &stop, &received)
            })
        })
        .collect();
    let flood_thread = {
        let (stop, sent, start) = (stop.clone(), sent.clone(), start.clone());
        spawn_named("storm-flooder", move || {
            start.wait();
            flood(flooder, flood_rate, &stop, &sent)
        })
    };
    start.wait();
    thread::sleep(WARM_UP);

    // Only the CPU seconds are reported (no cores): the rates below
    // divide by the calls' own stretch, first call to last reply.
    let cpu = CpuWindow::open(|| bus.cpu_seconds());
    let (received_before, sent_before) = (
        received.load(Ordering::Relaxed),
        sent.load(Ordering::Relaxed),
    );
    let began = Instant::now();
    let called = make_calls(&mut caller, &callee_name, calls, &mut sample.rtts_ns);
    sample.seconds = began.elapsed().as_secs_f64();
    let received_during = received.load(Ordering::Relaxed) - received_before;
    let sent_during = sent.load(Ordering::Relaxed) - sent_before;
    sample.bus_cpu_seconds = cpu.close().cpu_seconds;
    sample.rtts_ns.sort_unstable();
    if sample.seconds > 0.0 {
        sample.flood_carried_per_s = received_during as f64 / RECEIVERS as f64 / sample.seconds;
        sample.flood_sent_per_s = sent_during as f64 / sample.seconds;
    }

    stop.store(true, Ordering::Relaxed);
    if let Err(e) = called {
        sample.errors.push(e);
    }
    for t in receiver_threads {
        sample.errors.extend(
            t.join()
                .unwrap_or_else(|_| vec!["receiver panicked".into()]),
        );
    }
    sample.errors.extend(
        flood_thread
            .join()
            .unwrap_or_else(|_| vec!["flooder panicked".into()]),
    );
    let mut quit = Template::call(&callee_name, messages::QUIT, 0);
    let _ = caller.send_raw(quit.with_serial(u32::MAX).bytes(), &[]);
    sample.errors.extend(
        echo.join()
            .unwrap_or_else(|_| vec!["echo server panicked".into()]),
    );
    Ok(())
}

/// The paced calls: call `i` is due `i` ms after the first; one that
/// comes due while the previous waits for its reply goes at once.
fn make_calls(
    caller: &mut Connection,
    callee: &str,
    calls: u32,
    rtts_ns: &mut Vec<u64>,
) -> Result<(), String> {
    let mut call = Template::call(callee, messages::METHOD, CALL_SIZE);
    let first = Instant::now();
    for i in 0..calls {
        sleep_until(first + CALL_PERIOD * i);
        let sent = Instant::now();
        call_once(caller, &mut call, i + 1)?;
        rtts_ns.push(sent.elapsed().as_nanos() as u64);
    }
    Ok(())
}

/// Send 1 KiB signals until told to stop: back to back at rate 0, else
/// in small batches on a 1 ms schedule.
fn flood(mut flooder: Connection, rate: u32, stop: &AtomicBool, sent: &AtomicU64) -> Vec<String> {
    let mut signal = Template::signal(SIGNAL_SIZE);
    let began = Instant::now();
    let mut count: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        if rate > 0 {
            let due = (began.elapsed().as_secs_f64() * f64::from(rate)) as u64;
            if count >= due {
                thread::sleep(Duration::from_micros(500));
                continue;
            }
        }
        let serial = flooder.next_serial();
        signal
            .with_serial(serial)
            .with_timestamp(messages::now_ns());
        match flooder.send_raw(signal.bytes(), &[]) {
            Ok(()) => {
                count += 1;
                sent.store(count, Ordering::Relaxed);
            }
            // Once stopped, the receivers leave and a bus may drop us.
            Err(_) if stop.load(Ordering::Relaxed) => break,
            Err(e) => return vec![format!("flooder: {e}")],
        }
    }
    Vec::new()
}

/// Count the flood's signals until told to stop.
fn receive_flood(mut receiver: Connection, stop: &AtomicBool, received: &AtomicU64) -> Vec<String> {
    while !stop.load(Ordering::Relaxed) {
        match receiver.receive() {
            Ok((message, _)) => {
                if messages::is_burst(&message) {
                    received.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(Error::Timeout) => {}
            Err(e) => return vec![format!("receiver: {e}")],
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(rtts_us: &[u64], carried: f64) -> StormSample {
        let mut rtts_ns: Vec<u64> = rtts_us.iter().map(|us| us * 1000).collect();
        rtts_ns.sort_unstable();
        StormSample {
            calls_expected: rtts_us.len() as u32,
            rtts_ns,
            flood_carried_per_s: carried,
            flood_sent_per_s: carried,
            bus_cpu_seconds: 1.0,
            seconds: 1.0,
            errors: Vec::new(),
        }
    }

    #[test]
    fn the_table_has_medians_and_ratios_to_each_other_bus_per_flood_rate() {
        let mut storms = Storms::default();
        let many = |base: u64| (1..=100).map(|i| base + i).collect::<Vec<_>>();
        storms.add(0, BusKind::Quickbus, sample(&many(100), 2000.0));
        storms.add(0, BusKind::DbusBroker, sample(&many(300), 1000.0));
        storms.add(10_000, BusKind::Quickbus, sample(&many(0), 100.0));
        let table = storms.table();
        // quickbus: p50 150 µs, broker 350 µs; twice the flood.
        assert!(table.contains("qb/broker"), "{table}");
        assert!(
            table.contains("0.43x") && table.contains("2.00x"),
            "{table}"
        );
        assert!(table.contains("10000/s"), "{table}");
        assert!(table.contains("100/100"), "{table}");
        let plots = storms.plots();
        let names: Vec<&str> = plots.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "storm-flood-max-latency.svg",
                "storm-flood-10000-latency.svg"
            ]
        );
        assert!(plots[0].1.contains(">dbus-broker<"));
        let json = storms.json();
        assert_eq!(json.as_array().unwrap().len(), 3);
        assert_eq!(json[0]["median"]["p50_us"], 150.0);
    }

    #[test]
    fn percentiles_come_from_the_sorted_round_trips() {
        let s = sample(&[5, 1, 3, 2, 4], 0.0);
        assert_eq!(s.p50_us(), 3.0);
        assert_eq!(s.p99_us(), 5.0);
        assert_eq!(s.max_us(), 5.0);
        assert_eq!(StormSample::default().p99_us(), 0.0);
    }
}
