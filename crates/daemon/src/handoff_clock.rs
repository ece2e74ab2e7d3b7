//! The time the daemon's thread hand-offs wait by (`fd_closer`'s standby
//! and end, `spawner`'s end): the system's ([`SystemClock`]), or in their
//! model check ([`model`]) one whose time passes only while a thread waits
//! for it, where loom chooses, so that a time-out can fall at any point
//! of the other threads' work.
//!
//! Like those modules, the lock and condition variable are loom's only in
//! the tests' build with `--cfg quickbus_loom` (scripts/test.sh).

#[cfg(all(test, quickbus_loom))]
use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(all(test, quickbus_loom)))]
use std::sync::{Condvar, Mutex, MutexGuard};

use std::sync::PoisonError;
use std::time::Instant;

/// A clock for a hand-off whose shared state is `S`.
pub trait Clock<S>: Send + Sync {
    fn now(&self) -> Instant;
    /// Wait on `changed` until signalled or until `until`, letting
    /// `guard` go meanwhile (the lock it holds is `lock`'s, which a
    /// model's wait takes again itself to end with no signal: a time-out).
    fn wait_until<'a>(
        &self,
        changed: &Condvar,
        lock: &'a Mutex<S>,
        guard: MutexGuard<'a, S>,
        until: Instant,
    ) -> MutexGuard<'a, S>;
}

/// The daemon's clock.
pub struct SystemClock;

impl<S> Clock<S> for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wait_until<'a>(
        &self,
        changed: &Condvar,
        _: &'a Mutex<S>,
        guard: MutexGuard<'a, S>,
        until: Instant,
    ) -> MutexGuard<'a, S> {
        let left = until.saturating_duration_since(Instant::now());
        changed
            .wait_timeout(guard, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }
}

/// The model check's clock.
#[cfg(all(test, quickbus_loom))]
pub mod model {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use loom::sync::{Condvar, Mutex, MutexGuard};

    use super::Clock;

    /// A wait this long never times out in the model.
    pub const FOREVER: Duration = Duration::from_secs(24 * 60 * 60);

    /// The model's time: it passes only while a thread waits for it, to
    /// the moment that thread waits for, whenever loom lets it take the
    /// lock again: a wait may end at any point of the other threads' work,
    /// as what they wait for may take any time. A wait for [`FOREVER`]
    /// ends only on a signal.
    pub struct ModelClock {
        start: Instant,
        /// Nanoseconds since `start` (not one of loom's types: only the
        /// threads' order, which loom chooses, orders its reads and
        /// writes).
        passed: AtomicU64,
    }

    impl Default for ModelClock {
        fn default() -> ModelClock {
            ModelClock {
                start: Instant::now(),
                passed: AtomicU64::new(0),
            }
        }
    }

    impl<S> Clock<S> for ModelClock {
        fn now(&self) -> Instant {
            self.start + Duration::from_nanos(self.passed.load(Ordering::SeqCst))
        }

        fn wait_until<'a>(
            &self,
            changed: &Condvar,
            lock: &'a Mutex<S>,
            guard: MutexGuard<'a, S>,
            until: Instant,
        ) -> MutexGuard<'a, S> {
            if until >= self.start + FOREVER {
                return changed.wait(guard).unwrap();
            }
            drop(guard);
            let nanos = u64::try_from((until - self.start).as_nanos()).unwrap();
            self.passed.fetch_max(nanos, Ordering::SeqCst);
            lock.lock().unwrap()
        }
    }
}
