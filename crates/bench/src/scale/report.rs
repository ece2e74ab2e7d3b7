//! The scale run's results: per-block costs, memory per item and round
//! trips by size as text tables, the flatness ratios against the issue's
//! targets, JSON, and charts.

use std::fmt::Write;

use serde_json::{json, Value};

use super::probes::{Probe, ProbeResult};
use super::Phase;
use crate::buses::BusKind;
use quickbus_chart::{Axis, Chart, Series};

/// A ratio at or below this is flat (the target).
pub const FLAT: f64 = 1.2;

/// The bus after one block (or before the first: size 0).
#[derive(Clone, Debug)]
pub struct Point {
    pub size: usize,
    pub block_seconds: Option<f64>,
    pub block_cpu_seconds: Option<f64>,
    /// Daemon instructions in the block, under callgrind.
    pub block_instructions: Option<u64>,
    pub rss_bytes: u64,
    pub probes: Vec<ProbeResult>,
}

impl Point {
    fn probe(&self, probe: Probe) -> Option<&ProbeResult> {
        self.probes.iter().find(|p| p.probe == probe)
    }
}

/// One phase on one bus.
#[derive(Clone, Debug)]
pub struct Run {
    pub phase: Phase,
    pub bus: BusKind,
    pub count: usize,
    pub points: Vec<Point>,
    pub error: Option<String>,
}

/// How a phase's cost grew from its first block (or empty bus) to its last.
#[derive(Clone, Debug, PartialEq)]
pub struct Flatness {
    pub block_wall: Option<f64>,
    pub block_cpu: Option<f64>,
    pub bytes_per_item: Option<f64>,
    /// The probe whose median round trip grew most, and by how much.
    pub worst_round_trip: Option<(Probe, f64)>,
    /// The probe whose daemon CPU per round trip grew most.
    pub worst_round_trip_cpu: Option<(Probe, f64)>,
    /// Under callgrind: instructions per item, last block / first block.
    pub block_instructions: Option<f64>,
    /// Under callgrind: the probe whose instructions grew most.
    pub worst_round_trip_instructions: Option<(Probe, f64)>,
}

impl Run {
    pub fn new(phase: Phase, bus: BusKind, count: usize) -> Run {
        Run {
            phase,
            bus,
            count,
            points: Vec::new(),
            error: None,
        }
    }

    fn blocks(&self) -> impl Iterator<Item = (&Point, usize)> {
        self.points
            .windows(2)
            .map(|pair| (&pair[1], pair[1].size - pair[0].size))
    }

    pub fn flatness(&self) -> Flatness {
        let blocks: Vec<(&Point, usize)> = self.blocks().collect();
        let ratio = |f: &dyn Fn(&Point) -> Option<f64>| -> Option<f64> {
            let (first, last) = (blocks.first()?, blocks.last()?);
            let per_item = |(p, n): &(&Point, usize)| f(p).map(|v| v / *n as f64);
            Some(per_item(last)? / per_item(first)?)
        };
        let empty = self.points.first();
        let full = self.points.last().filter(|p| p.size > 0);
        let worst = |f: fn(&ProbeResult) -> Option<f64>| -> Option<(Probe, f64)> {
            let (empty, full) = (empty?, full?);
            Probe::ALL
                .into_iter()
                .filter_map(|probe| {
                    let (a, b) = (f(empty.probe(probe)?)?, f(full.probe(probe)?)?);
                    (a > 0.0).then_some((probe, b / a))
                })
                .max_by(|a, b| a.1.total_cmp(&b.1))
        };
        Flatness {
            block_wall: ratio(&|p| p.block_seconds),
            block_cpu: ratio(&|p| p.block_cpu_seconds),
            bytes_per_item: match (empty, full) {
                (Some(e), Some(f)) => {
                    Some((f.rss_bytes as f64 - e.rss_bytes as f64) / f.size as f64)
                }
                _ => None,
            },
            worst_round_trip: worst(|r| Some(r.median_us)),
            worst_round_trip_cpu: worst(|r| Some(r.daemon_cpu_us)),
            block_instructions: ratio(&|p| p.block_instructions.map(|n| n as f64)),
            worst_round_trip_instructions: worst(|r| r.instructions),
        }
    }
}

fn phases_of(runs: &[Run]) -> Vec<Phase> {
    let mut phases: Vec<Phase> = runs.iter().map(|r| r.phase).collect();
    phases.sort();
    phases.dedup();
    phases
}

fn opt(value: Option<f64>, precision: usize) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.precision$}"))
}

fn verdict(ratio: Option<f64>) -> String {
    match ratio {
        Some(r) if r <= FLAT => format!("{r:.2} ok"),
        Some(r) => format!("{r:.2} HIGH"),
        None => "-".to_owned(),
    }
}

fn worst_text(worst: Option<(Probe, f64)>) -> String {
    worst.map_or_else(
        || "-".to_owned(),
        |(probe, r)| format!("{} ({})", verdict(Some(r)), probe.name()),
    )
}

/// The text report: per phase, a row per bus and size, then the ratios.
pub fn table(runs: &[Run], notes: &[String]) -> String {
    let mut out = String::new();
    for phase in phases_of(runs) {
        let phase_runs: Vec<&Run> = runs.iter().filter(|r| r.phase == phase).collect();
        let count = phase_runs[0].count;
        let _ = writeln!(
            out,
            "\n{}: {count} {}; round trips are medians in µs",
            phase.name(),
            phase.items()
        );
        let _ = write!(
            out,
            "{:<12} {:>8} {:>9} {:>11} {:>8}",
            "bus", "size", "s/block", "cpu µs/item", "RSS MiB"
        );
        for probe in Probe::ALL {
            let _ = write!(out, " {:>16}", probe.name());
        }
        out.push('\n');
        for run in &phase_runs {
            let mut previous = 0;
            for point in &run.points {
                let items = point.size - previous;
                previous = point.size;
                let cpu_per_item = point
                    .block_cpu_seconds
                    .filter(|_| items > 0)
                    .map(|s| s * 1e6 / items as f64);
                let _ = write!(
                    out,
                    "{:<12} {:>8} {:>9} {:>11} {:>8.1}",
                    run.bus.name(),
                    point.size,
                    opt(point.block_seconds, 3),
                    opt(cpu_per_item, 2),
                    point.rss_bytes as f64 / (1024.0 * 1024.0)
                );
                for probe in Probe::ALL {
                    let median = point.probe(probe).map(|p| p.median_us);
                    let _ = write!(out, " {:>16}", opt(median, 1));
                }
                out.push('\n');
            }
            if let Some(e) = &run.error {
                let _ = writeln!(out, "{:<12} FAILED: {e}", run.bus.name());
            }
        }
        instruction_table(&mut out, phase, &phase_runs);
        let _ = writeln!(
            out,
            "\n{} flatness (target ≤ {FLAT}): last block / first block per {}; \
             round trip with {count} / with none (worst probe)",
            phase.name(),
            phase.item()
        );
        let _ = writeln!(
            out,
            "{:<12} {:>11} {:>11} {:>12} {:>30} {:>30}",
            "bus",
            "block wall",
            "block cpu",
            "RSS B/item",
            "round trip wall",
            "round trip daemon cpu"
        );
        for run in &phase_runs {
            let f = run.flatness();
            let _ = writeln!(
                out,
                "{:<12} {:>11} {:>11} {:>12} {:>30} {:>30}",
                run.bus.name(),
                verdict(f.block_wall),
                verdict(f.block_cpu),
                opt(f.bytes_per_item, 0),
                worst_text(f.worst_round_trip),
                worst_text(f.worst_round_trip_cpu)
            );
            if f.block_instructions.is_some() {
                let _ = writeln!(
                    out,
                    "{:<12} {:>11} {:>11} {:>12} {:>30}   (daemon instructions, callgrind)",
                    run.bus.name(),
                    "",
                    verdict(f.block_instructions),
                    "",
                    worst_text(f.worst_round_trip_instructions),
                );
            }
        }
    }
    for note in notes {
        let _ = writeln!(out, "note: {note}");
    }
    out
}

/// Daemon instructions per item and per round trip, for the runs made
/// under callgrind.
fn instruction_table(out: &mut String, phase: Phase, runs: &[&Run]) {
    let counted: Vec<&&Run> = runs
        .iter()
        .filter(|r| r.points.iter().any(|p| p.block_instructions.is_some()))
        .collect();
    if counted.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n{}: daemon instructions (callgrind) per {} and per round trip",
        phase.name(),
        phase.item()
    );
    let _ = write!(out, "{:<12} {:>8} {:>11}", "bus", "size", "Ir/item");
    for probe in Probe::ALL {
        let _ = write!(out, " {:>16}", probe.name());
    }
    out.push('\n');
    for run in counted {
        let mut previous = 0;
        for point in &run.points {
            let items = point.size - previous;
            previous = point.size;
            let per_item = point
                .block_instructions
                .filter(|_| items > 0)
                .map(|n| n as f64 / items as f64);
            let _ = write!(
                out,
                "{:<12} {:>8} {:>11}",
                run.bus.name(),
                point.size,
                opt(per_item, 0)
            );
            for probe in Probe::ALL {
                let ir = point.probe(probe).and_then(|p| p.instructions);
                let _ = write!(out, " {:>16}", opt(ir, 0));
            }
            out.push('\n');
        }
    }
}

pub fn json(runs: &[Run], command: &str, notes: &[String]) -> Value {
    let runs: Vec<Value> = runs
        .iter()
        .map(|run| {
            let f = run.flatness();
            let points: Vec<Value> = run
                .points
                .iter()
                .map(|p| {
                    let probes: Vec<Value> = p
                        .probes
                        .iter()
                        .map(|r| {
                            json!({
                                "probe": r.probe.name(),
                                "median_us": r.median_us,
                                "daemon_cpu_us": r.daemon_cpu_us,
                                "daemon_instructions": r.instructions,
                            })
                        })
                        .collect();
                    json!({
                        "size": p.size,
                        "block_seconds": p.block_seconds,
                        "block_daemon_cpu_seconds": p.block_cpu_seconds,
                        "block_daemon_instructions": p.block_instructions,
                        "rss_bytes": p.rss_bytes,
                        "probes": probes,
                    })
                })
                .collect();
            json!({
                "phase": run.phase.name(),
                "bus": run.bus.name(),
                "count": run.count,
                "error": run.error,
                "points": points,
                "flatness": {
                    "block_wall": f.block_wall,
                    "block_cpu": f.block_cpu,
                    "rss_bytes_per_item": f.bytes_per_item,
                    "worst_round_trip": f.worst_round_trip.map(|(p, r)| json!({"probe": p.name(), "ratio": r})),
                    "worst_round_trip_cpu": f.worst_round_trip_cpu.map(|(p, r)| json!({"probe": p.name(), "ratio": r})),
                    "block_instructions": f.block_instructions,
                    "worst_round_trip_instructions": f.worst_round_trip_instructions.map(|(p, r)| json!({"probe": p.name(), "ratio": r})),
                },
            })
        })
        .collect();
    json!({ "command": command, "target": FLAT, "notes": notes, "runs": runs })
}

/// SVG charts (file name, content), per phase: the cost of each block, the
/// daemon CPU per item, and each probe's round trip, against size.
pub fn charts(runs: &[Run]) -> Vec<(String, String)> {
    let mut charts = Vec::new();
    for phase in phases_of(runs) {
        let phase_runs: Vec<&Run> = runs.iter().filter(|r| r.phase == phase).collect();
        let series = |value: &dyn Fn(&Point, usize) -> Option<f64>| -> Vec<Series> {
            phase_runs
                .iter()
                .map(|run| Series {
                    name: run.bus.name().to_owned(),
                    points: run
                        .blocks()
                        .filter_map(|(p, n)| Some((p.size as f64, value(p, n)?)))
                        .collect(),
                })
                .collect()
        };
        let item = phase.item();
        let installed = format!("{} installed", phase.items());
        let per_block: [(&str, String, Vec<Series>); 3] = [
            (
                "block",
                format!("wall µs per {item} in each block"),
                series(&|p, n| Some(p.block_seconds? * 1e6 / n as f64)),
            ),
            (
                "cpu",
                format!("daemon CPU µs per {item} in each block"),
                series(&|p, n| Some(p.block_cpu_seconds? * 1e6 / n as f64)),
            ),
            (
                "instructions",
                format!("daemon instructions per {item} (callgrind)"),
                series(&|p, n| Some(p.block_instructions? as f64 / n as f64)),
            ),
        ];
        for (file, label, series) in per_block {
            if series.iter().all(|s| s.points.is_empty()) {
                continue;
            }
            let title = format!("{}: {label}", phase.name());
            if let Some(svg) = cost_chart(&title, &installed, &label).draw(&series) {
                charts.push((format!("{}-{file}.svg", phase.name()), svg));
            }
        }
        for probe in Probe::ALL {
            let series: Vec<Series> = phase_runs
                .iter()
                .map(|run| Series {
                    name: run.bus.name().to_owned(),
                    points: run
                        .points
                        .iter()
                        .filter_map(|p| Some((p.size as f64, p.probe(probe)?.median_us)))
                        .collect(),
                })
                .collect();
            let label = "round trip, median µs";
            let title = format!("{}: {} round trip", phase.name(), probe.name());
            if let Some(svg) = cost_chart(&title, &installed, label).draw(&series) {
                charts.push((format!("{}-{}.svg", phase.name(), probe.name()), svg));
            }
        }
    }
    charts
}

/// A cost against the number of items installed, on linear axes from zero.
fn cost_chart<'a>(title: &'a str, x_label: &'a str, y_label: &'a str) -> Chart<'a> {
    Chart {
        title,
        x_label,
        y_label,
        x: Axis::Linear,
        y: Axis::Linear,
        dots: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(size: usize, block: Option<f64>, rss: u64, call_us: f64) -> Point {
        Point {
            size,
            block_seconds: block,
            block_cpu_seconds: block.map(|b| b / 2.0),
            block_instructions: block.map(|b| (b * 1e6) as u64),
            rss_bytes: rss,
            probes: vec![
                ProbeResult {
                    probe: Probe::Call,
                    median_us: call_us,
                    daemon_cpu_us: 10.0,
                    instructions: Some(call_us * 1000.0),
                },
                ProbeResult {
                    probe: Probe::GetNameOwner,
                    median_us: 20.0,
                    daemon_cpu_us: 5.0,
                    instructions: None,
                },
            ],
        }
    }

    fn sample_run() -> Run {
        let mut run = Run::new(Phase::Names, BusKind::Quickbus, 300);
        run.points = vec![
            point(0, None, 1000, 40.0),
            point(100, Some(1.0), 11_000, 40.0),
            point(200, Some(1.0), 21_000, 44.0),
            // The last block is one and a half as big and costs as much
            // per item.
            point(350, Some(1.5), 36_000, 60.0),
        ];
        run
    }

    #[test]
    fn flatness_compares_per_item_costs_and_round_trips() {
        let f = sample_run().flatness();
        assert_eq!(f.block_wall, Some(1.0));
        assert_eq!(f.block_cpu, Some(1.0));
        assert_eq!(f.bytes_per_item, Some(100.0));
        assert_eq!(f.worst_round_trip, Some((Probe::Call, 1.5)));
        assert_eq!(f.worst_round_trip_cpu.map(|w| w.1), Some(1.0));
        assert_eq!(f.block_instructions, Some(1.0));
        assert_eq!(f.worst_round_trip_instructions, Some((Probe::Call, 1.5)));
    }

    #[test]
    fn a_failed_run_has_no_ratios_but_is_reported() {
        let mut run = Run::new(Phase::Rules, BusKind::DbusBroker, 100);
        run.points = vec![point(0, None, 1000, 40.0)];
        run.error = Some("after 0 rules: LimitsExceeded".into());
        let f = run.flatness();
        assert_eq!(f.block_wall, None);
        assert_eq!(f.worst_round_trip, None);
        let text = table(&[run], &[]);
        assert!(text.contains("FAILED: after 0 rules"), "{text}");
    }

    #[test]
    fn the_table_marks_what_is_not_flat() {
        let text = table(&[sample_run()], &["a note".into()]);
        assert!(text.contains("1.00 ok"), "{text}");
        assert!(text.contains("1.50 HIGH (call)"), "{text}");
        assert!(text.contains("note: a note"));
        assert!(
            text.contains("daemon instructions (callgrind) per name"),
            "{text}"
        );
    }

    #[test]
    fn json_and_charts_cover_every_run() {
        let runs = [sample_run()];
        let json = json(&runs, "quickbus-bench scale", &[]);
        assert_eq!(json["runs"][0]["points"].as_array().unwrap().len(), 4);
        assert_eq!(json["runs"][0]["flatness"]["block_wall"], 1.0);
        let charts = charts(&runs);
        let names: Vec<&str> = charts.iter().map(|(n, _)| n.as_str()).collect();
        assert!(names.contains(&"names-block.svg"), "{names:?}");
        assert!(names.contains(&"names-call.svg"), "{names:?}");
        assert!(names.contains(&"names-instructions.svg"), "{names:?}");
    }
}
