//! Where the daemon's log lines go: standard error, the system log, or
//! both, chosen as dbus-daemon chooses (`--syslog`, `--syslog-only`,
//! `--nosyslog`, else the configuration's `<syslog/>`).
//!
//! Under systemd the journal takes the place of both: standard error when
//! `JOURNAL_STREAM` names it, and the system log when the daemon's output
//! goes to the journal at all. Lines then go in the journal's native
//! protocol (`journal`), with their priority and the structured fields of
//! connection lines (`DBUS_UNIQUE_NAME`, `DBUS_PEER_UID`, `DBUS_PEER_PID`,
//! `DBUS_PEER_COMM`). Elsewhere the system log is syslog (`/dev/log`,
//! facility daemon, and auth for policy denials as dbus-daemon logs them),
//! and standard error gets plain lines, `quickbus-daemon[PID]: text`, as
//! dbus-daemon prints them.
//!
//! The log never stops the bus: a line is formatted where it is logged
//! and queued (at most `queue::BOUND` lines) for the log's one thread,
//! which writes it to every sink that can keep a writer waiting (syslog,
//! the journal, a standard error that is a pipe, a terminal or a socket:
//! `writer`). A line that finds the queue full is lost, and counted: a
//! warning says how many, on each of those sinks, where the lines went
//! missing (docs/reliability.md, "The log"). A standard error that is a
//! regular file or /dev/null, which never waits for a reader, is written
//! at once by the thread that logs. Each queued line carries the sinks
//! it was logged under. [`drain`] writes what is queued before a fork,
//! an exec, the switch to `<user>` (so no log thread keeps root's ids), a
//! forked daemon's readiness and the exit.
//!
//! [`init`] routes to standard error until the configuration is known;
//! [`configure`] then settles the destinations once, before the daemon
//! forks, so the system log's socket survives the fork that detaches the
//! standard streams.

mod handoff;
mod journal;
mod queue;
mod record;
mod syslog_sink;
mod writer;

use std::io::{self, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, RwLock};
use std::time::Duration;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

use crate::cli::SyslogMode;
use journal::Journal;
use record::Record;
use syslog_sink::SyslogSink;

/// The name the lines carry (syslog tag, journal `SYSLOG_IDENTIFIER`,
/// standard error prefix).
pub const IDENTIFIER: &str = "quickbus-daemon";

/// The target of policy denials: dbus-daemon logs them as "security"
/// messages, at notice priority in the auth facility.
pub const SECURITY: &str = "security";

/// The syslog socket, which the tests replace with one they bind (this
/// variable exists for them only: libc's syslog, and so dbus-daemon,
/// always use `/dev/log`).
pub const TEST_SYSLOG_SOCKET_ENV: &str = "QUICKBUS_TEST_SYSLOG_SOCKET";
const SYSLOG_SOCKET: &str = "/dev/log";

/// The destinations dbus-daemon's options and configuration ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Destinations {
    pub stderr: bool,
    pub system_log: bool,
}

impl Destinations {
    /// The command line wins over `<syslog/>` (which the system bus's
    /// configuration has and the session bus's has not); only
    /// `--syslog-only` silences standard error.
    pub fn choose(cli: Option<SyslogMode>, config_syslog: bool) -> Destinations {
        let (stderr, system_log) = match cli {
            Some(SyslogMode::Only) => (false, true),
            Some(SyslogMode::Also) => (true, true),
            Some(SyslogMode::Off) => (true, false),
            None => (true, config_syslog),
        };
        Destinations { stderr, system_log }
    }
}

/// How long the daemon waits for the log's thread to write what is
/// queued, before a fork or exec and at exit: the last lines (a fatal
/// error) should appear, but a sink that takes nothing must not keep a
/// stopping daemon for long.
pub const DRAIN_WAIT: Duration = Duration::from_secs(2);

/// What each line is sent to: those of the moment a line is logged,
/// which the line carries to the log's thread (`queue`).
struct Sinks {
    stderr_text: StderrText,
    journal: Option<Journal>,
    syslog: Option<SyslogSink>,
}

/// Whether standard error gets text lines, and who writes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StderrText {
    Off,
    /// A regular file or /dev/null, which never keeps a writer waiting
    /// for a reader: written by the thread that logs, at once, as
    /// dbus-daemon writes (so the line is there when the caller's reply
    /// is).
    Direct,
    /// Anything that can block (a pipe, a terminal, a socket): written by
    /// the log's thread.
    Queued,
}

impl Sinks {
    /// Whether any sink is written by the log's thread.
    fn queued(&self) -> bool {
        self.stderr_text == StderrText::Queued || self.journal.is_some() || self.syslog.is_some()
    }
}

/// The sinks of the moment, which each line takes when it is logged (so
/// a line queued before [`configure`] goes where lines went then, and no
/// lock is held while a sink blocks the log's thread).
static SINKS: LazyLock<RwLock<Arc<Sinks>>> = LazyLock::new(|| {
    RwLock::new(Arc::new(Sinks {
        stderr_text: stderr_text(true),
        journal: None,
        syslog: None,
    }))
});

/// Install the subscriber: lines at `$QUICKBUS_LOG` (default `info`) and
/// above, to standard error (the journal if it is standard error) until
/// [`configure`] is called.
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("QUICKBUS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(Router)
        .try_init();
    set_sinks(Destinations {
        stderr: true,
        system_log: false,
    });
    // The previous image's last lines, if a restart's exec left them
    // unwritten: counted once the destinations are known (`configure`).
    if let Some(lost) = take_lost_at_exec() {
        LOST_AT_EXEC.store(lost, Ordering::Relaxed);
    }
    drain_before_panics();
}

/// A panic may end the process: the lines logged before it are written
/// first, then the panic is reported as before (not by the log's thread
/// itself, which would wait for itself).
fn drain_before_panics() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !writer::on_log_thread() {
            drain();
        }
        report(info);
    }));
}

/// Route lines as `--syslog*` and `<syslog/>` say. Called once, before
/// the daemon forks or changes user.
pub fn configure(cli: Option<SyslogMode>, config_syslog: bool) {
    set_sinks(Destinations::choose(cli, config_syslog));
    // First on the sinks the bus logs to, as any lost lines are counted.
    let lost = LOST_AT_EXEC.swap(0, Ordering::Relaxed);
    if lost > 0 {
        log(Record::lost(lost));
    }
}

/// Whether lines reach the terminal (or whatever standard error is) as
/// text: if not, fatal start-up errors are printed there as well.
pub fn stderr_is_text() -> bool {
    SINKS
        .read()
        .map(|s| s.stderr_text != StderrText::Off)
        .unwrap_or(true)
}

/// Write every line logged so far and end the log's thread, waiting at
/// most [`DRAIN_WAIT`]; the next line starts another. Called before a
/// fork (a thread does not survive it, and a queued line would be written
/// by both processes), an exec ([`drain_before_exec`]) and the change of
/// user (ids are a thread's), when a forked daemon is ready, and at exit.
/// False if a sink still holds the thread up.
pub fn drain() -> bool {
    writer::end(DRAIN_WAIT).is_ok()
}

/// The environment variable by which a restart's exec tells the new image
/// how many lines it could not write in [`DRAIN_WAIT`] (they end with the
/// old image); the new image's [`init`] logs the count and removes it.
pub const LOST_AT_EXEC_ENV: &str = "QUICKBUS_LOG_LOST";

/// Lines a previous image could not write before its exec, read by
/// [`init`], told by [`configure`] (or passed on by another exec first).
static LOST_AT_EXEC: AtomicU64 = AtomicU64::new(0);

/// [`drain`] before an exec: the variable for the new image's environment
/// that counts the lines the exec will leave unwritten (and those an
/// earlier exec left that this image has not told yet), if any.
pub fn drain_before_exec() -> Option<(&'static str, String)> {
    let queued = writer::end(DRAIN_WAIT)
        .err()
        .map_or(0, |still| still.unwritten);
    let lost = queued + LOST_AT_EXEC.swap(0, Ordering::Relaxed);
    (lost > 0).then(|| (LOST_AT_EXEC_ENV, lost.to_string()))
}

/// The count a previous image left in [`LOST_AT_EXEC_ENV`], removed from
/// the environment (services the bus starts have no use for it).
fn take_lost_at_exec() -> Option<u64> {
    let value = std::env::var_os(LOST_AT_EXEC_ENV)?;
    std::env::remove_var(LOST_AT_EXEC_ENV);
    parse_lost_at_exec(&value.to_string_lossy())
}

/// A count of lost lines: a positive number (anything else counts none).
fn parse_lost_at_exec(value: &str) -> Option<u64> {
    value.trim().parse().ok().filter(|&n| n > 0)
}

fn set_sinks(want: Destinations) {
    let stream = std::env::var("JOURNAL_STREAM").ok();
    let stream = stream.as_deref().and_then(parse_journal_stream);
    let connected = |fd: std::os::fd::BorrowedFd<'_>| stream.is_some_and(|s| is_stream(fd, s));
    let stderr_is_journal = connected(io::stderr().as_fd());
    let output_is_journal = stderr_is_journal || connected(io::stdout().as_fd());

    let journal_wanted =
        (want.stderr && stderr_is_journal) || (want.system_log && output_is_journal);
    let journal = journal_wanted.then(Journal::open).flatten();
    let sinks = Sinks {
        stderr_text: stderr_text(want.stderr && !(stderr_is_journal && journal.is_some())),
        syslog: (want.system_log && !(output_is_journal && journal.is_some()))
            .then(|| SyslogSink::new(syslog_path())),
        journal,
    };
    // The lines queued so far carry the sinks they were logged under.
    *SINKS.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(sinks);
}

/// How standard error takes text lines, if `wanted`.
fn stderr_text(wanted: bool) -> StderrText {
    if !wanted {
        return StderrText::Off;
    }
    let never_waits = rustix::fs::fstat(io::stderr()).is_ok_and(|st| {
        match rustix::fs::FileType::from_raw_mode(st.st_mode) {
            rustix::fs::FileType::RegularFile => true,
            // /dev/null (1, 3), where a forked daemon's output goes.
            rustix::fs::FileType::CharacterDevice => {
                rustix::fs::major(st.st_rdev) == 1 && rustix::fs::minor(st.st_rdev) == 3
            }
            _ => false,
        }
    });
    if never_waits {
        StderrText::Direct
    } else {
        StderrText::Queued
    }
}

fn syslog_path() -> PathBuf {
    std::env::var_os(TEST_SYSLOG_SOCKET_ENV)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(SYSLOG_SOCKET))
}

/// `JOURNAL_STREAM=<dev>:<inode>`, as systemd sets it.
fn parse_journal_stream(value: &str) -> Option<(u64, u64)> {
    let (dev, ino) = value.split_once(':')?;
    Some((dev.parse().ok()?, ino.parse().ok()?))
}

fn is_stream(fd: std::os::fd::BorrowedFd<'_>, (dev, ino): (u64, u64)) -> bool {
    rustix::fs::fstat(fd).is_ok_and(|st| st.st_dev == dev && st.st_ino == ino)
}

/// The layer that formats each event and queues it for the log's thread.
struct Router;

impl<S: Subscriber> tracing_subscriber::Layer<S> for Router {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        // The core's warnings go through the daemon's one rate limit.
        if !crate::log_limit::admits_core_event(event.metadata()) {
            return;
        }
        log(Record::of_event(event));
    }
}

/// Write `record` to the sinks of the moment that never wait, and queue
/// it for the log's thread to the others.
fn log(record: Record) {
    let sinks = current_sinks();
    if sinks.stderr_text == StderrText::Direct {
        write_stderr(&record.text());
    }
    if sinks.queued() {
        writer::submit(record, &sinks);
    }
}

fn current_sinks() -> Arc<Sinks> {
    let sinks = SINKS.read().unwrap_or_else(|e| e.into_inner());
    Arc::clone(&sinks)
}

/// Write `record` to those of `sinks`, the ones it was logged under, that
/// the log's thread writes (on that thread).
fn write(record: &Record, sinks: &Sinks) {
    if let Some(journal) = &sinks.journal {
        journal.send(record);
    }
    let to_stderr = sinks.stderr_text == StderrText::Queued;
    if !to_stderr && sinks.syslog.is_none() {
        return;
    }
    let line = record.text();
    if let Some(syslog) = &sinks.syslog {
        syslog.send(record.level, record.security, &line);
    }
    if to_stderr {
        write_stderr(&line);
    }
}

/// One write per line, so lines of a daemon sharing the stream with others
/// do not interleave.
fn write_stderr(line: &str) {
    let text = format!("{IDENTIFIER}[{}]: {line}\n", std::process::id());
    let _ = io::stderr().lock().write_all(text.as_bytes());
}

/// The syslog severity of a line at `level` (dbus-daemon's: info, warning,
/// and notice for security messages).
fn syslog_severity(level: Level, security: bool) -> syslog::Severity {
    use syslog::Severity::*;
    match level {
        Level::ERROR => LOG_ERR,
        Level::WARN => LOG_WARNING,
        Level::INFO if security => LOG_NOTICE,
        Level::INFO => LOG_INFO,
        _ => LOG_DEBUG,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_wins_over_the_configuration() {
        let choose = Destinations::choose;
        let d = |stderr, system_log| Destinations { stderr, system_log };
        // The session bus: stderr only; the system bus (<syslog/>): both.
        assert_eq!(choose(None, false), d(true, false));
        assert_eq!(choose(None, true), d(true, true));
        assert_eq!(choose(Some(SyslogMode::Off), true), d(true, false));
        assert_eq!(choose(Some(SyslogMode::Also), false), d(true, true));
        assert_eq!(choose(Some(SyslogMode::Only), false), d(false, true));
    }

    #[test]
    fn journal_stream_is_device_colon_inode() {
        assert_eq!(parse_journal_stream("8:12345"), Some((8, 12345)));
        assert_eq!(parse_journal_stream("8"), None);
        assert_eq!(parse_journal_stream("a:1"), None);
        assert_eq!(parse_journal_stream(""), None);
    }

    #[test]
    fn our_own_stderr_matches_its_stat() {
        let st = rustix::fs::fstat(io::stderr()).unwrap();
        assert!(is_stream(io::stderr().as_fd(), (st.st_dev, st.st_ino)));
        assert!(!is_stream(io::stderr().as_fd(), (st.st_dev, st.st_ino + 1)));
    }

    #[test]
    fn warnings_are_warnings_and_denials_notices() {
        use syslog::Severity::*;
        assert_eq!(
            syslog_severity(Level::WARN, false) as u32,
            LOG_WARNING as u32
        );
        assert_eq!(syslog_severity(Level::INFO, false) as u32, LOG_INFO as u32);
        assert_eq!(syslog_severity(Level::INFO, true) as u32, LOG_NOTICE as u32);
        assert_eq!(syslog_severity(Level::ERROR, false) as u32, LOG_ERR as u32);
        assert_eq!(
            syslog_severity(Level::DEBUG, false) as u32,
            LOG_DEBUG as u32
        );
    }

    #[test]
    fn the_lines_lost_at_exec_are_a_positive_count() {
        assert_eq!(parse_lost_at_exec("17"), Some(17));
        assert_eq!(parse_lost_at_exec(" 3\n"), Some(3));
        assert_eq!(parse_lost_at_exec("0"), None);
        assert_eq!(parse_lost_at_exec(""), None);
        assert_eq!(parse_lost_at_exec("-2"), None);
        assert_eq!(parse_lost_at_exec("many"), None);
    }

    /// Set in the environment of a copy of this test binary that runs
    /// only [`a_panic_writes_the_queued_lines_before_it_is_reported`]:
    /// its panic hooks, sinks and log thread are the process's own.
    const PANIC_CHILD: &str = "QUICKBUS_TEST_PANIC_CHILD";
    /// What the child tells on its standard output.
    const CHILD_SAYS: &str = "panic child: ";

    /// The daemon's panic hook writes what is queued before the panic is
    /// reported (after which the process may die: here the report exits
    /// at once). The lines are held up in the log's thread by a syslog
    /// socket that takes nothing until the panic begins; the report then
    /// finds the log's thread ended with nothing queued, and every line
    /// sent.
    #[test]
    fn a_panic_writes_the_queued_lines_before_it_is_reported() {
        if std::env::var_os(PANIC_CHILD).is_some() {
            panic_with_lines_queued();
        }
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "logging::tests::a_panic_writes_the_queued_lines_before_it_is_reported",
                "--nocapture",
            ])
            .env(PANIC_CHILD, "1")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&child.stdout);
        let lines: Vec<String> = (1..=5).map(|n| format!("line {n}")).collect();
        assert!(
            said.contains(&format!("{CHILD_SAYS}log thread ended, nothing queued"))
                && said.contains(&format!("{CHILD_SAYS}sent {lines:?}"))
                && child.status.code() == Some(0),
            "{:?}\n{said}\n{}",
            child.status,
            String::from_utf8_lossy(&child.stderr)
        );
    }

    /// The child's part: queue lines behind a full syslog socket, and
    /// panic.
    fn panic_with_lines_queued() -> ! {
        use std::os::unix::net::UnixDatagram;
        use std::sync::{mpsc, Mutex};
        let dir = std::env::temp_dir().join(format!("qb-panic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("syslog");
        let syslog = UnixDatagram::bind(&path).unwrap();
        let filler = UnixDatagram::unbound().unwrap();
        filler.set_nonblocking(true).unwrap();
        while filler.send_to(b"filler", &path).is_ok() {}
        *SINKS.write().unwrap() = Arc::new(Sinks {
            stderr_text: StderrText::Off,
            journal: None,
            syslog: Some(SyslogSink::new(path)),
        });

        // Reads the socket once the panic begins, until the last line.
        let (panicking, begun) = mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            begun.recv().unwrap();
            syslog
                .set_read_timeout(Some(std::time::Duration::from_secs(30)))
                .unwrap();
            let mut buf = [0u8; 4096];
            let mut sent = Vec::new();
            while !sent.iter().any(|l: &String| l.ends_with("line 5")) {
                let Ok(n) = syslog.recv(&mut buf) else { break };
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                if let Some((_, line)) = text.rsplit_once(": ") {
                    sent.push(line.to_owned());
                }
            }
            sent
        });
        let reader = Mutex::new(Some(reader));

        // The report (the hooks run last set, first): the process dies
        // right after it, as it may after a real one.
        std::panic::set_hook(Box::new(move |_| {
            if !writer::busy() {
                println!("{CHILD_SAYS}log thread ended, nothing queued");
            }
            let reader = reader.lock().unwrap().take().unwrap();
            println!("{CHILD_SAYS}sent {:?}", reader.join().unwrap());
            let _ = std::fs::remove_dir_all(&dir);
            std::process::exit(0);
        }));
        drain_before_panics();
        let daemons = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let _ = panicking.send(());
            daemons(info);
        }));

        for n in 1..=5 {
            let mut record = Record::lost(0);
            record.message = format!("line {n}");
            log(record);
        }
        panic!("the test's panic, with 5 lines queued");
    }

    /// A line is written to the sinks of the moment it was logged, even
    /// when they change while it waits in the queue (here behind a line
    /// the first syslog socket, full, does not take yet).
    #[test]
    fn a_queued_line_goes_to_the_sinks_it_was_logged_under() {
        use std::os::unix::net::UnixDatagram;
        use std::path::Path;
        let dir = std::env::temp_dir().join(format!("qb-sinks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (first_path, second_path) = (dir.join("first"), dir.join("second"));
        let first = UnixDatagram::bind(&first_path).unwrap();
        let second = UnixDatagram::bind(&second_path).unwrap();
        let filler = UnixDatagram::unbound().unwrap();
        filler.set_nonblocking(true).unwrap();
        while filler.send_to(b"filler", &first_path).is_ok() {}
        let use_syslog_at = |path: Option<&Path>| {
            *SINKS.write().unwrap() = Arc::new(Sinks {
                stderr_text: StderrText::Off,
                journal: None,
                syslog: path.map(|path| SyslogSink::new(path.to_owned())),
            });
        };
        let logged = |text: &str| {
            let subscriber = tracing_subscriber::registry().with(Router);
            tracing::subscriber::with_default(subscriber, || tracing::warn!("{text}"));
        };

        use_syslog_at(Some(&first_path));
        logged("line one");
        logged("line two");
        // The sink takes nothing: the end of the log's thread is not
        // waited for, and says what it leaves queued (line two, and line
        // one if the thread had not taken it yet).
        let still = writer::end(std::time::Duration::from_millis(10)).unwrap_err();
        assert!((1..=2).contains(&still.unwritten), "{still:?}");
        use_syslog_at(Some(&second_path));
        // The first socket takes lines again: both come there.
        first
            .set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        let mut buf = [0u8; 4096];
        let mut got = Vec::new();
        while !got.iter().any(|l: &String| l.ends_with("line two")) {
            let n = first
                .recv(&mut buf)
                .unwrap_or_else(|e| panic!("{e}; the first socket got {got:?}"));
            let line = String::from_utf8_lossy(&buf[..n]).into_owned();
            if line != "filler" {
                got.push(line);
            }
        }
        assert!(got[0].ends_with("line one"), "{got:?}");
        assert!(drain());
        second.set_nonblocking(true).unwrap();
        let to_second = second.recv(&mut buf).map(|n| buf[..n].to_vec());
        assert!(to_second.is_err(), "{to_second:?}");
        use_syslog_at(None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
