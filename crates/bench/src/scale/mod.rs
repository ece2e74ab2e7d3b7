//! `quickbus-bench scale` (issue 6): does the cost of one more name, match
//! rule, connection or pending reply stay flat as there are 100,000 of
//! them, and do round trips stay as fast as on an empty bus?
//!
//! For each phase and bus, a fresh daemon (limits raised so no limit is
//! what is measured) gets its items in blocks, as in seed 004: the time and
//! daemon CPU of each block, the daemon's resident memory, and the round
//! trips of a set of probes at every size. A phase's bus is started anew,
//! so one phase's items never slow another's.

mod callgrind;
pub(crate) mod fill;
mod probes;
mod report;

use std::path::PathBuf;

use super::buses::{BusKind, RunningBus};
use super::cpu_window::CpuWindow;
use fill::Filler;
use report::{Point, Run};

#[derive(clap::Args, Debug)]
pub struct ScaleArgs {
    /// Smoke run: small sizes, few blocks and probe repetitions
    #[arg(long)]
    quick: bool,
    /// Well-known names registered from one connection (default 100000)
    #[arg(long, value_name = "N")]
    names: Option<usize>,
    /// Match rules added from one connection (default 100000)
    #[arg(long, value_name = "N")]
    rules: Option<usize>,
    /// Client connections opened (default 10000)
    #[arg(long, value_name = "N")]
    connections: Option<usize>,
    /// Method calls left waiting for a reply (default 100000)
    #[arg(long, value_name = "N")]
    pending: Option<usize>,
    /// Blocks each phase is measured in (default 10, --quick 4)
    #[arg(long, value_name = "N")]
    blocks: Option<usize>,
    /// Round trips of each probe at each size; the report shows medians
    /// (default 200, --quick 10)
    #[arg(long, value_name = "N")]
    probe_reps: Option<u32>,
    /// Run only these phases (names, rules, connections, pending)
    #[arg(long, value_name = "PHASE", value_delimiter = ',')]
    only: Vec<String>,
    /// Buses to compare
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "quickbus,dbus-daemon,dbus-broker"
    )]
    buses: Vec<String>,
    /// The quickbus-daemon binary (default: next to this quickbus binary)
    #[arg(long, value_name = "PATH")]
    quickbus: Option<PathBuf>,
    /// Run quickbus-daemon under callgrind and report its instructions per
    /// item and per round trip (steady where times are noisy; its times
    /// then mean nothing)
    #[arg(long)]
    callgrind: bool,
    /// Also write every measurement as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Also write SVG charts (cost and round trips against size) into DIR
    #[arg(long, value_name = "DIR")]
    plots: Option<PathBuf>,
}

/// What grows in a phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    Names,
    Rules,
    Connections,
    Pending,
}

impl Phase {
    pub const ALL: [Phase; 4] = [
        Phase::Names,
        Phase::Rules,
        Phase::Connections,
        Phase::Pending,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Phase::Names => "names",
            Phase::Rules => "rules",
            Phase::Connections => "connections",
            Phase::Pending => "pending",
        }
    }

    /// What one item is, for the report.
    pub fn item(self) -> &'static str {
        match self {
            Phase::Names => "name",
            Phase::Rules => "rule",
            Phase::Connections => "connection",
            Phase::Pending => "pending reply",
        }
    }

    /// Several items, for the report.
    pub fn items(self) -> &'static str {
        match self {
            Phase::Names => "names",
            Phase::Rules => "rules",
            Phase::Connections => "connections",
            Phase::Pending => "pending replies",
        }
    }

    fn default_count(self, quick: bool) -> usize {
        match (self, quick) {
            (Phase::Connections, false) => 10_000,
            (_, false) => 100_000,
            (Phase::Connections, true) => 200,
            (_, true) => 2_000,
        }
    }

    fn count(self, args: &ScaleArgs) -> usize {
        let given = match self {
            Phase::Names => args.names,
            Phase::Rules => args.rules,
            Phase::Connections => args.connections,
            Phase::Pending => args.pending,
        };
        given.unwrap_or_else(|| self.default_count(args.quick))
    }

    /// The limits raised for a phase of `count` items (with room for the
    /// probes' own names, rules and connections).
    fn limits(self, count: usize) -> Vec<(&'static str, u64)> {
        let n = count as u64;
        match self {
            Phase::Names => vec![("max_names_per_connection", n + 16)],
            Phase::Rules => vec![("max_match_rules_per_connection", n + 1_000)],
            Phase::Connections => vec![
                ("max_completed_connections", n + 100),
                ("max_connections_per_user", n + 100),
            ],
            // An hour: no call times out during the run.
            Phase::Pending => vec![
                ("max_replies_per_connection", n + 1_000),
                ("reply_timeout", 3_600_000),
            ],
        }
    }
}

/// What the run was asked to do, checked before anything starts.
#[derive(Debug)]
struct Plan {
    phases: Vec<(Phase, usize)>,
    buses: Vec<BusKind>,
    blocks: usize,
    probe_reps: u32,
}

fn plan(args: &ScaleArgs) -> Result<Plan, String> {
    let phases: Vec<Phase> = if args.only.is_empty() {
        Phase::ALL.to_vec()
    } else {
        super::pick_by_name(&args.only, &Phase::ALL, Phase::name, "phase")?
    };
    let buses = BusKind::parse_list(&args.buses)?;
    let blocks = args
        .blocks
        .unwrap_or(if args.quick { 4 } else { 10 })
        .max(1);
    let phases = phases
        .into_iter()
        .map(|p| (p, p.count(args)))
        .collect::<Vec<_>>();
    if let Some((phase, count)) = phases.iter().find(|(_, n)| *n < blocks) {
        return Err(format!(
            "{count} {} cannot fill {blocks} blocks",
            phase.items()
        ));
    }
    Ok(Plan {
        phases,
        buses,
        blocks,
        probe_reps: args
            .probe_reps
            .unwrap_or(if args.quick { 10 } else { 200 })
            .max(1),
    })
}

/// Item counts at the end of each block: `blocks` blocks of (nearly) equal
/// size adding up to `count`.
fn block_ends(count: usize, blocks: usize) -> Vec<usize> {
    (1..=blocks).map(|b| count * b / blocks).collect()
}

pub fn run(args: &ScaleArgs) -> Result<(), String> {
    let plan = plan(args)?;
    let mut daemon = args
        .quickbus
        .clone()
        .unwrap_or_else(super::default_quickbus_daemon);
    let callgrind = if args.callgrind {
        let callgrind = callgrind::Callgrind::prepare(&daemon)?;
        daemon = callgrind.wrapper().to_owned();
        Some(callgrind)
    } else {
        None
    };
    // 10,000 connections need as many fds here and in the daemon, which
    // inherits this limit.
    let nofile = fill::raise_fd_limit();
    let mut notes = vec![format!("RLIMIT_NOFILE raised to {nofile}")];
    let mut runs = Vec::new();
    for &(phase, count) in &plan.phases {
        for &kind in &plan.buses {
            eprintln!(
                "{}: {count} {} on {}",
                phase.name(),
                phase.items(),
                kind.name()
            );
            let bus = match RunningBus::start_with_limits(kind, &daemon, &phase.limits(count)) {
                Ok(bus) => bus,
                Err(note) => {
                    notes.push(format!("{} skipped: {note}", kind.name()));
                    continue;
                }
            };
            let counter = callgrind
                .as_ref()
                .filter(|_| kind == BusKind::Quickbus)
                .map(|c| {
                    let pid = bus.pid();
                    move || c.take(pid)
                });
            let counter = counter
                .as_ref()
                .map(|c| c as &dyn Fn() -> Result<u64, String>);
            runs.push(run_phase(&bus, phase, count, &plan, counter));
        }
    }
    notes.sort();
    notes.dedup();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    print!("{}", report::table(&runs, &notes));
    if let Some(path) = &args.json {
        let json = report::json(&runs, &command, &notes);
        std::fs::write(
            path,
            serde_json::to_string_pretty(&json).expect("JSON of numbers"),
        )
        .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(dir) = &args.plots {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for (name, svg) in report::charts(&runs) {
            let path = dir.join(name);
            std::fs::write(&path, svg).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// Reads the daemon's instruction count since the previous reading.
pub type Counter<'a> = Option<&'a dyn Fn() -> Result<u64, String>>;

/// One phase on one bus: probes on the empty bus, then each block followed
/// by the probes again. A failure ends the phase with what was measured.
fn run_phase(bus: &RunningBus, phase: Phase, count: usize, plan: &Plan, counter: Counter) -> Run {
    let mut run = Run::new(phase, bus.kind, count);
    let result = (|| -> Result<(), String> {
        let mut kit = probes::Kit::start(bus)?;
        let mut filler = Filler::start(phase, bus)?;
        run.points.push(Point {
            size: 0,
            block_seconds: None,
            block_cpu_seconds: None,
            block_instructions: None,
            rss_bytes: bus.rss_bytes(),
            probes: kit.measure(bus, plan.probe_reps, counter)?,
        });
        let mut done = 0;
        for end in block_ends(count, plan.blocks) {
            counter.map(|c| c()).transpose()?;
            let window = CpuWindow::open(|| bus.cpu_seconds());
            filler
                .add(done, end - done)
                .map_err(|e| format!("after {done} {}: {e}", phase.items()))?;
            let block = window.close();
            let instructions = counter.map(|c| c()).transpose()?;
            done = end;
            run.points.push(Point {
                size: done,
                block_seconds: Some(block.wall_seconds),
                block_cpu_seconds: Some(block.cpu_seconds),
                block_instructions: instructions,
                rss_bytes: bus.rss_bytes(),
                probes: kit.measure(bus, plan.probe_reps, counter)?,
            });
        }
        Ok(())
    })();
    if let Err(e) = result {
        eprintln!("{} on {}: {e}", phase.name(), bus.kind.name());
        run.error = Some(e);
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: ScaleArgs,
    }

    fn args(argv: &[&str]) -> ScaleArgs {
        let mut full = vec!["scale"];
        full.extend_from_slice(argv);
        Wrapper::try_parse_from(full).unwrap().args
    }

    #[test]
    fn defaults_are_the_issue_sizes_in_ten_blocks() {
        let plan = plan(&args(&[])).unwrap();
        assert_eq!(
            plan.phases,
            [
                (Phase::Names, 100_000),
                (Phase::Rules, 100_000),
                (Phase::Connections, 10_000),
                (Phase::Pending, 100_000)
            ]
        );
        assert_eq!(plan.blocks, 10);
        assert_eq!(plan.buses, BusKind::ALL);
    }

    #[test]
    fn quick_is_small_and_sizes_can_be_overridden() {
        let plan = plan(&args(&[
            "--quick",
            "--only",
            "rules,names",
            "--rules",
            "50",
        ]))
        .unwrap();
        assert_eq!(plan.phases, [(Phase::Rules, 50), (Phase::Names, 2_000)]);
        assert_eq!(plan.blocks, 4);
        assert_eq!(plan.probe_reps, 10);
    }

    #[test]
    fn bad_requests_are_refused() {
        assert!(plan(&args(&["--only", "objects"])).is_err());
        assert!(plan(&args(&["--buses", "kdbus"])).is_err());
        assert!(plan(&args(&["--names", "3", "--blocks", "4"])).is_err());
    }

    #[test]
    fn blocks_add_up_to_the_count() {
        assert_eq!(block_ends(100_000, 10)[0], 10_000);
        assert_eq!(block_ends(100_000, 10)[9], 100_000);
        assert_eq!(block_ends(10, 3), [3, 6, 10]);
    }

    #[test]
    fn every_phase_raises_its_own_limit_above_its_count() {
        for phase in Phase::ALL {
            let limits = phase.limits(1_000_000);
            assert!(limits
                .iter()
                .any(|(name, value)| name.starts_with("max_") && *value > 1_000_000));
        }
    }
}
