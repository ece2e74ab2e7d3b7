//! The system log outside systemd: RFC 3164 datagrams to `/dev/log` (the
//! `syslog` crate), facility daemon, and auth for security messages, as
//! dbus-daemon's `openlog(LOG_PID, LOG_DAEMON)` sends them.

use std::path::PathBuf;
use std::sync::Mutex;

use syslog::{Facility, Formatter3164, Logger, LoggerBackend};
use tracing::Level;

use super::{syslog_severity, IDENTIFIER};

pub struct SyslogSink {
    path: PathBuf,
    /// Connected on first use and again after a failed send: the syslog
    /// daemon may start after us, or restart (which breaks the connected
    /// socket), as libc's syslog also reconnects.
    logger: Mutex<Option<Logger<LoggerBackend, Formatter3164>>>,
}

impl SyslogSink {
    pub fn new(path: PathBuf) -> SyslogSink {
        let sink = SyslogSink {
            path,
            logger: Mutex::new(None),
        };
        // Connect now, before a fork or a change of user or root.
        if let Ok(mut logger) = sink.logger.lock() {
            *logger = sink.connect();
        }
        sink
    }

    fn connect(&self) -> Option<Logger<LoggerBackend, Formatter3164>> {
        let formatter = Formatter3164 {
            facility: Facility::LOG_DAEMON,
            hostname: None,
            process: IDENTIFIER.to_owned(),
            pid: std::process::id(),
        };
        syslog::unix_custom(formatter, &self.path).ok()
    }

    /// Send one line; lost if no syslog daemon listens (as with libc).
    pub fn send(&self, level: Level, security: bool, line: &str) {
        let Ok(mut logger) = self.logger.lock() else {
            return;
        };
        for _attempt in 0..2 {
            if logger.is_none() {
                *logger = self.connect();
            }
            let Some(connected) = logger.as_mut() else {
                return;
            };
            // The pid changes when the daemon forks.
            connected.formatter.pid = std::process::id();
            connected.formatter.facility = if security {
                Facility::LOG_AUTH
            } else {
                Facility::LOG_DAEMON
            };
            let sent = match syslog_severity(level, security) {
                syslog::Severity::LOG_ERR => connected.err(line),
                syslog::Severity::LOG_WARNING => connected.warning(line),
                syslog::Severity::LOG_NOTICE => connected.notice(line),
                syslog::Severity::LOG_INFO => connected.info(line),
                _ => connected.debug(line),
            };
            if sent.is_ok() {
                return;
            }
            *logger = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    #[test]
    fn lines_arrive_with_priority_tag_and_pid_and_survive_a_restart() {
        // A child another test forks would keep the first server socket
        // alive until its exec: the sink's send would then succeed into
        // it, and the second server never hear the line.
        let _alone = crate::test_forks::no_forks();
        let dir = std::env::temp_dir().join(format!("qb-syslog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log");
        let server = bound(&path);
        let sink = SyslogSink::new(path.clone());
        sink.send(Level::WARN, false, "careful");
        let mut buf = [0u8; 512];
        let n = server.recv(&mut buf).unwrap();
        let got = String::from_utf8_lossy(&buf[..n]).into_owned();
        // daemon (3) * 8 + warning (4)
        assert!(got.starts_with("<28>"), "{got}");
        let pid = std::process::id();
        assert!(
            got.ends_with(&format!(" quickbus-daemon[{pid}]: careful")),
            "{got}"
        );

        // The syslog daemon restarts: a new socket at the same path.
        drop(server);
        std::fs::remove_file(&path).unwrap();
        let server = bound(&path);
        sink.send(Level::INFO, true, "denied");
        let n = server.recv(&mut buf).unwrap();
        let got = String::from_utf8_lossy(&buf[..n]).into_owned();
        // auth (4) * 8 + notice (5)
        assert!(got.starts_with("<37>"), "{got}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A syslog daemon's socket at `path`; a line that never comes fails
    /// the test instead of hanging it.
    fn bound(path: &std::path::Path) -> UnixDatagram {
        let server = UnixDatagram::bind(path).unwrap();
        server
            .set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .unwrap();
        server
    }
}
