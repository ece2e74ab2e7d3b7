//! The binary a restart executes: the path the daemon was started from
//! (after an upgrade, the new file there), and an `O_PATH` descriptor of
//! the file this image runs, opened at start-up, to come back to.
//!
//! Owns: both, and the check that a binary speaks our handover version.
//! May touch: nothing else.

use std::ffi::{CString, OsStr};
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal};

use super::HANDOVER_VERSION;

/// How long a binary may take to print its handover version.
const VERSION_CHECK_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Binary {
    /// Where the daemon was started from, resolved at start-up.
    pub path: PathBuf,
    /// The file this image runs, whatever has become of `path`.
    pub running: OwnedFd,
}

impl Binary {
    /// This image's binary, read from /proc/self/exe before anything
    /// replaces it. `started_from`: a path handed over by the previous
    /// image (the path it was started from), else this image's own.
    pub fn open(started_from: Option<PathBuf>) -> io::Result<Binary> {
        let running = rustix::fs::open(
            "/proc/self/exe",
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        let path = match started_from {
            Some(path) => path,
            None => std::fs::read_link("/proc/self/exe")?,
        };
        Ok(Binary { path, running })
    }

    /// Whether the binary at `path` now can take over: it runs and prints
    /// our handover version. The error says why not, for the log and the
    /// caller of Restart.
    pub fn check(&self) -> Result<(), String> {
        let path = &self.path;
        let mut child = Command::new(path)
            .arg("--handover-version")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
        let deadline = Instant::now() + VERSION_CHECK_TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2))
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "{} --handover-version did not answer within {} s",
                        path.display(),
                        VERSION_CHECK_TIMEOUT.as_secs()
                    ));
                }
                Err(e) => return Err(format!("cannot wait for {}: {e}", path.display())),
            }
        };
        let mut printed = String::new();
        if let Some(mut out) = child.stdout.take() {
            let _ = out.read_to_string(&mut printed);
        }
        if !status.success() {
            return Err(format!(
                "{} --handover-version failed ({status}): not a quickbus-daemon that can restart in place",
                path.display()
            ));
        }
        match printed.trim().parse::<u32>() {
            Ok(v) if v == HANDOVER_VERSION => Ok(()),
            Ok(v) => Err(format!(
                "{} speaks handover version {v}, this bus {HANDOVER_VERSION}",
                path.display()
            )),
            Err(_) => Err(format!(
                "{} --handover-version printed {:?}, not a version",
                path.display(),
                printed.trim()
            )),
        }
    }

    /// Replace this image with the binary at [`Binary::path`], the same
    /// arguments, and `env` added to the environment. Returns only if
    /// exec failed.
    pub fn exec(&self, env: &[(&str, String)]) -> io::Error {
        let program = match CString::new(self.path.as_os_str().as_bytes()) {
            Ok(p) => p,
            Err(e) => return io::Error::new(io::ErrorKind::InvalidInput, e),
        };
        exec_with(|argv, envp| nix::unistd::execve(&program, argv, envp), env)
    }

    /// Replace this image with the binary it was started from, by its
    /// descriptor (the way back when a new binary cannot resume).
    pub fn exec_running(running: &OwnedFd, env: &[(&str, String)]) -> io::Error {
        exec_with(|argv, envp| nix::unistd::fexecve(running, argv, envp), env)
    }
}

/// The signals the daemon handles. They stay blocked across exec (the
/// mask survives it, handlers do not) until the new image has its
/// handlers: a SIGTERM or SIGUSR2 sent meanwhile waits instead of killing
/// the bus by default action.
fn handled_signals() -> SigSet {
    let mut set = SigSet::empty();
    for signal in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGCHLD,
        Signal::SIGUSR2,
    ] {
        set.add(signal);
    }
    set
}

/// Unblock what [`exec_with`] blocked, once the handlers are installed
/// (pending signals are then delivered to them).
pub fn unblock_handled_signals() {
    let _ = handled_signals().thread_unblock();
}

/// The handled signals, blocked until this is dropped (a restart that did
/// not happen) or for good (the exec happened: see [`exec_with`]).
pub struct HeldSignals(());

/// Block the signals the daemon handles: while a restart is under way
/// they wait in the kernel, which keeps them pending across the exec,
/// instead of reaching the handler of an image about to be replaced.
pub fn hold_handled_signals() -> HeldSignals {
    let _ = handled_signals().thread_block();
    HeldSignals(())
}

impl Drop for HeldSignals {
    fn drop(&mut self) {
        unblock_handled_signals();
    }
}

fn exec_with(
    exec: impl FnOnce(&[CString], &[CString]) -> nix::Result<std::convert::Infallible>,
    env: &[(&str, String)],
) -> io::Error {
    let blocked = handled_signals();
    let _ = blocked.thread_block();
    // The lines logged so far, written by this image: its log's thread
    // ends with the exec, and the new image knows nothing of its queue.
    // Those a sink did not take in time are counted for the new image to
    // tell (logging::LOST_AT_EXEC_ENV).
    let lost = crate::logging::drain_before_exec();
    let env: Vec<(&str, String)> = env.iter().cloned().chain(lost).collect();
    let argv: Vec<CString> = std::env::args_os()
        .filter_map(|a| CString::new(a.into_vec()).ok())
        .collect();
    let mut envp: Vec<CString> = std::env::vars_os()
        .filter(|(k, _)| !env.iter().any(|(key, _)| OsStr::new(key) == k))
        .filter_map(|(k, v)| {
            let mut pair = k.into_vec();
            pair.push(b'=');
            pair.extend_from_slice(v.as_bytes());
            CString::new(pair).ok()
        })
        .collect();
    envp.extend(
        env.iter()
            .filter_map(|(k, v)| CString::new(format!("{k}={v}")).ok()),
    );
    let Err(errno) = exec(&argv, &envp);
    let _ = blocked.thread_unblock();
    io::Error::from(errno)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_forks::{no_forks, starting_programs};
    use std::os::unix::fs::PermissionsExt;

    /// A binary at a fresh path: a shell script with `body`.
    fn script(name: &str, body: &str) -> Binary {
        let dir = std::env::temp_dir().join(format!(
            "quickbus-binary-test-{}-{name}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("quickbus-daemon");
        // Written while no other thread forks: a child would hold it open
        // for writing, and running it would fail with ETXTBSY.
        let no_forks = no_forks();
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        drop(no_forks);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut binary = Binary::open(None).unwrap();
        binary.path = path;
        binary
    }

    /// `binary.check()`, which runs it, while no test writes a script.
    fn checked(binary: &Binary) -> Result<(), String> {
        let _starting = starting_programs();
        binary.check()
    }

    #[test]
    fn a_binary_printing_our_version_may_take_over() {
        let binary = script("same", &format!("echo {HANDOVER_VERSION}"));
        assert_eq!(checked(&binary), Ok(()));
    }

    #[test]
    fn another_version_a_failing_program_or_garbage_are_refused() {
        let other = script("other", &format!("echo {}", HANDOVER_VERSION + 1));
        let why = checked(&other).unwrap_err();
        assert!(
            why.contains(&format!("speaks handover version {}", HANDOVER_VERSION + 1)),
            "{why}"
        );

        let failing = script("failing", "echo unknown option >&2; exit 1");
        let why = checked(&failing).unwrap_err();
        assert!(
            why.contains("not a quickbus-daemon that can restart in place"),
            "{why}"
        );

        let chatty = script("chatty", "echo hello");
        let why = checked(&chatty).unwrap_err();
        assert!(why.contains("not a version"), "{why}");
    }

    #[test]
    fn a_missing_binary_is_refused() {
        let mut binary = Binary::open(None).unwrap();
        binary.path = PathBuf::from("/nonexistent/quickbus-daemon");
        let why = checked(&binary).unwrap_err();
        assert!(
            why.starts_with("cannot run /nonexistent/quickbus-daemon"),
            "{why}"
        );
    }

    #[test]
    fn the_running_binary_is_this_test_program() {
        let binary = Binary::open(None).unwrap();
        assert_eq!(binary.path, std::env::current_exe().unwrap());
    }
}
