//! Reading a handover's state, and trying it first in a forked child:
//! the new image does both before it takes the bus over, and the old
//! image tries it after writing the state and before the exec (its
//! read-back), so that a state the new image would refuse is refused
//! while the old loop can still serve on (docs/restart.md, "Failure
//! paths").
//!
//! Owns: deserializing the state (with the counting again that follows
//! it) and the child that tries it. May touch: the descriptors the state
//! names (taken over by number).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

use quickbus_bus::handover::Clock;

use super::{read_handover, HandedOver, Restored, REFUSE_STATE_FOR_TESTS};

/// Set in a child forked to try the state ([`in_a_child`]).
static TRYING: AtomicBool = AtomicBool::new(false);

/// Whether this process is a child only trying to read a handover's
/// state: the socket, pid and nonce files the state names are the bus's,
/// not this child's to remove, whatever it drops (a state refused half
/// read drops what was read so far).
pub fn trying_the_state() -> bool {
    TRYING.load(Ordering::Relaxed)
}

/// The old image's read-back: the state just written to `memfd`, read as
/// the new image will read it (the same reader, the same checks, in a
/// forked child).
pub fn read_back(memfd: &OwnedFd) -> Result<(), CheckFailure> {
    let handed = read_handover(memfd).map_err(|e| CheckFailure::NotTried(e.to_string()))?;
    // The child takes the state's descriptors over by number while the
    // old image's state still owns them too: no harm, since the child
    // never touches that state again and ends without dropping anything
    // (`in_a_child`).
    in_a_child(&handed, super::clock_now())
}

/// Why a state was not found good in a child.
#[derive(Debug)]
pub enum CheckFailure {
    /// The child could not be run, or did not finish in time.
    NotTried(String),
    /// The child read the state and refused it, saying why.
    Refused(String),
}

impl std::fmt::Display for CheckFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckFailure::NotTried(why) => write!(f, "cannot check the handover: {why}"),
            CheckFailure::Refused(why) => f.write_str(why),
        }
    }
}

impl From<CheckFailure> for String {
    fn from(failure: CheckFailure) -> String {
        failure.to_string()
    }
}

/// The most a child waits to be heard: far more than the largest state
/// takes to read (the bench's 10,000 connections, 100,000 names and
/// 100,000 match rules: about 150 ms on the 2-core VM), but a bound, for
/// the loop waits meanwhile with its signals held.
const CHECK_DEADLINE: Duration = Duration::from_secs(60);

/// The most of a reason a child sends back: well within what a pipe
/// holds, so that its write never blocks.
const MOST_REASON_BYTES: usize = 4096;

/// Deserialize the state in a child process: Ok if it can be; else why
/// not, as the child found (sent back through a pipe).
///
/// `clock` is the one the caller deserializes with afterwards too: a
/// deadline the child could place on this clock, the caller can.
pub fn in_a_child(handed: &HandedOver, clock: Clock) -> Result<(), CheckFailure> {
    let not_tried = |e: &dyn std::fmt::Display| CheckFailure::NotTried(e.to_string());
    let (why_out, why_in) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map(|(read, write)| (std::fs::File::from(read), std::fs::File::from(write)))
        .map_err(|e| not_tried(&e))?;
    match crate::sys::fork_single_threaded() {
        Err(e) => Err(not_tried(&e)),
        Ok(None) => {
            TRYING.store(true, Ordering::Relaxed);
            // Were memory short, the kernel takes this child, not the bus.
            let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
            // A panic ends the child here, not in the bus's destructors
            // up the stack (the hook has printed it).
            let tried = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                deserialize(handed, clock, Reader::Check)
            }));
            let (code, why) = match tried {
                Ok(Ok(restored)) => {
                    // Nothing of the bus's is this child's to drop.
                    std::mem::forget(restored);
                    (0, String::new())
                }
                Ok(Err(why)) => (1, why),
                Err(_) => (2, "reading the state panicked".to_owned()),
            };
            let _ = (&why_in).write_all(truncated(&why, MOST_REASON_BYTES).as_bytes());
            // No destructors, no atexit: this child only had to try. Its
            // own lines (it may have warned) are written first.
            crate::logging::drain();
            crate::sys::exit_now(code)
        }
        Ok(Some(child)) => {
            drop(why_in);
            let why = hear_out(why_out, child, CHECK_DEADLINE)?;
            if why.is_empty() {
                return Ok(());
            }
            Err(CheckFailure::Refused(why))
        }
    }
}

/// What `child` writes to `reason` until it exits (an empty reason: it
/// found the state good), within `deadline`; past it, the child is
/// killed and the check not made. Read to the end before the wait, so
/// that no reason can fill the pipe while the parent waits.
fn hear_out(mut reason: File, child: u32, deadline: Duration) -> Result<String, CheckFailure> {
    let not_tried = |why: String| CheckFailure::NotTried(why);
    let pid = rustix::process::Pid::from_raw(child as i32)
        .ok_or_else(|| not_tried("fork returned pid 0".to_owned()))?;
    let give_up = Instant::now() + deadline;
    let mut heard = Vec::new();
    let mut chunk = [0u8; 512];
    loop {
        let left = give_up.saturating_duration_since(Instant::now());
        let mut ready = [PollFd::new(&reason, PollFlags::IN)];
        let waited = rustix::event::poll(
            &mut ready,
            i32::try_from(left.as_millis()).unwrap_or(i32::MAX),
        );
        match waited {
            Ok(0) => {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::Kill);
                let _ = wait_for(pid);
                return Err(not_tried(format!(
                    "the check of the state took more than {} s: stopped",
                    deadline.as_secs_f64()
                )));
            }
            Ok(_) => {}
            // Polled again: a read now could block past the deadline.
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(not_tried(format!("cannot wait for the check: {e}"))),
        }
        match reason.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => heard.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(not_tried(format!("cannot hear the check: {e}"))),
        }
        heard.truncate(MOST_REASON_BYTES);
    }
    let status = wait_for(pid).map_err(|e| not_tried(format!("cannot wait for the check: {e}")))?;
    let why = String::from_utf8_lossy(&heard).into_owned();
    Ok(match (status.exit_status(), why.is_empty()) {
        (Some(0), _) => String::new(),
        (_, false) => why,
        (Some(code), true) => format!("the check of the state exited with {code}"),
        (None, true) => format!("the check of the state died ({status:?})"),
    })
}

/// Reap `pid`, retrying when interrupted.
fn wait_for(pid: rustix::process::Pid) -> Result<rustix::process::WaitStatus, rustix::io::Errno> {
    loop {
        match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()) {
            Ok(Some(status)) => return Ok(status),
            Ok(None) | Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// At most `most` bytes of `text`, cut at a character's start.
fn truncated(text: &str, most: usize) -> &str {
    let mut end = text.len().min(most);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The state, from the handover; its queues share the handover's buffers
/// (read before any child is forked, so a check shares them too). With
/// it, the uids whose tallies were counted again (`Bus::check_handed_over`).
///
/// On an error after the descriptors were taken over, what was read is
/// forgotten, not dropped: in a new image those descriptors are the bus's
/// (the previous binary takes them back), and the guards would remove the
/// socket, pid and nonce files either way.
pub fn deserialize(
    handed: &HandedOver,
    clock: Clock,
    reader: Reader,
) -> Result<(Restored, Vec<u32>), String> {
    let table = take_over(&handed.fds)?;
    let buffers = handed.buffers.clone();
    let (restored, unused) = read_state::<Restored>(clock, table, buffers, &handed.payload);
    let mut restored = restored.map_err(|why| format!("cannot read the state: {why}"))?;
    if unused > 0 {
        tracing::warn!("{unused} descriptors of the handover were not named by its state");
    }
    // The users' tallies crossed beside the queues they count: counted
    // again, so a drifted one cannot misjudge flow control from now on
    // (and one that cannot be fails the check in the child).
    // The loop's connections crossed beside the bus's: checked against
    // them here, so that the read-back and the check in a child refuse
    // what the new image would.
    let checked = restored
        .bus
        .check_handed_over()
        .and_then(|recounted| Ok((recounted, restored.state.check_against(&restored.bus)?)));
    let recounted = match checked {
        Ok((recounted, ())) => recounted,
        Err(why) => {
            std::mem::forget(restored);
            return Err(format!("the state does not add up: {why}"));
        }
    };
    if reader == Reader::Check
        && std::env::var(REFUSE_STATE_FOR_TESTS).as_deref() == Ok("panic-in-the-check")
    {
        panic!("{REFUSE_STATE_FOR_TESTS}=panic-in-the-check (a test of a check that panics)");
    }
    if let Some(value) = refused_for_tests(reader) {
        std::mem::forget(restored);
        return Err(format!(
            "the state does not add up: {REFUSE_STATE_FOR_TESTS}={value} (a test of a refused state)"
        ));
    }
    Ok((restored, recounted))
}

/// `state`, as postcard wrote it, read back as a `T` with `fds` and
/// `buffers` as the tables its indices name: the value, or why it was
/// refused; with how many fds nothing took (closed).
pub fn read_state<T: serde::de::DeserializeOwned>(
    clock: Clock,
    fds: Vec<OwnedFd>,
    buffers: Vec<bytes::Bytes>,
    state: &[u8],
) -> (Result<T, String>, usize) {
    quickbus_bus::handover::restoring(clock, fds, buffers, || {
        postcard::from_bytes::<T>(state).map_err(quickbus_bus::handover::explained)
    })
}

/// Who reads the state.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// A forked child trying it (the new image's check, or the old
    /// image's read-back).
    Check,
    /// The new image, to serve it.
    NewImage,
    /// The previous binary, going back.
    GoingBack,
}

/// Whether [`REFUSE_STATE_FOR_TESTS`] makes the old image write a state
/// that cannot be read (`corrupt`: its last byte, which every reader
/// refuses once it has read all the rest).
pub fn corrupts_for_tests() -> bool {
    std::env::var(REFUSE_STATE_FOR_TESTS).as_deref() == Ok("corrupt")
}

/// Whether [`REFUSE_STATE_FOR_TESTS`] makes `reader` refuse the state, and
/// its value if so: `1`, every reader; `after-the-check`, only the new
/// image, after its check passed (as if the two disagreed).
fn refused_for_tests(reader: Reader) -> Option<String> {
    let value = std::env::var(REFUSE_STATE_FOR_TESTS).ok()?;
    let refused = match value.as_str() {
        "1" => true,
        "after-the-check" => reader == Reader::NewImage,
        _ => false,
    };
    refused.then_some(value)
}

/// The descriptor table, taken over: each number once, and a duplicate
/// for each further index naming it (the fds of a broadcast queued for
/// several receivers).
fn take_over(numbers: &[RawFd]) -> Result<Vec<OwnedFd>, String> {
    let mut table: Vec<OwnedFd> = Vec::with_capacity(numbers.len());
    let mut first: std::collections::HashMap<RawFd, usize> = Default::default();
    for (i, &number) in numbers.iter().enumerate() {
        let fd = match first.get(&number) {
            Some(&at) => table[at].try_clone(),
            None => {
                first.insert(number, i);
                crate::sys::adopt_inherited_fd(number).map(OwnedFd::from)
            }
        };
        match fd {
            Ok(fd) => table.push(fd),
            Err(e) => {
                // Those taken so far stay open, for the previous binary.
                std::mem::forget(table);
                return Err(format!("descriptor {number} of the handover: {e}"));
            }
        }
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// `script` run by sh, its stdout the reason pipe, heard out within
    /// `deadline`; with its pid.
    fn heard(script: &str, deadline: Duration) -> (Result<String, CheckFailure>, u32) {
        let _starting = crate::test_forks::starting_programs();
        #[allow(clippy::zombie_processes)] // `hear_out` reaps it
        let mut child = Command::new("sh")
            .args(["-c", script])
            .stdout(Stdio::piped())
            // Nothing left behind holds the test's output open.
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let reason = File::from(OwnedFd::from(child.stdout.take().unwrap()));
        (hear_out(reason, child.id(), deadline), child.id())
    }

    #[test]
    fn a_child_is_heard_out_to_its_exit() {
        let long = Duration::from_secs(60);
        assert_eq!(heard("exit 0", long).0.unwrap(), "");
        assert_eq!(
            heard("printf 'it does not add up'; exit 1", long)
                .0
                .unwrap(),
            "it does not add up"
        );
        assert_eq!(
            heard("exit 3", long).0.unwrap(),
            "the check of the state exited with 3"
        );
        // A reason longer than a pipe holds is cut, never blocking the
        // child: read before the wait.
        let (long_reason, _) = heard("head -c 200000 /dev/zero | tr '\\0' x; exit 1", long);
        assert_eq!(long_reason.unwrap(), "x".repeat(MOST_REASON_BYTES));
    }

    #[test]
    fn a_child_past_the_deadline_is_stopped_and_the_check_not_made() {
        // `exec`: the process killed is the one sleeping, not a shell that
        // would leave its sleep behind.
        let (result, pid) = heard("exec sleep 600", Duration::from_millis(100));
        match result {
            Err(CheckFailure::NotTried(why)) => assert!(why.contains("took more than"), "{why}"),
            other => panic!("{other:?}"),
        }
        // Killed and reaped: no such process any more.
        let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
        assert!(rustix::process::test_kill_process(pid).is_err());
    }

    #[test]
    fn a_reason_is_cut_at_a_character() {
        assert_eq!(truncated("défaut", 2), "d");
        assert_eq!(truncated("défaut", 3), "dé");
        assert_eq!(truncated("ok", 10), "ok");
    }
}
