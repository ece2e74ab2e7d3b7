//! `quickbus-bench`: the seed experiments (signal bursts, fan-out, round
//! trips with their no-bus floors, daemon CPU per message) run against
//! quickbus-daemon, dbus-daemon and dbus-broker side by side, interleaved,
//! reported as medians with ratios; `quickbus-bench scale` measures the
//! cost per item as a bus grows. A lab for developers, not part of the
//! Debian package.

#![forbid(unsafe_code)]

mod buses;
mod cpu_window;
mod draining_neighbours;
mod endpoint;
mod hostile_neighbour;
mod many_clients;
mod messages;
mod relay;
mod report;
mod restart;
mod round_trip;
mod sampled;
mod sandbox;
mod scale;
mod storm;
mod targets;
mod workloads;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use buses::{BusKind, RunningBus};
use report::{Key, Results, Subject};

/// Measure quickbus-daemon against dbus-daemon and dbus-broker
#[derive(Parser, Debug)]
#[command(
    name = "quickbus-bench",
    version,
    args_conflicts_with_subcommands = true
)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    /// Repetitions of every measurement (the report shows medians)
    #[arg(long, default_value_t = 3)]
    reps: u32,
    /// Smoke run: one repetition, fewer messages and sizes
    #[arg(long)]
    quick: bool,
    /// Also write every sample and median as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Also write SVG charts of the medians into directory DIR
    #[arg(long, value_name = "DIR")]
    plots: Option<PathBuf>,
    /// Run only these workloads (signal-burst, fan-out, round-trip,
    /// hostile-neighbour, draining-neighbours, storm; and two that run
    /// only when named: sandbox, which starts its own buses and
    /// xdg-dbus-proxy, and many-clients, K ping-pong pairs at once and a
    /// fan-out to 48 receivers with each bus's CPU in cores, a few
    /// minutes)
    #[arg(long, value_name = "WORKLOAD", value_delimiter = ',')]
    only: Vec<String>,
    /// Buses to compare
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "quickbus,dbus-daemon,dbus-broker"
    )]
    buses: Vec<String>,
    /// The quickbus-daemon binary (default: next to this quickbus-bench binary)
    #[arg(long, value_name = "PATH")]
    quickbus: Option<PathBuf>,
    /// Messages (or round trips) per run, overriding the defaults
    #[arg(long, value_name = "N")]
    count: Option<u32>,
    /// Payload sizes in bytes, overriding every workload's default sizes
    #[arg(long, value_name = "BYTES", value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Also run quickbus once per socket buffer size (SO_SNDBUF/SO_RCVBUF,
    /// its socket_buffer_bytes limit) from the kernel default to 4 MiB;
    /// the other buses run at their defaults. Without --only: the signal
    /// burst and round trip workloads.
    #[arg(long)]
    sweep_socket_buffers: bool,
    /// Also run quickbus once per thread count N of this list (its
    /// `threads` limit; 1: no pool, as before threads), reported as rows
    /// "qb tN" with ratio rows "tN/daemon" and "tN/broker"; the plain
    /// quickbus row keeps the default configuration. Honoured by
    /// many-clients, signal-burst, fan-out and round-trip; the other
    /// workloads run the plain buses only.
    #[arg(long, value_name = "N", value_delimiter = ',')]
    quickbus_threads: Vec<usize>,
    /// Also run each of --buses that has a tcp transport (quickbus,
    /// dbus-daemon) listening on tcp:host=127.0.0.1 (ANONYMOUS), reported
    /// as "qb tcp" / "daemon tcp" with a tcp/unix ratio row. Without
    /// --only: the signal burst and round trip workloads.
    #[arg(long)]
    tcp: bool,
    /// How long the hostile-neighbour and draining-neighbours workloads
    /// run on each bus (default 30 s, 4 s with --quick)
    #[arg(long, value_name = "SECONDS")]
    neighbour_seconds: Option<u64>,
    /// The storm workload's flood rates in signals/s, 0 for as fast as
    /// the bus takes them
    #[arg(long, value_name = "RATE", value_delimiter = ',', default_values_t = storm::FLOOD_RATES)]
    flood_rates: Vec<u32>,
    /// The many-clients workload's numbers of ping-pong pairs at once
    #[arg(long, value_name = "K", value_delimiter = ',', default_values_t = many_clients::CLIENTS)]
    clients: Vec<usize>,
    /// The many-clients workload's fan-out receivers (--count sets its
    /// signals)
    #[arg(long, value_name = "N", default_value_t = many_clients::RECEIVERS)]
    wide_fan_out: usize,
}

#[derive(clap::Subcommand, Debug)]
enum BenchCommand {
    /// Cost per item as names, match rules, connections and pending
    /// replies grow to 100,000 (issue 6)
    Scale(Box<scale::ScaleArgs>),
    /// The pause of a restart in place, idle and with 10,000 connections,
    /// 100,000 names and 100,000 match rules (issue 16)
    Restart(restart::RestartArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Workload {
    SignalBurst,
    FanOut,
    RoundTrip,
    /// A well-behaved client's waiting while another user's reader
    /// overflows and drains at will (see `hostile_neighbour`).
    HostileNeighbour,
    /// The same client's waiting, and a newcomer's connecting, while
    /// another user's many receivers fill and drain in turn (see
    /// `draining_neighbours`).
    DrainingNeighbours,
    /// Paced method calls while another client floods signals (see
    /// `storm`).
    Storm,
    /// An app's calls and the signals it receives through xdg-dbus-proxy
    /// and through a quickbus container socket with the same rules (see
    /// `sandbox`). Only when named in --only.
    Sandbox,
    /// K ping-pong pairs at once and a wide fan-out, each bus's CPU in
    /// cores (see `many_clients`). Only when named in --only.
    ManyClients,
}

/// The socket buffer sizes of a sweep (seed 002): 0 is the kernel's
/// default (net.core.wmem_default, 208 KiB here), then 64 KiB to 4 MiB.
const SWEEP_SOCKET_BUFFERS: [usize; 8] = [
    0,
    64 * KIB,
    128 * KIB,
    256 * KIB,
    512 * KIB,
    KIB * KIB,
    2 * KIB * KIB,
    4 * KIB * KIB,
];

/// Receivers in the fan-out workload.
const FAN_OUT_RECEIVERS: usize = 10;

const KIB: usize = 1024;
const SIGNAL_SIZES: [usize; 9] = [
    32,
    128,
    512,
    KIB,
    2 * KIB,
    4 * KIB,
    8 * KIB,
    32 * KIB,
    128 * KIB,
];
const QUICK_SIGNAL_SIZES: [usize; 3] = [32, KIB, 128 * KIB];
const CALL_SIZES: [usize; 9] = [1, 32, 128, 512, KIB, 4 * KIB, 8 * KIB, 32 * KIB, 128 * KIB];
const QUICK_CALL_SIZES: [usize; 2] = [1, 128 * KIB];

impl Workload {
    const ALL: [Workload; 8] = [
        Workload::SignalBurst,
        Workload::FanOut,
        Workload::RoundTrip,
        Workload::HostileNeighbour,
        Workload::DrainingNeighbours,
        Workload::Storm,
        Workload::Sandbox,
        Workload::ManyClients,
    ];

    /// Whether it runs without --only: all but the sandbox, whose proxies
    /// and buses of its own are a comparison of their own (issue 26), and
    /// many-clients, which takes minutes (issue 27).
    fn runs_by_default(self) -> bool {
        !matches!(self, Workload::Sandbox | Workload::ManyClients)
    }

    pub fn name(self) -> &'static str {
        match self {
            Workload::SignalBurst => "signal-burst",
            Workload::FanOut => "fan-out",
            Workload::RoundTrip => "round-trip",
            Workload::HostileNeighbour => "hostile-neighbour",
            Workload::DrainingNeighbours => "draining-neighbours",
            Workload::Storm => "storm",
            Workload::Sandbox => "sandbox",
            Workload::ManyClients => "many-clients",
        }
    }

    fn sizes(self, args: &BenchArgs) -> &[usize] {
        if !args.sizes.is_empty() {
            return &args.sizes;
        }
        match (self, args.quick) {
            (Workload::RoundTrip, false) => &CALL_SIZES,
            (Workload::RoundTrip, true) => &QUICK_CALL_SIZES,
            (_, false) => &SIGNAL_SIZES,
            (_, true) => &QUICK_SIGNAL_SIZES,
        }
    }

    /// Messages per run: 10,000 signals as in seed 000; fewer for large
    /// fan-out and round trips so a full run stays within minutes.
    fn count(self, size: usize, args: &BenchArgs) -> u32 {
        if let Some(n) = args.count {
            return n.max(1);
        }
        match (self, args.quick) {
            (Workload::SignalBurst, false) => 10_000,
            (Workload::FanOut, false) if size <= 8 * KIB => 10_000,
            (Workload::FanOut, false) => 2_000,
            (Workload::RoundTrip, false) => (64 * KIB * KIB / size).clamp(500, 2_000) as u32,
            (Workload::Storm, false) => storm::CALLS,
            (Workload::Storm, true) => storm::QUICK_CALLS,
            (Workload::SignalBurst, true) => 1_000,
            (_, true) => 200,
            // Runs for a time, not a count (--neighbour-seconds).
            (Workload::HostileNeighbour | Workload::DrainingNeighbours, false) => 0,
            // Two counts of its own: sandbox_counts.
            (Workload::Sandbox, false) => 0,
            // Timed pairs and its own signal count: many_clients::Settings.
            (Workload::ManyClients, false) => 0,
        }
    }
}

/// The sandbox workload's round trips and signals per run: as the
/// round-trip workload's at 1 B and the signal burst's, or --count for
/// both.
fn sandbox_counts(args: &BenchArgs) -> sandbox::Counts {
    let count = |quick, full| {
        args.count
            .map_or(if args.quick { quick } else { full }, |n| n.max(1))
    };
    sandbox::Counts {
        calls: count(200, 2_000),
        signals: count(1_000, 10_000),
    }
}

/// What the bench was asked to do, checked before anything starts.
struct Plan {
    workloads: Vec<Workload>,
    buses: Vec<BusKind>,
    /// Extra quickbus instances, one per socket buffer size.
    socket_buffers: Vec<usize>,
    /// Extra quickbus instances, one per `threads` limit, ascending.
    quickbus_threads: Vec<usize>,
    /// Buses also started on tcp.
    tcp: Vec<BusKind>,
    reps: u32,
    many_clients: many_clients::Settings,
}

/// The items of `all` that `names` name, in that order, or an error naming
/// the unknown one and listing every known `what`.
fn pick_by_name<T: Copy>(
    names: &[String],
    all: &[T],
    name: fn(T) -> &'static str,
    what: &str,
) -> Result<Vec<T>, String> {
    names
        .iter()
        .map(|wanted| {
            all.iter()
                .copied()
                .find(|&t| name(t) == wanted)
                .ok_or_else(|| {
                    let known: Vec<&str> = all.iter().map(|&t| name(t)).collect();
                    format!("unknown {what} {wanted:?} ({})", known.join(", "))
                })
        })
        .collect()
}

fn plan(args: &BenchArgs) -> Result<Plan, String> {
    let workloads = if args.only.is_empty() && (args.sweep_socket_buffers || args.tcp) {
        vec![Workload::SignalBurst, Workload::RoundTrip]
    } else if args.only.is_empty() {
        Workload::ALL
            .into_iter()
            .filter(|w| w.runs_by_default())
            .collect()
    } else {
        pick_by_name(&args.only, &Workload::ALL, Workload::name, "workload")?
    };
    let buses = BusKind::parse_list(&args.buses)?;
    let reps = if args.quick { 1 } else { args.reps.max(1) };
    let socket_buffers = if args.sweep_socket_buffers {
        SWEEP_SOCKET_BUFFERS.to_vec()
    } else {
        Vec::new()
    };
    let tcp = if args.tcp {
        buses
            .iter()
            .copied()
            .filter(|&kind| kind != BusKind::DbusBroker)
            .collect()
    } else {
        Vec::new()
    };
    let many_clients =
        many_clients::Settings::new(&args.clients, args.wide_fan_out, args.quick, args.count)?;
    Ok(Plan {
        workloads,
        buses,
        socket_buffers,
        quickbus_threads: quickbus_threads(&args.quickbus_threads)?,
        tcp,
        reps,
        many_clients,
    })
}

/// The --quickbus-threads list, sorted, each once; 0 (the daemon's
/// choice from the cores) is refused: that is the plain quickbus row.
fn quickbus_threads(listed: &[usize]) -> Result<Vec<usize>, String> {
    if listed.contains(&0) {
        return Err(
            "--quickbus-threads: every thread count must be 1 or more (the default, \
             chosen from the cores, is the plain quickbus row)"
                .into(),
        );
    }
    let mut threads = listed.to_vec();
    threads.sort_unstable();
    threads.dedup();
    Ok(threads)
}

pub(crate) fn default_quickbus_daemon() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("quickbus-daemon")))
        .unwrap_or_else(|| PathBuf::from("quickbus-daemon"))
}

fn main() -> ExitCode {
    match run(&BenchArgs::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &BenchArgs) -> Result<(), String> {
    match &args.command {
        Some(BenchCommand::Scale(scale)) => return scale::run(scale),
        Some(BenchCommand::Restart(restart)) => return restart::run(restart),
        None => {}
    }
    let plan = plan(args)?;
    let daemon = args
        .quickbus
        .clone()
        .unwrap_or_else(default_quickbus_daemon);
    let mut notes = Vec::new();
    let mut results = Results::default();
    let mut storms = storm::Storms::default();
    let mut sandboxes = sandbox::Sandboxes::default();
    let mut many = many_clients::ManyClients::default();
    for rep in 0..plan.reps {
        eprintln!("rep {}/{}", rep + 1, plan.reps);
        // Fresh daemons every repetition, so that no state a daemon's
        // process picks up (its placement by the scheduler, its heap)
        // carries from one repetition into the next.
        // The sandbox starts buses of its own.
        let running = if plan.workloads == [Workload::Sandbox] {
            Vec::new()
        } else {
            start_buses(&plan, &daemon, &mut notes)
        };
        for &workload in &plan.workloads {
            if matches!(
                workload,
                Workload::HostileNeighbour | Workload::DrainingNeighbours
            ) {
                let seconds = args
                    .neighbour_seconds
                    .unwrap_or(if args.quick { 4 } else { 30 });
                let duration = std::time::Duration::from_secs(seconds);
                for &kind in &plan.buses {
                    eprintln!("{} on {} for {seconds} s", workload.name(), kind.name());
                    if workload == Workload::HostileNeighbour {
                        let sample = hostile_neighbour::run(kind, &daemon, duration);
                        results.add_neighbour(kind, sample);
                    } else {
                        let sample = draining_neighbours::run(kind, &daemon, duration);
                        results.add_draining(kind, sample);
                    }
                }
                continue;
            }
            if workload == Workload::Sandbox {
                let ways = sandbox::ways(&plan.buses);
                sandbox::run(&daemon, &ways, &sandbox_counts(args), rep, &mut sandboxes);
                continue;
            }
            if workload == Workload::ManyClients {
                let buses = many_clients_buses(&running);
                many_clients::run(&buses, &plan.many_clients, rep, &mut many);
                continue;
            }
            if workload == Workload::Storm {
                let calls = workload.count(0, args);
                run_storms(&running, &args.flood_rates, calls, rep, &mut storms);
                continue;
            }
            for &size in workload.sizes(args) {
                let count = workload.count(size, args);
                if workload == Workload::RoundTrip {
                    // Every bus and both floors take turns within the run.
                    let trips = round_trip::interleaved(&running, size, count);
                    let subjects = running.iter().map(subject_of);
                    for (subject, sample) in subjects.zip(trips.buses) {
                        results.add(key(workload, size, count, subject), sample);
                    }
                    results.add(
                        key(workload, size, count, Subject::PeerToPeer),
                        trips.peer_to_peer,
                    );
                    results.add(key(workload, size, count, Subject::Relay), trips.relay);
                    results.add(key(workload, size, count, Subject::Socket), trips.socket);
                    continue;
                }
                // Rotate the order of buses each repetition so none always
                // runs first (or last) after the others warmed the caches.
                let n = running.len().max(1);
                for i in 0..running.len() {
                    let bus = &running[(i + rep as usize) % n];
                    let receivers = match workload {
                        Workload::FanOut => FAN_OUT_RECEIVERS,
                        _ => 1,
                    };
                    let sample = workloads::signal_burst(bus, receivers, size, count);
                    results.add(key(workload, size, count, subject_of(bus)), sample);
                }
                if workload == Workload::SignalBurst {
                    // What the same clients move without a bus.
                    let sample = workloads::peer_signal_burst(size, count);
                    results.add(key(workload, size, count, Subject::PeerToPeer), sample);
                }
            }
        }
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    print!("{}", results.table(&notes));
    print!("{}", storms.table());
    print!("{}", sandboxes.table());
    print!("{}", many.table());
    if let Some(path) = &args.json {
        let mut json = results.json(&command, plan.reps, &notes);
        json["storm"] = storms.json();
        json["sandbox"] = sandboxes.json();
        json["many_clients"] = many.json();
        std::fs::write(
            path,
            serde_json::to_string_pretty(&json).expect("JSON of numbers"),
        )
        .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(dir) = &args.plots {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let charts = results.plots().into_iter().chain(storms.plots());
        for (name, svg) in charts.chain(many.plots()) {
            let path = dir.join(name);
            std::fs::write(&path, svg).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// The storm workload on every plain bus ([`plain_buses`]) at every
/// flood rate, the buses in a different order each repetition.
fn run_storms(
    running: &[RunningBus],
    flood_rates: &[u32],
    calls: u32,
    rep: u32,
    storms: &mut storm::Storms,
) {
    let plain = plain_buses(running);
    for &flood_rate in flood_rates {
        let n = plain.len().max(1);
        for i in 0..plain.len() {
            let bus = plain[(i + rep as usize) % n];
            eprintln!("storm on {} (flood rate {flood_rate})", bus.kind.name());
            storms.add(flood_rate, bus.kind, storm::run(bus, calls, flood_rate));
        }
    }
}

/// The buses of `running` that are not the tcp, socket-buffer or thread
/// variants of quickbus (whose samples would be filed under the same bus).
fn plain_buses(running: &[RunningBus]) -> Vec<&RunningBus> {
    running
        .iter()
        .filter(|bus| subject_of(bus) == Subject::Bus(bus.kind))
        .collect()
}

/// The buses of `running` the many-clients workload measures, each with
/// its subject: the plain buses and quickbus with each number of threads
/// (not the tcp or socket-buffer variants).
fn many_clients_buses(running: &[RunningBus]) -> Vec<(Subject, &RunningBus)> {
    running
        .iter()
        .map(|bus| (subject_of(bus), bus))
        .filter(|(subject, _)| matches!(subject, Subject::Bus(_) | Subject::QuickbusThreads(_)))
        .collect()
}

/// Every bus of the plan (and quickbus with each socket buffer size of a
/// sweep, each thread count of --quickbus-threads), those that cannot
/// start noted once in `notes`.
fn start_buses(plan: &Plan, daemon: &std::path::Path, notes: &mut Vec<String>) -> Vec<RunningBus> {
    let mut running = Vec::new();
    let mut note = |text: String| {
        if !notes.contains(&text) {
            eprintln!("note: {text}");
            notes.push(text);
        }
    };
    for kind in &plan.buses {
        match RunningBus::start(*kind, daemon) {
            Ok(bus) => running.push(bus),
            Err(e) => note(format!("{} skipped: {e}", kind.name())),
        }
    }
    for &bytes in &plan.socket_buffers {
        match RunningBus::start_with_socket_buffer(BusKind::Quickbus, daemon, Some(bytes)) {
            Ok(bus) => running.push(bus),
            Err(e) => note(format!(
                "quickbus with {bytes} B socket buffers skipped: {e}"
            )),
        }
    }
    for &threads in &plan.quickbus_threads {
        match RunningBus::start_with_limits(
            BusKind::Quickbus,
            daemon,
            &[("threads", threads as u64)],
        ) {
            Ok(bus) => running.push(bus),
            Err(e) => note(format!("quickbus with {threads} threads skipped: {e}")),
        }
    }
    for &kind in &plan.tcp {
        match RunningBus::start_tcp(kind, daemon) {
            Ok(bus) => running.push(bus),
            Err(e) => note(format!("{} on tcp skipped: {e}", kind.name())),
        }
    }
    running
}

fn subject_of(bus: &RunningBus) -> Subject {
    match (bus.socket_buffer, bus.threads, bus.tcp) {
        (Some(bytes), _, _) => Subject::QuickbusSocketBuffer(bytes),
        (None, Some(threads), _) => Subject::QuickbusThreads(threads),
        (None, None, true) => Subject::Tcp(bus.kind),
        (None, None, false) => Subject::Bus(bus.kind),
    }
}

fn key(workload: Workload, size: usize, count: u32, subject: Subject) -> Key {
    Key {
        workload,
        size,
        count,
        subject,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(argv: &[&str]) -> BenchArgs {
        let mut full = vec!["quickbus-bench"];
        full.extend_from_slice(argv);
        BenchArgs::try_parse_from(full).unwrap()
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        BenchArgs::command().debug_assert();
    }

    #[test]
    fn names_pick_items_in_order_and_an_unknown_one_is_an_error_listing_the_known() {
        let only = ["round-trip".to_owned(), "signal-burst".to_owned()];
        let picked = pick_by_name(&only, &Workload::ALL, Workload::name, "workload").unwrap();
        assert_eq!(picked, [Workload::RoundTrip, Workload::SignalBurst]);
        let bad = ["burst".to_owned()];
        assert_eq!(
            pick_by_name(&bad, &Workload::ALL, Workload::name, "workload").unwrap_err(),
            "unknown workload \"burst\" (signal-burst, fan-out, round-trip, hostile-neighbour, \
             draining-neighbours, storm, sandbox, many-clients)"
        );
    }
    #[test]
    fn defaults_run_everything_on_every_bus_three_times() {
        let plan = plan(&args(&[])).unwrap();
        assert_eq!(plan.workloads, Workload::ALL[..6]);
        assert!(!plan.workloads.contains(&Workload::Sandbox));
        assert!(!plan.workloads.contains(&Workload::ManyClients));
        assert_eq!(plan.buses, BusKind::ALL);
        assert_eq!(plan.reps, 3);
    }

    #[test]
    fn quick_is_one_repetition_of_fewer_sizes() {
        let a = args(&["--quick", "--reps", "5", "--only", "fan-out,round-trip"]);
        let plan = plan(&a).unwrap();
        assert_eq!(plan.reps, 1);
        assert_eq!(plan.workloads, [Workload::FanOut, Workload::RoundTrip]);
        assert!(Workload::FanOut.sizes(&a).len() < Workload::FanOut.sizes(&args(&[])).len());
    }

    #[test]
    fn a_sweep_adds_quickbus_per_buffer_size_on_bursts_and_round_trips() {
        let sweep = plan(&args(&["--sweep-socket-buffers"])).unwrap();
        assert_eq!(
            sweep.workloads,
            [Workload::SignalBurst, Workload::RoundTrip]
        );
        assert_eq!(sweep.buses, BusKind::ALL);
        assert_eq!(sweep.socket_buffers[0], 0, "the kernel default comes first");
        assert_eq!(*sweep.socket_buffers.last().unwrap(), 4 * KIB * KIB);
        assert!(sweep.socket_buffers.windows(2).all(|w| w[0] < w[1]));
        let narrowed = plan(&args(&["--sweep-socket-buffers", "--only", "round-trip"])).unwrap();
        assert_eq!(narrowed.workloads, [Workload::RoundTrip]);
        assert!(plan(&args(&[])).unwrap().socket_buffers.is_empty());
    }

    #[test]
    fn tcp_adds_the_buses_that_have_it_on_bursts_and_round_trips() {
        let tcp = plan(&args(&["--tcp"])).unwrap();
        assert_eq!(tcp.workloads, [Workload::SignalBurst, Workload::RoundTrip]);
        assert_eq!(tcp.tcp, [BusKind::Quickbus, BusKind::DbusDaemon]);
        let one = plan(&args(&["--tcp", "--buses", "quickbus"])).unwrap();
        assert_eq!(one.tcp, [BusKind::Quickbus]);
        assert!(plan(&args(&[])).unwrap().tcp.is_empty());
    }

    #[test]
    fn many_clients_runs_only_when_named_with_its_pairs_and_receivers() {
        let named = plan(&args(&["--only", "many-clients"])).unwrap();
        assert_eq!(named.workloads, [Workload::ManyClients]);
        assert_eq!(named.buses, BusKind::ALL);
        assert_eq!(named.many_clients.clients, [1, 4, 16, 48]);
        assert_eq!(named.many_clients.receivers, 48);
        let full_window = named.many_clients.window;
        let narrowed = args(&[
            "--only",
            "many-clients",
            "--quick",
            "--clients",
            "1,4,16",
            "--wide-fan-out",
            "12",
            "--count",
            "30",
        ]);
        let narrowed = plan(&narrowed).unwrap();
        assert_eq!(narrowed.many_clients.clients, [1, 4, 16]);
        assert_eq!(narrowed.many_clients.receivers, 12);
        assert_eq!(narrowed.many_clients.signals, 30);
        assert!(narrowed.many_clients.window < full_window);
        assert!(plan(&args(&["--clients", "1,0"])).is_err());
        assert!(plan(&args(&["--wide-fan-out", "0"])).is_err());
    }

    #[test]
    fn quickbus_threads_add_a_quickbus_per_count_and_keep_the_workloads() {
        let none = plan(&args(&["--only", "many-clients"])).unwrap();
        assert!(none.quickbus_threads.is_empty());
        let listed = plan(&args(&[
            "--only",
            "many-clients",
            "--quickbus-threads",
            "8,1,4,1",
        ]));
        let listed = listed.unwrap();
        assert_eq!(listed.quickbus_threads, [1, 4, 8]);
        assert_eq!(listed.buses, BusKind::ALL, "the plain buses all stay");
        assert_eq!(listed.workloads, [Workload::ManyClients]);
        let default = plan(&args(&["--quickbus-threads", "2"])).unwrap();
        assert_eq!(default.workloads, plan(&args(&[])).unwrap().workloads);
        let zero = plan(&args(&["--quickbus-threads", "1,0"])).err().unwrap();
        assert!(zero.contains("--quickbus-threads"), "{zero}");
    }

    #[test]
    fn unknown_names_are_refused() {
        assert!(plan(&args(&["--only", "kdbus-burst"])).is_err());
        assert!(plan(&args(&["--buses", "quickbus,kdbus"])).is_err());
    }

    #[test]
    fn counts_follow_the_seed_and_the_override() {
        let full = args(&[]);
        assert_eq!(Workload::SignalBurst.count(128 * KIB, &full), 10_000);
        assert_eq!(Workload::FanOut.count(128 * KIB, &full), 2_000);
        assert_eq!(Workload::RoundTrip.count(1, &full), 2_000);
        assert_eq!(Workload::RoundTrip.count(128 * KIB, &full), 512);
        let tiny = args(&["--count", "7", "--sizes", "1,64"]);
        assert_eq!(Workload::FanOut.count(32, &tiny), 7);
        assert_eq!(Workload::RoundTrip.sizes(&tiny), [1, 64]);
    }
}
