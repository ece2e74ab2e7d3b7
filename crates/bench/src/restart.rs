//! `quickbus-bench restart` (issue 16): how long a restart in place
//! (docs/restart.md) keeps the bus from serving, on an idle bus, on one
//! holding 10,000 connections, 100,000 names and 100,000 match rules, and
//! (issue 24) on one whose non-reading receivers hold a large backlog of
//! the same broadcasts, with the daemon's memory before and after.
//!
//! Each repetition calls `org.quickbus.Daemon1.Restart`, whose reply the
//! new image sends once it serves: the call's duration is the pause as a
//! client sees it. The daemon's own figure (`serving again after X ms`,
//! from the moment it decided to restart) is read from its log. After each
//! restart the bus must still hold everything, or the run fails:
//! Debug.Stats' counts, every connection kept (as the daemon logs), a
//! sample of names with their owners, a sample of the clients answered by
//! the same bus, and a sample of their match rules delivering.
//!
//! dbus-daemon and dbus-broker cannot restart in place: there is nothing
//! to compare, and the report says so.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use quickbus_client::{bus_call, Connection};
use quickbus_wire::{MessageBuilder, MessageType, Value};

use crate::buses::{BusKind, RunningBus};
use crate::report::median;
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
    /// The backlog case: MiB of distinct signals queued, unread, for each
    /// of its receivers (0 skips the case)
    #[arg(long, value_name = "MIB", default_value_t = 128)]
    backlog_mib: usize,
    /// The backlog case: the size of each signal, in KiB
    #[arg(long, value_name = "KIB", default_value_t = 1024)]
    backlog_signal_kib: usize,
    /// The backlog case: receivers (of one user, like the sender) that
    /// never read, each queued every signal
    #[arg(long, value_name = "N", default_value_t = 4)]
    backlog_receivers: usize,
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
    /// The backlog case's queues and the daemon's memory.
    backlog: Option<Backlog>,
}

/// What the backlog case queued, and the daemon's memory
/// ([`daemon_memory`]) before the first restart and after each.
struct Backlog {
    receivers: usize,
    /// Distinct bytes: the signals, each queued for every receiver.
    distinct: usize,
    rss_before: u64,
    rss_after: Vec<u64>,
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
    let mut cases = vec![idle, loaded];
    if args.backlog_mib > 0 {
        cases.push(measure_backlog(
            &daemon,
            args.backlog_receivers.max(1),
            args.backlog_mib,
            args.backlog_signal_kib.max(1),
            args.reps,
        )?);
    }
    print!("{}", report(&cases, args.reps));
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
    let mut clients = fill(&bus, connections, names, rules)?;
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
        backlog: None,
    };
    let mut shown_steps = 0;
    for rep in 0..reps {
        restart_once(&bus, &mut admin, &mut case, rep, clients.conns.len() + 1)?;
        expected.check(&mut admin, &mut clients, label)?;
        shown_steps = show_steps(&bus, shown_steps);
    }
    drop(clients);
    Ok(case)
}

/// One Restart call, timed, and the daemon's figure for restart `rep`;
/// every one of `connections` must have crossed.
fn restart_once(
    bus: &RunningBus,
    admin: &mut Connection,
    case: &mut Case,
    rep: u32,
    connections: usize,
) -> Result<(), String> {
    let label = case.label;
    let restarted = Instant::now();
    admin
        .call(
            MessageBuilder::method_call(quickbus_wire::BUS_PATH, "Restart")
                .interface(quickbus_wire::DAEMON_INTERFACE)
                .destination(quickbus_wire::BUS_NAME),
        )
        .map_err(|e| format!("{label}: Restart: {e}; the daemon's log:\n{}", bus.log()))?;
    case.calls.push(restarted.elapsed().as_secs_f64() * 1000.0);
    let logged = logged_restarts(&bus.log());
    let Some(&(kept, pause)) = logged.get(rep as usize) else {
        return Err(format!(
            "{label}: the daemon logged {} restarts after {} calls:\n{}",
            logged.len(),
            rep + 1,
            bus.log()
        ));
    };
    case.logged.push(pause);
    if kept != connections {
        return Err(format!(
            "{label}: the daemon kept {kept} connections of {connections}"
        ));
    }
    eprintln!(
        "{label}: restart {}: {:.1} ms (the daemon: {pause:.1} ms)",
        rep + 1,
        case.calls[rep as usize]
    );
    Ok(())
}

/// Print the daemon's breakdown of the restarts logged since `shown`
/// lines, when its log level shows it
/// (QUICKBUS_LOG=info,quickbus_daemon::restart=debug,quickbus_daemon::server::restarting=debug);
/// returns how many there are now.
fn show_steps(bus: &RunningBus, shown: usize) -> usize {
    let log = bus.log();
    let steps: Vec<&str> = log.lines().filter(|l| l.contains("handover ")).collect();
    for line in steps.iter().skip(shown) {
        eprintln!("  {line}");
    }
    steps.len()
}

/// The backlog case: `receivers` connections of one user subscribe to the
/// bench's signals and never read; the same user sends `mib` MiB of
/// signals of `signal_kib` KiB each, so each receiver's queue holds all of them (those the kernel's
/// socket buffer took aside). Flow control is set out of the way (no
/// pacing, queues large enough), so everything stays queued. After the
/// last restart one receiver reads its whole backlog: every signal, in
/// order, with its bytes.
fn measure_backlog(
    daemon: &std::path::Path,
    receivers: usize,
    mib: usize,
    signal_kib: usize,
    reps: u32,
) -> Result<Case, String> {
    let label = "backlog";
    let size = signal_kib * 1024;
    let count = mib * 1024 / signal_kib;
    let queue = (mib + 16) * 1024 * 1024;
    let limits = [
        ("pacing_bytes", 0),
        ("max_outgoing_bytes", queue as u64),
        ("max_outgoing_queues_per_user", receivers as u64 + 2),
    ];
    let bus = RunningBus::start_with_limits(BusKind::Quickbus, daemon, &limits)?;
    eprintln!(
        "{label}: {receivers} receivers that do not read, {count} signals of {signal_kib} KiB each"
    );
    let mut readers = Vec::with_capacity(receivers);
    for i in 0..receivers {
        let mut conn = bus
            .connect(IO_TIMEOUT)
            .map_err(|e| format!("{label}: receiver {i}: {e}"))?;
        conn.add_match(crate::messages::MATCH_RULE)
            .map_err(|e| format!("{label}: AddMatch: {e}"))?;
        readers.push(conn);
    }
    let mut admin = bus.connect(IO_TIMEOUT).map_err(|e| e.to_string())?;
    // The size with its header (and the bench's timestamp) about `size`.
    let mut signal = crate::messages::Template::signal(size.saturating_sub(256).max(8));
    for i in 0..count {
        signal
            .with_serial(BACKLOG_SERIALS + i as u32)
            .with_timestamp(i as u64);
        admin
            .send_raw(signal.bytes(), &[])
            .map_err(|e| format!("{label}: signal {i}: {e}"))?;
    }
    // Answered once every signal before it was routed and queued.
    admin.get_id().map_err(|e| format!("{label}: GetId: {e}"))?;
    let mut case = Case {
        label,
        connections: receivers + 1,
        names: 0,
        rules: receivers,
        target: LOADED_TARGET,
        calls: Vec::new(),
        logged: Vec::new(),
        backlog: Some(Backlog {
            receivers,
            distinct: count * signal.bytes().len(),
            rss_before: daemon_memory(bus.pid())?,
            rss_after: Vec::new(),
        }),
    };
    let mut shown_steps = 0;
    for rep in 0..reps {
        restart_once(&bus, &mut admin, &mut case, rep, receivers + 1)?;
        if let Some(backlog) = &mut case.backlog {
            // The new image replies to Restart just before it lets go of
            // what it no longer needs (the handover's memfd, unless it
            // reads buffers from it): measured once it answers from its
            // loop.
            admin.get_id().map_err(|e| format!("{label}: GetId: {e}"))?;
            let memory = daemon_memory(bus.pid())?;
            eprintln!("  the daemon's memory: {} MiB", memory >> 20);
            backlog.rss_after.push(memory);
        }
        shown_steps = show_steps(&bus, shown_steps);
    }
    let body = quickbus_wire::Message::parse(bytes::Bytes::copy_from_slice(signal.bytes()))
        .map_err(|e| e.to_string())?
        .body()
        .len();
    read_backlog(&mut readers[0], count, body)
        .map_err(|e| format!("{label}: after {reps} restarts: {e}"))?;
    Ok(case)
}

/// The memory the daemon holds: its resident anonymous and file-backed
/// pages, and the pages of the handover memfd it still reads large
/// buffers from after a restart (docs/restart.md), whether touched yet
/// or not (VmRSS counts shared memory only once touched).
fn daemon_memory(pid: u32) -> Result<u64, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("the daemon's status: {e}"))?;
    Ok(resident_kib(&status, &["RssAnon:", "RssFile:"]) * 1024 + handover_bytes(pid))
}

/// The sum of `fields` (kB) in a /proc/PID/status text.
fn resident_kib(status: &str, fields: &[&str]) -> u64 {
    status
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let field = words.next()?;
            fields
                .contains(&field)
                .then(|| words.next()?.parse::<u64>().ok())?
        })
        .sum()
}

/// The bytes allocated to handover memfds `pid` holds open (each once,
/// though it may hold one by two descriptors for a moment).
fn handover_bytes(pid: u32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    let is_handover = |fd: &std::fs::DirEntry| {
        std::fs::read_link(fd.path()).is_ok_and(|target| {
            target
                .to_string_lossy()
                .starts_with("/memfd:quickbus-handover")
        })
    };
    let memfds: std::collections::HashMap<u64, u64> = fds
        .flatten()
        .filter(is_handover)
        .filter_map(|fd| std::fs::metadata(fd.path()).ok())
        .map(|meta| (meta.ino(), meta.blocks() * 512))
        .collect();
    memfds.values().sum()
}

/// Serials of the backlog's signals, far from the client's own.
const BACKLOG_SERIALS: u32 = 0x4000_0000;

/// Every one of the `count` backlog signals, in order and whole: signal
/// `i` has serial [`BACKLOG_SERIALS`] + `i`, `i` as its timestamp, and
/// the body it was sent with (`body` bytes).
fn read_backlog(reader: &mut Connection, count: usize, body: usize) -> Result<(), String> {
    let mut next = 0;
    while next < count {
        let (msg, _) = reader
            .receive()
            .map_err(|e| format!("signal {next} of {count} did not arrive: {e}"))?;
        if !crate::messages::is_burst(&msg) {
            continue;
        }
        let stamp = crate::messages::timestamp_of(&msg);
        if msg.serial() != BACKLOG_SERIALS + next as u32
            || stamp != Some(next as u64)
            || msg.body().len() != body
        {
            return Err(format!(
                "signal {next} arrived as serial {:#x}, timestamp {stamp:?}, {} bytes of body",
                msg.serial(),
                msg.body().len()
            ));
        }
        next += 1;
    }
    Ok(())
}

/// The loaded bus's clients: each owns names and rules, `i`-th item on
/// connection `i % connections`.
struct Clients {
    conns: Vec<Connection>,
    names: usize,
    rules: usize,
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
    Ok(Clients {
        conns,
        names,
        rules,
    })
}

/// What the bus must still hold after every restart.
struct Expected {
    counts: Vec<(&'static str, u32)>,
    /// A sample of names, each with the unique name that owns it.
    owners: Vec<(String, String)>,
    /// The bus's GetId, which a restart keeps.
    id: String,
}

/// Client connections that must still get answers after each restart.
const ANSWERING: usize = 50;
/// Rules that must still deliver after each restart.
const DELIVERING: usize = 10;
/// Where the delivery checks' signals come from.
const CHECK_PATH: &str = "/org/quickbus/Bench/Restart";
const CHECK_INTERFACE: &str = "org.quickbus.Bench.Restart";

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
        let id = admin.get_id().map_err(|e| format!("GetId: {e}"))?;
        Ok(Expected { counts, owners, id })
    }

    /// The counts and owners as before; a sample of the clients still
    /// answered by the same bus, and a sample of their rules delivering.
    fn check(
        &self,
        admin: &mut Connection,
        clients: &mut Clients,
        label: &str,
    ) -> Result<(), String> {
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
        for c in spread(clients.conns.len(), ANSWERING) {
            let conn = &mut clients.conns[c];
            let id = conn.get_id().map_err(|e| {
                format!(
                    "{label}: client {c} ({}) got no answer: {e}",
                    conn.unique_name()
                )
            })?;
            if id != self.id {
                return Err(format!(
                    "{label}: client {c} sees bus {id}, not {}",
                    self.id
                ));
            }
        }
        // Rule i with i % 5 == 3 is `member='Foo{i}'` (scale::fill::rule).
        for j in spread((clients.rules + 1) / 5, DELIVERING) {
            expect_delivery(admin, clients, 5 * j + 3, label)?;
        }
        Ok(())
    }
}

/// A signal from `admin` with member `Foo{i}` reaches the client that
/// added rule `i`, through that rule alone.
fn expect_delivery(
    admin: &mut Connection,
    clients: &mut Clients,
    i: usize,
    label: &str,
) -> Result<(), String> {
    let member = format!("Foo{i}");
    debug_assert!(rule(i).contains(&format!("member='{member}'")));
    admin
        .send(
            MessageBuilder::signal(CHECK_PATH, CHECK_INTERFACE, member.as_str()),
            &[],
        )
        .map_err(|e| format!("{label}: emit {member}: {e}"))?;
    let connections = clients.conns.len();
    let receiver = &mut clients.conns[i % connections];
    loop {
        // Bounded by the connection's read time-out (IO_TIMEOUT).
        let (msg, _) = receiver.receive().map_err(|e| {
            format!(
                "{label}: {member} did not reach {} through its rule: {e}",
                receiver.unique_name()
            )
        })?;
        // NameAcquired and the like, left from filling, are skipped.
        if msg.msg_type() != MessageType::Signal || msg.interface() != Some(CHECK_INTERFACE) {
            continue;
        }
        if msg.member() != Some(member.as_str()) {
            return Err(format!(
                "{label}: {} received {:?}, which none of its rules matches",
                receiver.unique_name(),
                msg.member()
            ));
        }
        return Ok(());
    }
}

/// `count` indices spread evenly over `0..len`, the first and the last
/// included (all of them if there are no more).
fn spread(len: usize, count: usize) -> Vec<usize> {
    match count {
        _ if len <= count => (0..len).collect(),
        0 | 1 => (0..count).collect(),
        _ => (0..count).map(|j| j * (len - 1) / (count - 1)).collect(),
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

/// Every `restarted in place: N connections kept, serving again after X
/// ms` of the daemon's log, in order: N and X.
fn logged_restarts(log: &str) -> Vec<(usize, f64)> {
    log.lines()
        .filter_map(|l| {
            let rest = l.split("restarted in place: ").nth(1)?;
            let (kept, rest) = rest.split_once(" connections kept, serving again after ")?;
            let pause = rest.strip_suffix(" ms")?;
            Some((kept.parse().ok()?, pause.trim().parse().ok()?))
        })
        .collect()
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
            median(&mut case.calls.clone()),
            worst,
            median(&mut case.logged.clone()),
            max(&case.logged),
            case.target.as_millis(),
        ));
    }
    for case in cases {
        if let Some(backlog) = &case.backlog {
            out.push_str(&backlog_line(case.label, backlog));
        }
    }
    out.push_str("dbus-daemon and dbus-broker cannot restart in place: no row to compare.\n");
    out
}

/// What the backlog case queued, and the daemon's memory around its
/// restarts.
fn backlog_line(label: &str, backlog: &Backlog) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let after = backlog.rss_after.iter().copied().max().unwrap_or(0);
    format!(
        "{label}: {:.0} MiB of distinct signals queued for each of {} receivers ({:.0} MiB queued in all); \
         daemon memory {:.0} MiB before the first restart, at most {:.0} MiB after one\n",
        backlog.distinct as f64 / MIB,
        backlog.receivers,
        (backlog.distinct * backlog.receivers) as f64 / MIB,
        backlog.rss_before as f64 / MIB,
        after as f64 / MIB,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemons_pauses_are_read_from_its_log() {
        let log = "quickbus-daemon[7]: Restart: restarting in place\n\
                   quickbus-daemon[7]: restarted in place: 3 connections kept, serving again after 4.2 ms\n\
                   quickbus-daemon[7]: restarted in place: 3 connections kept, serving again after 12.0 ms\n";
        assert_eq!(logged_restarts(log), vec![(3, 4.2), (3, 12.0)]);
        let failed = "quickbus-daemon[7]: restart failed: why; 3 connections kept, serving again after 2.0 ms";
        assert!(logged_restarts(failed).is_empty());
    }

    #[test]
    fn samples_spread_over_the_whole_range() {
        assert_eq!(spread(5, 50), [0, 1, 2, 3, 4]);
        assert!(spread(0, 50).is_empty());
        let s = spread(100_000, 50);
        assert_eq!((s.len(), s[0], s[49]), (50, 0, 99_999));
        assert!(s.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(spread(10, 1), [0]);
    }

    #[test]
    fn the_rules_checked_are_member_rules_that_exist() {
        for rules in [0, 3, 4, 9, 50, 100_000] {
            for j in spread((rules + 1) / 5, DELIVERING) {
                let i = 5 * j + 3;
                assert!(i < rules, "{i} of {rules}");
                assert!(rule(i).contains(&format!("member='Foo{i}'")), "{}", rule(i));
            }
        }
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
            backlog: None,
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

    #[test]
    fn the_daemons_memory_counts_anonymous_and_file_pages() {
        let status = "Name:\tquickbus-daemon\nVmRSS:\t  900 kB\nRssAnon:\t  500 kB\n\
                      RssFile:\t  100 kB\nRssShmem:\t  300 kB\n";
        assert_eq!(resident_kib(status, &["RssAnon:", "RssFile:"]), 600);
    }

    #[test]
    fn the_backlog_line_shows_the_memory_before_and_the_worst_after() {
        let backlog = Backlog {
            receivers: 4,
            distinct: 128 << 20,
            rss_before: 150 << 20,
            rss_after: vec![160 << 20, 700 << 20, 170 << 20],
        };
        let line = backlog_line("backlog", &backlog);
        assert!(line.contains("128 MiB of distinct"), "{line}");
        assert!(line.contains("512 MiB queued in all"), "{line}");
        assert!(line.contains("memory 150 MiB before"), "{line}");
        assert!(line.contains("at most 700 MiB after"), "{line}");
    }
}
