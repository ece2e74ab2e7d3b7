//! The fd closer: the threads that close the fds clients passed
//! (`quickbus_bus::fds::PassedFd` hands every one it drops to
//! [`close_later`]), so that no close ever runs on the bus's loop or a
//! thread of its pool, which the loop waits for.
//!
//! Why: a close may block as long as the client that passed the fd
//! likes. A TCP socket with `SO_LINGER` on and a send queue its peer
//! never reads makes the last close wait up to the linger time; a file
//! on FUSE or NFS flushes on every close. Once the client closed its own
//! copy, the bus's is the last (docs/reliability.md, "Fds clients
//! pass").
//!
//! One thread closes while closes are quick. A close that is stuck does
//! not stop the others: when fds wait and every closing thread has been
//! inside one close for [`STUCK_AFTER`], another thread takes the next.
//! That thread is a standby, started (up to [`MOST_THREADS`]) whenever
//! fds wait with no thread idle (an fd handed over, or a close begun
//! with others behind it), which waits until the closes in progress
//! count as stuck; if they end first, it is an idle thread like any.
//! Past [`MOST_THREADS`] the fds wait, open, counted; with more than
//! [`WARN_WAITING`] waiting a warning says so (at most one per
//! [`WARN_EVERY`]). Threads, once started, stay until [`end`], idle
//! when nothing waits (an idle thread takes the next fd whatever the
//! others do): under a flood of fds there may be all eight.
//!
//! A thread does not survive fork or exec: [`end`] closes every waiting
//! fd and ends the threads first (`sys::become_single_threaded`, which
//! every fork of the daemon's goes through: `sys::fork_single_threaded`),
//! or says a close is stuck and the fork is refused; so a forked child
//! finds no thread of its parent's in the state, and the next fd handed
//! over starts one.
//!
//! The hand-off to the threads is model-checked (`loom_tests`, built
//! with `--cfg quickbus_loom`: scripts/test.sh), as the log's is
//! (`logging/handoff.rs`): that build takes loom's lock, condition
//! variable and threads in place of std's, and a [`Clock`] whose time
//! passes where loom chooses. Only the tests' build takes loom's (a
//! dev-dependency): any other build, with that cfg or not, is the
//! daemon's.
//!
//! Owns: the closing threads and the fds waiting for them.

#[cfg(all(test, quickbus_loom))]
use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(all(test, quickbus_loom))]
use loom::thread::{Builder, JoinHandle};
#[cfg(not(all(test, quickbus_loom)))]
use std::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(all(test, quickbus_loom)))]
use std::thread::{Builder, JoinHandle};

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::{Arc, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use tracing::warn;

use crate::handoff_clock::{Clock, SystemClock};

/// How long every closing thread must have been inside one close before
/// a waiting fd gets another thread.
pub const STUCK_AFTER: Duration = Duration::from_millis(100);
/// The most closing threads; past them, fds wait.
pub const MOST_THREADS: usize = 8;
/// More fds than this waiting to be closed: a warning.
pub const WARN_WAITING: usize = 64;
/// At most one warning per this long.
pub const WARN_EVERY: Duration = Duration::from_secs(60);
/// How long [`end`] waits for the closes before a fork, an exec or the
/// change of user (closes take microseconds unless one is stuck).
pub const END_WAIT: Duration = Duration::from_millis(500);

/// The closing threads' name.
const NAME: &str = "quickbus-close";

/// The process's closer, which [`close_later`] hands fds to (made by
/// the first).
static PROCESS: OnceLock<Closer> = OnceLock::new();

/// Make every dropped `PassedFd` come here ([`close_later`]); called once,
/// at start-up.
pub fn register() {
    quickbus_bus::fds::set_closer(close_later);
}

/// Close `fd` on a closing thread, never on the caller's (unless no
/// thread can be started at all).
pub fn close_later(fd: OwnedFd) {
    PROCESS.get_or_init(|| Closer::new(drop)).hand_over(fd);
}

/// Close every waiting fd and end this process's closing threads,
/// waiting at most `wait`; [`StillClosing`] if a close is stuck (the
/// threads go on, and the fds are closed when they can be).
pub fn end(wait: Duration) -> Result<(), StillClosing> {
    PROCESS.get().map_or(Ok(()), |closer| closer.end(wait))
}

/// The closes did not end in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StillClosing {
    /// Closes in progress when the wait ended.
    pub closing: usize,
    /// Fds still waiting for a thread.
    pub waiting: usize,
}

impl std::fmt::Display for StillClosing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "closing the fds clients passed is stuck ({} closes in progress, {} fds waiting)",
            self.closing, self.waiting
        )
    }
}

/// Fds waiting, the threads that close them, and the close itself (in
/// tests, one that can be made to stick).
pub struct Closer {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// What idle threads wait on: signalled once per fd handed over while
    /// one is idle (one thread woken, not all of them: each woken thread
    /// costs the process a wake-up and a sleep), and for all of them when
    /// the threads are to end.
    fd_ready: Condvar,
    /// What a standby and [`Closer::end`] wait on: signalled when the
    /// threads are to end and when one ended. (A standby needs no word of
    /// a new fd: it takes one only once the closes in progress count as
    /// stuck, and a close that ends meanwhile frees its thread, which
    /// takes the next fd itself.)
    changed: Condvar,
    close: Box<dyn Fn(OwnedFd) + Send + Sync>,
    clock: Box<dyn Clock<State>>,
}

#[derive(Default)]
struct State {
    waiting: VecDeque<OwnedFd>,
    threads: Vec<Slot>,
    /// Threads waiting for fds.
    idle: usize,
    /// A thread is waiting for the others' closes to count as stuck.
    standby: bool,
    /// The calls of [`Closer::end`] waiting: while there are any, the
    /// threads end once nothing waits. A count, not a flag that a
    /// hand-over clears, which would keep the threads idle for an `end`
    /// that waits for them (loom found that in the log's hand-off); the
    /// first `end` to give up must not keep them for another either.
    /// The daemon ends the closer on the loop's thread with the pool
    /// stopped and no other thread that drops a `PassedFd`, but nothing
    /// here relies on that.
    ends_waiting: u32,
    warned_at: Option<Instant>,
}

/// One closing thread.
struct Slot {
    /// Since when it is inside its current close.
    closing_since: Option<Instant>,
    /// Until it left its loop (then joining it cannot wait).
    running: bool,
    handle: Option<JoinHandle<()>>,
}

impl State {
    fn running(&self) -> usize {
        self.threads.iter().filter(|t| t.running).count()
    }

    fn closing(&self) -> usize {
        self.threads
            .iter()
            .filter(|t| t.closing_since.is_some())
            .count()
    }

    /// None when every close in progress has lasted [`STUCK_AFTER`] (or
    /// none is): a standby takes a waiting fd. Otherwise when that will
    /// be so, if those closes last.
    fn stuck_at(&self, now: Instant) -> Option<Instant> {
        let youngest = self.threads.iter().filter_map(|t| t.closing_since).max()?;
        let stuck = youngest + STUCK_AFTER;
        (stuck > now).then_some(stuck)
    }

    /// A warning's text, at most one per [`WARN_EVERY`], while more than
    /// [`WARN_WAITING`] fds wait.
    fn warning(&mut self, now: Instant) -> Option<String> {
        if self.waiting.len() <= WARN_WAITING
            || self
                .warned_at
                .is_some_and(|at| now.duration_since(at) < WARN_EVERY)
        {
            return None;
        }
        self.warned_at = Some(now);
        Some(format!(
            "closes of fds that clients passed are stuck: {} fds wait to be closed (open \
             meanwhile) while {} closes are in progress on {} threads; a close blocks where \
             a client passed a socket with SO_LINGER that its peer does not read, or a file on \
             a file system that does not answer",
            self.waiting.len(),
            self.closing(),
            self.running()
        ))
    }
}

impl Closer {
    /// A closer whose threads close each fd with `close`.
    pub fn new(close: impl Fn(OwnedFd) + Send + Sync + 'static) -> Closer {
        Closer::with_clock(close, SystemClock)
    }

    /// [`Closer::new`] on `clock` (the model check's).
    fn with_clock(
        close: impl Fn(OwnedFd) + Send + Sync + 'static,
        clock: impl Clock<State> + 'static,
    ) -> Closer {
        Closer {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                fd_ready: Condvar::new(),
                changed: Condvar::new(),
                close: Box::new(close),
                clock: Box::new(clock),
            }),
        }
    }

    /// Queue `fd` for a closing thread, starting one if none is idle and
    /// none is on standby, up to [`MOST_THREADS`]. Never waits for a
    /// close.
    pub fn hand_over(&self, fd: OwnedFd) {
        let mut state = self.shared.lock();
        state.waiting.push_back(fd);
        // An idle thread is woken once the lock is let go, so that it does
        // not wake only to wait for the lock. (It is inside its wait: it
        // counted itself idle and waits under the lock held here.)
        let wake_idle = state.idle > 0;
        // A standby takes the fd when its time comes (`Shared::changed`).
        if !wake_idle
            && !state.standby
            && !start_standby(&self.shared, &mut state)
            && state.running() == 0
        {
            // No thread to be had: closed here, as a last resort (kept
            // open, it would wait for a thread that never comes).
            let waiting = std::mem::take(&mut state.waiting);
            drop(state);
            drop(waiting);
            return;
        }
        // (The clock is read only where a warning may be due.)
        let warning = (state.waiting.len() > WARN_WAITING)
            .then(|| state.warning(self.shared.clock.now()))
            .flatten();
        drop(state);
        if wake_idle {
            self.shared.fd_ready.notify_one();
        }
        if let Some(warning) = warning {
            warn!("{warning}");
        }
    }

    /// Fds waiting for a thread (not those being closed).
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.shared.lock().waiting.len()
    }

    /// [`end`] for this closer. An fd handed over meanwhile is closed
    /// before the threads end, by one of them or a new one.
    pub fn end(&self, wait: Duration) -> Result<(), StillClosing> {
        let shared = &self.shared;
        let mut state = shared.lock();
        let deadline = shared.clock.now() + wait;
        state.ends_waiting += 1;
        shared.fd_ready.notify_all();
        shared.changed.notify_all();
        while state.running() > 0 {
            if shared.clock.now() >= deadline {
                state.ends_waiting -= 1;
                return Err(StillClosing {
                    closing: state.closing(),
                    waiting: state.waiting.len(),
                });
            }
            state = shared
                .clock
                .wait_until(&shared.changed, &shared.state, state, deadline);
        }
        state.ends_waiting -= 1;
        // Joined, so that a fork finds the process's one thread.
        let ended: Vec<_> = state.threads.drain(..).filter_map(|t| t.handle).collect();
        drop(state);
        for thread in ended {
            let _ = thread.join();
        }
        Ok(())
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves a usable queue.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Start a closing thread running `run`: std's, with every signal
/// blocked, so that the bus's loop handles them all (and a restart's
/// held signals stay pending); loom's in the model.
#[cfg(not(all(test, quickbus_loom)))]
fn spawn(run: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle<()>> {
    crate::quiet_thread::spawn(Builder::new().name(NAME.into()), run)
}

#[cfg(all(test, quickbus_loom))]
fn spawn(run: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle<()>> {
    Builder::new().name(NAME.into()).spawn(run)
}

/// Start a standby thread (see [`run`]) unless one is there or the
/// threads are [`MOST_THREADS`] already; false if none was started.
fn start_standby(shared: &Arc<Shared>, state: &mut State) -> bool {
    if state.standby || state.running() >= MOST_THREADS {
        return false;
    }
    let thread_shared = shared.clone();
    let slot = state.threads.len();
    let Ok(handle) = spawn(move || run(thread_shared, slot)) else {
        return false;
    };
    state.standby = true;
    state.threads.push(Slot {
        closing_since: None,
        running: true,
        handle: Some(handle),
    });
    true
}

/// A closing thread, in `slot`. It starts on standby: it takes a waiting
/// fd only once every close in progress is stuck ([`State::stuck_at`]),
/// or at once when none is (the first thread) or the threads are ending;
/// after that, and once nothing waits, it is an ordinary thread, which
/// takes whatever waits.
fn run(shared: Arc<Shared>, slot: usize) {
    let mut standby = true;
    let mut state = shared.lock();
    loop {
        if standby && state.ends_waiting == 0 && !state.waiting.is_empty() {
            if let Some(stuck) = state.stuck_at(shared.clock.now()) {
                state = shared
                    .clock
                    .wait_until(&shared.changed, &shared.state, state, stuck);
                continue;
            }
        }
        if std::mem::take(&mut standby) {
            state.standby = false;
        }
        if let Some(fd) = state.waiting.pop_front() {
            state.threads[slot].closing_since = Some(shared.clock.now());
            // Should this close stick, another thread is to be ready
            // for the fds that wait behind it.
            if !state.waiting.is_empty() && state.idle == 0 {
                start_standby(&shared, &mut state);
            }
            drop(state);
            // A close that panics (a test's) loses this fd's close, not
            // the thread.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (shared.close)(fd)));
            state = shared.lock();
            state.threads[slot].closing_since = None;
        } else if state.ends_waiting > 0 {
            state.threads[slot].running = false;
            shared.changed.notify_all();
            return;
        } else {
            state.idle += 1;
            state = shared
                .fd_ready
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.idle -= 1;
        }
    }
}

#[cfg(all(test, quickbus_loom))]
mod loom_tests;

#[cfg(all(test, not(quickbus_loom)))]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    /// What the tests' closes saw, and a gate that holds the closes of
    /// chosen fds (a close that is stuck) until opened.
    #[derive(Default)]
    struct Closes {
        state: Mutex<Seen>,
        changed: Condvar,
    }

    #[derive(Default)]
    struct Seen {
        /// Inodes of the sockets whose close sticks until `open`.
        held: Vec<u64>,
        open: bool,
        /// Closes inside the gate now.
        inside: usize,
        /// Inodes of the sockets closed, in the order they were.
        closed: Vec<u64>,
    }

    fn inode(fd: impl AsFd) -> u64 {
        rustix::fs::fstat(fd).unwrap().st_ino
    }

    impl Closes {
        fn close(&self, fd: OwnedFd) {
            let ino = inode(&fd);
            let mut seen = self.state.lock().unwrap();
            if seen.held.contains(&ino) {
                seen.inside += 1;
                self.changed.notify_all();
                seen = self.changed.wait_while(seen, |s| !s.open).unwrap();
                seen.inside -= 1;
            }
            seen.closed.push(ino);
            drop(seen);
            drop(fd);
            self.changed.notify_all();
        }

        /// Wait until `done` holds (a minute at most: a guard against a
        /// hang, not a measure).
        fn wait_for(&self, done: impl Fn(&Seen) -> bool) {
            let seen = self.state.lock().unwrap();
            let (_seen, timed_out) = self
                .changed
                .wait_timeout_while(seen, Duration::from_secs(60), |s| !done(s))
                .unwrap();
            assert!(!timed_out.timed_out(), "the closes never got there");
        }

        fn open(&self) {
            self.state.lock().unwrap().open = true;
            self.changed.notify_all();
        }
    }

    /// A closer closing through `closes`.
    fn closer(closes: &Arc<Closes>) -> Closer {
        let closes = closes.clone();
        Closer::new(move |fd| closes.close(fd))
    }

    /// `n` sockets: ours to hand over (with their inodes), and their peers.
    fn sockets(n: usize) -> (Vec<OwnedFd>, Vec<u64>, Vec<UnixStream>) {
        let (mut ours, mut inodes, mut peers) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..n {
            let (a, b) = UnixStream::pair().unwrap();
            inodes.push(inode(&a));
            ours.push(OwnedFd::from(a));
            peers.push(b);
        }
        (ours, inodes, peers)
    }

    /// Once `closer` ended, every socket of `inodes` was closed exactly
    /// once (in any order), and every peer sees its socket closed.
    fn all_closed_once(closer: &Closer, closes: &Closes, inodes: Vec<u64>, peers: Vec<UnixStream>) {
        closer.end(Duration::from_secs(60)).unwrap();
        assert_eq!(closer.waiting(), 0);
        let closed = closes.state.lock().unwrap().closed.clone();
        assert_eq!(sorted(closed), sorted(inodes));
        for mut peer in peers {
            assert_eq!(peer.read(&mut [0; 1]).unwrap(), 0);
        }
    }

    fn sorted(mut v: Vec<u64>) -> Vec<u64> {
        v.sort_unstable();
        v
    }

    #[test]
    fn every_fd_handed_over_is_closed_exactly_once() {
        let closes = Arc::new(Closes::default());
        let closer = Arc::new(closer(&closes));
        let (ours, inodes, peers) = sockets(200);
        // From two threads at once, as the loop and a worker drop fds.
        let mut ours = ours.into_iter();
        let first: Vec<OwnedFd> = ours.by_ref().take(100).collect();
        let other = {
            let closer = closer.clone();
            std::thread::spawn(move || first.into_iter().for_each(|fd| closer.hand_over(fd)))
        };
        ours.for_each(|fd| closer.hand_over(fd));
        other.join().unwrap();
        all_closed_once(&closer, &closes, inodes, peers);
    }

    #[test]
    fn a_stuck_close_does_not_stop_the_others() {
        let closes = Arc::new(Closes::default());
        let closer = closer(&closes);
        let (ours, inodes, peers) = sockets(21);
        closes.state.lock().unwrap().held.push(inodes[0]);
        for fd in ours {
            closer.hand_over(fd);
        }
        // The 20 others are closed while the first one's close sticks.
        closes.wait_for(|s| s.closed.len() == 20);
        assert_eq!(closes.state.lock().unwrap().inside, 1);
        assert!(!closes.state.lock().unwrap().closed.contains(&inodes[0]));
        // No fork or exec while it sticks: the wait for the end fails.
        assert_eq!(
            closer.end(Duration::from_millis(10)),
            Err(StillClosing {
                closing: 1,
                waiting: 0
            })
        );
        closes.open();
        all_closed_once(&closer, &closes, inodes, peers);
    }

    #[test]
    fn past_the_most_threads_stuck_fds_wait_open() {
        let closes = Arc::new(Closes::default());
        let closer = closer(&closes);
        let (ours, inodes, peers) = sockets(MOST_THREADS + 3);
        closes.state.lock().unwrap().held = inodes.clone();
        for fd in ours {
            closer.hand_over(fd);
        }
        closes.wait_for(|s| s.inside == MOST_THREADS);
        // Every thread is stuck: the rest wait, and no thread is added.
        assert_eq!(closer.waiting(), 3);
        assert_eq!(closer.shared.lock().running(), MOST_THREADS);
        let (more, more_inodes, more_peers) = sockets(1);
        closer.hand_over(more.into_iter().next().unwrap());
        assert_eq!(closer.waiting(), 4);
        assert_eq!(closer.shared.lock().running(), MOST_THREADS);
        assert!(closes.state.lock().unwrap().closed.is_empty());
        closes.open();
        all_closed_once(
            &closer,
            &closes,
            [inodes, more_inodes].concat(),
            peers.into_iter().chain(more_peers).collect(),
        );
    }

    #[test]
    fn many_fds_waiting_are_told_once_a_while() {
        let mut state = State::default();
        let t0 = Instant::now();
        let (ours, _, _peers) = sockets(WARN_WAITING + 1);
        let mut ours = ours.into_iter();
        state.waiting.extend(ours.by_ref().take(WARN_WAITING));
        assert_eq!(state.warning(t0), None);
        state.waiting.extend(ours);
        let warning = state.warning(t0).unwrap();
        assert!(warning.contains(&format!("{} fds wait", WARN_WAITING + 1)));
        assert_eq!(state.warning(t0 + WARN_EVERY / 2), None);
        assert!(state.warning(t0 + WARN_EVERY).is_some());
    }
}
