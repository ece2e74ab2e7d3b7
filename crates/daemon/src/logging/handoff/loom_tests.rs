//! The hand-off model-checked: loom runs each test over every
//! interleaving of its threads, with loom's lock and condition variable
//! in the hand-off. Built and run by scripts/test.sh:
//! `RUSTFLAGS="--cfg quickbus_loom" cargo test -p quickbus-daemon --lib
//! --target-dir target/loom logging::handoff::loom_tests`.
//!
//! A thread blocked for ever (a lost wake-up, an `end` that waits for a
//! thread that will not end) fails a test as loom's deadlock.

use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
use loom::thread::JoinHandle;

use super::{Handoff, Join, Patience, StillWriting};
use crate::logging::record::Record;

/// The pid of the model's one process.
const OWNER: u32 = 1;

impl Join for JoinHandle<()> {
    fn join_thread(self) {
        self.join().expect("the log's thread never panics");
    }
}

/// The log of one run of a model: the hand-off, and its sink.
struct Log {
    handoff: Handoff<(), JoinHandle<()>>,
    /// The sinks every line is logged under (the model has one).
    sinks: std::sync::Arc<()>,
    /// Held by a test, the sink is held up: its writer waits for it.
    sink_held: Mutex<()>,
    written: Mutex<Vec<String>>,
    /// Signalled for each line written.
    wrote: Condvar,
    /// The log threads started.
    starts: Mutex<usize>,
}

impl Log {
    fn new() -> Arc<Log> {
        Arc::new(Log {
            handoff: Handoff::new(16),
            sinks: std::sync::Arc::new(()),
            sink_held: Mutex::new(()),
            written: Mutex::new(Vec::new()),
            wrote: Condvar::new(),
            starts: Mutex::new(0),
        })
    }

    fn write(&self, record: &Record) {
        let _held = self.sink_held.lock().unwrap();
        self.written.lock().unwrap().push(record.message.clone());
        self.wrote.notify_all();
    }

    fn written(&self) -> Vec<String> {
        self.written.lock().unwrap().clone()
    }

    /// Wait (without any time-out: loom has none) until `count` lines
    /// were written.
    fn wait_written(&self, count: usize) {
        let mut written = self.written.lock().unwrap();
        while written.len() < count {
            written = self.wrote.wait(written).unwrap();
        }
    }

    fn starts(&self) -> usize {
        *self.starts.lock().unwrap()
    }

    fn end(&self, patience: impl Patience) -> Result<(), StillWriting> {
        self.handoff.end(OWNER, patience)
    }
}

fn submit(log: &Arc<Log>, text: &str) {
    let mut record = Record::lost(0);
    record.level = tracing::Level::INFO;
    record.message = text.to_owned();
    let start = || {
        *log.starts.lock().unwrap() += 1;
        let log = Arc::clone(log);
        Some(loom::thread::spawn(move || {
            log.handoff.run(|record, _| log.write(record))
        }))
    };
    log.handoff
        .submit(record, &log.sinks, OWNER, start, |record, _| {
            log.write(record)
        });
}

/// Waits for every signal, for as long as it takes.
struct Forever;

impl Patience for Forever {
    fn exhausted(&mut self) -> bool {
        false
    }

    fn wait<'a, U>(
        &mut self,
        changed: &Condvar,
        _: &'a Mutex<U>,
        guard: MutexGuard<'a, U>,
    ) -> MutexGuard<'a, U> {
        changed.wait(guard).unwrap()
    }
}

/// Times out so many times, then gives up: each time-out lets the lock
/// go and takes it again with no signal, so loom tries it at every point
/// of the other threads' work (it has no clock: this is how the daemon's
/// deadline passes, whenever it does).
struct TimesOut(usize);

impl Patience for TimesOut {
    fn exhausted(&mut self) -> bool {
        self.0 == 0
    }

    fn wait<'a, U>(
        &mut self,
        _: &Condvar,
        lock: &'a Mutex<U>,
        guard: MutexGuard<'a, U>,
    ) -> MutexGuard<'a, U> {
        self.0 -= 1;
        drop(guard);
        lock.lock().unwrap()
    }
}

/// Every interleaving, with no bound on preemptions: these models are
/// small enough to explore whole in seconds.
fn model(test: impl Fn() + Sync + Send + 'static) {
    loom::model(test);
}

fn lines_from(written: &[String], prefix: char) -> Vec<&str> {
    written
        .iter()
        .map(String::as_str)
        .filter(|line| line.starts_with(prefix))
        .collect()
}

#[test]
fn two_threads_lines_are_written_once_each_in_its_threads_order() {
    model(|| {
        let log = Log::new();
        let other = {
            let log = Arc::clone(&log);
            loom::thread::spawn(move || {
                submit(&log, "b1");
                submit(&log, "b2");
            })
        };
        submit(&log, "a1");
        submit(&log, "a2");
        other.join().unwrap();
        assert_eq!(log.end(Forever), Ok(()));
        let written = log.written();
        assert_eq!(written.len(), 4, "{written:?}");
        assert_eq!(lines_from(&written, 'a'), ["a1", "a2"]);
        assert_eq!(lines_from(&written, 'b'), ["b1", "b2"]);
        assert_eq!(log.starts(), 1);
    });
}

#[test]
fn end_returns_once_every_line_is_written_and_the_next_line_starts_a_thread() {
    model(|| {
        let log = Log::new();
        submit(&log, "a1");
        submit(&log, "a2");
        assert_eq!(log.end(Forever), Ok(()));
        assert_eq!(log.written(), ["a1", "a2"]);
        assert!(!log.handoff.busy(OWNER), "the thread ended");
        submit(&log, "a3");
        assert_eq!(log.end(Forever), Ok(()));
        assert_eq!(log.written(), ["a1", "a2", "a3"]);
        assert_eq!(log.starts(), 2, "a3 had a thread of its own");
    });
}

/// However the time-out falls, `end` either saw the thread end with
/// every line written, or gave up counting exactly the lines not taken.
#[test]
fn end_that_times_out_says_what_it_leaves_queued() {
    model(|| {
        let log = Log::new();
        submit(&log, "a1");
        submit(&log, "a2");
        match log.end(TimesOut(1)) {
            Ok(()) => assert_eq!(log.written(), ["a1", "a2"]),
            Err(StillWriting { unwritten }) => {
                // The lines the thread had not taken (it goes on).
                assert!(unwritten <= 2, "{unwritten}");
                assert_eq!(log.end(Forever), Ok(()));
                assert_eq!(log.written(), ["a1", "a2"]);
            }
        }
    });
}

/// A sink that takes nothing: `end` gives up, and counts the lines still
/// queued (all but the one the thread is writing, if it took one).
#[test]
fn end_gives_up_while_the_sink_is_held() {
    model(|| {
        let log = Log::new();
        let held = log.sink_held.lock().unwrap();
        submit(&log, "a1");
        submit(&log, "a2");
        let still = log.end(TimesOut(1)).unwrap_err();
        assert!(
            [1, 2].contains(&still.unwritten),
            "a1 taken or not: {still:?}"
        );
        assert!(log.written().is_empty());
        drop(held);
        assert_eq!(log.end(Forever), Ok(()));
        assert_eq!(log.written(), ["a1", "a2"]);
    });
}

/// A line logged while `end` waits is written by the ending thread, or
/// by a new one: once, never lost.
#[test]
fn a_line_racing_with_end_is_written_once() {
    model(|| line_racing_with_end(Forever));
}

/// The same with an `end` that times out, as a restart's may.
#[test]
fn a_line_racing_with_an_end_that_times_out_is_written_once() {
    model(|| line_racing_with_end(TimesOut(1)));
}

/// Another thread logs `b1` while `end` waits with `patience`; a last
/// `end` then waits for whatever is left.
fn line_racing_with_end(patience: impl Patience) {
    let log = Log::new();
    submit(&log, "a1");
    let other = {
        let log = Arc::clone(&log);
        loom::thread::spawn(move || submit(&log, "b1"))
    };
    let _ = log.end(patience);
    other.join().unwrap();
    assert_eq!(log.end(Forever), Ok(()));
    let mut written = log.written();
    written.sort();
    assert_eq!(written, ["a1", "b1"]);
    assert!(!log.handoff.busy(OWNER));
}

/// No lost wake-up: a line queued while the thread waits is written with
/// no `end` to wake it (else loom finds every thread blocked).
#[test]
fn a_line_wakes_the_idle_thread() {
    model(|| {
        let log = Log::new();
        submit(&log, "a1");
        log.wait_written(1);
        submit(&log, "a2");
        log.wait_written(2);
        assert_eq!(log.written(), ["a1", "a2"]);
        assert_eq!(log.end(Forever), Ok(()));
        assert_eq!(log.starts(), 1);
    });
}
