//! `quickbus-bench restart` (issue 16): how long a restart in place
//! (docs/restart.md) keeps the bus from serving, on an idle bus and on one
//! holding 10,000 connections, 100,000 names and 100,000 match rules.
//!
//! Each repetition calls `org.quickbus.Daemon1.Restart`, whose reply the
//! new image sends once it serves: the call's duration is the pause as a
//! client sees it. The daemon's own figure (`serving again after X ms`,
//! from the moment it decided to restart) is read from its log. After each
//! restart the bus must still hold everything (Debug.Stats' counts, a
//! sample of names with their owners), or the run fails.
//!
//! dbus-daemon and dbus-broker cannot restart in place: there is nothing
//! to compare, and the report says so.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use quickbus_client::{bus_call, Connection};
use quickbus_wire::{MessageBuilder, Value};

use crate::buses::{BusKind, RunningBus};
use crate::scale::fill::{name, pipeline, raise_fd_limit, rule, IO_TIMEOUT};

#[derive(clap::Args, Debug)]
pub struct RestartArgs {
    /// The quickbus-daemon binary (default: next to this quickbus-bench binary)
    #[arg(long, value_name = "PATH")]
    quickbus: Option<PathBuf>,
    /// Client connections of the loaded bus
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    connections: usize,
    /// Well-known names of the loaded bus, spread over its connections
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    names: usize,
    /// Match rules of the loaded bus, spread over its connections
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    rules: usize,
    /// Restarts measured per case
    #[arg(long, value_name = "N", default_value_t = 5)]
    reps: u32,
}

/// The targets.
const IDLE_TARGET: Duration = Duration::from_millis(50);
const LOADED_TARGET: Duration = Duration::from_secs(1);

/// One case's measurements.
struct Case {
    label: &'static str,
    connections: usize,
    names: usize,
    rules: usize,
    target: Duration,
    /// The Restart call's durations, and the daemon's own figures (ms).
    calls: Vec<f64>,
    logged: Vec<f64>,
}

pub fn run(args: &RestartArgs) -> Result<(), String> {
    if args.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    if args.connections == 0 && (args.names > 0 || args.rules > 0) {
        return Err("names and rules need at least one connection".into());
    }
    let daemon = args
        .quickbus
        .clone()
        .unwrap_or_else(crate::default_quickbus_daemon);
    let fds = raise_fd_limit();
    if (fds as usize) < args.connections + 64 {
        return Err(format!(
            "{} connections need more open files than this process may have ({fds})",
            args.connections
        ));
    }
    let idle = measure(&daemon, "idle", 0, 0, 0, IDLE_TARGET, args.reps)?;
    let loaded = measure(
        &daemon,
        "loaded",
        args.connections,
        args.names,
        args.rules,
        LOADED_TARGET,
        args.reps,
    )?;
    print!("{}", report(&[idle, loaded], args.reps));
    Ok(())
}

fn measure(
    daemon: &std::path::Path,
    label: &'static str,
    connections: usize,
    names: usize,
    rules: usize,
    target: Duration,
    reps: u32,
) -> Result<Case, String> {
    let limits = [
        ("max_completed_connections", connections as u64 + 100),
        ("max_connections_per_user", connections as u64 + 100),
        (
            "max_names_per_connection",
            (names / connections.max(1)) as u64 + 16,
        ),
        (
            "max_match_rules_per_connection",
            (rules / connections.max(1)) as u64 + 16,
        ),
    ];
    let bus = RunningBus::start_with_limits(BusKind::Quickbus, daemon, &limits)?;
    eprintln!("{label}: filling the bus ({connections} connections, {names} names, {rules} rules)");
    let clients = fill(&bus, connections, names, rules)?;
    let mut admin = bus.connect(IO_TIMEOUT).map_err(|e| e.to_string())?;
    let expected = Expected::of(&mut admin, &clients)?;
    let mut case = Case {
        label,
        connections,
        names,
        rules,
        target,
        calls: Vec::new(),
        logged: Vec::new(),
    };
    let mut shown_steps = 0;
    for rep in 0..reps {
        let restarted = Instant::now();
        admin
            .call(
                MessageBuilder::method_call(quickbus_wire::BUS_PATH, "Restart")
                    .interface(quickbus_wire::DAEMON_INTERFACE)
                    .destination(quickbus_wire::BUS_NAME),
            )
            .map_err(|e| format!("{label}: Restart: {e}; the daemon's log:\n{}", bus.log()))?;
        case.calls.push(restarted.elapsed().as_secs_f64() * 1000.0);
        let logged = logged_pauses(&bus.log());
        let Some(&pause) = logged.get(rep as usize) else {
            return Err(format!(
                "{label}: the daemon logged {} restarts after {} calls:\n{}",
                logged.len(),
                rep + 1,
                bus.log()
            ));
        };
        case.logged.push(pause);
        expected.check(&mut admin, label)?;
        eprintln!(
            "{label}: restart {}/{reps}: {:.1} ms (the daemon: {pause:.1} ms)",
            rep + 1,
            case.calls[rep as usize]
        );
        // The daemon's breakdown, when its log level shows it
        // (QUICKBUS_LOG=info,quickbus_daemon::restart=debug,quickbus_daemon::server::restarting=debug).
        let log = bus.log();
        let steps: Vec<&str> = log.lines().filter(|l| l.contains("handover ")).collect();
        for line in steps.iter().skip(shown_steps) {
            eprintln!("  {line}");
        }
        shown_steps = steps.len();
    }
    drop(clients);
    Ok(case)
}

/// The loaded bus's clients: each owns names and rules, `i`-th item on
/// connection `i % connections`.
struct Clients {
    conns: Vec<Connection>,
    names: usize,
}

fn fill(
    bus: &RunningBus,
    connections: usize,
    names: usize,
    rules: usize,
) -> Result<Clients, String> {
    let mut conns = Vec::with_capacity(connections);
    for i in 0..connections {
        conns.push(
            bus.connect(IO_TIMEOUT)
                .map_err(|e| format!("connection {i}: {e}"))?,
        );
    }
    for (c, conn) in conns.iter_mut().enumerate() {
        let own = (c..names)
            .step_by(connections)
            .map(|i| bus_call("RequestName").body(vec![Value::String(name(i)), Value::Uint32(4)]));
        let add = (c..rules)
            .step_by(connections)
            .map(|i| bus_call("AddMatch").body(vec![Value::String(rule(i))]));
        pipeline(conn, own.chain(add))?;
        if c % 1000 == 999 {
            eprintln!("  {} connections filled", c + 1);
        }
    }
    Ok(Clients { conns, names })
}

/// What the bus must still hold after every restart.
struct Expected {
    counts: Vec<(&'static str, u32)>,
    /// A sample of names, each with the unique name that owns it.
    owners: Vec<(String, String)>,
}

/// The Debug.Stats counts compared across restarts.
const COUNTED: [&str; 3] = ["ActiveConnections", "BusNames", "MatchRules"];

impl Expected {
    fn of(admin: &mut Connection, clients: &Clients) -> Result<Expected, String> {
        let counts = stats_counts(admin)?;
        let connections = clients.conns.len();
        let sample = (0..clients.names).step_by((clients.names / 16).max(1));
        let owners = sample
            .map(|i| {
                (
                    name(i),
                    clients.conns[i % connections].unique_name().to_owned(),
                )
            })
            .collect();
        Ok(Expected { counts, owners })
    }

    fn check(&self, admin: &mut Connection, label: &str) -> Result<(), String> {
        let counts = stats_counts(admin)?;
        if counts != self.counts {
            return Err(format!(
                "{label}: after the restart Debug.Stats says {counts:?}, before {:?}",
                self.counts
            ));
        }
        for (name, owner) in &self.owners {
            let now = admin
                .get_name_owner(name)
                .map_err(|e| format!("{label}: GetNameOwner {name}: {e}"))?;
            if &now != owner {
                return Err(format!("{label}: {name} is owned by {now}, not {owner}"));
            }
        }
        Ok(())
    }
}

fn stats_counts(admin: &mut Connection) -> Result<Vec<(&'static str, u32)>, String> {
    let reply = admin
        .call(
            MessageBuilder::method_call(quickbus_wire::BUS_PATH, "GetStats")
                .interface("org.freedesktop.DBus.Debug.Stats")
                .destination(quickbus_wire::BUS_NAME),
        )
        .map_err(|e| format!("GetStats: {e}"))?;
    let values = reply.body_values().map_err(|e| e.to_string())?;
    let Some(Value::Array { items, .. }) = values.into_iter().next() else {
        return Err("GetStats returned no dictionary".into());
    };
    let mut counts = Vec::new();
    for key in COUNTED {
        let value = items.iter().find_map(|entry| match entry {
            Value::DictEntry(k, v) if **k == Value::String(key.into()) => match &**v {
                Value::Variant(inner) => match **inner {
                    Value::Uint32(n) => Some(n),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        });
        counts.push((key, value.ok_or(format!("GetStats has no {key}"))?));
    }
    Ok(counts)
}

/// Every `serving again after X ms` of the daemon's log, in order.
fn logged_pauses(log: &str) -> Vec<f64> {
    log.lines()
        .filter(|l| l.contains("restarted in place"))
        .filter_map(|l| {
            let after = l.split("serving again after ").nth(1)?;
            after.trim_end_matches(" ms").trim().parse().ok()
        })
        .collect()
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

fn max(values: &[f64]) -> f64 {
    values.iter().copied().fold(0.0, f64::max)
}

fn report(cases: &[Case], reps: u32) -> String {
    let mut out = String::from(
        "restart in place: the pause, from the Restart call to its reply (sent by the new image), and as the daemon logs it\n",
    );
    out.push_str(&format!(
        "{:<8} {:>11} {:>8} {:>8} {:>5} {:>11} {:>9} {:>13} {:>11} {:>8}  {}\n",
        "case",
        "connections",
        "names",
        "rules",
        "reps",
        "call median",
        "call max",
        "daemon median",
        "daemon max",
        "target",
        "verdict"
    ));
    for case in cases {
        let worst = max(&case.calls);
        let verdict = if worst <= case.target.as_secs_f64() * 1000.0 {
            "within"
        } else {
            "OVER"
        };
        out.push_str(&format!(
            "{:<8} {:>11} {:>8} {:>8} {:>5} {:>8.1} ms {:>6.1} ms {:>10.1} ms {:>8.1} ms {:>5} ms  {verdict}\n",
            case.label,
            case.connections,
            case.names,
            case.rules,
            reps,
            median(&case.calls),
            worst,
            median(&case.logged),
            max(&case.logged),
            case.target.as_millis(),
        ));
    }
    out.push_str("dbus-daemon and dbus-broker cannot restart in place: no row to compare.\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemons_pauses_are_read_from_its_log() {
        let log = "quickbus-daemon[7]: Restart: restarting in place\n\
                   quickbus-daemon[7]: restarted in place: 3 connections kept, serving again after 4.2 ms\n\
                   quickbus-daemon[7]: restarted in place: 3 connections kept, serving again after 12.0 ms\n";
        assert_eq!(logged_pauses(log), vec![4.2, 12.0]);
    }

    #[test]
    fn the_report_judges_the_worst_call_against_the_target() {
        let case = |label, calls: Vec<f64>, target| Case {
            label,
            connections: 1,
            names: 2,
            rules: 3,
            target,
            logged: calls.clone(),
            calls,
        };
        let text = report(
            &[
                case("idle", vec![3.0, 4.0, 60.0], IDLE_TARGET),
                case("loaded", vec![300.0, 400.0], LOADED_TARGET),
            ],
            3,
        );
        let idle = text.lines().find(|l| l.starts_with("idle")).unwrap();
        assert!(idle.ends_with("OVER"), "{idle}");
        assert!(idle.contains("4.0 ms"), "{idle}");
        let loaded = text.lines().find(|l| l.starts_with("loaded")).unwrap();
        assert!(loaded.ends_with("within"), "{loaded}");
    }
}
