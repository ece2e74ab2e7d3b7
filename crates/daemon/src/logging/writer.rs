//! The log's thread: the one thread that writes the daemon's lines to
//! their sinks, so that a sink that blocks (a full pipe on standard error
//! nobody reads, a syslog daemon or journald that is behind) stops the
//! log, never the bus. The threads that log (the bus's loop, the pool's
//! threads) only queue each line ([`submit`]); a line that finds the
//! queue full is counted, and the log's thread says so where it was lost
//! (`queue`).
//!
//! A thread does not survive fork or exec: [`end`] writes every queued
//! line and ends the thread before either (and at exit), and the next
//! line starts a thread in whatever process logs it (remembered by pid).
//! So each line is written once, by the process that logged it.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};

use super::queue::{Queue, BOUND};
use super::record::Record;
use super::Sinks;

struct State {
    queue: Queue<Sinks>,
    thread: Option<Writer>,
    /// The thread waits for lines (and wants waking for the next).
    idle: bool,
    /// The thread is to end once the queue is empty.
    ending: bool,
}

struct Writer {
    /// The process that started it: a forked child has no such thread.
    pid: u32,
    /// Until the thread has left its loop (then joining it cannot wait).
    running: bool,
    handle: Option<JoinHandle<()>>,
}

static STATE: Mutex<State> = Mutex::new(State {
    queue: Queue::new(BOUND),
    thread: None,
    idle: false,
    ending: false,
});
/// Signalled when lines were queued for an idle thread, when the thread
/// is to end, and when it ended.
static CHANGED: Condvar = Condvar::new();

fn lock() -> MutexGuard<'static, State> {
    // A panic while holding the lock leaves a usable queue.
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    /// Whether this process has a log thread that writes (or will).
    fn has_thread(&self) -> bool {
        let pid = std::process::id();
        self.thread
            .as_ref()
            .is_some_and(|w| w.pid == pid && w.running)
    }

    /// The thread that left its loop, to join; forgets one another
    /// process started (this is a child it forked: no such thread here to
    /// join or detach).
    fn take_ended(&mut self) -> Option<JoinHandle<()>> {
        let writer = self.thread.take()?;
        if writer.pid == std::process::id() {
            writer.handle
        } else {
            std::mem::forget(writer.handle);
            None
        }
    }
}

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
    let mut state = lock();
    state.queue.push(record, sinks);
    state.ending = false;
    if !state.has_thread() {
        // Left its loop, not joined yet: gone in a moment. Joined
        // without the lock, which nothing may hold while it waits.
        if let Some(ended) = state.take_ended() {
            drop(state);
            let _ = ended.join();
            state = lock();
        }
    }
    // Another line may have started one while the lock was let go.
    if state.has_thread() {
        if state.idle {
            CHANGED.notify_all();
        }
        return;
    }
    if start(&mut state) {
        return;
    }
    // No thread to be had: written here, as before there was one (not
    // under the lock, which a panic's drain takes).
    let unwritten: Vec<_> = std::iter::from_fn(|| state.queue.pop()).collect();
    drop(state);
    for (record, sinks) in &unwritten {
        super::write(record, sinks);
    }
}

/// Start this process's log thread (it has none, and none to join);
/// false if none could be started.
fn start(state: &mut State) -> bool {
    // The thread starts with every signal blocked, so the bus's loop
    // handles them all (and a restart's held signals stay pending).
    let mut previous = SigSet::empty();
    let blocked = pthread_sigmask(
        SigmaskHow::SIG_BLOCK,
        Some(&SigSet::all()),
        Some(&mut previous),
    );
    let spawned = std::thread::Builder::new().name(NAME.into()).spawn(run);
    if blocked.is_ok() {
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&previous), None);
    }
    let Ok(handle) = spawned else {
        return false;
    };
    state.thread = Some(Writer {
        pid: std::process::id(),
        running: true,
        handle: Some(handle),
    });
    true
}

/// The log's thread: writes the queued lines in order, waiting for the
/// sinks as long as they take, until told to end with nothing queued.
fn run() {
    let mut state = lock();
    loop {
        if let Some((record, sinks)) = state.queue.pop() {
            drop(state);
            // A sink that panics loses this line, not the thread (which
            // would leave every later line queued for nobody).
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                super::write(&record, &sinks);
            }));
            state = lock();
        } else if state.ending {
            if let Some(writer) = state.thread.as_mut() {
                writer.running = false;
            }
            CHANGED.notify_all();
            return;
        } else {
            state.idle = true;
            state = CHANGED.wait(state).unwrap_or_else(|e| e.into_inner());
            state.idle = false;
        }
    }
}

/// The log's thread did not end in time: a sink still holds it up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StillWriting {
    /// The lines still queued (and counted as lost) when the wait ended.
    pub unwritten: u64,
}

/// Write every queued line and end the log's thread, waiting at most
/// `wait`; [`StillWriting`] if a sink still holds it up (then it goes on,
/// and its lines are written when the sink takes them, unless the
/// process execs or exits first).
pub fn end(wait: Duration) -> Result<(), StillWriting> {
    let mut state = lock();
    if state.has_thread() {
        state.ending = true;
        CHANGED.notify_all();
        state = CHANGED
            .wait_timeout_while(state, wait, |s| s.has_thread())
            .unwrap_or_else(|e| e.into_inner())
            .0;
        if state.has_thread() {
            return Err(StillWriting {
                unwritten: state.queue.unwritten(),
            });
        }
    }
    // Joined, so that a fork finds the process's one thread.
    let ended = state.take_ended();
    drop(state);
    if let Some(ended) = ended {
        let _ = ended.join();
    }
    Ok(())
}
