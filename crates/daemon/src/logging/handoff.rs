//! The hand-off of lines from the threads that log to the log's one
//! thread: the queue under a lock, the condition variable that wakes the
//! thread and whoever waits for it to end, the thread's loop, and the
//! start of a new thread after one ended. Nothing here knows of pids,
//! signal masks or thread names (`writer` adds them), so the model check
//! (`loom_tests`, built with `--cfg quickbus_loom`: scripts/test.sh) can
//! drive this very code with loom's lock and condition variable in place
//! of std's, over every interleaving of the threads. Only the tests'
//! build takes loom's (a dev-dependency): any other build, with that cfg
//! or not, is the daemon's.

#[cfg(all(test, quickbus_loom))]
use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(all(test, quickbus_loom)))]
use std::sync::{Condvar, Mutex, MutexGuard};

use std::sync::{Arc, PoisonError};
use std::time::Instant;

use super::queue::Queue;
use super::record::Record;

/// Lines for sinks `S`, written by a thread whose handle is `T`.
pub struct Handoff<S, T> {
    state: Mutex<State<S, T>>,
    /// Signalled when lines were queued for an idle thread, when the
    /// thread is to end, and when it ended.
    changed: Condvar,
}

struct State<S, T> {
    queue: Queue<S>,
    thread: Option<Writer<T>>,
    /// The thread waits for lines (and wants waking for the next).
    idle: bool,
    /// The calls of [`Handoff::end`] waiting: while there are any, the
    /// thread ends once the queue is empty (a count, as two may wait, and
    /// the first to give up must not keep the thread for the other).
    ends_waiting: u32,
}

struct Writer<T> {
    /// The process that started it: a forked child has no such thread.
    owner: u32,
    /// Until the thread has left its loop (then joining it cannot wait).
    running: bool,
    handle: Option<T>,
}

/// A thread that can be waited for: std's, or loom's in the model.
pub trait Join {
    fn join_thread(self);
}

impl Join for std::thread::JoinHandle<()> {
    fn join_thread(self) {
        let _ = self.join();
    }
}

/// How long [`Handoff::end`] waits for the thread to end.
pub trait Patience {
    /// No more waiting: the thread is left writing.
    fn exhausted(&mut self) -> bool;
    /// Wait on `changed` for a while, letting `guard` go meanwhile (the
    /// lock it holds is `lock`'s, which a model's wait takes again itself
    /// to end with no signal: a time-out, at any point).
    fn wait<'a, U>(
        &mut self,
        changed: &Condvar,
        lock: &'a Mutex<U>,
        guard: MutexGuard<'a, U>,
    ) -> MutexGuard<'a, U>;
}

/// Wait until this moment, and no longer (the daemon's patience).
pub struct Deadline(pub Instant);

impl Patience for Deadline {
    fn exhausted(&mut self) -> bool {
        Instant::now() >= self.0
    }

    fn wait<'a, U>(
        &mut self,
        changed: &Condvar,
        _: &'a Mutex<U>,
        guard: MutexGuard<'a, U>,
    ) -> MutexGuard<'a, U> {
        let left = self.0.saturating_duration_since(Instant::now());
        changed
            .wait_timeout(guard, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }
}

/// The log's thread did not end in time: a sink still holds it up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StillWriting {
    /// The lines still queued (and counted as lost) when the wait ended.
    pub unwritten: u64,
}

impl<S, T> State<S, T> {
    const fn new(bound: usize) -> Self {
        State {
            queue: Queue::new(bound),
            thread: None,
            idle: false,
            ends_waiting: 0,
        }
    }

    /// Whether `owner` has a thread that writes (or will).
    fn has_thread(&self, owner: u32) -> bool {
        self.thread
            .as_ref()
            .is_some_and(|w| w.owner == owner && w.running)
    }

    /// The thread that left its loop, to join; forgets one another
    /// process started (`owner` is a child it forked: no such thread here
    /// to join or detach).
    fn take_ended(&mut self, owner: u32) -> Option<T> {
        let writer = self.thread.take()?;
        if writer.owner == owner {
            writer.handle
        } else {
            std::mem::forget(writer.handle);
            None
        }
    }
}

impl<S, T: Join> Handoff<S, T> {
    /// `const` for the log's static; loom's types are made at run time.
    #[cfg(not(all(test, quickbus_loom)))]
    pub const fn new(bound: usize) -> Self {
        let state = Mutex::new(State::new(bound));
        Handoff {
            state,
            changed: Condvar::new(),
        }
    }

    #[cfg(all(test, quickbus_loom))]
    pub fn new(bound: usize) -> Self {
        let state = Mutex::new(State::new(bound));
        Handoff {
            state,
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<S, T>> {
        // A panic while holding the lock leaves a usable queue.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queue `record` for `sinks`, logged by process `owner`, for its
    /// thread, which `start` starts (running [`Handoff::run`]) if `owner`
    /// has none; if none can be started, the lines are written here with
    /// `write`. Never waits for a sink.
    pub fn submit(
        &self,
        record: Record,
        sinks: &Arc<S>,
        owner: u32,
        start: impl FnOnce() -> Option<T>,
        write: impl Fn(&Record, &S),
    ) {
        let mut state = self.lock();
        state.queue.push(record, sinks);
        if state.has_thread(owner) {
            if state.idle {
                self.changed.notify_all();
            }
            return;
        }
        // One that left its loop is gone in a moment: joined once the new
        // one runs and the lock is let go (nothing may hold it while it
        // waits), so no line is ever queued with no thread to write it.
        let ended = state.take_ended(owner);
        let started = start();
        let unwritten: Vec<_> = match started {
            Some(handle) => {
                state.thread = Some(Writer {
                    owner,
                    running: true,
                    handle: Some(handle),
                });
                Vec::new()
            }
            // No thread to be had: written here, as before there was one
            // (not under the lock, which a panic's drain takes).
            None => std::iter::from_fn(|| state.queue.pop()).collect(),
        };
        drop(state);
        if let Some(ended) = ended {
            ended.join_thread();
        }
        for (record, sinks) in &unwritten {
            write(record, sinks);
        }
    }

    /// The log's thread: writes the queued lines in order with `write`,
    /// waiting for the sinks as long as they take, until an
    /// [`Handoff::end`] waits for it with nothing queued.
    pub fn run(&self, write: impl Fn(&Record, &S)) {
        let mut state = self.lock();
        loop {
            if let Some((record, sinks)) = state.queue.pop() {
                drop(state);
                // A sink that panics loses this line, not the thread (which
                // would leave every later line queued for nobody).
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    write(&record, &sinks);
                }));
                state = self.lock();
            } else if state.ends_waiting > 0 {
                if let Some(writer) = state.thread.as_mut() {
                    writer.running = false;
                }
                self.changed.notify_all();
                return;
            } else {
                state.idle = true;
                state = self
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                state.idle = false;
            }
        }
    }

    /// Write every queued line and end `owner`'s thread, waiting as long
    /// as `patience` lets; [`StillWriting`] if a sink still holds it up
    /// (then it goes on, and its lines are written when the sink takes
    /// them, unless the process execs or exits first). A line queued
    /// meanwhile is written before the thread ends, or by the next.
    pub fn end(&self, owner: u32, mut patience: impl Patience) -> Result<(), StillWriting> {
        let mut state = self.lock();
        state.ends_waiting += 1;
        self.changed.notify_all();
        while state.has_thread(owner) {
            if patience.exhausted() {
                state.ends_waiting -= 1;
                return Err(StillWriting {
                    unwritten: state.queue.unwritten(),
                });
            }
            state = patience.wait(&self.changed, &self.state, state);
        }
        state.ends_waiting -= 1;
        // Joined, so that a fork finds the process's one thread.
        let ended = state.take_ended(owner);
        drop(state);
        if let Some(ended) = ended {
            ended.join_thread();
        }
        Ok(())
    }

    /// Whether `owner` has a thread, or lines queued (for the tests).
    #[cfg(test)]
    pub fn busy(&self, owner: u32) -> bool {
        let state = self.lock();
        state.has_thread(owner) || state.queue.unwritten() > 0
    }
}

#[cfg(all(test, quickbus_loom))]
mod loom_tests;

#[cfg(all(test, not(quickbus_loom)))]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::thread::JoinHandle;
    use std::time::Duration;

    const OWNER: u32 = 1;

    static WRITTEN: Mutex<Vec<String>> = Mutex::new(Vec::new());

    /// The sink of [`a_sink_that_panics_loses_that_line_only`]: panics
    /// on the line that says so.
    fn write_or_panic(record: &Record, _: &()) {
        assert_ne!(record.message, "panic", "the sink panics");
        WRITTEN.lock().unwrap().push(record.message.clone());
    }

    /// The thread survives a sink that panics: only that line is lost,
    /// the next is written by the same thread, and `end` finds it ending.
    #[test]
    fn a_sink_that_panics_loses_that_line_only() {
        let handoff: &'static Handoff<(), JoinHandle<()>> = Box::leak(Box::new(Handoff::new(16)));
        let sinks = Arc::new(());
        let starts = Mutex::new(0);
        let submit = |text: &str| {
            let mut record = Record::lost(0);
            record.message = text.to_owned();
            let start = || {
                *starts.lock().unwrap() += 1;
                std::thread::Builder::new()
                    .spawn(|| handoff.run(write_or_panic))
                    .ok()
            };
            handoff.submit(record, &sinks, OWNER, start, write_or_panic);
        };
        submit("before");
        submit("panic");
        submit("after");
        // Generous: only a thread that died with its lines would take it.
        let patience = Deadline(Instant::now() + Duration::from_secs(30));
        assert_eq!(handoff.end(OWNER, patience), Ok(()));
        assert_eq!(*WRITTEN.lock().unwrap(), ["before", "after"]);
        assert_eq!(*starts.lock().unwrap(), 1, "the same thread went on");
        assert!(!handoff.busy(OWNER));
    }
}
