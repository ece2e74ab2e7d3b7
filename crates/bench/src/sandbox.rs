//! The sandbox workload (issue 26): what an app's connection pays for being
//! filtered. The app calls a service (round trips, 1 B each way) and
//! receives the service's 32 B signals (a burst, rate at the app), with
//! the same rules, [`RULES`], on every filtered path:
//!
//! - `proxy-broker`: through xdg-dbus-proxy `--filter` in front of
//!   dbus-broker (what a Flatpak app does today);
//! - `proxy-qb`: through xdg-dbus-proxy in front of quickbus;
//! - `container`: through a quickbus container socket made by
//!   `org.freedesktop.DBus.Containers1.AddServer` with the rules as its
//!   named argument `org.quickbus.Filter` (the filter in the bus, no hop);
//! - `unfiltered`: a quickbus container socket made without the named
//!   argument (labelled, not filtered): what the filter itself costs;
//! - `plain`: a plain quickbus connection, no filter, the baseline.
//!
//! Every path has a bus of its own (the service owns the same name on
//! each), so the CPU counted for a path is its bus's, plus its proxy's.
//! Round trips take turns along the paths as the round-trip workload's
//! buses do; the bursts run one path after the other. The report gives
//! the container's ratios to the proxies and to the plain connection, and
//! issue 26's targets: a container round trip at least 2x faster than the
//! proxy's, and no more than 10 % over the plain connection's.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use quickbus_client::{containers1, Connection};
use serde_json::{json, Value as Json};

use super::buses::{tree_cpu_seconds, BusKind, RunningBus};
use super::report::{errors_cell, measured_cell, summarize_samples, RatioCells, Summary};
use super::round_trip::{interleaved_paths, CallPath};
use super::sampled::Sampled;
use super::targets::{rows_section, Row};
use super::workloads::{signal_burst_routed, BurstRoute, Sample};

/// The service the app may talk to, and owns on every path's bus.
pub const SERVICE: &str = "org.example.Bench";
/// The app's rules, as xdg-dbus-proxy options (and, the same strings, as
/// the elements of AddServer's `org.quickbus.Filter`).
pub const RULES: [&str; 1] = ["--talk=org.example.Bench"];
/// The app's subscription to the service's signals.
const MATCH_RULE: &str =
    "type='signal',sender='org.example.Bench',interface='org.quickbus.Bench',member='Burst'";
pub const CALL_SIZE: usize = 1;
pub const SIGNAL_SIZE: usize = 32;
/// Bound of connecting, and of the proxy's start.
const TIMEOUT: Duration = Duration::from_secs(20);
const XDG_DBUS_PROXY: &str = "/usr/bin/xdg-dbus-proxy";
/// Where a bus run by root binds container sockets.
const ROOT_SOCKET_DIR: &str = "/run/dbus/containers";

/// How the app reaches the bus.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Way {
    ProxyBroker,
    ProxyQuickbus,
    Container,
    UnfilteredContainer,
    Plain,
}

impl Way {
    pub const ALL: [Way; 5] = [
        Way::ProxyBroker,
        Way::ProxyQuickbus,
        Way::Container,
        Way::UnfilteredContainer,
        Way::Plain,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Way::ProxyBroker => "proxy-broker",
            Way::ProxyQuickbus => "proxy-qb",
            Way::Container => "container",
            Way::UnfilteredContainer => "unfiltered",
            Way::Plain => "plain",
        }
    }
}

/// What is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Measure {
    /// The app's calls to the service and their replies.
    Calls,
    /// The service's signals to the app.
    Signals,
}

impl Measure {
    fn name(self) -> &'static str {
        match self {
            Measure::Calls => "calls",
            Measure::Signals => "signals",
        }
    }

    fn size(self) -> usize {
        match self {
            Measure::Calls => CALL_SIZE,
            Measure::Signals => SIGNAL_SIZE,
        }
    }
}

/// xdg-dbus-proxy in front of a bus, listening on a socket of its own;
/// stopped on drop.
struct Proxy {
    child: Child,
    dir: PathBuf,
    address: String,
}

impl Proxy {
    fn start(bus_address: &str, rules: &[&str]) -> Result<Proxy, String> {
        if !Path::new(XDG_DBUS_PROXY).exists() {
            return Err(format!(
                "{XDG_DBUS_PROXY} not found (apt-get install xdg-dbus-proxy)"
            ));
        }
        let dir = std::env::temp_dir().join(format!(
            "quickbus-bench-proxy-{}-{}",
            std::process::id(),
            unique()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let socket = dir.join("proxy");
        let log = std::fs::File::create(dir.join("proxy.log"))
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let child = Command::new(XDG_DBUS_PROXY)
            .arg(bus_address)
            .arg(&socket)
            .arg("--filter")
            .args(rules)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {XDG_DBUS_PROXY}: {e}"))?;
        let mut proxy = Proxy {
            child,
            address: format!("unix:path={}", socket.display()),
            dir,
        };
        // Listening once a client gets through it to the bus.
        let deadline = Instant::now() + TIMEOUT;
        let mut last = "no socket".to_owned();
        loop {
            if socket.exists() {
                // Step by step: Debian 12's xdg-dbus-proxy (0.1.4) closes a
                // pipelined SASL exchange.
                match Connection::connect_step_by_step(&proxy.address, TIMEOUT) {
                    Ok(mut probe) => match probe.get_id() {
                        Ok(_) => return Ok(proxy),
                        Err(e) => last = format!("GetId: {e}"),
                    },
                    Err(e) => last = format!("connect: {e}"),
                }
            }
            if let Ok(Some(status)) = proxy.child.try_wait() {
                return Err(format!("xdg-dbus-proxy exited ({status})"));
            }
            if Instant::now() > deadline {
                return Err(format!("xdg-dbus-proxy did not answer ({last})"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A number for this process's temporary directories.
fn unique() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A container server on `bus`, the app's rules as its filter (None: no
/// named argument, not filtered): the connection that made it (kept open
/// for as long as the server is used) and the address AddServer returned.
fn add_container_server(
    bus: &RunningBus,
    rules: Option<&[&str]>,
) -> Result<(Connection, String), String> {
    // A bus run by root binds container sockets in /run/dbus/containers,
    // which quickbus's package makes at boot (tmpfiles.d): make it when
    // the bench runs without the package.
    if rustix::process::geteuid().is_root() {
        std::fs::create_dir_all(ROOT_SOCKET_DIR).map_err(|e| format!("{ROOT_SOCKET_DIR}: {e}"))?;
    }
    let mut creator = bus.connect(TIMEOUT).map_err(|e| format!("connect: {e}"))?;
    let request = containers1::Request {
        container_type: "org.quickbus.Bench".into(),
        name: "sandbox".into(),
        metadata: Vec::new(),
        filter: rules.map(|rules| rules.iter().map(|r| (*r).to_owned()).collect()),
    };
    let instance = containers1::add_server(&mut creator, &request)?;
    Ok((creator, instance.address))
}

/// One way, running: its bus, what sits in front of it, and the address
/// the app connects to.
struct Route {
    way: Way,
    bus: RunningBus,
    proxy: Option<Proxy>,
    /// The container server's creator, which must stay connected.
    _creator: Option<Connection>,
    app_address: String,
}

impl Route {
    fn start(way: Way, quickbus_daemon: &Path) -> Result<Route, String> {
        let kind = match way {
            Way::ProxyBroker => BusKind::DbusBroker,
            _ => BusKind::Quickbus,
        };
        let bus = RunningBus::start(kind, quickbus_daemon)?;
        let (proxy, creator, app_address) = match way {
            Way::ProxyBroker | Way::ProxyQuickbus => {
                let proxy = Proxy::start(&bus.address, &RULES)?;
                let address = proxy.address.clone();
                (Some(proxy), None, address)
            }
            Way::Container => {
                let (creator, address) = add_container_server(&bus, Some(&RULES))?;
                (None, Some(creator), address)
            }
            Way::UnfilteredContainer => {
                let (creator, address) = add_container_server(&bus, None)?;
                (None, Some(creator), address)
            }
            Way::Plain => (None, None, bus.address.clone()),
        };
        Ok(Route {
            way,
            bus,
            proxy,
            _creator: creator,
            app_address,
        })
    }

    /// CPU seconds of the bus and of the proxy in front of it.
    fn cpu_seconds(&self) -> f64 {
        self.bus.cpu_seconds()
            + self
                .proxy
                .as_ref()
                .map_or(0.0, |p| tree_cpu_seconds(p.child.id()))
    }
}

/// Calls and signals per run.
pub struct Counts {
    pub calls: u32,
    pub signals: u32,
}

/// The ways to measure when the bench compares `buses`: proxy-broker only
/// with dbus-broker among them (the others are all quickbus).
pub fn ways(buses: &[BusKind]) -> Vec<Way> {
    Way::ALL
        .into_iter()
        .filter(|&way| way != Way::ProxyBroker || buses.contains(&BusKind::DbusBroker))
        .collect()
}

/// One repetition: every way of `ways` that starts, measured; those that
/// cannot start are noted.
pub fn run(
    quickbus_daemon: &Path,
    ways: &[Way],
    counts: &Counts,
    rep: u32,
    results: &mut Sandboxes,
) {
    let mut routes = Vec::new();
    for &way in ways {
        eprintln!("sandbox: starting {}", way.name());
        match Route::start(way, quickbus_daemon) {
            Ok(route) => routes.push(route),
            Err(e) => results.note(format!("sandbox {} skipped: {e}", way.name())),
        }
    }
    let meters: Vec<Box<dyn Fn() -> f64 + '_>> = routes
        .iter()
        .map(|route| Box::new(move || route.cpu_seconds()) as Box<dyn Fn() -> f64>)
        .collect();
    let paths: Vec<CallPath<'_>> = routes
        .iter()
        .zip(&meters)
        .map(|(route, meter)| CallPath {
            caller_address: &route.app_address,
            server_address: &route.bus.address,
            server_name: SERVICE,
            cpu_seconds: meter.as_ref(),
        })
        .collect();
    eprintln!("sandbox: {} round trips on each way", counts.calls);
    let trips = interleaved_paths(&paths, CALL_SIZE, counts.calls);
    for (route, sample) in routes.iter().zip(trips) {
        results.add(Measure::Calls, route.way, sample);
    }
    // Bursts one way at a time, who goes first rotating with the rep.
    let n = routes.len().max(1);
    for i in 0..routes.len() {
        let route = &routes[(i + rep as usize) % n];
        eprintln!(
            "sandbox: {} signals on {}",
            counts.signals,
            route.way.name()
        );
        let cpu_seconds = || route.cpu_seconds();
        let burst = BurstRoute {
            sender_address: &route.bus.address,
            sender_name: Some(SERVICE),
            receiver_address: &route.app_address,
            match_rule: MATCH_RULE,
            cpu_seconds: Some(&cpu_seconds),
            // The bus and a proxy: no one loop thread to read.
            loop_cpu_seconds: None,
        };
        let sample = signal_burst_routed(&burst, 1, SIGNAL_SIZE, counts.signals);
        results.add(Measure::Signals, route.way, sample);
    }
}

/// Every sandbox sample, by measure and way.
pub struct Sandboxes {
    runs: Sampled<(Measure, Way), Sample, Summary>,
    notes: Vec<String>,
}

impl Default for Sandboxes {
    fn default() -> Self {
        Sandboxes {
            runs: Sampled::new(|&(measure, _), samples| summarize(measure, samples)),
            notes: Vec::new(),
        }
    }
}

fn summarize(measure: Measure, samples: &[Sample]) -> Summary {
    // A call's payload goes both ways.
    let directions = match measure {
        Measure::Calls => 2.0,
        Measure::Signals => 1.0,
    };
    summarize_samples(samples, measure.size() as f64 * directions)
}

impl Sandboxes {
    pub fn add(&mut self, measure: Measure, way: Way, sample: Sample) {
        self.runs.add((measure, way), sample);
    }

    fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            eprintln!("note: {note}");
            self.notes.push(note);
        }
    }

    /// The medians, a row per measure and way, each other way followed by
    /// the container's ratios to it, then issue 26's targets.
    pub fn table(&self) -> String {
        let mut out = String::new();
        if self.runs.is_empty() && self.notes.is_empty() {
            return out;
        }
        let summaries = self.runs.summaries();
        let _ = writeln!(
            out,
            "\n== sandbox: an app calls a service ({CALL_SIZE} B both ways; rate = calls/s, \
             latency = RTT) and receives its {SIGNAL_SIZE} B signals (rate = signals/s), \
             rules {} (medians; cpu = bus + proxy) ==",
            RULES.join(" ")
        );
        let _ = writeln!(
            out,
            "{:<8} {:>6} {:>16} {:>10} {:>12} {:>8} {:>8} {:>10}  errors",
            "measure", "size", "way", "rate", "lat mean µs", "p99 µs", "recv %", "cpu µs/msg"
        );
        for (&(measure, way), s) in summaries {
            let cpu = measured_cell(s.cpu_us_per_message);
            let errors = errors_cell(&s.errors);
            let _ = writeln!(
                out,
                "{:<8} {:>6} {:>16} {:>10.0} {:>12.1} {:>8.1} {:>7.1}% {:>10}  {errors}",
                measure.name(),
                format!("{} B", measure.size()),
                way.name(),
                s.rate,
                s.latency_mean_us,
                s.latency_p99_us,
                s.received_percent,
                cpu,
            );
            if way == Way::Container {
                continue;
            }
            if let Some(c) = summaries.get(&(measure, Way::Container)) {
                let cells = RatioCells::of(c, s);
                let _ = writeln!(
                    out,
                    "{:<8} {:>6} {:>16} {:>10} {:>12} {:>8} {:>8} {:>10}",
                    "",
                    "",
                    format!("container/{}", short(way)),
                    cells.rate,
                    cells.latency_mean,
                    cells.latency_p99,
                    "",
                    cells.cpu
                );
            }
        }
        out.push_str(&targets(summaries));
        if !self.notes.is_empty() {
            out.push('\n');
            for note in &self.notes {
                let _ = writeln!(out, "note: {note}");
            }
        }
        out
    }

    pub fn json(&self) -> Json {
        let summaries = self.runs.summaries();
        let rows: Vec<Json> = self
            .runs
            .samples()
            .iter()
            .map(|(&(measure, way), samples)| {
                let s = &summaries[&(measure, way)];
                json!({
                    "measure": measure.name(),
                    "size": measure.size(),
                    "way": way.name(),
                    "median": {
                        "rate": s.rate,
                        "latency_mean_us": s.latency_mean_us,
                        "latency_p99_us": s.latency_p99_us,
                        "received_percent": s.received_percent,
                        "cpu_us_per_message": s.cpu_us_per_message,
                    },
                    "samples": samples.iter().map(|x| json!({
                        "expected": x.expected,
                        "delivered": x.delivered,
                        "seconds": x.seconds,
                        "latency_mean_us": x.latency_mean_us,
                        "latency_p99_us": x.latency_p99_us,
                        "cpu_seconds": x.daemon_cpu_seconds,
                        "errors": x.errors,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({ "rules": RULES, "results": rows, "notes": self.notes })
    }
}

/// A way's name short enough for a ratio row.
fn short(way: Way) -> &'static str {
    match way {
        Way::ProxyBroker => "broker",
        Way::ProxyQuickbus => "proxy",
        Way::Container => "container",
        Way::UnfilteredContainer => "unfiltered",
        Way::Plain => "plain",
    }
}

/// Issue 26's targets from this run's medians (rows whose ways did not
/// run are left out).
fn targets(summaries: &BTreeMap<(Measure, Way), Summary>) -> String {
    let rtt = |way| {
        summaries
            .get(&(Measure::Calls, way))
            .map(|s| s.latency_mean_us)
    };
    let rate = |way| summaries.get(&(Measure::Signals, way)).map(|s| s.rate);
    let over = |a: Option<f64>, b: Option<f64>| Some(a? / b?.max(f64::MIN_POSITIVE));
    let rows = [
        Row::at_least(
            "call RTT: proxy-broker ÷ container",
            2.0,
            over(rtt(Way::ProxyBroker), rtt(Way::Container)),
            None,
        ),
        Row::at_least(
            "call RTT: proxy-qb ÷ container",
            2.0,
            over(rtt(Way::ProxyQuickbus), rtt(Way::Container)),
            None,
        ),
        Row::at_most(
            "call RTT: container ÷ plain",
            1.1,
            over(rtt(Way::Container), rtt(Way::Plain)),
            None,
        ),
        Row::at_most(
            &format!("{SIGNAL_SIZE} B signals/s: plain ÷ container"),
            1.1,
            over(rate(Way::Plain), rate(Way::Container)),
            None,
        ),
    ];
    rows_section("issue 26", &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(rate: f64, latency_us: f64) -> Sample {
        Sample {
            expected: 100,
            delivered: 100,
            bus_messages: 100,
            seconds: 100.0 / rate,
            latency_mean_us: latency_us,
            latency_p99_us: latency_us * 2.0,
            daemon_cpu_seconds: Some(0.001),
            ..Sample::default()
        }
    }

    #[test]
    fn the_table_has_a_row_per_way_ratios_to_the_container_and_the_targets() {
        let mut results = Sandboxes::default();
        results.add(Measure::Calls, Way::ProxyBroker, sample(1000.0, 90.0));
        results.add(Measure::Calls, Way::Container, sample(3000.0, 30.0));
        results.add(Measure::Calls, Way::Plain, sample(3100.0, 29.0));
        results.add(Measure::Signals, Way::Container, sample(90_000.0, 10.0));
        results.add(Measure::Signals, Way::Plain, sample(100_000.0, 9.0));
        let table = results.table();
        for row in [
            "calls       1 B     proxy-broker",
            "calls       1 B        container",
            "signals    32 B            plain",
        ] {
            assert!(table.contains(row), "no {row:?} in\n{table}");
        }
        assert!(
            table.contains("container/broker      3.00x        0.33x"),
            "{table}"
        );
        let target = |name: &str| {
            table
                .lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_else(|| panic!("no {name} in\n{table}"))
                .to_owned()
        };
        assert!(target("call RTT: proxy-broker ÷ container").contains("3.00  met"));
        assert!(target("call RTT: container ÷ plain").contains("1.03  met"));
        assert!(target("32 B signals/s: plain ÷ container").contains("1.11  not met"));
        // proxy-qb did not run: no target row for it.
        assert!(!table.contains("proxy-qb ÷"), "{table}");
    }

    #[test]
    fn the_broker_way_follows_the_buses_compared() {
        assert_eq!(ways(&BusKind::ALL), Way::ALL);
        assert_eq!(
            ways(&[BusKind::Quickbus]),
            [
                Way::ProxyQuickbus,
                Way::Container,
                Way::UnfilteredContainer,
                Way::Plain
            ]
        );
    }

    #[test]
    fn ways_that_did_not_start_are_noted_once() {
        let mut results = Sandboxes::default();
        results.note("sandbox container skipped: no Containers1".into());
        results.note("sandbox container skipped: no Containers1".into());
        let table = results.table();
        assert_eq!(table.matches("note: sandbox container skipped").count(), 1);
        assert_eq!(results.json()["notes"].as_array().unwrap().len(), 1);
    }
}
