//! Running one test program under a time limit, in its own process group,
//! and cleaning up whatever it leaves behind (a bus daemon orphaned by an
//! aborted test would otherwise outlive the run).

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::{kill_process_group, Pid, Signal};

/// How the tests find the bus daemon and their data (see dbus's
/// test/test-utils-glib.c).
#[derive(Debug, Clone)]
pub struct Environment {
    /// The daemon the tests spawn (`DBUS_TEST_DAEMON`).
    pub daemon: PathBuf,
    /// The installed tests (`DBUS_TEST_EXEC`; data in `data/`).
    pub tests: PathBuf,
    /// A home directory for the tests (`DBUS_TEST_HOMEDIR`).
    pub home: PathBuf,
    /// More variables for the tests (e.g. what a patched test expects of
    /// this daemon in particular).
    pub extra: Vec<(String, String)>,
}

impl Environment {
    fn apply(&self, command: &mut Command) {
        command
            .env("DBUS_TEST_DAEMON", &self.daemon)
            .env("DBUS_TEST_DATA", self.tests.join("data"))
            .env("DBUS_TEST_EXEC", &self.tests)
            .env("DBUS_TEST_HOMEDIR", &self.home);
        // A bus the caller happens to be on must not leak into the tests.
        for name in [
            "DBUS_TEST_DAEMON_ADDRESS",
            "DBUS_TEST_DATADIR",
            "DBUS_SESSION_BUS_ADDRESS",
            "DBUS_STARTER_ADDRESS",
            "DBUS_STARTER_BUS_TYPE",
            crate::containers::SUPPORTED_ARGUMENTS_VAR,
        ] {
            command.env_remove(name);
        }
        for (name, value) in &self.extra {
            command.env(name, value);
        }
    }
}

/// How a run ended.
#[derive(Debug)]
pub enum Ended {
    Exited(ExitStatus),
    TimedOut(Duration),
}

impl Ended {
    pub fn success(&self) -> bool {
        matches!(self, Ended::Exited(status) if status.success())
    }
}

/// Runs `program args` with the test environment, output (stdout and
/// stderr) to `log`, for at most `limit`. Returns how it ended and what it
/// printed.
pub fn run_logged(
    env: &Environment,
    program: &Path,
    args: &[&str],
    log: &Path,
    limit: Duration,
) -> std::io::Result<(Ended, String)> {
    let out = File::create(log)?;
    let err = out.try_clone()?;
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    env.apply(&mut command);
    let mut child = command.spawn()?;
    let group = Pid::from_child(&child);
    let deadline = Instant::now() + limit;
    let ended = loop {
        if let Some(status) = child.try_wait()? {
            break Ended::Exited(status);
        }
        if Instant::now() >= deadline {
            end_group(group);
            child.wait()?;
            break Ended::TimedOut(limit);
        }
        thread::sleep(Duration::from_millis(20));
    };
    // Daemons the test started (and did not stop) are still in its group.
    end_group(group);
    let output = std::fs::read_to_string(log).unwrap_or_default();
    Ok((ended, output))
}

/// Lists what `program args` prints, with the test environment, bounded.
pub fn output_of(env: &Environment, program: &Path, args: &[&str]) -> std::io::Result<String> {
    let log = env.home.join("listing.log");
    let (ended, output) = run_logged(env, program, args, &log, Duration::from_secs(30))?;
    if !ended.success() {
        return Err(std::io::Error::other(format!(
            "{} {}: {ended:?}",
            program.display(),
            args.join(" ")
        )));
    }
    Ok(output)
}

/// SIGTERM to every process of the group, then SIGKILL to what is left a
/// moment later. A group that is already empty is fine.
fn end_group(group: Pid) {
    if kill_process_group(group, Signal::Term).is_err() {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        if !has_live_members(group) {
            return;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let _ = kill_process_group(group, Signal::Kill);
}

/// Whether a process of `group` is still running. Zombies do not count:
/// orphans reparented to a pid 1 that never reaps them would otherwise
/// look alive forever.
fn has_live_members(group: Pid) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        // No /proc: ask the kernel, zombies included.
        return rustix::process::test_kill_process_group(group).is_ok();
    };
    entries.flatten().any(|entry| {
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // pid (comm) state ppid pgrp ...: comm may hold spaces, so split
        // after its closing parenthesis.
        let Some((_, fields)) = stat.rsplit_once(") ") else {
            return false;
        };
        let mut fields = fields.split(' ');
        let state = fields.next();
        let pgrp = fields.nth(1).and_then(|f| f.parse::<i32>().ok());
        state != Some("Z") && pgrp == Some(group.as_raw_nonzero().get())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(dir: &Path) -> Environment {
        Environment {
            daemon: PathBuf::from("/bin/false"),
            tests: dir.to_path_buf(),
            home: dir.to_path_buf(),
            extra: vec![("QB_EXTRA".into(), "yes".into())],
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("qb-conformance-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn output_and_status_are_captured_with_the_test_environment() {
        let dir = scratch("env");
        let (ended, output) = run_logged(
            &env(&dir),
            Path::new("/bin/sh"),
            &[
                "-c",
                "echo daemon=$DBUS_TEST_DAEMON extra=$QB_EXTRA; echo oops >&2; exit 3",
            ],
            &dir.join("log"),
            Duration::from_secs(10),
        )
        .unwrap();
        assert!(!ended.success());
        assert!(matches!(ended, Ended::Exited(s) if s.code() == Some(3)));
        assert!(output.contains("daemon=/bin/false extra=yes"), "{output}");
        assert!(output.contains("oops"), "{output}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_hanging_test_is_stopped_with_what_it_left_behind() {
        let dir = scratch("hang");
        let pidfile = dir.join("orphan.pid");
        let script = format!("sleep 600 & echo $! > {}; sleep 600", pidfile.display());
        let (ended, _) = run_logged(
            &env(&dir),
            Path::new("/bin/sh"),
            &["-c", &script],
            &dir.join("log"),
            Duration::from_millis(500),
        )
        .unwrap();
        assert!(matches!(ended, Ended::TimedOut(_)));
        let orphan = std::fs::read_to_string(&pidfile).unwrap();
        let alive = Path::new(&format!("/proc/{}", orphan.trim())).exists()
            && !std::fs::read_to_string(format!("/proc/{}/stat", orphan.trim()))
                .unwrap_or_default()
                .contains(") Z ");
        assert!(!alive, "the background sleep {} survived", orphan.trim());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
