//! Starting the buses under test, each with the same permissive
//! configuration and raised limits, and reading their CPU time.

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

use quickbus_client::Connection;

/// How long a bus may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// dbus-broker-launch logs to the journal and fails without it.
const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BusKind {
    Quickbus,
    DbusDaemon,
    DbusBroker,
}

impl BusKind {
    pub const ALL: [BusKind; 3] = [BusKind::Quickbus, BusKind::DbusDaemon, BusKind::DbusBroker];

    pub fn name(self) -> &'static str {
        match self {
            BusKind::Quickbus => "quickbus",
            BusKind::DbusDaemon => "dbus-daemon",
            BusKind::DbusBroker => "dbus-broker",
        }
    }

    pub fn parse(name: &str) -> Option<BusKind> {
        BusKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The `--buses` list, or an error naming the one not known.
    pub fn parse_list(names: &[String]) -> Result<Vec<BusKind>, String> {
        names
            .iter()
            .map(|name| {
                BusKind::parse(name).ok_or_else(|| {
                    format!("unknown bus {name:?} (quickbus, dbus-daemon, dbus-broker)")
                })
            })
            .collect()
    }
}

/// A bus daemon started by the bench, killed on drop.
pub struct RunningBus {
    pub kind: BusKind,
    /// The `socket_buffer_bytes` quickbus was configured with, when the
    /// bench set one (a socket-buffer sweep); None: the daemon's default.
    pub socket_buffer: Option<usize>,
    /// The `threads` limit quickbus was configured with, when the bench
    /// set one (--quickbus-threads); None: the daemon's default.
    pub threads: Option<usize>,
    /// It listens on tcp (127.0.0.1, ANONYMOUS) rather than a unix socket.
    pub tcp: bool,
    pub address: String,
    child: Child,
    dir: PathBuf,
    /// The journal socket the bench bound for dbus-broker, if it had to.
    _journal: Option<JournalSocket>,
}

impl RunningBus {
    /// Start `kind`; `quickbus_daemon` is the quickbus-daemon binary.
    /// Err(note) when the bus is not installed or does not start.
    pub fn start(kind: BusKind, quickbus_daemon: &Path) -> Result<RunningBus, String> {
        RunningBus::start_with_limits(kind, quickbus_daemon, &[])
    }

    /// [`RunningBus::start`], with quickbus's `socket_buffer_bytes` limit
    /// set to `socket_buffer` (0: the kernel's default). The other buses
    /// have no such setting: asking for one is refused.
    pub fn start_with_socket_buffer(
        kind: BusKind,
        quickbus_daemon: &Path,
        socket_buffer: Option<usize>,
    ) -> Result<RunningBus, String> {
        match socket_buffer {
            None => RunningBus::start(kind, quickbus_daemon),
            Some(_) if kind != BusKind::Quickbus => {
                Err(format!("{} cannot set its socket buffers", kind.name()))
            }
            Some(bytes) => RunningBus::start_with_limits(
                kind,
                quickbus_daemon,
                &[("socket_buffer_bytes", bytes as u64)],
            ),
        }
    }

    /// Start `kind` with some limits of the bench configuration replaced
    /// (`(name, value)` as in `<limit name="...">`), e.g. raised far enough
    /// that a scale run measures data structures, not limits.
    pub fn start_with_limits(
        kind: BusKind,
        quickbus_daemon: &Path,
        limits: &[(&str, u64)],
    ) -> Result<RunningBus, String> {
        RunningBus::start_listening(kind, quickbus_daemon, limits, false)
    }

    /// [`RunningBus::start`] listening on `tcp:host=127.0.0.1` with
    /// ANONYMOUS authentication (quickbus and dbus-daemon only: the bench
    /// starts dbus-broker on a unix socket from systemd).
    pub fn start_tcp(kind: BusKind, quickbus_daemon: &Path) -> Result<RunningBus, String> {
        if kind == BusKind::DbusBroker {
            return Err("dbus-broker has no tcp transport".into());
        }
        RunningBus::start_listening(kind, quickbus_daemon, &[], true)
    }

    fn start_listening(
        kind: BusKind,
        quickbus_daemon: &Path,
        limits: &[(&str, u64)],
        tcp: bool,
    ) -> Result<RunningBus, String> {
        // Several buses of one kind may run at once (socket buffer sweeps).
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let limit = |wanted: &str| {
            limits
                .iter()
                .find(|(name, _)| *name == wanted)
                .map(|&(_, value)| value as usize)
        };
        let socket_buffer = limit("socket_buffer_bytes");
        let threads = limit("threads");
        let dir = std::env::temp_dir().join(format!(
            "quickbus-bench-{}-{}-{}",
            std::process::id(),
            kind.name(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let socket = dir.join("bus");
        let config = dir.join("bus.conf");
        let listen = if tcp {
            Listen::Tcp
        } else {
            Listen::Unix(&socket)
        };
        std::fs::write(&config, config_text(listen, limits))
            .map_err(|e| format!("{}: {e}", config.display()))?;
        let unix_address = format!("unix:path={}", socket.display());
        let started = match kind {
            BusKind::Quickbus => start_printing_address(quickbus_daemon, &config)
                .map(|(child, address)| (child, address, None)),
            BusKind::DbusDaemon => {
                start_printing_address(Path::new("/usr/bin/dbus-daemon"), &config)
                    .map(|(child, address)| (child, address, None))
            }
            BusKind::DbusBroker => start_broker(&socket, &config, &unix_address)
                .map(|(child, journal)| (child, unix_address.clone(), journal)),
        };
        match started {
            Ok((child, address, journal)) => Ok(RunningBus {
                kind,
                socket_buffer,
                threads,
                tcp,
                address,
                child,
                dir,
                _journal: journal,
            }),
            Err(note) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(note)
            }
        }
    }

    pub fn connect(&self, timeout: Duration) -> Result<Connection, quickbus_client::Error> {
        Connection::connect_with_timeout(&self.address, timeout)
    }

    /// The process the bench started (the daemon itself, a wrapper that
    /// exec'd it, or dbus-broker's socket activator).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What quickbus-daemon or dbus-daemon wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.stderr")).unwrap_or_default()
    }

    /// Resident memory of the daemon and its descendants, in bytes
    /// (VmRSS of each process).
    pub fn rss_bytes(&self) -> u64 {
        process_tree(self.child.id())
            .into_iter()
            .filter_map(process_rss_bytes)
            .sum()
    }

    /// CPU seconds of the daemon and its descendants (dbus-broker runs as
    /// a child of dbus-broker-launch): the scheduler's nanosecond run time
    /// of every thread (/proc/PID/task/TID/schedstat) where the kernel
    /// has it, else utime + stime from /proc/PID/stat, whose clock ticks
    /// (10 ms) are too coarse for short runs. Which of the two is decided
    /// once per run ([`CpuClock`]), so two readings are always comparable.
    ///
    /// Both count every thread of a daemon, so a quickbus with worker
    /// threads (its `threads` limit) shows all the cores they burn: the
    /// schedstat of each thread is summed over /proc/PID/task, and the
    /// utime and stime of /proc/PID/stat are the whole thread group's
    /// (proc(5)), not only its main thread's.
    pub fn cpu_seconds(&self) -> f64 {
        tree_cpu_seconds(self.child.id())
    }

    /// CPU seconds of quickbus's loop alone, the one thread that routes
    /// (its main thread), beside the workers its `threads` limit starts:
    /// None for the other buses (dbus-broker's main thread is its
    /// launcher's) or where the kernel keeps no schedstat.
    pub fn loop_cpu_seconds(&self) -> Option<f64> {
        if self.kind != BusKind::Quickbus || CpuClock::of_this_kernel() != CpuClock::RunTime {
            return None;
        }
        let pid = self.child.id();
        let path = PathBuf::from(format!("/proc/{pid}/task/{pid}"));
        task_run_ns(&path).map(|ns| ns as f64 / 1e9)
    }

    /// Threads of the daemon and its descendants right now (the entries
    /// of each one's /proc/PID/task): shows that a `threads` limit took
    /// effect. quickbus's log and fd-closing threads are left out: each
    /// starts when first needed (a line logged, a client's fd or a
    /// connection closed), so whether one is there says nothing of the
    /// limit.
    pub fn thread_count(&self) -> usize {
        process_tree(self.child.id())
            .into_iter()
            .filter_map(|pid| std::fs::read_dir(format!("/proc/{pid}/task")).ok())
            .flat_map(|tasks| tasks.flatten())
            .filter(|task| {
                let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
                !STARTED_AS_NEEDED.contains(&comm.trim_end())
            })
            .count()
    }
}

/// The names of quickbus's threads that start when first needed.
const STARTED_AS_NEEDED: [&str; 2] = ["quickbus-log", "quickbus-close"];

/// CPU seconds of `pid` and its descendants, as [`RunningBus::cpu_seconds`]
/// reads them (also for a proxy in front of a bus).
pub fn tree_cpu_seconds(pid: u32) -> f64 {
    CpuClock::of_this_kernel().seconds_of(&process_tree(pid), process_run_ns, process_ticks)
}

/// Where CPU seconds are read from: one clock for a whole run. Were it
/// chosen at each reading (ticks whenever some process of a tree had no
/// run time, e.g. one that ended between the listing and the reading),
/// a window could subtract a reading in ticks from one in run time.
#[derive(Clone, Copy, Debug, PartialEq)]
enum CpuClock {
    /// The scheduler's run time in ns of every thread (schedstat).
    RunTime,
    /// utime + stime in clock ticks (/proc/PID/stat).
    Ticks,
}

impl CpuClock {
    fn of_this_kernel() -> CpuClock {
        static CLOCK: OnceLock<CpuClock> = OnceLock::new();
        *CLOCK.get_or_init(|| CpuClock::given_own_run_ns(process_run_ns(std::process::id())))
    }

    /// Run time where this process's own shows that it ran: a kernel
    /// without schedstat has none, and one that keeps no scheduler
    /// statistics reads 0 for every thread.
    fn given_own_run_ns(own_run_ns: Option<u64>) -> CpuClock {
        match own_run_ns {
            Some(ns) if ns > 0 => CpuClock::RunTime,
            _ => CpuClock::Ticks,
        }
    }

    /// CPU seconds of `pids` on this clock, `run_ns` or `ticks` reading
    /// one process: one that gives nothing (it ended since the listing)
    /// counts nothing, whichever the clock.
    fn seconds_of(
        self,
        pids: &[u32],
        run_ns: impl Fn(u32) -> Option<u64>,
        ticks: impl Fn(u32) -> Option<u64>,
    ) -> f64 {
        match self {
            CpuClock::RunTime => {
                pids.iter().filter_map(|&pid| run_ns(pid)).sum::<u64>() as f64 / 1e9
            }
            CpuClock::Ticks => {
                let ticks: u64 = pids.iter().filter_map(|&pid| ticks(pid)).sum();
                ticks as f64 / clock_ticks_per_second()
            }
        }
    }
}

impl Drop for RunningBus {
    fn drop(&mut self) {
        // SIGTERM first so dbus-broker-launch takes its broker down too.
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::Term);
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The daemon's stderr: `daemon.stderr` beside its configuration (see
/// [`RunningBus::log`]).
fn stderr_file(config: &Path) -> Result<std::fs::File, String> {
    let path = config.with_file_name("daemon.stderr");
    std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Start a daemon that prints its address; the child and the address.
fn start_printing_address(program: &Path, config: &Path) -> Result<(Child, String), String> {
    if !program.exists() {
        return Err(format!("{} not found", program.display()));
    }
    let mut child = Command::new(program)
        .arg(format!("--config-file={}", config.display()))
        .arg("--nofork")
        .arg("--print-address")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr_file(config)?)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
    let stdout = child.stdout.take().expect("piped stdout");
    // On a thread, so a daemon that never prints cannot hang the bench.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let mut reader = BufReader::new(stdout);
        let _ = tx.send(reader.read_line(&mut line).map(|_| line));
        // Keep the pipe open (and drained) while the daemon lives.
        let mut sink = String::new();
        while matches!(reader.read_line(&mut sink), Ok(n) if n > 0) {
            sink.clear();
        }
    });
    match rx.recv_timeout(START_TIMEOUT) {
        Ok(Ok(line)) if !line.trim().is_empty() => Ok((child, line.trim().to_owned())),
        other => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!(
                "{} printed no address: {other:?}",
                program.display()
            ))
        }
    }
}

fn start_broker(
    socket: &Path,
    config: &Path,
    address: &str,
) -> Result<(Child, Option<JournalSocket>), String> {
    for program in [
        "/usr/bin/dbus-broker",
        "/usr/bin/dbus-broker-launch",
        "/usr/bin/systemd-socket-activate",
    ] {
        if !Path::new(program).exists() {
            return Err(format!(
                "{program} not found (apt-get install -y dbus-broker systemd)"
            ));
        }
    }
    let journal = ensure_journal_socket()?;
    let mut child = Command::new("/usr/bin/systemd-socket-activate")
        .arg("-l")
        .arg(socket)
        .arg("-E")
        .arg(format!("DBUS_SESSION_BUS_ADDRESS={address}"))
        .arg("dbus-broker-launch")
        .arg("--scope")
        .arg("user")
        .arg("--config-file")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start systemd-socket-activate: {e}"))?;
    // The socket appears first; the first connection starts the launcher,
    // which answers once the broker runs.
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if socket.exists() {
            if let Ok(mut conn) = Connection::connect_with_timeout(address, START_TIMEOUT) {
                if conn.get_id().is_ok() {
                    // Like dbus-daemon's sockets, open to every user (the
                    // hostile-neighbour workload connects as nobody).
                    use std::os::unix::fs::PermissionsExt;
                    let _ =
                        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o777));
                    return Ok((child, journal));
                }
            }
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err("dbus-broker did not answer".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A journal socket bound by the bench; its file is removed on drop so no
/// later program finds a socket nobody reads.
struct JournalSocket;

impl Drop for JournalSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(JOURNAL_SOCKET);
    }
}

/// Bind the journal's datagram socket with a thread that discards what
/// arrives, if nobody provides it (None: someone does).
fn ensure_journal_socket() -> Result<Option<JournalSocket>, String> {
    let path = Path::new(JOURNAL_SOCKET);
    if path.exists() {
        let listening = UnixDatagram::unbound().and_then(|probe| probe.connect(path));
        if listening.is_ok() {
            return Ok(None);
        }
        // Left behind by a program that is gone: nobody reads it any more.
        let _ = std::fs::remove_file(path);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let socket = UnixDatagram::bind(path).map_err(|e| format!("{JOURNAL_SOCKET}: {e}"))?;
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while socket.recv(&mut buf).is_ok() {}
    });
    Ok(Some(JournalSocket))
}

/// Limits of the bench configuration, raised so no bus refuses the
/// bench's traffic.
const BENCH_LIMITS: [(&str, u64); 7] = [
    ("max_incoming_bytes", 1_000_000_000),
    ("max_outgoing_bytes", 1_000_000_000),
    ("max_message_size", 134_217_728),
    ("max_completed_connections", 100_000),
    ("max_connections_per_user", 100_000),
    ("max_match_rules_per_connection", 50_000),
    ("max_replies_per_connection", 50_000),
];

/// The same permissive session configuration for every bus, with
/// [`BENCH_LIMITS`], each replaced by its entry in `overrides` if any (and
/// the overrides not among them added).
/// Where a bench bus listens.
#[derive(Clone, Copy)]
enum Listen<'a> {
    Unix(&'a Path),
    /// 127.0.0.1, a port the kernel picks; ANONYMOUS, since EXTERNAL
    /// needs a unix socket.
    Tcp,
}

fn config_text(listen: Listen<'_>, overrides: &[(&str, u64)]) -> String {
    let mut limits: Vec<(&str, u64)> = BENCH_LIMITS.to_vec();
    for &(name, value) in overrides {
        match limits.iter_mut().find(|(n, _)| *n == name) {
            Some(limit) => limit.1 = value,
            None => limits.push((name, value)),
        }
    }
    let limits: String = limits
        .iter()
        .map(|(name, value)| format!("  <limit name=\"{name}\">{value}</limit>\n"))
        .collect();
    let listen = match listen {
        Listen::Unix(socket) => format!(
            "  <listen>unix:path={}</listen>\n  <auth>EXTERNAL</auth>",
            socket.display()
        ),
        Listen::Tcp => "  <listen>tcp:host=127.0.0.1,port=0</listen>\n  <auth>ANONYMOUS</auth>\n  <allow_anonymous/>".to_owned(),
    };
    format!(
        r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
{listen}
  <policy context="default">
    <allow user="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow receive_sender="*"/>
    <allow own="*"/>
  </policy>
{limits}</busconfig>
"#
    )
}

/// VmRSS of `pid` from /proc/PID/status, in bytes.
fn process_rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_rss_kib(&status).map(|kib| kib * 1024)
}

/// The `VmRSS:` line of a /proc/PID/status text, in KiB.
fn parse_rss_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// `pid` and all its descendants.
fn process_tree(pid: u32) -> Vec<u32> {
    let mut all = Vec::new();
    let mut todo = vec![pid];
    while let Some(pid) = todo.pop() {
        all.push(pid);
        todo.extend(children_of(pid));
    }
    all
}

/// Nanoseconds on CPU of all threads of `pid` (first schedstat field).
fn process_run_ns(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    // A thread may end between listing and reading: it is skipped. None
    // when no thread has a readable schedstat: the process ended, or the
    // kernel has none ([`CpuClock`] tells which).
    let mut total = None;
    for task in tasks.flatten() {
        if let Some(ns) = task_run_ns(&task.path()) {
            total = Some(total.unwrap_or(0) + ns);
        }
    }
    total
}

/// The run time in ns of the thread at `task` (/proc/PID/task/TID), from
/// its schedstat.
fn task_run_ns(task: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(task.join("schedstat")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

fn process_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_ticks(&stat)
}

/// utime (field 14) + stime (field 15) of a /proc/PID/stat line. The
/// command name (field 2) may hold spaces and parentheses, so fields are
/// counted after its last ')'.
fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

fn children_of(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return children;
    };
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            children.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    children
}

fn clock_ticks_per_second() -> f64 {
    rustix::param::clock_ticks_per_second() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_ticks_are_read_after_the_command_name() {
        let line = "42 (odd) name) S 1 42 42 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 1 0 9 0 0";
        assert_eq!(parse_stat_ticks(line), Some(12));
        assert_eq!(parse_stat_ticks("garbage"), None);
    }

    #[test]
    fn our_own_cpu_time_is_readable() {
        let me = std::process::id();
        assert!(process_ticks(me).is_some());
        assert_eq!(process_tree(me)[0], me);
        let child = Command::new("sleep").arg("5").spawn().unwrap();
        let tree = process_tree(me);
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
        assert!(tree.contains(&child.id()), "{tree:?}");
        // Burn some CPU so the run time cannot stay at zero.
        let spin = Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < Duration::from_millis(20) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(process_run_ns(me).unwrap() > 0);
    }

    #[test]
    fn a_process_that_ended_counts_nothing_on_the_clock_of_the_run() {
        // Process 2 ended between the listing and the reading: it has
        // neither a run time nor ticks any more. The ticks are coarser
        // than the run time (1.234 s is 123 ticks of 10 ms), so a reading
        // in the wrong unit shows.
        let reading = |table: [(u32, u64); 2]| {
            move |pid| table.iter().find(|&&(p, _)| p == pid).map(|&(_, n)| n)
        };
        let run_ns = reading([(1, 1_234_000_000), (3, 250_000_000)]);
        let ticks = reading([(1, 123), (3, 25)]);
        let pids = [1, 2, 3];
        assert_eq!(CpuClock::RunTime.seconds_of(&pids, run_ns, ticks), 1.484);
        assert_eq!(
            CpuClock::Ticks.seconds_of(&pids, run_ns, ticks),
            148.0 / clock_ticks_per_second()
        );
    }

    #[test]
    fn the_run_time_clock_is_chosen_where_our_own_run_time_reads() {
        assert_eq!(CpuClock::given_own_run_ns(Some(42)), CpuClock::RunTime);
        assert_eq!(CpuClock::given_own_run_ns(Some(0)), CpuClock::Ticks);
        assert_eq!(CpuClock::given_own_run_ns(None), CpuClock::Ticks);
    }

    #[test]
    fn limits_are_replaced_or_added() {
        let text = config_text(
            Listen::Unix(Path::new("/tmp/x")),
            &[
                ("max_match_rules_per_connection", 7),
                ("max_names_per_connection", 9),
            ],
        );
        assert!(text.contains(r#"<limit name="max_match_rules_per_connection">7</limit>"#));
        assert!(!text.contains(r#"<limit name="max_match_rules_per_connection">50000"#));
        assert!(text.contains(r#"<limit name="max_names_per_connection">9</limit>"#));
        assert!(text.contains(r#"<limit name="max_incoming_bytes">1000000000</limit>"#));
        assert_eq!(text.matches("<limit ").count(), BENCH_LIMITS.len() + 1);
    }

    #[test]
    fn tcp_buses_listen_on_loopback_with_anonymous() {
        let text = config_text(Listen::Tcp, &[]);
        assert!(text.contains("<listen>tcp:host=127.0.0.1,port=0</listen>"));
        assert!(text.contains("<auth>ANONYMOUS</auth>"));
        assert!(text.contains("<allow_anonymous/>"));
        assert!(RunningBus::start_tcp(BusKind::DbusBroker, Path::new("/nonexistent")).is_err());
    }

    #[test]
    fn resident_memory_is_read_from_status() {
        assert_eq!(parse_rss_kib("Name:\tx\nVmRSS:\t  1234 kB\n"), Some(1234));
        assert_eq!(parse_rss_kib("Name:\tx\n"), None);
        assert!(process_rss_bytes(std::process::id()).unwrap() > 0);
    }

    #[test]
    fn only_quickbus_takes_a_socket_buffer_size() {
        let config = config_text(
            Listen::Unix(Path::new("/tmp/x/bus")),
            &[("socket_buffer_bytes", 4096)],
        );
        assert!(config.contains("<limit name=\"socket_buffer_bytes\">4096</limit>\n</busconfig>"));
        let refused = RunningBus::start_with_socket_buffer(
            BusKind::DbusBroker,
            Path::new("/nonexistent"),
            Some(4096),
        );
        assert!(refused.is_err());
    }

    #[test]
    fn bus_names_round_trip() {
        for kind in BusKind::ALL {
            assert_eq!(BusKind::parse(kind.name()), Some(kind));
        }
        assert_eq!(BusKind::parse("kdbus"), None);
    }

    #[test]
    fn bus_lists_parse_or_name_the_unknown_one() {
        let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            BusKind::parse_list(&names(&["dbus-broker", "quickbus"])),
            Ok(vec![BusKind::DbusBroker, BusKind::Quickbus])
        );
        let err = BusKind::parse_list(&names(&["quickbus", "kdbus"])).unwrap_err();
        assert!(err.contains("\"kdbus\""), "{err}");
    }
}
