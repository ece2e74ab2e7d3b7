//! The many-clients workload (issue 27): how a bus's throughput grows
//! with the number of busy clients, and how many cores it burns for it.
//!
//! - Ping-pong pairs: for each K of a list, K pairs at once, each a caller
//!   and an echo server (the callee) that owns a well-known name of its
//!   own; every caller makes [`CALL_SIZE`] B Echo calls back to back (one
//!   outstanding) for a fixed stretch of time. Reported: the round trips
//!   completed in that stretch per second, summed over the pairs; the
//!   calls' p50 and p99; the bus's CPU in cores (its CPU seconds over the
//!   stretch ÷ the stretch's wall seconds); and the scaling, each row's
//!   rate ÷ the same bus's at the smallest K. The same K pairs peer to
//!   peer (socketpairs, no bus, as the round-trip workload's floor) show
//!   what the clients alone do as K grows.
//! - Wide fan-out: one emitter sends [`SIGNAL_SIZE`] B signals back to
//!   back to many receivers that all match them (the fan-out workload's
//!   burst, with more receivers); deliveries/s summed over the receivers,
//!   and the bus's cores.
//!
//! Every client is a thread of the bench that blocks in its own socket.
//! Nothing is shared on a call's way: a caller counts its own calls, and
//! the stretch it counts is fixed before it starts, so the bench adds no
//! serialization of its own. On a machine with few cores the clients
//! compete with the bus for them: there every bus is CPU-bound, and the
//! scaling cannot show.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::buses::RunningBus;
use super::cpu_window::{cores, per_second, CpuWindow};
use super::endpoint::{Endpoint, Peer};
use super::messages::{self, Template};
use super::report::{
    count_errors, errors_cell, measured_cell, measured_ratio, median, ratio, write_ratio_row,
    Subject,
};
use super::round_trip::{call_once, serve_echo};
use super::sampled::Sampled;
use super::workloads::{own_name, percentile, signal_burst, sleep_until, Sample};
use quickbus_chart::{Axis, Chart, Series};

/// Pairs at once, the default list (issue 27's).
pub const CLIENTS: [usize; 4] = [1, 4, 16, 48];
/// Receivers of the wide fan-out (issue 27's).
pub const RECEIVERS: usize = 48;
pub const CALL_SIZE: usize = 64;
pub const SIGNAL_SIZE: usize = 1024;
/// How long the pairs' round trips are counted, and with --quick.
const WINDOW: Duration = Duration::from_secs(2);
const QUICK_WINDOW: Duration = Duration::from_millis(300);
/// The pairs call this long before their round trips count, so that
/// every one of them is running when counting starts.
const WARM_UP: Duration = Duration::from_millis(200);
/// Signals the fan-out's emitter sends (as the fan-out workload's, seed
/// 000's bursts), and with --quick.
const SIGNALS: u32 = 10_000;
const QUICK_SIGNALS: u32 = 200;
/// Bound of every single blocking read or write.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Each callee's name begins so; a run number and the pair's follow.
const NAME_PREFIX: &str = "org.quickbus.Bench.Pair";

/// What the workload runs, from the command line.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Each K of the pairs, in order.
    pub clients: Vec<usize>,
    /// How long each K's round trips are counted.
    pub window: Duration,
    /// The fan-out's receivers and the signals sent to them.
    pub receivers: usize,
    pub signals: u32,
}

impl Settings {
    /// `clients` (each at least 1) and `receivers` (at least 1); the
    /// window and signal count of a full or a --quick run, or `count`
    /// signals.
    pub fn new(
        clients: &[usize],
        receivers: usize,
        quick: bool,
        count: Option<u32>,
    ) -> Result<Settings, String> {
        if clients.is_empty() || clients.contains(&0) {
            return Err(format!(
                "--clients: every number of pairs must be 1 or more, got {clients:?}"
            ));
        }
        if receivers == 0 {
            return Err("--wide-fan-out: at least 1 receiver".into());
        }
        let default_signals = if quick { QUICK_SIGNALS } else { SIGNALS };
        Ok(Settings {
            clients: clients.to_vec(),
            window: if quick { QUICK_WINDOW } else { WINDOW },
            receivers,
            signals: count.map_or(default_signals, |n| n.max(1)),
        })
    }
}

/// One run of K pairs on one bus (or peer to peer).
#[derive(Clone, Debug, Default)]
pub struct PairsSample {
    /// Round trips completed within the window, all pairs together.
    pub round_trips: u64,
    pub seconds: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// The bus's CPU seconds over the window (None: no bus).
    pub bus_cpu_seconds: Option<f64>,
    /// The wall seconds those CPU seconds were read over.
    pub cpu_wall_seconds: f64,
    /// The bus's threads at the window's end (None: no bus).
    pub bus_threads: Option<usize>,
    /// CPU seconds of quickbus's loop thread, read within the window of
    /// `bus_cpu_seconds` (None: another bus, no bus, or not readable).
    pub loop_cpu_seconds: Option<f64>,
    pub errors: Vec<String>,
}

impl PairsSample {
    pub fn rate(&self) -> f64 {
        per_second(self.round_trips as f64, self.seconds)
    }

    pub fn bus_cores(&self) -> Option<f64> {
        Some(cores(self.bus_cpu_seconds?, self.cpu_wall_seconds))
    }

    /// The cores quickbus's loop thread kept busy: near 1, the one thread
    /// that routes is what limits the rate, whatever its workers could do.
    pub fn loop_cores(&self) -> Option<f64> {
        Some(cores(self.loop_cpu_seconds?, self.cpu_wall_seconds))
    }
}

/// The bus's cores over a fan-out (None: not measured): its CPU over the
/// wall time that CPU was read over, which ends when every receiver is
/// done, not over `seconds`, which ends at the last receive.
fn fan_out_cores(sample: &Sample) -> Option<f64> {
    Some(cores(
        sample.daemon_cpu_seconds?,
        sample.daemon_cpu_wall_seconds,
    ))
}

/// quickbus's loop thread's cores over the same stretch (None: another
/// bus).
fn fan_out_loop_cores(sample: &Sample) -> Option<f64> {
    Some(cores(
        sample.loop_cpu_seconds?,
        sample.daemon_cpu_wall_seconds,
    ))
}

/// One repetition: the pairs at every K on every bus of `buses` (each
/// filed under its subject: a bus, or quickbus with a number of threads)
/// and peer to peer, then the fan-out on every bus; the order rotates
/// with `rep` (and with K) so that none always runs first.
pub fn run(
    buses: &[(Subject, &RunningBus)],
    settings: &Settings,
    rep: u32,
    results: &mut ManyClients,
) {
    let mut lanes: Vec<(Subject, Option<&RunningBus>)> = buses
        .iter()
        .map(|&(subject, bus)| (subject, Some(bus)))
        .collect();
    lanes.push((Subject::PeerToPeer, None));
    for (i, &pairs) in settings.clients.iter().enumerate() {
        let n = lanes.len();
        for j in 0..n {
            let (subject, lane) = lanes[(j + i + rep as usize) % n];
            eprintln!("many-clients: {pairs} pairs on {}", subject.name());
            let sample = run_pairs(lane, pairs, settings.window);
            results.add_pairs(pairs, subject, sample);
        }
    }
    let n = buses.len().max(1);
    for i in 0..buses.len() {
        let (subject, bus) = buses[(i + rep as usize) % n];
        eprintln!(
            "many-clients: fan-out to {} receivers on {}",
            settings.receivers,
            subject.name()
        );
        let sample = run_fan_out(bus, settings.receivers, settings.signals);
        results.add_fan_out(settings.receivers, subject, sample);
    }
}

/// One caller and its callee, the callee serving on its own thread.
struct Pair {
    caller: Box<dyn Endpoint>,
    /// The name the caller calls.
    callee_name: String,
    callee: JoinHandle<Vec<String>>,
    /// The caller's last serial.
    serial: u32,
}

impl Pair {
    fn new(
        caller: Box<dyn Endpoint>,
        callee_name: String,
        callee: impl Endpoint + 'static,
    ) -> Pair {
        Pair {
            caller,
            callee_name,
            callee: thread::spawn(move || serve_echo(callee)),
            serial: 0,
        }
    }

    /// A callee that owns `name` on `bus` and a caller on the same bus.
    fn through(bus: &RunningBus, name: String) -> Result<Pair, String> {
        let mut callee = bus
            .connect(IO_TIMEOUT)
            .map_err(|e| format!("callee: connect: {e}"))?;
        own_name(&mut callee, &name).map_err(|e| format!("callee: {e}"))?;
        let caller = bus
            .connect(IO_TIMEOUT)
            .map_err(|e| format!("caller: connect: {e}"))?;
        Ok(Pair::new(Box::new(caller), name, callee))
    }

    /// The two over a socketpair, no bus.
    fn direct() -> Result<Pair, String> {
        let (caller, callee) = Peer::pair(IO_TIMEOUT).map_err(|e| format!("socketpair: {e}"))?;
        Ok(Pair::new(Box::new(caller), ":1.0".to_owned(), callee))
    }

    /// Back-to-back calls until `window` ends: the round-trip times of
    /// those that completed within it, and the error that ended them
    /// early, if one did.
    fn make_calls(&mut self, window: &Window) -> Calls {
        let mut call = Template::call(&self.callee_name, messages::METHOD, CALL_SIZE);
        let mut calls = Calls {
            rtts_ns: Vec::new(),
            error: None,
        };
        loop {
            let sent = Instant::now();
            if sent >= window.end {
                return calls;
            }
            self.serial = self.serial.wrapping_add(1).max(1);
            if let Err(e) = call_once(self.caller.as_mut(), &mut call, self.serial) {
                calls.error = Some(e);
                return calls;
            }
            let done = Instant::now();
            if done >= window.start && done <= window.end {
                calls.rtts_ns.push((done - sent).as_nanos() as u64);
            }
        }
    }

    /// Tells the callee to stop; its errors.
    fn close(mut self) -> Vec<String> {
        let mut quit = Template::call(&self.callee_name, messages::QUIT, 0);
        let serial = self.serial.wrapping_add(1).max(1);
        let _ = self.caller.send(quit.with_serial(serial).bytes());
        // Peer to peer, hanging up also ends the callee.
        drop(self.caller);
        self.callee
            .join()
            .unwrap_or_else(|_| vec!["callee panicked".into()])
    }
}

/// The stretch in which round trips count.
#[derive(Clone, Copy)]
struct Window {
    start: Instant,
    end: Instant,
}

/// Calls counted by one caller.
struct Calls {
    rtts_ns: Vec<u64>,
    error: Option<String>,
}

/// A number for each run's callee names: a bus may not yet have
/// released the names of the run before when the next one asks.
fn next_run() -> usize {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    RUNS.fetch_add(1, Ordering::Relaxed)
}

/// `pairs` pairs through `bus` (None: peer to peer), calling for `window`
/// after a warm-up.
fn run_pairs(bus: Option<&RunningBus>, pairs: usize, window: Duration) -> PairsSample {
    let mut sample = PairsSample {
        seconds: window.as_secs_f64(),
        ..PairsSample::default()
    };
    let run = next_run();
    let mut opened = Vec::with_capacity(pairs);
    for i in 0..pairs {
        let pair = match bus {
            Some(bus) => Pair::through(bus, format!("{NAME_PREFIX}{run}_{i}")),
            None => Pair::direct(),
        };
        match pair {
            Ok(pair) => opened.push(pair),
            Err(e) => {
                sample.errors.push(format!("pair {i}: {e}"));
                break;
            }
        }
    }
    if !sample.errors.is_empty() {
        for pair in opened {
            sample.errors.extend(pair.close());
        }
        return sample;
    }

    // Each caller learns the window on a channel of its own once all are
    // started: nothing they share while calling.
    let mut windows = Vec::with_capacity(pairs);
    let callers: Vec<JoinHandle<(Pair, Calls)>> = opened
        .into_iter()
        .map(|mut pair| {
            let (tell, told) = mpsc::channel::<Window>();
            windows.push(tell);
            thread::spawn(move || {
                let calls = match told.recv() {
                    Ok(window) => pair.make_calls(&window),
                    Err(_) => Calls {
                        rtts_ns: Vec::new(),
                        error: Some("caller: no window".into()),
                    },
                };
                (pair, calls)
            })
        })
        .collect();
    let start = Instant::now() + WARM_UP;
    let measured = Window {
        start,
        end: start + window,
    };
    for tell in windows {
        let _ = tell.send(measured);
    }
    sleep_until(measured.start);
    let cpu = bus.map(|bus| {
        CpuWindow::open_with_loop(|| bus.cpu_seconds(), Some(|| bus.loop_cpu_seconds()))
    });
    sleep_until(measured.end);
    let cpu = cpu.map(CpuWindow::close);
    sample.bus_cpu_seconds = cpu.map(|span| span.cpu_seconds);
    sample.cpu_wall_seconds = cpu.map_or(0.0, |span| span.wall_seconds);
    sample.loop_cpu_seconds = cpu.and_then(|span| span.loop_cpu_seconds);
    sample.bus_threads = bus.map(RunningBus::thread_count);

    let mut rtts_ns = Vec::new();
    for caller in callers {
        match caller.join() {
            Ok((pair, calls)) => {
                rtts_ns.extend(calls.rtts_ns);
                sample.errors.extend(calls.error);
                sample.errors.extend(pair.close());
            }
            Err(_) => sample.errors.push("caller panicked".into()),
        }
    }
    rtts_ns.sort_unstable();
    sample.round_trips = rtts_ns.len() as u64;
    sample.p50_us = percentile(&rtts_ns, 0.50) as f64 / 1e3;
    sample.p99_us = percentile(&rtts_ns, 0.99) as f64 / 1e3;
    sample
}

/// One emitter's `signals` to `receivers` matching receivers on `bus`,
/// the bus's CPU read from the first send to when every receiver is done
/// ([`signal_burst`]).
fn run_fan_out(bus: &RunningBus, receivers: usize, signals: u32) -> Sample {
    signal_burst(bus, receivers, SIGNAL_SIZE, signals)
}

/// Every many-clients sample of a bench invocation.
pub struct ManyClients {
    /// By K and subject (a bus, or peer to peer).
    pairs: Sampled<(usize, Subject), PairsSample, PairsSummary>,
    /// By receivers and subject (a bus, or quickbus with a number of
    /// threads).
    fan_outs: Sampled<(usize, Subject), Sample, FanOutSummary>,
}

/// Medians over the repetitions of one K and subject.
struct PairsSummary {
    rate: f64,
    p50_us: f64,
    p99_us: f64,
    bus_cores: Option<f64>,
    loop_cores: Option<f64>,
    errors: Vec<(String, usize)>,
}

/// Medians over the repetitions of one fan-out.
struct FanOutSummary {
    rate: f64,
    received_percent: f64,
    bus_cores: Option<f64>,
    loop_cores: Option<f64>,
    signals: u64,
    errors: Vec<(String, usize)>,
}

/// The median of `f` over the samples where it is measured, None where
/// it is measured in none.
fn median_of<T>(samples: &[T], f: impl Fn(&T) -> Option<f64>) -> Option<f64> {
    let mut values: Vec<f64> = samples.iter().filter_map(f).collect();
    (!values.is_empty()).then(|| median(&mut values))
}

fn summarize_pairs(samples: &[PairsSample]) -> PairsSummary {
    let med = |f: fn(&PairsSample) -> f64| median_of(samples, |s| Some(f(s))).unwrap_or(0.0);
    PairsSummary {
        rate: med(PairsSample::rate),
        p50_us: med(|s| s.p50_us),
        p99_us: med(|s| s.p99_us),
        bus_cores: median_of(samples, PairsSample::bus_cores),
        loop_cores: median_of(samples, PairsSample::loop_cores),
        errors: count_errors(samples.iter().flat_map(|s| &s.errors)),
    }
}

fn summarize_fan_out(samples: &[Sample]) -> FanOutSummary {
    let med = |f: fn(&Sample) -> f64| median_of(samples, |s| Some(f(s))).unwrap_or(0.0);
    FanOutSummary {
        rate: med(Sample::rate),
        received_percent: med(Sample::received_percent),
        bus_cores: median_of(samples, fan_out_cores),
        loop_cores: median_of(samples, fan_out_loop_cores),
        signals: samples.first().map_or(0, |s| s.expected),
        errors: count_errors(samples.iter().flat_map(|s| &s.errors)),
    }
}

/// The ratio rows that follow the row of `subject` in a table with
/// column `widths` ([`Subject::ratio_rows`]). `find` gives a subject's
/// figures at the same K (or receivers), `cells` a row's ratio cells,
/// the figures over the others.
fn write_ratio_rows<'a, T: 'a>(
    out: &mut String,
    widths: &[usize],
    subject: Subject,
    find: impl Fn(Subject) -> Option<&'a T>,
    cells: impl Fn(&T, &T) -> Vec<String>,
) {
    for row in subject.ratio_rows() {
        if let (Some(over), Some(under)) = (find(row.over), find(row.under)) {
            let cells = cells(over, under);
            let cells: Vec<&str> = cells.iter().map(String::as_str).collect();
            write_ratio_row(out, widths, &row.name, &cells);
        }
    }
}

impl Default for ManyClients {
    fn default() -> Self {
        ManyClients {
            pairs: Sampled::new(|_, samples| summarize_pairs(samples)),
            fan_outs: Sampled::new(|_, samples| summarize_fan_out(samples)),
        }
    }
}

impl ManyClients {
    pub fn add_pairs(&mut self, pairs: usize, subject: Subject, sample: PairsSample) {
        self.pairs.add((pairs, subject), sample);
    }

    pub fn add_fan_out(&mut self, receivers: usize, subject: Subject, sample: Sample) {
        self.fan_outs.add((receivers, subject), sample);
    }

    /// Each subject's rate at its smallest K: what scaling divides by.
    fn scaling_bases(
        summaries: &BTreeMap<(usize, Subject), PairsSummary>,
    ) -> BTreeMap<Subject, (usize, f64)> {
        let mut bases = BTreeMap::new();
        // Keys come in K order: the first seen per subject is its smallest.
        for (&(pairs, subject), s) in summaries {
            bases.entry(subject).or_insert((pairs, s.rate));
        }
        bases
    }

    /// The medians: per K a row per bus and peer to peer, with quickbus's
    /// ratios to each other bus; then the fan-out likewise.
    pub fn table(&self) -> String {
        let mut out = String::new();
        if !self.pairs.is_empty() {
            out.push_str(&self.pairs_table());
        }
        if !self.fan_outs.is_empty() {
            out.push_str(&self.fan_out_table());
        }
        out
    }

    fn pairs_table(&self) -> String {
        let mut out = String::new();
        let summaries = self.pairs.summaries();
        let bases = Self::scaling_bases(summaries);
        let smallest = bases.values().map(|&(k, _)| k).min().unwrap_or(1);
        let _ = writeln!(
            out,
            "\n== many-clients: K ping-pong pairs at once, each a caller making {CALL_SIZE} B \
             calls back to back to a callee owning its own name (medians; rate = round trips/s \
             of all pairs; scaling = rate ÷ the same row's at K={smallest}; bus cores = bus CPU \
             s ÷ wall s) =="
        );
        let _ = writeln!(
            out,
            "{:<6} {:>12} {:>14} {:>8} {:>9} {:>9} {:>9}  errors",
            "pairs", "bus", "round trips/s", "scaling", "p50 µs", "p99 µs", "bus cores"
        );
        let mut current = None;
        for (&(pairs, subject), s) in summaries {
            if current.is_some_and(|k| k != pairs) {
                out.push('\n');
            }
            current = Some(pairs);
            let scaling = bases
                .get(&subject)
                .map_or("-".into(), |&(_, base)| ratio(s.rate, base));
            let _ = writeln!(
                out,
                "{:<6} {:>12} {:>14.0} {:>8} {:>9.1} {:>9.1} {:>9}  {}",
                pairs,
                subject.name(),
                s.rate,
                scaling,
                s.p50_us,
                s.p99_us,
                measured_cell(s.bus_cores),
                errors_cell(&s.errors)
            );
            write_ratio_rows(
                &mut out,
                &[6, 12, 14, 8, 9, 9, 9],
                subject,
                |other| summaries.get(&(pairs, other)),
                |q, s| {
                    vec![
                        ratio(q.rate, s.rate),
                        String::new(),
                        ratio(q.p50_us, s.p50_us),
                        ratio(q.p99_us, s.p99_us),
                        measured_ratio(q.bus_cores, s.bus_cores),
                    ]
                },
            );
        }
        out
    }

    fn fan_out_table(&self) -> String {
        let mut out = String::new();
        let summaries = self.fan_outs.summaries();
        let _ = writeln!(
            out,
            "\n== many-clients fan-out: one emitter, {SIGNAL_SIZE} B signals back to back to \
             receivers that all match (medians; rate = deliveries/s summed over the receivers) =="
        );
        let _ = writeln!(
            out,
            "{:<9} {:>12} {:>12} {:>9} {:>8} {:>9}  errors",
            "receivers", "bus", "deliveries/s", "signals", "recv %", "bus cores"
        );
        for (&(receivers, subject), s) in summaries {
            let _ = writeln!(
                out,
                "{:<9} {:>12} {:>12.0} {:>9} {:>7.1}% {:>9}  {}",
                receivers,
                subject.name(),
                s.rate,
                s.signals / receivers.max(1) as u64,
                s.received_percent,
                measured_cell(s.bus_cores),
                errors_cell(&s.errors)
            );
            write_ratio_rows(
                &mut out,
                &[9, 12, 12, 9, 8, 9],
                subject,
                |other| summaries.get(&(receivers, other)),
                |q, s| {
                    vec![
                        ratio(q.rate, s.rate),
                        String::new(),
                        String::new(),
                        measured_ratio(q.bus_cores, s.bus_cores),
                    ]
                },
            );
        }
        out
    }

    /// Two charts against K: each subject's round trips/s, and each bus's
    /// cores.
    pub fn plots(&self) -> Vec<(String, String)> {
        let summaries = self.pairs.summaries();
        let mut subjects: Vec<Subject> = summaries.keys().map(|&(_, s)| s).collect();
        subjects.sort();
        subjects.dedup();
        type Metric = fn(&PairsSummary) -> Option<f64>;
        let metrics: [(&str, &str, Axis, Metric); 2] = [
            (
                "round-trips",
                "round trips/s, all pairs",
                Axis::Log10,
                |s| Some(s.rate),
            ),
            ("bus-cores", "bus CPU, cores", Axis::Linear, |s| s.bus_cores),
        ];
        let mut charts = Vec::new();
        for (metric, label, y, value) in metrics {
            let series: Vec<Series> = subjects
                .iter()
                .map(|&subject| Series {
                    name: subject.name(),
                    points: summaries
                        .iter()
                        .filter(|((_, s), _)| *s == subject)
                        .filter_map(|(&(pairs, _), s)| Some((pairs as f64, value(s)?)))
                        .collect(),
                })
                .filter(|series| !series.points.is_empty())
                .collect();
            let title = format!("many-clients: {label}, by ping-pong pairs");
            let chart = Chart {
                title: &title,
                x_label: "ping-pong pairs at once",
                y_label: label,
                x: Axis::Linear,
                y,
                dots: true,
            };
            if let Some(svg) = chart.draw(&series) {
                charts.push((format!("many-clients-{metric}.svg"), svg));
            }
        }
        charts
    }

    pub fn json(&self) -> Value {
        let summaries = self.pairs.summaries();
        let bases = Self::scaling_bases(summaries);
        let pairs: Vec<Value> = self
            .pairs
            .samples()
            .iter()
            .map(|(&(k, subject), samples)| {
                let s = &summaries[&(k, subject)];
                let scaling = bases
                    .get(&subject)
                    .and_then(|&(_, base)| (base > 0.0).then(|| s.rate / base));
                let mut row = json!({
                    "pairs": k,
                    "subject": subject.name(),
                    "call_size": CALL_SIZE,
                    "median": {
                        "round_trips_per_s": s.rate,
                        "scaling": scaling,
                        "p50_us": s.p50_us,
                        "p99_us": s.p99_us,
                        "bus_cores": s.bus_cores,
                        "loop_cores": s.loop_cores,
                    },
                    "samples": samples.iter().map(|x| json!({
                        "round_trips": x.round_trips,
                        "seconds": x.seconds,
                        "p50_us": x.p50_us,
                        "p99_us": x.p99_us,
                        "bus_cpu_seconds": x.bus_cpu_seconds,
                        "cpu_wall_seconds": x.cpu_wall_seconds,
                        "bus_threads": x.bus_threads,
                        "loop_cpu_seconds": x.loop_cpu_seconds,
                        "errors": x.errors,
                    })).collect::<Vec<_>>(),
                });
                subject.mark_json(&mut row);
                row
            })
            .collect();
        let fan_out_summaries = self.fan_outs.summaries();
        let fan_outs: Vec<Value> = self
            .fan_outs
            .samples()
            .iter()
            .map(|(&(receivers, subject), samples)| {
                let s = &fan_out_summaries[&(receivers, subject)];
                let mut row = json!({
                    "receivers": receivers,
                    "bus": subject.name(),
                    "signal_size": SIGNAL_SIZE,
                    "median": {
                        "deliveries_per_s": s.rate,
                        "received_percent": s.received_percent,
                        "bus_cores": s.bus_cores,
                        "loop_cores": s.loop_cores,
                    },
                    "samples": samples.iter().map(|x| json!({
                        "expected": x.expected,
                        "delivered": x.delivered,
                        "seconds": x.seconds,
                        "bus_cpu_seconds": x.daemon_cpu_seconds,
                        "cpu_wall_seconds": x.daemon_cpu_wall_seconds,
                        "loop_cpu_seconds": x.loop_cpu_seconds,
                        "errors": x.errors,
                    })).collect::<Vec<_>>(),
                });
                subject.mark_json(&mut row);
                row
            })
            .collect();
        json!({ "pairs": pairs, "fan_out": fan_outs })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buses::BusKind;

    fn pairs(round_trips: u64, cpu: Option<f64>) -> PairsSample {
        PairsSample {
            round_trips,
            seconds: 2.0,
            p50_us: 50.0,
            p99_us: 100.0,
            bus_cpu_seconds: cpu,
            cpu_wall_seconds: 2.0,
            bus_threads: cpu.map(|_| 1),
            loop_cpu_seconds: cpu.map(|c| c / 2.0),
            errors: Vec::new(),
        }
    }

    fn fan_out(delivered: u64, cpu: f64) -> Sample {
        Sample {
            expected: 4800,
            delivered,
            bus_messages: delivered,
            seconds: 0.5,
            daemon_cpu_seconds: Some(cpu),
            daemon_cpu_wall_seconds: 0.5,
            ..Sample::default()
        }
    }

    #[test]
    fn fan_out_cores_divide_the_cpu_by_the_wall_time_it_was_read_over() {
        // The last signal arrived 0.5 s after the first send, the CPU was
        // read at 0.8 s: 0.4 CPU seconds over 0.8 s is half a core (over
        // the 0.5 s to the last receive it would read 0.8).
        let sample = Sample {
            daemon_cpu_wall_seconds: 0.8,
            ..fan_out(4800, 0.4)
        };
        assert_eq!(fan_out_cores(&sample), Some(0.5));
        let mut results = ManyClients::default();
        results.add_fan_out(48, Subject::Bus(BusKind::Quickbus), sample.clone());
        let json = results.json();
        let row = &json["fan_out"][0];
        assert_eq!(row["median"]["bus_cores"], 0.5, "{row}");
        assert_eq!(row["samples"][0]["cpu_wall_seconds"], 0.8, "{row}");
        assert!(results.table().contains(" 0.50 "), "{}", results.table());
        let unmeasured = Sample {
            daemon_cpu_seconds: None,
            ..sample
        };
        assert_eq!(fan_out_cores(&unmeasured), None);
    }

    #[test]
    fn settings_follow_quick_count_and_refuse_zero() {
        let full = Settings::new(&CLIENTS, RECEIVERS, false, None).unwrap();
        assert_eq!(full.clients, [1, 4, 16, 48]);
        assert_eq!((full.window, full.signals), (WINDOW, SIGNALS));
        let quick = Settings::new(&[1, 2], 3, true, Some(7)).unwrap();
        assert_eq!(quick.window, QUICK_WINDOW);
        assert_eq!((quick.receivers, quick.signals), (3, 7));
        assert!(Settings::new(&[1, 0], RECEIVERS, false, None).is_err());
        assert!(Settings::new(&[], RECEIVERS, false, None).is_err());
        assert!(Settings::new(&[1], 0, false, None).is_err());
    }

    #[test]
    fn the_table_scales_each_row_by_its_smallest_k_with_ratios_and_cores() {
        let mut results = ManyClients::default();
        let qb = Subject::Bus(BusKind::Quickbus);
        let broker = Subject::Bus(BusKind::DbusBroker);
        results.add_pairs(1, qb, pairs(20_000, Some(1.0)));
        results.add_pairs(4, qb, pairs(60_000, Some(2.0)));
        results.add_pairs(1, broker, pairs(40_000, Some(2.0)));
        results.add_pairs(4, broker, pairs(40_000, Some(2.0)));
        let mut failed = pairs(0, None);
        failed
            .errors
            .push("pair 0: callee: connect: refused".into());
        results.add_pairs(4, Subject::PeerToPeer, failed);
        results.add_fan_out(48, qb, fan_out(4800, 0.5));
        results.add_fan_out(48, broker, fan_out(2400, 0.5));
        let table = results.table();
        let row = |start: &str, subject: &str| {
            table
                .lines()
                .find(|l| l.starts_with(start) && l.contains(&format!(" {subject} ")))
                .unwrap_or_else(|| panic!("no {start} {subject} row in\n{table}"))
                .to_owned()
        };
        // 60,000 round trips in 2 s: 30,000/s, 3x its rate at K=1 (10,000/s).
        let k4 = row("4 ", "quickbus");
        assert!(k4.contains(" 30000 ") && k4.contains(" 3.00x "), "{k4}");
        assert!(k4.contains(" 1.00 "), "cores: {k4}");
        assert!(row("1 ", "dbus-broker").contains(" 1.00x "), "{table}");
        // At K=4 quickbus does 1.50x dbus-broker's rate on the same cores.
        assert!(
            table.contains("qb/broker          1.50x"),
            "no ratio row:\n{table}"
        );
        let p2p = row("4 ", "peer-to-peer");
        assert!(
            p2p.contains("pair 0: callee: connect: refused (x1)"),
            "{p2p}"
        );
        // Fan-out: 4,800 deliveries in 0.5 s, 100 signals to 48 receivers.
        let fan = row("48 ", "quickbus");
        assert!(
            fan.contains(" 9600 ") && fan.contains(" 100 ") && fan.contains("100.0%"),
            "{fan}"
        );
        assert!(row("48 ", "dbus-broker").contains("50.0%"), "{table}");
        assert!(table.contains("2.00x"), "{table}");

        let json = results.json();
        assert_eq!(json["pairs"].as_array().unwrap().len(), 5);
        // In K order, then quickbus, dbus-broker, peer-to-peer.
        assert_eq!(json["pairs"][2]["pairs"], 4);
        assert_eq!(json["pairs"][2]["subject"], "quickbus");
        assert_eq!(json["pairs"][2]["median"]["scaling"], 3.0);
        assert_eq!(json["pairs"][2]["median"]["bus_cores"], 1.0);
        // Half of it on the loop thread (the fixture's loop CPU).
        assert_eq!(json["pairs"][2]["median"]["loop_cores"], 0.5);
        assert_eq!(json["fan_out"][0]["median"]["deliveries_per_s"], 9600.0);
        let plots = results.plots();
        let names: Vec<&str> = plots.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["many-clients-round-trips.svg", "many-clients-bus-cores.svg"]
        );
        assert!(plots[0].1.contains(">dbus-broker<"));
    }

    #[test]
    fn quickbus_with_threads_gets_rows_of_its_own_each_with_ratios_to_the_other_buses() {
        let mut results = ManyClients::default();
        let qb = Subject::Bus(BusKind::Quickbus);
        let t4 = Subject::QuickbusThreads(4);
        let daemon = Subject::Bus(BusKind::DbusDaemon);
        let broker = Subject::Bus(BusKind::DbusBroker);
        for (subject, k1, k4, cores) in [
            (qb, 20_000, 40_000, 1.0),
            (t4, 20_000, 80_000, 3.0),
            (daemon, 10_000, 20_000, 1.0),
            (broker, 40_000, 40_000, 1.0),
        ] {
            results.add_pairs(1, subject, pairs(k1, Some(cores)));
            results.add_pairs(4, subject, pairs(k4, Some(cores * 2.0)));
            results.add_fan_out(48, subject, fan_out(k4 / 20, cores));
        }
        let table = results.table();
        let lines: Vec<&str> = table.lines().collect();
        let at = |start: &str, name: &str| {
            lines
                .iter()
                .position(|l| l.starts_with(start) && l.contains(&format!(" {name} ")))
                .unwrap_or_else(|| panic!("no {start}{name} row in\n{table}"))
        };
        // K=4: 40,000 round trips/s with 4 threads, 4x its K=1, on 3 cores.
        let row = lines[at("4 ", "qb t4")];
        assert!(row.contains(" 40000 ") && row.contains(" 4.00x "), "{row}");
        assert!(row.contains(" 3.00 "), "cores: {row}");
        // Right under it, against each other bus: dbus-daemon's 10,000/s
        // and dbus-broker's 20,000/s.
        let variant = at("4 ", "qb t4");
        let by_hand = format!(
            "{:<6} {:>12} {:>14} {:>8} {:>9} {:>9} {:>9}",
            "", "t4/daemon", "4.00x", "", "1.00x", "1.00x", "3.00x"
        );
        assert_eq!(lines[variant + 1], by_hand, "{table}");
        assert!(
            lines[variant + 2]
                .trim_start()
                .starts_with("t4/broker          2.00x "),
            "{table}"
        );
        // The plain quickbus keeps its rows under the other buses'.
        assert!(
            lines[at("4 ", "dbus-broker") + 1].contains("qb/broker"),
            "{table}"
        );
        assert_eq!(
            table.matches("qb/broker").count(),
            3,
            "K=1, K=4, fan-out:\n{table}"
        );
        // The fan-out too: 4,000 deliveries in 0.5 s against dbus-broker's 2,000.
        let fan = at("48 ", "qb t4");
        assert!(lines[fan].contains(" 8000 "), "{table}");
        assert!(
            lines[fan + 2]
                .trim_start()
                .starts_with("t4/broker        2.00x "),
            "{table}"
        );
        assert!(lines[fan + 2].trim_end().ends_with(" 3.00x"), "{table}");

        let json = results.json();
        let variant_rows = |part: &str| -> Vec<Value> {
            json[part]
                .as_array()
                .unwrap()
                .iter()
                .filter(|row| row.get("quickbus_threads").is_some())
                .cloned()
                .collect()
        };
        let rows = variant_rows("pairs");
        assert_eq!(rows.len(), 2, "{json}");
        assert!(rows
            .iter()
            .all(|r| r["quickbus_threads"] == 4 && r["subject"] == "qb t4"));
        assert_eq!(rows[1]["median"]["scaling"], 4.0);
        assert_eq!(variant_rows("fan_out")[0]["bus"], "qb t4");
        assert_eq!(json["pairs"][0]["samples"][0]["bus_threads"], 1);
        let plots = results.plots();
        assert!(plots[0].1.contains(">qb t4<"));
    }

    #[test]
    fn peer_to_peer_pairs_complete_round_trips_within_the_window() {
        let sample = run_pairs(None, 3, Duration::from_millis(100));
        assert_eq!(sample.errors, Vec::<String>::new());
        assert!(sample.round_trips > 0 && sample.rate() > 0.0);
        assert!(sample.p50_us > 0.0 && sample.p99_us >= sample.p50_us);
        assert_eq!(sample.bus_cores(), None);
    }
}
