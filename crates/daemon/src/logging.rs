//! Where the daemon's log lines go: standard error, the system log, or
//! both, chosen as dbus-daemon chooses (`--syslog`, `--syslog-only`,
//! `--nosyslog`, else the configuration's `<syslog/>`).
//!
//! Under systemd the journal takes the place of both: standard error when
//! `JOURNAL_STREAM` names it, and the system log when the daemon's output
//! goes to the journal at all. Lines then go in the journal's native
//! protocol (`tracing-journald`), with their priority and the structured
//! fields of connection lines (`DBUS_UNIQUE_NAME`, `DBUS_PEER_UID`,
//! `DBUS_PEER_PID`, `DBUS_PEER_COMM`). Elsewhere the system log is syslog
//! (`/dev/log`, facility daemon, and auth for policy denials as
//! dbus-daemon logs them), and standard error gets plain lines,
//! `quickbus-daemon[PID]: text`, as dbus-daemon prints them.
//!
//! [`init`] routes to standard error until the configuration is known;
//! [`configure`] then settles the destinations once, before the daemon
//! forks, so the system log's socket survives the fork that detaches the
//! standard streams.

mod syslog_sink;
mod text;

use std::io::{self, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::RwLock;

use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_journald::{Priority, PriorityMappings};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use crate::cli::SyslogMode;
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

/// What each line is sent to.
struct Sinks {
    stderr_text: bool,
    journal: Option<Journal>,
    syslog: Option<SyslogSink>,
}

/// The journal's native protocol, in two flavours: dbus-daemon logs
/// policy denials at notice priority in the auth facility.
struct Journal {
    daemon: tracing_journald::Layer,
    security: tracing_journald::Layer,
}

static SINKS: RwLock<Sinks> = RwLock::new(Sinks {
    stderr_text: true,
    journal: None,
    syslog: None,
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
}

/// Route lines as `--syslog*` and `<syslog/>` say. Called once, before
/// the daemon forks or changes user.
pub fn configure(cli: Option<SyslogMode>, config_syslog: bool) {
    set_sinks(Destinations::choose(cli, config_syslog));
}

/// Whether lines reach the terminal (or whatever standard error is) as
/// text: if not, fatal start-up errors are printed there as well.
pub fn stderr_is_text() -> bool {
    SINKS.read().map(|s| s.stderr_text).unwrap_or(true)
}

fn set_sinks(want: Destinations) {
    let stream = std::env::var("JOURNAL_STREAM").ok();
    let stream = stream.as_deref().and_then(parse_journal_stream);
    let connected = |fd: std::os::fd::BorrowedFd<'_>| stream.is_some_and(|s| is_stream(fd, s));
    let stderr_is_journal = connected(io::stderr().as_fd());
    let output_is_journal = stderr_is_journal || connected(io::stdout().as_fd());

    let journal_wanted =
        (want.stderr && stderr_is_journal) || (want.system_log && output_is_journal);
    let journal = journal_wanted.then(open_journal).flatten();
    let sinks = Sinks {
        stderr_text: want.stderr && !(stderr_is_journal && journal.is_some()),
        syslog: (want.system_log && !(output_is_journal && journal.is_some()))
            .then(|| SyslogSink::new(syslog_path())),
        journal,
    };
    if let Ok(mut current) = SINKS.write() {
        *current = sinks;
    }
}

fn syslog_path() -> PathBuf {
    std::env::var_os(TEST_SYSLOG_SOCKET_ENV)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(SYSLOG_SOCKET))
}

fn open_journal() -> Option<Journal> {
    let open = |info: Priority, facility: &str| {
        let mut mappings = PriorityMappings::new();
        mappings.error = Priority::Error;
        mappings.warn = Priority::Warning;
        mappings.info = info;
        mappings.debug = Priority::Debug;
        mappings.trace = Priority::Debug;
        tracing_journald::Layer::new().ok().map(|layer| {
            layer
                .with_field_prefix(None)
                .with_syslog_identifier(IDENTIFIER.to_owned())
                .with_priority_mappings(mappings)
                .with_custom_fields([("SYSLOG_FACILITY", facility)])
        })
    };
    Some(Journal {
        daemon: open(Priority::Informational, "3")?,
        security: open(Priority::Notice, "4")?,
    })
}

/// `JOURNAL_STREAM=<dev>:<inode>`, as systemd sets it.
fn parse_journal_stream(value: &str) -> Option<(u64, u64)> {
    let (dev, ino) = value.split_once(':')?;
    Some((dev.parse().ok()?, ino.parse().ok()?))
}

fn is_stream(fd: std::os::fd::BorrowedFd<'_>, (dev, ino): (u64, u64)) -> bool {
    rustix::fs::fstat(fd).is_ok_and(|st| st.st_dev == dev && st.st_ino == ino)
}

/// The layer that sends each event to the sinks of the moment.
struct Router;

impl<S> tracing_subscriber::Layer<S> for Router
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    // The journal layer keeps span fields in the span's extensions (once
    // per span: both flavours read the same ones). The sinks are settled
    // at start-up before any span exists, so no span misses them.
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if let Ok(sinks) = SINKS.read() {
            if let Some(journal) = &sinks.journal {
                journal.daemon.on_new_span(attrs, id, ctx);
            }
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Ok(sinks) = SINKS.read() {
            if let Some(journal) = &sinks.journal {
                journal.daemon.on_record(id, values, ctx);
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        // The core's warnings go through the daemon's one rate limit.
        if !crate::log_limit::admits_core_event(event.metadata()) {
            return;
        }
        let Ok(sinks) = SINKS.read() else {
            return;
        };
        let security = event.metadata().target() == SECURITY;
        if let Some(journal) = &sinks.journal {
            let layer = if security {
                &journal.security
            } else {
                &journal.daemon
            };
            layer.on_event(event, ctx);
        }
        if !sinks.stderr_text && sinks.syslog.is_none() {
            return;
        }
        let line = text::render(event);
        let level = *event.metadata().level();
        if let Some(syslog) = &sinks.syslog {
            syslog.send(level, security, &line);
        }
        if sinks.stderr_text {
            write_stderr(&line);
        }
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
}
