//! A private bus daemon for tests and benchmarks: started with a
//! temporary configuration, killed (and its directory removed) on drop.
//!
//! The daemon binary is `$QUICKBUS_TEST_DAEMON` if set (any program with
//! dbus-daemon's `--config-file --nofork --print-address` command line,
//! e.g. /usr/bin/dbus-daemon), else the workspace's built quickbus-daemon.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use crate::{Connection, Error};

/// How long a test waits for the daemon to print its address, and the
/// read time-out of connections made with `connect()`.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(20);

pub struct TestBus {
    child: Child,
    dir: PathBuf,
    address: String,
}

impl TestBus {
    /// Start a daemon with a permissive session-bus configuration.
    pub fn start() -> TestBus {
        TestBus::start_with_policy("")
    }

    /// Start a daemon; `extra_config` is inserted into `<busconfig>` (e.g.
    /// more `<policy>` or `<limit>` elements).
    pub fn start_with_policy(extra_config: &str) -> TestBus {
        let dir = unique_temp_dir();
        let config = dir.join("bus.conf");
        std::fs::write(&config, config_text(&dir, extra_config)).expect("write test bus config");
        let program = daemon_program();
        let mut child = Command::new(&program)
            .arg(format!("--config-file={}", config.display()))
            .arg("--nofork")
            .arg("--print-address")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start test bus daemon {} ({e}); build quickbus-daemon or set \
                     QUICKBUS_TEST_DAEMON=/usr/bin/dbus-daemon",
                    program.display()
                )
            });
        let stdout = child.stdout.take().expect("piped stdout");
        // Read the address on a thread so a daemon that never prints one
        // cannot hang the test.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let result = BufReader::new(stdout).read_line(&mut line).map(|_| line);
            let _ = tx.send(result);
        });
        let address = match rx.recv_timeout(TEST_TIMEOUT) {
            Ok(Ok(line)) if !line.trim().is_empty() => line.trim().to_owned(),
            other => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = std::fs::remove_dir_all(&dir);
                panic!(
                    "test bus daemon {} printed no address: {other:?}",
                    program.display()
                );
            }
        };
        TestBus {
            child,
            dir,
            address,
        }
    }

    /// The address the daemon printed.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// A new connection with TEST_TIMEOUT as read time-out.
    pub fn connect(&self) -> Connection {
        self.try_connect().expect("connect to the test bus")
    }

    pub fn try_connect(&self) -> Result<Connection, Error> {
        Connection::connect_with_timeout(&self.address, TEST_TIMEOUT)
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The temporary directory holding the config and the socket.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for TestBus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn daemon_program() -> PathBuf {
    if let Some(program) = std::env::var_os("QUICKBUS_TEST_DAEMON") {
        return program.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("debug/quickbus-daemon")
}

fn unique_temp_dir() -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("quickbus-test-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create test bus directory");
    dir
}

fn config_text(dir: &Path, extra: &str) -> String {
    format!(
        r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={}/bus</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
  {extra}
</busconfig>
"#,
        dir.display()
    )
}
