//! Issue 5's targets, computed from one run's medians: each ratio, whether
//! it is met, and where a floor or ceiling of this machine says how far a
//! bus could go at all (the relay for round trips, the same clients
//! without a bus for bursts).

use std::collections::BTreeMap;
use std::fmt::Write;

use super::buses::BusKind;
use super::report::{size_text, Key, Subject, Summary};
use super::Workload;

const QUICKBUS: Subject = Subject::Bus(BusKind::Quickbus);
const BROKER: Subject = Subject::Bus(BusKind::DbusBroker);
const DAEMON: Subject = Subject::Bus(BusKind::DbusDaemon);

/// The section of the text report; empty when the run has none of the
/// rows a target needs.
pub fn section(summaries: &BTreeMap<Key, Summary>) -> String {
    let get = |workload, size, subject| {
        summaries
            .iter()
            .find(|(k, _)| k.workload == workload && k.size == size && k.subject == subject)
            .map(|(_, s)| s)
    };
    let rtt = |subject| get(Workload::RoundTrip, 1, subject).map(|s| s.latency_mean_us);
    let hop = |subject| {
        let p2p = rtt(Subject::PeerToPeer)?;
        let bare = rtt(Subject::Socket)?;
        Some((rtt(subject)? - p2p) / bare.max(f64::MIN_POSITIVE))
    };
    let rate = |workload, size, subject| get(workload, size, subject).map(|s| s.rate);
    let cpu_rt = |subject| get(Workload::RoundTrip, 1, subject)?.cpu_us_per_message;

    let mut rows = Vec::new();
    let ratio = |a: Option<f64>, b: Option<f64>| Some(a? / b?.max(f64::MIN_POSITIVE));
    rows.push(Row::at_most(
        "1-byte call RTT ÷ dbus-broker's",
        0.7,
        ratio(rtt(QUICKBUS), rtt(BROKER)),
        ratio(rtt(Subject::Relay), rtt(BROKER)).map(|r| format!("relay {r:.2}")),
    ));
    rows.push(Row::at_most(
        "1-byte call RTT ÷ dbus-daemon's",
        0.5,
        ratio(rtt(QUICKBUS), rtt(DAEMON)),
        ratio(rtt(Subject::Relay), rtt(DAEMON)).map(|r| format!("relay {r:.2}")),
    ));
    rows.push(Row::at_most(
        "bus hop, 1 B, in bare-socket RTTs",
        1.3,
        hop(QUICKBUS),
        hop(Subject::Relay).map(|h| format!("relay {h:.2}")),
    ));
    let big = 128 * 1024;
    rows.push(Row::at_least(
        "128 KiB signals ÷ dbus-broker's",
        2.0,
        ratio(
            rate(Workload::SignalBurst, big, QUICKBUS),
            rate(Workload::SignalBurst, big, BROKER),
        ),
        ratio(
            rate(Workload::SignalBurst, big, Subject::PeerToPeer),
            rate(Workload::SignalBurst, big, BROKER),
        )
        .map(|r| format!("no bus {r:.2}")),
    ));
    rows.push(Row::at_least(
        "32 B signals ÷ dbus-broker's",
        1.5,
        ratio(
            rate(Workload::SignalBurst, 32, QUICKBUS),
            rate(Workload::SignalBurst, 32, BROKER),
        ),
        None,
    ));
    rows.push(Row::at_least(
        "1 KiB fan-out ÷ dbus-broker's",
        1.5,
        ratio(
            rate(Workload::FanOut, 1024, QUICKBUS),
            rate(Workload::FanOut, 1024, BROKER),
        ),
        None,
    ));
    for workload in Workload::ALL {
        let (worst, size) = worst_cpu_ratio(summaries, workload);
        let floor = (workload == Workload::RoundTrip)
            .then(|| ratio(cpu_rt(Subject::Relay), cpu_rt(BROKER)))
            .flatten()
            .map(|r| format!("relay at 1 B {r:.2}"));
        let at = size.map_or(String::new(), |s| format!(", worst at {}", size_text(s)));
        rows.push(Row::at_most(
            &format!("{} CPU ÷ dbus-broker's{at}", workload.name()),
            0.5,
            worst,
            floor,
        ));
    }
    let buses: Vec<&Summary> = summaries
        .iter()
        .filter(|(k, _)| matches!(k.subject, Subject::Bus(_)))
        .map(|(_, s)| s)
        .collect();
    let all_received = buses
        .iter()
        .all(|s| s.received_percent >= 100.0 && s.errors.is_empty());
    let mut out = rows_section("issue 5", &rows);
    if out.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "{:<58} {:>8} {:>8}  {}",
        "received: 100 %, no client error",
        "",
        if all_received { "all" } else { "not all" },
        if all_received { "met" } else { "NOT MET" }
    );
    out
}

/// The section of `issue`'s targets: the rows this run has a value for;
/// empty when it has none.
pub(crate) fn rows_section(issue: &str, rows: &[Row]) -> String {
    let mut out = String::new();
    let rows: Vec<&Row> = rows.iter().filter(|r| r.value.is_some()).collect();
    if rows.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\n== {issue} targets (ratios of this run's medians) =="
    );
    for row in rows {
        let _ = writeln!(out, "{row}");
    }
    out
}

/// The highest quickbus ÷ dbus-broker CPU per message over a workload's
/// sizes, and the size it was at.
fn worst_cpu_ratio(
    summaries: &BTreeMap<Key, Summary>,
    workload: Workload,
) -> (Option<f64>, Option<usize>) {
    let mut worst: Option<(f64, usize)> = None;
    for (key, qb) in summaries
        .iter()
        .filter(|(k, _)| k.workload == workload && k.subject == QUICKBUS)
    {
        let broker = Key {
            subject: BROKER,
            ..*key
        };
        let (Some(a), Some(b)) = (
            qb.cpu_us_per_message,
            summaries.get(&broker).and_then(|s| s.cpu_us_per_message),
        ) else {
            continue;
        };
        let r = a / b.max(f64::MIN_POSITIVE);
        if worst.is_none_or(|(w, _)| r > w) {
            worst = Some((r, key.size));
        }
    }
    (worst.map(|(r, _)| r), worst.map(|(_, s)| s))
}

/// One target: a ratio, its bound, and whether this run met it.
pub(crate) struct Row {
    name: String,
    /// The bound, and whether the value must stay below it.
    bound: f64,
    at_most: bool,
    value: Option<f64>,
    /// What a floor or ceiling of the machine gives for the same ratio.
    limit: Option<String>,
}

impl Row {
    pub(crate) fn at_most(
        name: &str,
        bound: f64,
        value: Option<f64>,
        limit: Option<String>,
    ) -> Row {
        Row {
            name: name.to_owned(),
            bound,
            at_most: true,
            value,
            limit,
        }
    }

    pub(crate) fn at_least(
        name: &str,
        bound: f64,
        value: Option<f64>,
        limit: Option<String>,
    ) -> Row {
        Row {
            at_most: false,
            ..Row::at_most(name, bound, value, limit)
        }
    }

    fn met(&self) -> bool {
        self.value.is_some_and(|v| {
            if self.at_most {
                v <= self.bound
            } else {
                v >= self.bound
            }
        })
    }
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bound = format!("{} {:.2}", if self.at_most { "≤" } else { "≥" }, self.bound);
        write!(
            f,
            "{:<58} {:>8} {:>8.2}  {:<7}",
            self.name,
            bound,
            self.value.unwrap_or(f64::NAN),
            if self.met() { "met" } else { "not met" }
        )?;
        if let Some(limit) = &self.limit {
            write!(f, "  ({limit})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(rate: f64, latency: f64, cpu: Option<f64>) -> Summary {
        Summary {
            rate,
            latency_mean_us: latency,
            received_percent: 100.0,
            cpu_us_per_message: cpu,
            ..Summary::default()
        }
    }

    fn key(workload: Workload, size: usize, subject: Subject) -> Key {
        Key {
            workload,
            size,
            count: 10,
            subject,
        }
    }

    #[test]
    fn each_target_is_computed_and_judged_with_its_floor() {
        let mut s = BTreeMap::new();
        let rt = Workload::RoundTrip;
        s.insert(key(rt, 1, QUICKBUS), summary(0.0, 30.0, Some(4.0)));
        s.insert(key(rt, 1, BROKER), summary(0.0, 50.0, Some(10.0)));
        s.insert(key(rt, 1, DAEMON), summary(0.0, 70.0, Some(20.0)));
        s.insert(key(rt, 1, Subject::Relay), summary(0.0, 28.0, Some(6.0)));
        s.insert(key(rt, 1, Subject::PeerToPeer), summary(0.0, 12.0, None));
        s.insert(key(rt, 1, Subject::Socket), summary(0.0, 10.0, None));
        let burst = Workload::SignalBurst;
        s.insert(key(burst, 32, QUICKBUS), summary(300.0, 0.0, Some(1.0)));
        s.insert(key(burst, 32, BROKER), summary(100.0, 0.0, Some(4.0)));
        s.insert(key(burst, 131072, QUICKBUS), summary(20.0, 0.0, Some(30.0)));
        s.insert(key(burst, 131072, BROKER), summary(16.0, 0.0, Some(40.0)));
        s.insert(
            key(burst, 131072, Subject::PeerToPeer),
            summary(36.0, 0.0, None),
        );
        let text = section(&s);
        let line = |start: &str| {
            text.lines()
                .find(|l| l.starts_with(start))
                .unwrap_or_else(|| panic!("no {start} in\n{text}"))
                .to_owned()
        };
        // 30/50 = 0.6 ≤ 0.7; relay 28/50.
        let rtt = line("1-byte call RTT ÷ dbus-broker's");
        assert!(
            rtt.contains("0.60  met") && rtt.contains("(relay 0.56)"),
            "{rtt}"
        );
        // 30/70 = 0.43 ≤ 0.5.
        assert!(line("1-byte call RTT ÷ dbus-daemon's").contains("0.43  met"));
        // (30 - 12) / 10 = 1.8 > 1.3; relay (28 - 12) / 10 = 1.6.
        let hop = line("bus hop");
        assert!(
            hop.contains("1.80  not met") && hop.contains("(relay 1.60)"),
            "{hop}"
        );
        let big = line("128 KiB signals");
        assert!(
            big.contains("1.25  not met") && big.contains("(no bus 2.25)"),
            "{big}"
        );
        assert!(line("32 B signals").contains("3.00  met"));
        // Worst CPU ratio over the burst sizes: 30/40 at 128 KiB.
        let cpu = line("signal-burst CPU");
        assert!(
            cpu.contains("worst at 128 KiB") && cpu.contains("0.75  not met"),
            "{cpu}"
        );
        let rt_cpu = line("round-trip CPU");
        assert!(
            rt_cpu.contains("0.40  met") && rt_cpu.contains("relay at 1 B 0.60"),
            "{rt_cpu}"
        );
        // No fan-out rows: no fan-out line.
        assert!(!text.contains("fan-out ÷"), "{text}");
        assert!(line("received").contains("met"));
    }

    #[test]
    fn a_run_without_the_rows_has_no_section() {
        assert_eq!(section(&BTreeMap::new()), "");
    }
}
