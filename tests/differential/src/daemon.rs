//! One bus daemon (either implementation) started with the harness's
//! configuration in a scratch directory, stopped (SIGTERM, then SIGKILL if
//! it lingers) when dropped.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

use crate::TIMEOUT;

/// The configuration both daemons get: a session bus on a unix socket in
/// the scratch directory, EXTERNAL authentication, the policy of Debian's
/// session.conf (which lets everything through, unrequested replies and
/// eavesdropping included), the scratch directory's `services/` as service
/// directory, and `extra` inside `<busconfig>`.
pub fn config_text(dir: &Path, extra: &str) -> String {
    format!(
        r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={dir}/bus</listen>
  <auth>EXTERNAL</auth>
  <servicedir>{dir}/services</servicedir>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
  </policy>
  {extra}
</busconfig>
"#,
        dir = dir.display()
    )
}

/// The daemon under test: `QUICKBUS_DIFF_DAEMON`, else the workspace's
/// quickbus-daemon next to the running test's target directory.
pub fn quickbus_daemon() -> PathBuf {
    if let Some(path) = std::env::var_os("QUICKBUS_DIFF_DAEMON") {
        return PathBuf::from(path);
    }
    // Test binaries live in <target>/<profile>/deps/; the daemon in <target>/<profile>/.
    let exe = std::env::current_exe().expect("current exe");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target dir");
    let path = profile_dir.join("quickbus-daemon");
    assert!(
        path.is_file(),
        "no {} (run `cargo build -p quickbus-daemon` first or set QUICKBUS_DIFF_DAEMON)",
        path.display()
    );
    path
}

/// A fresh scratch directory under the system temp dir, removed on drop
/// (short: unix socket paths are limited to 108 bytes).
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new() -> Scratch {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "qb-diff-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(path.join("services"))
            .unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        Scratch(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Default for Scratch {
    fn default() -> Self {
        Scratch::new()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running daemon.
pub struct Daemon {
    child: Child,
    address: String,
    // Dropped after the child is stopped (field order).
    scratch: Scratch,
}

impl Daemon {
    /// Starts `program --config-file=... --nofork --print-address`; the
    /// `.service` files in `services` (file name, contents) are written
    /// first.
    pub fn start(program: &Path, extra_config: &str, services: &[(String, String)]) -> Daemon {
        let scratch = Scratch::new();
        let dir = scratch.path();
        for (name, text) in services {
            let path = dir.join("services").join(name);
            std::fs::write(&path, text)
                .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        }
        let config = dir.join("bus.conf");
        std::fs::write(&config, config_text(dir, extra_config)).expect("write bus.conf");
        let stderr = File::create(dir.join("daemon.stderr")).expect("stderr log");
        // --print-address without a value prints to stdout: a pipe std
        // creates close-on-exec, so no other scenario's child inherits it.
        let mut child = Command::new(program)
            .arg(format!("--config-file={}", config.display()))
            .arg("--nofork")
            .arg("--print-address")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(TIMEOUT).unwrap_or_default();
        let daemon = Daemon {
            child,
            address: line.trim().to_owned(),
            scratch,
        };
        assert!(
            !daemon.address.is_empty(),
            "{} printed no address; stderr: {}",
            program.display(),
            daemon.log()
        );
        daemon
    }

    /// The socket clients connect to.
    pub fn socket_path(&self) -> PathBuf {
        self.scratch.path().join("bus")
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The address the daemon printed.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// What the daemon wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.scratch.path().join("daemon.stderr")).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = kill_process(Pid::from_child(&self.child), Signal::Term);
        let deadline = Instant::now() + TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
