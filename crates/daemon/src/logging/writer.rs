//! The log's thread: the one thread that writes the daemon's lines to
//! their sinks, so that a sink that blocks (a full pipe on standard error
//! nobody reads, a syslog daemon or journald that is behind) stops the
//! log, never the bus. The threads that log (the bus's loop, the pool's
//! threads) only queue each line ([`submit`]); a line that finds the
//! queue full is counted, and the log's thread says so where it was lost
//! (`queue`). The hand-off itself is `handoff`'s (model-checked); this
//! module gives it the process: the pid, the thread's name and signal
//! mask.
//!
//! A thread does not survive fork or exec: [`end`] writes every queued
//! line and ends the thread before either (and at exit), and the next
//! line starts a thread in whatever process logs it (remembered by pid).
//! So each line is written once, by the process that logged it.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::handoff::{Deadline, Handoff};
use super::queue::BOUND;
use super::record::Record;
use super::Sinks;

pub use super::handoff::StillWriting;

#[cfg(not(all(test, quickbus_loom)))]
static HANDOFF: Handoff<Sinks, JoinHandle<()>> = Handoff::new(BOUND);
/// The model check's tests run no daemon: loom's types, made at run
/// time, only have to compile here.
#[cfg(all(test, quickbus_loom))]
static HANDOFF: std::sync::LazyLock<Handoff<Sinks, JoinHandle<()>>> =
    std::sync::LazyLock::new(|| Handoff::new(BOUND));

/// The thread's name, which also tells whether the caller is that thread.
const NAME: &str = "quickbus-log";

/// Whether the caller is the log's thread.
pub fn on_log_thread() -> bool {
    std::thread::current().name() == Some(NAME)
}

/// Queue `record` for the log's thread, to be written to `sinks` (those
/// of the moment it was logged, whatever they are when it is written),
/// starting a thread if this process has none. Never waits for a sink.
pub fn submit(record: Record, sinks: &Arc<Sinks>) {
    HANDOFF.submit(record, sinks, std::process::id(), start, super::write);
}

/// Start this process's log thread; `None` if none could be started.
fn start() -> Option<JoinHandle<()>> {
    // Every signal blocked, so the bus's loop handles them all (and a
    // restart's held signals stay pending).
    let builder = std::thread::Builder::new().name(NAME.into());
    crate::quiet_thread::spawn(builder, || HANDOFF.run(super::write)).ok()
}

/// Write every queued line and end the log's thread, waiting at most
/// `wait`; [`StillWriting`] if a sink still holds it up (then it goes on,
/// and its lines are written when the sink takes them, unless the
/// process execs or exits first).
pub fn end(wait: Duration) -> Result<(), StillWriting> {
    HANDOFF.end(std::process::id(), Deadline(Instant::now() + wait))
}

/// Whether this process has a log thread or lines queued (for the tests).
#[cfg(test)]
pub fn busy() -> bool {
    HANDOFF.busy(std::process::id())
}
