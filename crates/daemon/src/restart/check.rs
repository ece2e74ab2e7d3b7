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

use std::io::{Read, Write};
use std::os::fd::{OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

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
/// forked child). Err says why the new image would refuse it.
pub fn read_back(memfd: &OwnedFd) -> Result<(), String> {
    let handed = read_handover(memfd).map_err(|e| e.to_string())?;
    // The child takes the state's descriptors over by number while the
    // old image's state still owns them too: no harm, since the child
    // never touches that state again and ends without dropping anything
    // (`in_a_child`).
    in_a_child(&handed, super::clock_now())
}

/// Deserialize the state in a child process: Ok if it can be; else why
/// not, as the child found (sent back through a pipe).
///
/// `clock` is the one the caller deserializes with afterwards too: a
/// deadline the child could place on this clock, the caller can.
pub fn in_a_child(handed: &HandedOver, clock: Clock) -> Result<(), String> {
    let (mut why_out, why_in) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map(|(read, write)| (std::fs::File::from(read), std::fs::File::from(write)))
        .map_err(|e| format!("cannot check the handover: {e}"))?;
    match crate::sys::fork_single_threaded() {
        Err(e) => Err(format!("cannot check the handover: {e}")),
        Ok(None) => {
            TRYING.store(true, Ordering::Relaxed);
            let code = match deserialize(handed, clock, Reader::Check) {
                Ok(restored) => {
                    // Not dropped: its guards would remove the bus's
                    // socket, pid and nonce files.
                    std::mem::forget(restored);
                    0
                }
                Err(why) => {
                    // A pipe holds far more than a reason: this write does
                    // not block.
                    let _ = (&why_in).write_all(why.as_bytes());
                    1
                }
            };
            // No destructors, no atexit: this child only had to try.
            crate::sys::exit_now(code)
        }
        Ok(Some(child)) => {
            drop(why_in);
            let pid = rustix::process::Pid::from_raw(child as i32).ok_or("fork returned pid 0")?;
            let status = loop {
                match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()) {
                    Ok(Some(status)) => break status,
                    Ok(None) => continue,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => return Err(format!("cannot wait for the check: {e}")),
                }
            };
            if status.exit_status() == Some(0) {
                return Ok(());
            }
            let mut why = String::new();
            let _ = why_out.read_to_string(&mut why);
            Err(match (why.is_empty(), status.exit_status()) {
                (false, _) => why,
                (true, Some(code)) => format!("the check of the state exited with {code}"),
                (true, None) => format!("the check of the state died ({status:?})"),
            })
        }
    }
}

/// The state, from the handover; its queues share the handover's buffers
/// (read before any child is forked, so a check shares them too). With
/// it, the uids whose tallies were counted again (`Bus::recount_handed_over`).
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
    let (restored, unused) = quickbus_bus::handover::restoring(clock, table, buffers, || {
        postcard::from_bytes::<Restored>(&handed.payload).map_err(|e| {
            format!(
                "cannot read the state: {}",
                quickbus_bus::handover::explained(e)
            )
        })
    });
    let mut restored = restored?;
    if unused > 0 {
        tracing::warn!("{unused} descriptors of the handover were not named by its state");
    }
    // The users' tallies crossed beside the queues they count: counted
    // again, so a drifted one cannot misjudge flow control from now on
    // (and one that cannot be fails the check in the child).
    let recounted = match restored.bus.recount_handed_over() {
        Ok(recounted) => recounted,
        Err(why) => {
            std::mem::forget(restored);
            return Err(format!("the state does not add up: {why}"));
        }
    };
    if let Some(value) = refused_for_tests(reader) {
        std::mem::forget(restored);
        return Err(format!(
            "the state does not add up: {REFUSE_STATE_FOR_TESTS}={value} (a test of a refused state)"
        ));
    }
    Ok((restored, recounted))
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
