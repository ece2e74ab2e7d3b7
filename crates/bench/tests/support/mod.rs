//! Running `quickbus-bench` from the smoke tests: bounded, its output
//! collected while it runs (a full pipe cannot stall it).

use std::ffi::{OsStr, OsString};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// `args`, then `--quickbus` naming the workspace's quickbus-daemon (as
/// quickbus-e2e finds it), for the bench to measure.
pub fn against_quickbus(args: &[&str]) -> Vec<OsString> {
    let mut all: Vec<OsString> = args.iter().map(OsString::from).collect();
    all.push("--quickbus".into());
    all.push(quickbus_e2e::quickbus_daemon_path().into());
    all
}

/// Runs `quickbus-bench` with `args` to completion within `limit`; panics
/// (after killing it) if it takes longer, or if it fails.
pub fn run_bench<I, S>(args: I, limit: Duration) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let output = run_bench_with(args, &[], limit);
    assert!(
        output.status.success(),
        "quickbus-bench failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// [`run_bench`] with `env` added to the bench's environment (and so its
/// daemons'), whether it succeeds or not.
pub fn run_bench_with<I, S>(args: I, env: &[(&str, &str)], limit: Duration) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let child = Command::new(env!("CARGO_BIN_EXE_quickbus-bench"))
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start quickbus-bench");
    let pid = rustix::process::Pid::from_child(&child);
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    let output = match finished.recv_timeout(limit) {
        Ok(output) => output.expect("quickbus-bench's output"),
        Err(_) => {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::Kill);
            let late = finished.recv().map(|o| o.ok());
            panic!("quickbus-bench did not finish within {limit:?}: {late:?}");
        }
    };
    output
}
