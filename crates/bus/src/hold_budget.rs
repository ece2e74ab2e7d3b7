//! How long one user's receivers may still hold other users' senders back
//! (`max_hold_per_user_per_minute`, see [`crate::flow`]): a token bucket
//! of time, refilled at the budget per minute and never holding more than
//! one minute's worth. Whatever the pattern of overflows, the holds and
//! pauses a user's receivers impose on others' senders over any span of
//! T seconds add up to at most budget × (1 + T / 60 s).
//!
//! Owns: one user's hold budget. May touch: nothing else.

use std::time::{Duration, Instant};

const MINUTE: Duration = Duration::from_secs(60);

/// One receiving user's budget. Starts full.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HoldBudget {
    /// Time spent beyond what has been refilled, as of `at` (0: full).
    spent: Duration,
    #[serde(with = "crate::handover::optional_instant")]
    at: Option<Instant>,
}

impl HoldBudget {
    /// What may be spent at `now`, with `per_minute` the budget.
    pub fn available(&mut self, per_minute: Duration, now: Instant) -> Duration {
        self.refill(per_minute, now);
        per_minute.saturating_sub(self.spent)
    }

    /// Take up to `wanted` (no more than is available); returns what was
    /// taken.
    pub fn take(&mut self, wanted: Duration, per_minute: Duration, now: Instant) -> Duration {
        let taken = wanted.min(self.available(per_minute, now));
        self.spent += taken;
        taken
    }

    /// A hold ended early: give back what it did not use.
    pub fn give_back(&mut self, unused: Duration) {
        self.spent = self.spent.saturating_sub(unused);
    }

    fn refill(&mut self, per_minute: Duration, now: Instant) {
        if let Some(at) = self.at {
            let elapsed = now.saturating_duration_since(at);
            // per_minute × elapsed / 60 s, in nanoseconds (u128: no overflow).
            let refilled = per_minute.as_nanos() * elapsed.as_nanos() / MINUTE.as_nanos();
            let refilled = Duration::from_nanos(u64::try_from(refilled).unwrap_or(u64::MAX));
            self.spent = self.spent.saturating_sub(refilled);
        }
        self.at = Some(now);
    }
}

// Tests may use the clock (see clippy.toml).
#[cfg(test)]
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    const BUDGET: Duration = Duration::from_millis(600);

    #[test]
    fn a_budget_starts_full_and_is_taken_up_to_what_is_left() {
        let mut b = HoldBudget::default();
        let t0 = Instant::now();
        assert_eq!(b.available(BUDGET, t0), BUDGET);
        assert_eq!(b.take(Duration::from_secs(1), BUDGET, t0), BUDGET);
        assert_eq!(b.available(BUDGET, t0), Duration::ZERO);
        assert_eq!(b.take(Duration::from_secs(1), BUDGET, t0), Duration::ZERO);
    }

    #[test]
    fn it_refills_at_the_budget_per_minute_and_never_beyond_it() {
        let mut b = HoldBudget::default();
        let t0 = Instant::now();
        b.take(BUDGET, BUDGET, t0);
        // 10 s refill 100 ms of a 600 ms-a-minute budget.
        let t1 = t0 + Duration::from_secs(10);
        assert_eq!(b.available(BUDGET, t1), Duration::from_millis(100));
        let t2 = t0 + Duration::from_secs(3600);
        assert_eq!(b.available(BUDGET, t2), BUDGET);
    }

    #[test]
    fn what_a_hold_did_not_use_comes_back() {
        let mut b = HoldBudget::default();
        let t0 = Instant::now();
        let taken = b.take(Duration::from_millis(500), BUDGET, t0);
        b.give_back(taken - Duration::from_millis(20));
        assert_eq!(b.available(BUDGET, t0), BUDGET - Duration::from_millis(20));
        // Never more than full.
        b.give_back(Duration::from_secs(10));
        assert_eq!(b.available(BUDGET, t0), BUDGET);
    }

    #[test]
    fn over_any_span_holds_add_up_to_at_most_budget_times_one_plus_minutes() {
        // An attacker asking for a 1 s hold every 100 ms of simulated time.
        let mut b = HoldBudget::default();
        let t0 = Instant::now();
        let mut total = Duration::ZERO;
        let span = Duration::from_secs(300);
        let mut t = t0;
        while t < t0 + span {
            total += b.take(Duration::from_secs(1), BUDGET, t);
            t += Duration::from_millis(100);
        }
        let bound = BUDGET + BUDGET * 5; // 1 + 300 s / 60 s
        assert!(total <= bound, "{total:?} > {bound:?}");
        // And the budget was indeed used, not just refused.
        assert!(total >= BUDGET * 5, "{total:?}");
    }

    #[test]
    fn a_zero_budget_never_holds() {
        let mut b = HoldBudget::default();
        let t0 = Instant::now();
        assert_eq!(
            b.take(Duration::from_secs(1), Duration::ZERO, t0),
            Duration::ZERO
        );
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(b.available(Duration::ZERO, later), Duration::ZERO);
    }
}
