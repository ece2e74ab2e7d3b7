//! Collecting samples and reporting their medians: a text table with
//! quickbus's ratios to the other buses, and JSON with every sample.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::{json, Value};

use super::buses::BusKind;
use super::draining_neighbours::{DrainSample, RECEIVERS};
use super::hostile_neighbour::{ClientWaits, NeighbourSample};
use super::sampled::Sampled;
use super::workloads::Sample;
use super::{Workload, FAN_OUT_RECEIVERS};
use quickbus_chart::{Axis, Chart, Series};

/// Who carried the messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Subject {
    Bus(BusKind),
    /// quickbus with its `threads` limit set to this many (the plain
    /// `Bus(Quickbus)` keeps the default configuration), from
    /// --quickbus-threads.
    QuickbusThreads(usize),
    /// quickbus with its socket buffers set to this many bytes (0: the
    /// kernel's default), in a socket-buffer sweep.
    QuickbusSocketBuffer(usize),
    /// A bus listening on tcp (127.0.0.1) instead of a unix socket.
    Tcp(BusKind),
    /// Client to client over a socketpair, no bus.
    PeerToPeer,
    /// Client to client through a thread that only moves bytes: the least
    /// a bus adds.
    Relay,
    /// Bare bytes over a socketpair, no D-Bus.
    Socket,
}

impl Subject {
    /// The buses a quickbus subject's ratio rows compare it with: every
    /// bus but quickbus.
    pub fn other_buses() -> impl Iterator<Item = BusKind> {
        BusKind::ALL
            .into_iter()
            .filter(|&kind| kind != BusKind::Quickbus)
    }

    pub fn name(self) -> String {
        match self {
            Subject::Bus(kind) => kind.name().to_owned(),
            Subject::QuickbusThreads(threads) => format!("qb t{threads}"),
            Subject::QuickbusSocketBuffer(0) => "qb buf=dflt".to_owned(),
            Subject::QuickbusSocketBuffer(bytes) => format!("qb buf={}", buffer_text(bytes)),
            Subject::Tcp(kind) => format!("{} tcp", short(kind)),
            Subject::PeerToPeer => "peer-to-peer".to_owned(),
            Subject::Relay => "relay".to_owned(),
            Subject::Socket => "bare-socket".to_owned(),
        }
    }

    /// The ratio rows that follow this subject's row in a table, in order
    /// (names short enough for the bus column): under a bus's tcp row, it
    /// over the same bus on its unix socket ("tcp/unix", what tcp costs);
    /// under another bus's row, the plain quickbus over it ("qb/broker");
    /// under quickbus with N threads, it over each other bus ("t4/daemon",
    /// "t4/broker"); none under the rest. A table writes those rows whose
    /// two subjects it has figures for.
    pub fn ratio_rows(self) -> Vec<RatioRow> {
        let row = |name, over, under| RatioRow { name, over, under };
        match self {
            Subject::Tcp(kind) => vec![row("tcp/unix".to_owned(), self, Subject::Bus(kind))],
            Subject::Bus(BusKind::Quickbus) => Vec::new(),
            Subject::Bus(other) => vec![row(
                qb_ratio_name(other),
                Subject::Bus(BusKind::Quickbus),
                self,
            )],
            Subject::QuickbusThreads(threads) => Subject::other_buses()
                .map(|other| {
                    let name = format!("t{threads}/{}", short(other));
                    row(name, self, Subject::Bus(other))
                })
                .collect(),
            Subject::QuickbusSocketBuffer(_)
            | Subject::PeerToPeer
            | Subject::Relay
            | Subject::Socket => Vec::new(),
        }
    }

    /// Adds `"quickbus_threads"` to a JSON row of this subject, if it has
    /// one (the rows of other subjects stay as they were).
    pub fn mark_json(self, row: &mut Value) {
        if let (Subject::QuickbusThreads(threads), Some(row)) = (self, row.as_object_mut()) {
            row.insert("quickbus_threads".into(), threads.into());
        }
    }
}

/// A row of ratios under a subject's row: `over`'s figures ÷ `under`'s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RatioRow {
    pub name: String,
    pub over: Subject,
    pub under: Subject,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub workload: Workload,
    pub size: usize,
    pub count: u32,
    pub subject: Subject,
}

/// Reads one figure of a summary, for a chart.
type Metric = fn(&Summary) -> f64;

/// Medians over the repetitions of one key.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub rate: f64,
    pub mib_per_s: f64,
    pub latency_mean_us: f64,
    pub latency_p99_us: f64,
    pub received_percent: f64,
    pub cpu_us_per_message: Option<f64>,
    /// Distinct errors with how often they occurred.
    pub errors: Vec<(String, usize)>,
}

pub struct Results {
    samples: Sampled<Key, Sample, Summary>,
    /// The hostile-neighbour runs, by bus, in the order they ran.
    neighbours: Vec<(BusKind, NeighbourSample)>,
    /// The draining-neighbours runs, likewise.
    draining: Vec<(BusKind, DrainSample)>,
}

impl Default for Results {
    fn default() -> Self {
        Results {
            samples: Sampled::new(summarize),
            neighbours: Vec::new(),
            draining: Vec::new(),
        }
    }
}

pub fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

fn summarize(key: &Key, samples: &[Sample]) -> Summary {
    // A round trip moves the payload both ways.
    let directions = if key.workload == Workload::RoundTrip {
        2.0
    } else {
        1.0
    };
    summarize_samples(samples, key.size as f64 * directions)
}

/// The medians of `samples`, each unit of their rate moving
/// `bytes_per_unit` payload bytes.
pub(crate) fn summarize_samples(samples: &[Sample], bytes_per_unit: f64) -> Summary {
    let med = |f: &dyn Fn(&Sample) -> f64| median(&mut samples.iter().map(f).collect::<Vec<_>>());
    let cpu: Vec<f64> = samples
        .iter()
        .filter_map(|s| s.daemon_cpu_us_per_message())
        .collect();
    let rate = med(&|s| s.rate());
    Summary {
        rate,
        mib_per_s: rate * bytes_per_unit / (1024.0 * 1024.0),
        latency_mean_us: med(&|s| s.latency_mean_us),
        latency_p99_us: med(&|s| s.latency_p99_us),
        received_percent: med(&|s| s.received_percent()),
        cpu_us_per_message: (!cpu.is_empty()).then(|| median(&mut cpu.clone())),
        errors: count_errors(samples.iter().flat_map(|s| &s.errors)),
    }
}

/// Distinct errors with how often they occurred.
pub(crate) fn count_errors<'a>(errors: impl Iterator<Item = &'a String>) -> Vec<(String, usize)> {
    let mut counted: BTreeMap<String, usize> = BTreeMap::new();
    for e in errors {
        *counted.entry(e.clone()).or_default() += 1;
    }
    counted.into_iter().collect()
}

pub(crate) fn size_text(size: usize) -> String {
    if size >= 1024 && (size / 1024) * 1024 == size {
        format!("{} KiB", size / 1024)
    } else {
        format!("{size} B")
    }
}

/// A socket buffer size, short enough for the bus column.
fn buffer_text(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// The ratios of `a`'s medians to `b`'s, as a ratio row shows them.
pub(crate) struct RatioCells {
    pub rate: String,
    pub mib_per_s: String,
    pub latency_mean: String,
    pub latency_p99: String,
    pub cpu: String,
}

impl RatioCells {
    pub(crate) fn of(a: &Summary, b: &Summary) -> RatioCells {
        RatioCells {
            rate: ratio(a.rate, b.rate),
            mib_per_s: ratio(a.mib_per_s, b.mib_per_s),
            latency_mean: ratio(a.latency_mean_us, b.latency_mean_us),
            latency_p99: ratio(a.latency_p99_us, b.latency_p99_us),
            cpu: measured_ratio(a.cpu_us_per_message, b.cpu_us_per_message),
        }
    }
}

/// A figure that is not always measured (CPU µs per message, bus cores),
/// or "-" where it was not.
pub(crate) fn measured_cell(figure: Option<f64>) -> String {
    figure.map_or("-".into(), |c| format!("{c:.2}"))
}

/// The ratio of two figures that are not always measured, "-" where
/// either was not.
pub(crate) fn measured_ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => ratio(a, b),
        _ => "-".into(),
    }
}

/// A summary's errors, each with how often it occurred, or "-".
pub(crate) fn errors_cell(errors: &[(String, usize)]) -> String {
    if errors.is_empty() {
        return "-".to_owned();
    }
    errors
        .iter()
        .map(|(e, n)| format!("{e} (x{n})"))
        .collect::<Vec<_>>()
        .join("; ")
}

pub(crate) fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a > 0.0 {
        format!("{:.2}x", a / b)
    } else {
        "-".into()
    }
}

/// The row under another bus's row that compares quickbus with it, for
/// the tables of one workload each (many-clients, storm): blank in the
/// table's first column, "qb/<bus>" in the bus column, then quickbus's
/// figure over `bus`'s in each later column ("" leaves one blank).
/// `widths` are the table's column widths, those first two included.
pub(crate) fn write_qb_ratio_row(
    out: &mut String,
    widths: &[usize],
    bus: BusKind,
    ratios: &[&str],
) {
    write_ratio_row(out, widths, &qb_ratio_name(bus), ratios);
}

/// The name of the row of the plain quickbus's figures over `bus`'s.
fn qb_ratio_name(bus: BusKind) -> String {
    format!("qb/{}", short(bus))
}

/// [`write_qb_ratio_row`] with the row's name given (e.g. "t4/broker",
/// a [`RatioRow`]'s).
pub(crate) fn write_ratio_row(out: &mut String, widths: &[usize], name: &str, ratios: &[&str]) {
    debug_assert_eq!(widths.len(), ratios.len() + 2, "a width per column");
    let Some((&first, widths)) = widths.split_first() else {
        return;
    };
    let _ = write!(out, "{:first$}", "");
    for (cell, &width) in std::iter::once(name)
        .chain(ratios.iter().copied())
        .zip(widths)
    {
        let _ = write!(out, " {cell:>width$}");
    }
    out.push('\n');
}

/// A row of the main table under the row of `b`: `name` and a ratios.
fn ratio_row(name: &str, cells: &RatioCells) -> String {
    format!(
        "{:<14} {:>9} {:>12} {:>10} {:>12} {:>12} {:>8} {:>10} {:>10}\n",
        "",
        "",
        name,
        cells.rate,
        cells.mib_per_s,
        cells.latency_mean,
        cells.latency_p99,
        "",
        cells.cpu
    )
}

fn title(workload: Workload, count: u32) -> String {
    match workload {
        Workload::SignalBurst => {
            format!("signal-burst: {count} signals back to back, 1 receiver (rate = messages/s)")
        }
        Workload::FanOut => format!(
            "fan-out: {count} signals, {FAN_OUT_RECEIVERS} receivers (rate = deliveries/s)"
        ),
        Workload::RoundTrip => format!(
            "round-trip: {count} method calls + replies, same payload both ways (rate = calls/s, latency = RTT)"
        ),
        Workload::HostileNeighbour => "hostile-neighbour".to_owned(),
        Workload::DrainingNeighbours => "draining-neighbours".to_owned(),
        Workload::Storm => "storm".to_owned(),
        Workload::Sandbox => "sandbox".to_owned(),
        Workload::ManyClients => "many-clients".to_owned(),
    }
}

impl Results {
    pub fn add(&mut self, key: Key, sample: Sample) {
        self.samples.add(key, sample);
    }

    pub fn add_neighbour(&mut self, bus: BusKind, sample: NeighbourSample) {
        self.neighbours.push((bus, sample));
    }

    pub fn add_draining(&mut self, bus: BusKind, sample: DrainSample) {
        self.draining.push((bus, sample));
    }

    pub fn table(&self, notes: &[String]) -> String {
        let summaries = self.samples.summaries();
        let mut out = String::new();
        let mut current: Option<(Workload, usize)> = None;
        let header = format!(
            "{:<14} {:>9} {:>12} {:>10} {:>12} {:>12} {:>8} {:>10} {:>10}  errors\n",
            "workload",
            "size",
            "bus",
            "rate",
            "MiB/s",
            "lat mean µs",
            "p99 µs",
            "recv %",
            "cpu µs/msg"
        );
        for (key, s) in summaries {
            if current.map(|(w, _)| w) != Some(key.workload) {
                let _ = writeln!(out, "\n== {} ==", title(key.workload, key.count));
                out.push_str(&header);
            }
            if current != Some((key.workload, key.size))
                && current.is_some_and(|(w, _)| w == key.workload)
            {
                out.push('\n');
            }
            current = Some((key.workload, key.size));
            let cpu = measured_cell(s.cpu_us_per_message);
            let errors = errors_cell(&s.errors);
            let _ = writeln!(
                out,
                "{:<14} {:>9} {:>12} {:>10.0} {:>12.1} {:>12.1} {:>8.1} {:>9.1}% {:>10}  {}",
                key.workload.name(),
                size_text(key.size),
                key.subject.name(),
                s.rate,
                s.mib_per_s,
                s.latency_mean_us,
                s.latency_p99_us,
                s.received_percent,
                cpu,
                errors
            );
            for row in key.subject.ratio_rows() {
                let find = |subject| summaries.get(&Key { subject, ..*key });
                if let (Some(over), Some(under)) = (find(row.over), find(row.under)) {
                    out.push_str(&ratio_row(&row.name, &RatioCells::of(over, under)));
                }
            }
        }
        out.push_str(&self.bus_overhead(summaries));
        out.push_str(&burst_ceiling(summaries));
        out.push_str(&super::targets::section(summaries));
        out.push_str(&socket_buffer_sweep(summaries));
        out.push_str(&self.neighbour_table());
        out.push_str(&self.draining_table());
        if !notes.is_empty() {
            out.push('\n');
            for note in notes {
                let _ = writeln!(out, "note: {note}");
            }
        }
        out
    }

    /// One row per hostile-neighbour run.
    fn neighbour_table(&self) -> String {
        let mut out = String::new();
        if self.neighbours.is_empty() {
            return out;
        }
        let _ = writeln!(
            out,
            "\n== hostile-neighbour: a client's signal + round trip every 20 ms while another \
             user's reader stops 1.5 s / drains 0.5 s (max_outgoing_bytes 1 MiB) =="
        );
        let _ = writeln!(
            out,
            "{:<17} {:>12} {:>8} {:>10} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9}  errors",
            "workload",
            "bus",
            "waited",
            "of s",
            "worst ms",
            "trips",
            "cycles",
            "to reader",
            "told lost",
            "silently"
        );
        for (bus, s) in &self.neighbours {
            let _ = writeln!(
                out,
                "{:<17} {:>12} {:>7.2}% {:>10.1} {:>9.1} {:>9} {:>8} {:>9} {:>9} {:>9}  {}{}",
                "hostile-neighbour",
                bus.name(),
                s.client.waited_percent(),
                s.client.seconds,
                s.client.worst_ms,
                s.client.round_trips,
                s.episodes,
                s.sent,
                s.told_lost,
                s.lost_silently(),
                if s.other_user { "" } else { "(same user) " },
                errors_text(&s.errors)
            );
        }
        out
    }

    /// One row per draining-neighbours run.
    fn draining_table(&self) -> String {
        let mut out = String::new();
        if self.draining.is_empty() {
            return out;
        }
        let _ = writeln!(
            out,
            "\n== draining-neighbours: a client's signal + round trip every 20 ms and a new \
             connection every 200 ms while another user's {RECEIVERS} receivers fill, then \
             drain one at a time (max_outgoing_bytes 1 MiB) =="
        );
        let _ = writeln!(
            out,
            "{:<19} {:>12} {:>8} {:>7} {:>9} {:>7} {:>11} {:>7} {:>9} {:>9} {:>9} {:>7}  errors",
            "workload",
            "bus",
            "waited",
            "of s",
            "worst ms",
            "trips",
            "connect ms",
            "turns",
            "sent",
            "told lost",
            "silently",
            "cut off"
        );
        for (bus, s) in &self.draining {
            let _ = writeln!(
                out,
                "{:<19} {:>12} {:>7.2}% {:>7.1} {:>9.1} {:>7} {:>11.1} {:>7} {:>9} {:>9} {:>9} {:>7}  {}{}",
                "draining-neighbours",
                bus.name(),
                s.client.waited_percent(),
                s.client.seconds,
                s.client.worst_ms,
                s.client.round_trips,
                s.worst_connect_ms,
                s.turns,
                s.sent,
                s.told_lost,
                s.lost_silently,
                s.cut_off,
                if s.other_user { "" } else { "(same user) " },
                errors_text(&s.errors)
            );
        }
        out
    }

    /// What each bus adds to a round trip (bus RTT − peer-to-peer RTT),
    /// against a bare socket ping-pong's RTT.
    fn bus_overhead(&self, summaries: &BTreeMap<Key, Summary>) -> String {
        let mut out = String::new();
        let rows: Vec<&Key> = summaries
            .keys()
            .filter(|k| {
                k.workload == Workload::RoundTrip
                    && matches!(
                        k.subject,
                        Subject::Bus(_) | Subject::QuickbusThreads(_) | Subject::Relay
                    )
            })
            .collect();
        if rows.is_empty() {
            return out;
        }
        let _ = writeln!(
            out,
            "\n== bus hop: round-trip RTT minus peer-to-peer RTT, in bare-socket RTTs (relay: the least any bus adds) =="
        );
        for key in rows {
            let floor = |subject| summaries.get(&Key { subject, ..*key });
            let (Some(bus), Some(p2p), Some(socket)) = (
                summaries.get(key),
                floor(Subject::PeerToPeer),
                floor(Subject::Socket),
            ) else {
                continue;
            };
            let hop = bus.latency_mean_us - p2p.latency_mean_us;
            let _ = writeln!(
                out,
                "{:<14} {:>9} {:>12} {:>10.1} µs added = {:.2} x socket RTT ({:.1} µs)",
                "bus-hop",
                size_text(key.size),
                key.subject.name(),
                hop,
                hop / socket.latency_mean_us.max(f64::MIN_POSITIVE),
                socket.latency_mean_us
            );
        }
        out
    }

    /// SVG charts (file name, content): per workload, the rate, the mean
    /// latency and the daemon CPU per message against payload size.
    pub fn plots(&self) -> Vec<(String, String)> {
        let summaries = self.samples.summaries();
        let mut charts = Vec::new();
        for workload in Workload::ALL {
            let keys: Vec<&Key> = summaries
                .keys()
                .filter(|k| k.workload == workload)
                .collect();
            let mut subjects: Vec<Subject> = keys.iter().map(|k| k.subject).collect();
            subjects.sort();
            subjects.dedup();
            let (rate_label, latency_label) = match workload {
                Workload::SignalBurst => ("messages/s", "send-to-receive latency, mean µs"),
                Workload::FanOut => ("deliveries/s", "send-to-receive latency, mean µs"),
                Workload::RoundTrip => ("calls/s", "round-trip time, mean µs"),
                // Its rows are not per payload size: no chart.
                Workload::HostileNeighbour
                | Workload::DrainingNeighbours
                | Workload::Storm
                | Workload::Sandbox
                | Workload::ManyClients => continue,
            };
            let metrics: [(&str, &str, Metric); 3] = [
                ("rate", rate_label, |s| s.rate),
                ("latency", latency_label, |s| s.latency_mean_us),
                ("cpu", "daemon CPU µs per message", |s| {
                    s.cpu_us_per_message.unwrap_or(0.0)
                }),
            ];
            for (metric, label, value) in metrics {
                let series: Vec<Series> = subjects
                    .iter()
                    .map(|&subject| Series {
                        name: subject.name(),
                        points: keys
                            .iter()
                            .filter(|k| k.subject == subject)
                            .map(|k| (k.size as f64, value(&summaries[*k])))
                            .collect(),
                    })
                    .collect();
                let title = format!("{}: {label}", workload.name());
                let chart = Chart {
                    title: &title,
                    x_label: "payload bytes",
                    y_label: label,
                    x: Axis::Log2Sizes,
                    y: Axis::Log10,
                    dots: true,
                };
                if let Some(svg) = chart.draw(&series) {
                    charts.push((format!("{}-{metric}.svg", workload.name()), svg));
                }
            }
        }
        charts
    }

    pub fn json(&self, command: &str, reps: u32, notes: &[String]) -> Value {
        let summaries = self.samples.summaries();
        let rows: Vec<Value> = self
            .samples
            .samples()
            .iter()
            .map(|(key, samples)| {
                let s = &summaries[key];
                let mut row = json!({
                    "workload": key.workload.name(),
                    "size": key.size,
                    "count": key.count,
                    "subject": key.subject.name(),
                    "median": {
                        "rate": s.rate,
                        "mib_per_s": s.mib_per_s,
                        "latency_mean_us": s.latency_mean_us,
                        "latency_p99_us": s.latency_p99_us,
                        "received_percent": s.received_percent,
                        "daemon_cpu_us_per_message": s.cpu_us_per_message,
                    },
                    "errors": s.errors.iter().map(|(e, n)| json!({"error": e, "count": n})).collect::<Vec<_>>(),
                    "samples": samples.iter().map(|x| json!({
                        "expected": x.expected,
                        "delivered": x.delivered,
                        "bus_messages": x.bus_messages,
                        "seconds": x.seconds,
                        "latency_mean_us": x.latency_mean_us,
                        "latency_p99_us": x.latency_p99_us,
                        "daemon_cpu_seconds": x.daemon_cpu_seconds,
                        "errors": x.errors,
                    })).collect::<Vec<_>>(),
                });
                key.subject.mark_json(&mut row);
                row
            })
            .collect();
        let unix_time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let neighbours: Vec<Value> = self
            .neighbours
            .iter()
            .map(|(bus, s)| {
                client_json(
                    bus,
                    &s.client,
                    json!({
                    "episodes": s.episodes,
                    "signals_to_reader": s.sent,
                    "received_by_reader": s.received,
                    "told_lost": s.told_lost,
                    "lost_silently": s.lost_silently(),
                    "other_user": s.other_user,
                    "errors": s.errors,
                    }),
                )
            })
            .collect();
        let draining: Vec<Value> = self
            .draining
            .iter()
            .map(|(bus, s)| {
                client_json(
                    bus,
                    &s.client,
                    json!({
                    "connects": s.connects,
                    "worst_connect_ms": s.worst_connect_ms,
                    "turns": s.turns,
                    "signals_to_each_receiver": s.sent,
                    "received_by_receivers": s.received,
                    "told_lost": s.told_lost,
                    "lost_silently": s.lost_silently,
                    "receivers_cut_off": s.cut_off,
                    "other_user": s.other_user,
                    "errors": s.errors,
                    }),
                )
            })
            .collect();
        json!({
            "command": command,
            "unix_time": unix_time,
            "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
            "reps": reps,
            "notes": notes,
            "results": rows,
            "hostile_neighbour": neighbours,
            "draining_neighbours": draining,
        })
    }
}

/// A neighbour workload's row of JSON: the bus, what the well-behaved
/// client waited, and the workload's own `fields`.
fn client_json(bus: &BusKind, client: &ClientWaits, fields: Value) -> Value {
    let mut row = json!({
        "bus": bus.name(),
        "seconds": client.seconds,
        "waited_seconds": client.waited_seconds,
        "waited_percent": client.waited_percent(),
        "worst_ms": client.worst_ms,
        "round_trips": client.round_trips,
    });
    if let (Some(row), Value::Object(fields)) = (row.as_object_mut(), fields) {
        row.extend(fields);
    }
    row
}

/// A row's errors, or "-".
pub(crate) fn errors_text(errors: &[String]) -> String {
    if errors.is_empty() {
        "-".to_owned()
    } else {
        errors.join("; ")
    }
}

/// Each bus's signal-burst rate as a share of the same clients' rate
/// without a bus (peer to peer): what is left between a bus and the
/// ceiling of this machine.
fn burst_ceiling(summaries: &BTreeMap<Key, Summary>) -> String {
    let mut out = String::new();
    let rows: Vec<&Key> = summaries
        .keys()
        .filter(|k| {
            k.workload == Workload::SignalBurst
                && matches!(k.subject, Subject::Bus(_) | Subject::QuickbusThreads(_))
        })
        .collect();
    let mut lines = Vec::new();
    for key in rows {
        let ceiling = Key {
            subject: Subject::PeerToPeer,
            ..*key
        };
        let (Some(bus), Some(peer)) = (summaries.get(key), summaries.get(&ceiling)) else {
            continue;
        };
        lines.push(format!(
            "{:<14} {:>9} {:>12} {:>10.2} of the peer-to-peer rate ({:.0} messages/s)",
            "ceiling",
            size_text(key.size),
            key.subject.name(),
            bus.rate / peer.rate.max(f64::MIN_POSITIVE),
            peer.rate
        ));
    }
    if !lines.is_empty() {
        out.push_str("\n== signal burst: rate as a share of the same clients without a bus ==\n");
        for line in lines {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

/// Each swept socket buffer size against the kernel's default: rate and
/// mean latency ratios per workload and payload size, and which size did
/// best (the highest rate).
fn socket_buffer_sweep(summaries: &BTreeMap<Key, Summary>) -> String {
    let mut out = String::new();
    let mut groups: BTreeMap<(Workload, usize), Vec<(usize, &Summary)>> = BTreeMap::new();
    for (key, summary) in summaries {
        if let Subject::QuickbusSocketBuffer(bytes) = key.subject {
            groups
                .entry((key.workload, key.size))
                .or_default()
                .push((bytes, summary));
        }
    }
    if groups.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\n== socket buffer sweep: quickbus's SO_SNDBUF/SO_RCVBUF against the kernel default (rate ratio / latency ratio) =="
    );
    for ((workload, size), rows) in groups {
        let default = rows.iter().find(|(bytes, _)| *bytes == 0).map(|(_, s)| *s);
        let best = rows
            .iter()
            .max_by(|a, b| a.1.rate.total_cmp(&b.1.rate))
            .map(|(bytes, _)| *bytes);
        let cells: Vec<String> = rows
            .iter()
            .map(|(bytes, s)| {
                let (rate, latency) = default.map_or(("-".into(), "-".into()), |d| {
                    (
                        ratio(s.rate, d.rate),
                        ratio(s.latency_mean_us, d.latency_mean_us),
                    )
                });
                let name = if *bytes == 0 {
                    "dflt".to_owned()
                } else {
                    buffer_text(*bytes)
                };
                let mark = if Some(*bytes) == best { "*" } else { "" };
                format!("{name}{mark} {rate}/{latency}")
            })
            .collect();
        let _ = writeln!(
            out,
            "{:<14} {:>9}  {}",
            workload.name(),
            size_text(size),
            cells.join("  ")
        );
    }
    out
}

pub(crate) fn short(kind: BusKind) -> &'static str {
    match kind {
        BusKind::Quickbus => "qb",
        BusKind::DbusDaemon => "daemon",
        BusKind::DbusBroker => "broker",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(delivered: u64, seconds: f64) -> Sample {
        Sample {
            expected: 10,
            delivered,
            bus_messages: delivered,
            seconds,
            latency_mean_us: seconds,
            daemon_cpu_seconds: Some(0.0),
            ..Sample::default()
        }
    }

    #[test]
    fn a_qb_ratio_row_lays_out_like_the_tables_format_strings() {
        let mut out = String::new();
        let widths = [4, 10, 6, 3, 6];
        write_qb_ratio_row(&mut out, &widths, BusKind::DbusDaemon, &["1.50x", "", "-"]);
        let by_hand = format!(
            "{:<4} {:>10} {:>6} {:>3} {:>6}\n",
            "", "qb/daemon", "1.50x", "", "-"
        );
        assert_eq!(out, by_hand);
        assert_eq!(out, "      qb/daemon  1.50x          -\n");
    }

    #[test]
    fn each_subject_has_the_ratio_rows_of_one_rule() {
        let names = |subject: Subject| -> Vec<(String, Subject, Subject)> {
            subject
                .ratio_rows()
                .into_iter()
                .map(|r| (r.name, r.over, r.under))
                .collect()
        };
        let qb = Subject::Bus(BusKind::Quickbus);
        let daemon = Subject::Bus(BusKind::DbusDaemon);
        let broker = Subject::Bus(BusKind::DbusBroker);
        assert_eq!(names(qb), []);
        assert_eq!(names(daemon), [("qb/daemon".into(), qb, daemon)]);
        let t4 = Subject::QuickbusThreads(4);
        assert_eq!(
            names(t4),
            [
                ("t4/daemon".into(), t4, daemon),
                ("t4/broker".into(), t4, broker)
            ]
        );
        let tcp = Subject::Tcp(BusKind::DbusDaemon);
        assert_eq!(names(tcp), [("tcp/unix".into(), tcp, daemon)]);
        for none in [
            Subject::PeerToPeer,
            Subject::Relay,
            Subject::Socket,
            Subject::QuickbusSocketBuffer(0),
        ] {
            assert_eq!(names(none), []);
        }
    }

    #[test]
    fn a_tcp_row_is_followed_by_its_cost_over_the_unix_socket() {
        let mut results = Results::default();
        let key = |subject| Key {
            workload: Workload::SignalBurst,
            size: 1,
            count: 10,
            subject,
        };
        results.add(key(Subject::Bus(BusKind::DbusDaemon)), sample(10, 1.0));
        results.add(key(Subject::Tcp(BusKind::DbusDaemon)), sample(10, 2.0));
        let table = results.table(&[]);
        let lines: Vec<&str> = table.lines().collect();
        let tcp = lines
            .iter()
            .position(|l| l.contains(" daemon tcp "))
            .unwrap_or_else(|| panic!("no tcp row:\n{table}"));
        // Half the rate at twice the latency.
        let below = lines[tcp + 1];
        assert!(
            below.contains(" tcp/unix ") && below.contains(" 0.50x ") && below.contains(" 2.00x "),
            "{table}"
        );
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }

    #[test]
    fn table_has_rows_ratios_and_errors() {
        let mut results = Results::default();
        let key = |subject| Key {
            workload: Workload::SignalBurst,
            size: 1024,
            count: 10,
            subject,
        };
        results.add(key(Subject::Bus(BusKind::Quickbus)), sample(10, 1.0));
        let mut slow = sample(5, 2.0);
        slow.errors.push("sender: boom".into());
        results.add(key(Subject::Bus(BusKind::DbusBroker)), slow);
        let table = results.table(&["dbus-daemon skipped: not found".into()]);
        assert!(table.contains("signal-burst"), "{table}");
        assert!(table.contains("1 KiB"), "{table}");
        assert!(table.contains("100.0%"), "{table}");
        assert!(table.contains("50.0%"), "{table}");
        // quickbus delivered 10/s, dbus-broker 2.5/s.
        assert!(
            table.contains("qb/broker") && table.contains("4.00x"),
            "{table}"
        );
        assert!(table.contains("sender: boom (x1)"), "{table}");
        assert!(table.contains("note: dbus-daemon skipped"), "{table}");
        let plots = results.plots();
        let names: Vec<&str> = plots.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            ["signal-burst-rate.svg", "signal-burst-latency.svg"],
            "no CPU chart: no CPU time was measured"
        );
        assert!(plots[0].1.contains(">quickbus<") && plots[0].1.contains(">dbus-broker<"));
        let json = results.json("quickbus-bench", 1, &[]);
        assert_eq!(json["results"].as_array().unwrap().len(), 2);
        assert_eq!(json["results"][0]["median"]["received_percent"], 100.0);
    }

    #[test]
    fn bursts_are_shown_against_the_no_bus_ceiling() {
        let mut results = Results::default();
        let key = |subject| Key {
            workload: Workload::SignalBurst,
            size: 131072,
            count: 10,
            subject,
        };
        results.add(key(Subject::Bus(BusKind::Quickbus)), sample(10, 4.0));
        results.add(key(Subject::PeerToPeer), sample(10, 1.0));
        let table = results.table(&[]);
        let ceiling = &table[table.find("without a bus").expect(&table)..];
        assert!(
            ceiling.contains("128 KiB") && ceiling.contains("quickbus"),
            "{ceiling}"
        );
        assert!(
            ceiling.contains("0.25 of the peer-to-peer rate (10 messages/s)"),
            "{ceiling}"
        );
    }

    #[test]
    fn quickbus_with_threads_is_compared_with_each_other_bus_under_its_own_row() {
        let mut results = Results::default();
        let key = |subject| Key {
            workload: Workload::RoundTrip,
            size: 1,
            count: 10,
            subject,
        };
        results.add(key(Subject::Bus(BusKind::Quickbus)), sample(10, 1.0));
        results.add(key(Subject::QuickbusThreads(2)), sample(10, 0.5));
        results.add(key(Subject::Bus(BusKind::DbusDaemon)), sample(10, 2.0));
        results.add(key(Subject::PeerToPeer), sample(10, 0.25));
        results.add(key(Subject::Socket), sample(10, 0.25));
        let table = results.table(&[]);
        let lines: Vec<&str> = table.lines().collect();
        let variant = lines
            .iter()
            .position(|l| l.contains(" qb t2 "))
            .unwrap_or_else(|| panic!("no qb t2 row:\n{table}"));
        // 20 calls/s against dbus-daemon's 5: 4x, at a quarter of its latency.
        let below = lines[variant + 1];
        assert!(
            below.contains(" t2/daemon ") && below.contains(" 4.00x ") && below.contains(" 0.25x "),
            "{table}"
        );
        assert!(!table.contains("t2/broker"), "no dbus-broker ran:\n{table}");
        assert_eq!(table.matches("qb/daemon").count(), 1, "{table}");
        assert!(
            table.contains("bus-hop              1 B        qb t2"),
            "{table}"
        );
        let json = results.json("quickbus-bench", 1, &[]);
        let rows = json["results"].as_array().unwrap();
        let marked: Vec<&Value> = rows
            .iter()
            .filter(|r| r.get("quickbus_threads").is_some())
            .collect();
        assert_eq!(marked.len(), 1, "{json}");
        assert_eq!(marked[0]["quickbus_threads"], 2);
        assert_eq!(marked[0]["subject"], "qb t2");
    }

    #[test]
    fn a_sweep_reports_each_size_against_the_kernel_default() {
        let mut results = Results::default();
        let key = |bytes| Key {
            workload: Workload::RoundTrip,
            size: 1,
            count: 10,
            subject: Subject::QuickbusSocketBuffer(bytes),
        };
        results.add(key(0), sample(10, 1.0));
        results.add(key(256 * 1024), sample(10, 0.5));
        results.add(key(4 << 20), sample(10, 2.0));
        let table = results.table(&[]);
        assert!(
            table.contains("qb buf=dflt") && table.contains("qb buf=4M"),
            "{table}"
        );
        let sweep = &table[table.find("socket buffer sweep").expect(&table)..];
        // 256 KiB: twice the rate, half the latency of the default; best.
        assert!(sweep.contains("256K* 2.00x/0.50x"), "{sweep}");
        assert!(sweep.contains("dflt 1.00x/1.00x"), "{sweep}");
        assert!(sweep.contains("4M 0.50x/2.00x"), "{sweep}");
    }
}
