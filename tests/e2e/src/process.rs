//! Child processes that can never hang a test: every wait is bounded, and a
//! child still running when its handle drops is killed.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use crate::{POLL_INTERVAL, TIMEOUT};

/// Held while a child is spawned with an inheritable (non-CLOEXEC) fd, so
/// that no child spawned concurrently by another test inherits it too.
static SPAWN_LOCK: Mutex<()> = Mutex::new(());

pub(crate) fn spawn_lock() -> MutexGuard<'static, ()> {
    SPAWN_LOCK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub(crate) fn describe(cmd: &Command) -> String {
    let mut text = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

/// Writes `contents` to `path` as an executable (mode 755), in a child
/// process. Written by the test process, the file would be open for
/// writing in any child another test thread forks at that moment until
/// that child execs, and running the file then fails with ETXTBSY.
pub fn write_executable(path: &Path, contents: &str) {
    run_bounded(
        Command::new("sh")
            .args(["-c", "printf %s \"$2\" > \"$1\" && chmod 755 \"$1\"", "sh"])
            .arg(path)
            .arg(contents),
    )
    .success();
}

/// Copies the executable `from` to `to` (mode 755), in a child process, for
/// the reason [`write_executable`] gives.
pub fn copy_executable(from: &Path, to: &Path) {
    run_bounded(
        Command::new("sh")
            .args(["-c", "cp -- \"$1\" \"$2\" && chmod 755 \"$2\"", "sh"])
            .arg(from)
            .arg(to),
    )
    .success();
}

/// `pid` names a process that has not exited. A zombie has: only its
/// parent can reap it, and a daemon that forked is not the test's child.
pub fn running(pid: u32) -> bool {
    process_state(pid).is_some_and(|state| state != 'Z')
}

/// The state letter of process `pid` in /proc/PID/stat (after the
/// command's parenthesis): `S` sleeping, `T` stopped, `Z` a zombie...;
/// None once it is gone.
pub fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// A process stopped (SIGSTOP) until dropped (SIGCONT): whatever clients
/// write meanwhile waits in its sockets, so that it finds it all at once
/// when it goes on (a deterministic turn).
pub struct Stopped(u32);

impl Stopped {
    /// Stops `pid` and waits (bounded) until /proc says it is stopped.
    pub fn process(pid: u32) -> Stopped {
        signal(pid, rustix::process::Signal::Stop);
        let began = Instant::now();
        while process_state(pid) != Some('T') {
            assert!(began.elapsed() < TIMEOUT, "process {pid} did not stop");
            thread::sleep(POLL_INTERVAL);
        }
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        signal(self.0, rustix::process::Signal::Cont);
    }
}

fn signal(pid: u32, which: rustix::process::Signal) {
    let process = rustix::process::Pid::from_raw(pid as i32).expect("a pid");
    rustix::process::kill_process(process, which)
        .unwrap_or_else(|e| panic!("{which:?} to process {pid}: {e}"));
}

/// SIGTERM to `pid`, then waits (bounded) until it has exited.
pub fn terminate_and_wait(pid: u32) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::Term);
    }
    let deadline = Instant::now() + TIMEOUT;
    while running(pid) {
        assert!(
            Instant::now() < deadline,
            "{pid} did not exit after SIGTERM"
        );
        thread::sleep(POLL_INTERVAL);
    }
}

/// What a finished command did.
#[derive(Debug)]
pub struct Finished {
    pub command: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    /// Panics, showing everything, unless the command exited with status 0.
    pub fn success(self) -> Finished {
        assert!(self.status.success(), "expected success: {self:#?}");
        self
    }

    /// Panics, showing everything, if the command exited with status 0.
    pub fn failure(self) -> Finished {
        assert!(
            !self.status.success() && self.status.code().is_some(),
            "expected a non-zero exit: {self:#?}"
        );
        self
    }
}

/// Runs `cmd` to completion with stdin closed, capturing its output. Panics
/// if it runs longer than [`TIMEOUT`] (after killing it).
pub fn run_bounded(cmd: &mut Command) -> Finished {
    let command = describe(cmd);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = {
        let _guard = spawn_lock();
        cmd.spawn()
            .unwrap_or_else(|err| panic!("cannot run {command}: {err}"))
    };
    let stdout = read_all_in_background(child.stdout.take().expect("piped stdout"));
    let stderr = read_all_in_background(child.stderr.take().expect("piped stderr"));
    let status = wait_bounded(&mut child);
    // A grandchild may still hold the pipes open; don't wait for it forever.
    let stdout = stdout.recv_timeout(TIMEOUT).unwrap_or_default();
    let stderr = stderr.recv_timeout(TIMEOUT).unwrap_or_default();
    match status {
        Some(status) => Finished {
            command,
            status,
            stdout,
            stderr,
        },
        None => panic!(
            "{command} did not finish within {TIMEOUT:?}; killed it.\nstdout: {stdout}\nstderr: {stderr}"
        ),
    }
}

fn read_all_in_background(mut source: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = source.read_to_end(&mut bytes);
        let _ = tx.send(String::from_utf8_lossy(&bytes).into_owned());
    });
    rx
}

/// Waits for `child` to exit, at most [`TIMEOUT`]; on time-out kills it and
/// returns None.
pub(crate) fn wait_bounded(child: &mut Child) -> Option<ExitStatus> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(POLL_INTERVAL),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// A client running in the background whose stdout is read line by line.
/// Killed (SIGKILL) when dropped.
pub struct Background {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl Background {
    /// Spawns `cmd` with piped stdin and stdout; stderr is collected for
    /// failure messages.
    pub fn spawn(cmd: &mut Command) -> Background {
        let name = describe(cmd);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = {
            let _guard = spawn_lock();
            cmd.spawn()
                .unwrap_or_else(|err| panic!("cannot start {name}: {err}"))
        };
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        let mut source = child.stderr.take().expect("piped stderr");
        thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = source.read(&mut chunk) {
                let text = String::from_utf8_lossy(&chunk[..n]).into_owned();
                sink.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push_str(&text);
            }
        });
        Background {
            name,
            child,
            stdin,
            lines,
            stderr,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The child's stdin (None after [`Background::close_stdin`]).
    pub fn stdin(&mut self) -> Option<&mut ChildStdin> {
        self.stdin.as_mut()
    }

    /// Closes the child's stdin, telling it that no more input comes.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// What the child wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The next stdout line within `wait`, or None if there is none yet.
    /// Panics if stdout has closed.
    pub fn try_read_line(&mut self, wait: Duration) -> Option<String> {
        match self.lines.recv_timeout(wait) {
            Ok(line) => Some(line),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                panic!("{} closed its stdout; stderr: {}", self.name, self.stderr())
            }
        }
    }

    /// The next stdout line; panics after [`TIMEOUT`] without one.
    pub fn read_line(&mut self) -> String {
        match self.try_read_line(TIMEOUT) {
            Some(line) => line,
            None => panic!(
                "{} wrote no line within {TIMEOUT:?}; stderr: {}",
                self.name,
                self.stderr()
            ),
        }
    }

    /// Reads lines until one satisfies `wanted` and returns it; panics after
    /// [`TIMEOUT`], listing the lines skipped.
    pub fn wait_for_line(&mut self, mut wanted: impl FnMut(&str) -> bool) -> String {
        let deadline = Instant::now() + TIMEOUT;
        let mut skipped = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.try_read_line(left) {
                Some(line) if wanted(&line) => return line,
                Some(line) => skipped.push(line),
                None => panic!(
                    "{}: no wanted line within {TIMEOUT:?}; got {skipped:#?}; stderr: {}",
                    self.name,
                    self.stderr()
                ),
            }
        }
    }

    /// Waits (bounded) for the child to exit after its stdin was closed or it
    /// was told to quit.
    pub fn wait(&mut self) -> ExitStatus {
        self.close_stdin();
        wait_bounded(&mut self.child)
            .unwrap_or_else(|| panic!("{} did not exit within {TIMEOUT:?}", self.name))
    }

    /// Kills the child (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A field of /proc/PID/status that is counted in kB (`"VmRSS:"`), in KiB.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_bounded_captures_output_and_status() {
        let done = run_bounded(Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]));
        assert_eq!(done.stdout, "out\n");
        assert_eq!(done.stderr, "err\n");
        assert_eq!(done.status.code(), Some(3));
        let done = done.failure();
        let outcome = std::panic::catch_unwind(move || done.success());
        assert!(outcome.is_err(), "a failed command passed as success");
    }

    #[test]
    fn background_reads_lines_and_sees_the_end() {
        let mut child = Background::spawn(Command::new("sh").args(["-c", "read x; echo got $x"]));
        use std::io::Write;
        writeln!(child.stdin().unwrap(), "hello").unwrap();
        assert_eq!(child.read_line(), "got hello");
        assert!(child.wait().success());
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            child.try_read_line(Duration::from_secs(5))
        }));
        assert!(
            outcome.is_err(),
            "a closed stdout must not look like silence"
        );
    }

    #[test]
    fn wait_for_line_skips_unwanted_lines() {
        let mut child = Background::spawn(Command::new("printf").arg("a\\nb\\nc\\n"));
        assert_eq!(child.wait_for_line(|line| line == "b"), "b");
        assert_eq!(child.read_line(), "c");
    }
}
