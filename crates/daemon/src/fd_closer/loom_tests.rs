//! The closer's hand-off model-checked: loom runs each test over every
//! interleaving of its threads (those handing fds over, the closing
//! threads, `end`), with loom's lock, condition variable and threads in
//! the closer, and a [`ModelClock`]. Built and run by scripts/test.sh:
//! `RUSTFLAGS="--cfg quickbus_loom" cargo test -p quickbus-daemon --lib
//! --target-dir target/loom loom_tests`.
//!
//! A thread blocked for ever (a lost wake-up, an `end` that waits for a
//! thread that will not end, an fd no thread takes) fails a test as
//! loom's deadlock.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

use loom::sync::{Arc, Condvar, Mutex};

use crate::handoff_clock::model::{ModelClock, FOREVER};

use super::{Closer, StillClosing, END_WAIT};

/// The fds the closer closed, and a gate that holds the closes of
/// chosen fds (a close that is stuck) until opened.
#[derive(Default)]
struct Closes {
    seen: Mutex<Seen>,
    /// Signalled for each close, and when the gate opens.
    changed: Condvar,
}

#[derive(Default)]
struct Seen {
    /// The fds whose close sticks until `open`.
    held: Vec<RawFd>,
    open: bool,
    /// The fds closed, in the order they were.
    closed: Vec<RawFd>,
}

impl Closes {
    fn close(&self, fd: OwnedFd) {
        let raw = fd.as_raw_fd();
        let mut seen = self.seen.lock().unwrap();
        while seen.held.contains(&raw) && !seen.open {
            seen = self.changed.wait(seen).unwrap();
        }
        seen.closed.push(raw);
        drop(fd);
        self.changed.notify_all();
    }

    fn hold(&self, fd: RawFd) {
        self.seen.lock().unwrap().held.push(fd);
    }

    fn open(&self) {
        self.seen.lock().unwrap().open = true;
        self.changed.notify_all();
    }

    /// Wait (without any time-out: loom has none) until `fd` was closed.
    fn wait_closed(&self, fd: RawFd) {
        let mut seen = self.seen.lock().unwrap();
        while !seen.closed.contains(&fd) {
            seen = self.changed.wait(seen).unwrap();
        }
    }

    fn closed(&self) -> Vec<RawFd> {
        sorted(self.seen.lock().unwrap().closed.clone())
    }
}

fn sorted(mut fds: Vec<RawFd>) -> Vec<RawFd> {
    fds.sort_unstable();
    fds
}

/// A closer on the model's clock, and the closes it makes.
fn closer() -> (Arc<Closer>, Arc<Closes>) {
    let closes = Arc::new(Closes::default());
    let closing = Arc::clone(&closes);
    let close = move |fd| closing.close(fd);
    (
        Arc::new(Closer::with_clock(close, ModelClock::default())),
        closes,
    )
}

/// `n` fds to hand over (/dev/null opened), and their numbers.
fn fds(n: usize) -> (Vec<OwnedFd>, Vec<RawFd>) {
    let fds: Vec<OwnedFd> = (0..n)
        .map(|_| std::fs::File::open("/dev/null").unwrap().into())
        .collect();
    let raw = fds.iter().map(AsRawFd::as_raw_fd).collect();
    (fds, raw)
}

/// `closer` ended, waiting as long as it takes: every fd of `raw` was
/// closed exactly once, and no thread is left.
fn all_closed_once(closer: &Closer, closes: &Closes, raw: &[RawFd]) {
    assert_eq!(closer.end(FOREVER), Ok(()));
    assert_eq!(closes.closed(), sorted(raw.to_vec()));
    let state = closer.shared.lock();
    assert!(state.waiting.is_empty());
    assert!(state.threads.is_empty(), "every thread ended and joined");
    assert_eq!(
        (state.idle, state.standby, state.ends_waiting),
        (0, false, 0)
    );
}

/// Every interleaving with at most [`PREEMPTIONS`] preemptions.
fn model(test: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(PREEMPTIONS);
    builder.check(test);
}

/// Up to three threads may be preempted where loom chooses: each model
/// then takes seconds (the whole of the largest, with up to four
/// threads, took more than 15 minutes), and a lost wake-up or a race
/// needs one or two.
const PREEMPTIONS: usize = 3;

/// Fds handed over from two threads at once (the loop's and another)
/// are each closed once, by threads that all end.
#[test]
fn fds_from_two_threads_are_closed_once_each() {
    model(|| {
        let (closer, closes) = closer();
        let (mut ours, raw) = fds(2);
        let theirs = ours.pop().unwrap();
        let other = {
            let closer = Arc::clone(&closer);
            loom::thread::spawn(move || closer.hand_over(theirs))
        };
        closer.hand_over(ours.pop().unwrap());
        other.join().unwrap();
        all_closed_once(&closer, &closes, &raw);
    });
}

/// `end` returns once every fd is closed and every thread ended; the
/// next fd starts a thread again, which the next `end` ends.
#[test]
fn end_returns_once_every_fd_is_closed_and_every_thread_ended() {
    model(|| {
        let (closer, closes) = closer();
        let (ours, raw) = fds(3);
        let mut ours = ours.into_iter();
        closer.hand_over(ours.next().unwrap());
        closer.hand_over(ours.next().unwrap());
        all_closed_once(&closer, &closes, &raw[..2]);
        closer.hand_over(ours.next().unwrap());
        all_closed_once(&closer, &closes, &raw);
    });
}

/// While closes are held, `end` gives up (no fork then) and counts
/// them: each fd is being closed or waits. The fds are closed once the
/// closes go on.
#[test]
fn end_gives_up_while_closes_are_held_and_counts_them() {
    model(|| {
        let (closer, closes) = closer();
        let (ours, raw) = fds(2);
        raw.iter().for_each(|&fd| closes.hold(fd));
        ours.into_iter().for_each(|fd| closer.hand_over(fd));
        let still = closer.end(END_WAIT).unwrap_err();
        assert!(still.closing + still.waiting == 2, "{still:?}");
        assert!(closes.closed().is_empty());
        closes.open();
        all_closed_once(&closer, &closes, &raw);
    });
}

/// A close that sticks does not keep the next fd open: a standby takes
/// it once the close counts as stuck (fewer than `MOST_THREADS` run).
#[test]
fn a_stuck_close_does_not_keep_the_next_fd_open() {
    model(|| {
        let (closer, closes) = closer();
        let (ours, raw) = fds(2);
        closes.hold(raw[0]);
        ours.into_iter().for_each(|fd| closer.hand_over(fd));
        closes.wait_closed(raw[1]);
        assert_eq!(closes.closed(), [raw[1]]);
        closes.open();
        all_closed_once(&closer, &closes, &raw);
    });
}

/// No lost wake-up: an fd handed over while the thread is idle is
/// closed with no `end` to wake it (else loom finds every thread
/// blocked).
#[test]
fn an_fd_wakes_the_idle_thread() {
    model(|| {
        let (closer, closes) = closer();
        let (ours, raw) = fds(2);
        let mut ours = ours.into_iter();
        closer.hand_over(ours.next().unwrap());
        closes.wait_closed(raw[0]);
        closer.hand_over(ours.next().unwrap());
        closes.wait_closed(raw[1]);
        all_closed_once(&closer, &closes, &raw);
    });
}

/// An fd handed over while `end` waits (or after it) is closed once,
/// by an ending thread or a new one, and `end` still returns: a
/// hand-over that took the threads' end back would keep them idle, and
/// `end` waiting for them (loom's deadlock).
#[test]
fn an_fd_racing_with_end_is_closed_once() {
    model(|| fd_racing_with_end(FOREVER));
}

/// The same with an `end` that gives up, as a restart's may.
#[test]
fn an_fd_racing_with_an_end_that_gives_up_is_closed_once() {
    model(|| fd_racing_with_end(END_WAIT));
}

/// Another thread hands an fd over while `end` waits `wait`; a last
/// `end` then waits for whatever is left.
fn fd_racing_with_end(wait: Duration) {
    let (closer, closes) = closer();
    let (mut ours, raw) = fds(2);
    let theirs = ours.pop().unwrap();
    closer.hand_over(ours.pop().unwrap());
    let other = {
        let closer = Arc::clone(&closer);
        loom::thread::spawn(move || closer.hand_over(theirs))
    };
    match closer.end(wait) {
        Ok(()) => {}
        Err(StillClosing { closing, waiting }) => {
            assert!(wait < FOREVER);
            assert!(
                closing + waiting <= 2,
                "{closing} closing, {waiting} waiting"
            );
        }
    }
    other.join().unwrap();
    all_closed_once(&closer, &closes, &raw);
}
