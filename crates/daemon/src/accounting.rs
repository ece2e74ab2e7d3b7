//! Per-user accounting of what the daemon holds for peers beyond what the
//! bus core counts: bytes and fds queued for sending to a user's
//! connections. Every connection of a uid shares one [`UserTally`], so
//! updating it costs no lookup per message; the tally goes when the user's
//! last connection does.

use std::cell::Cell;
use std::collections::HashMap;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use crate::hold_budget::HoldBudget;

/// What one user's connections have queued.
#[derive(Debug, Default)]
pub struct UserTally {
    pub uid: u32,
    out_bytes: Cell<usize>,
    out_fds: Cell<usize>,
    /// Its connections not past Hello (see server::admission).
    incomplete: Cell<usize>,
    /// How long its receivers may still hold other users' senders.
    hold_budget: Cell<HoldBudget>,
}

impl UserTally {
    pub fn queued(&self, bytes: usize, fds: usize) {
        self.out_bytes.set(self.out_bytes.get() + bytes);
        self.out_fds.set(self.out_fds.get() + fds);
    }

    pub fn sent(&self, bytes: usize, fds: usize) {
        self.out_bytes
            .set(self.out_bytes.get().saturating_sub(bytes));
        self.out_fds.set(self.out_fds.get().saturating_sub(fds));
    }

    pub fn out_bytes(&self) -> usize {
        self.out_bytes.get()
    }

    pub fn out_fds(&self) -> usize {
        self.out_fds.get()
    }

    pub fn incomplete_opened(&self) {
        self.incomplete.set(self.incomplete.get() + 1);
    }

    pub fn incomplete_closed(&self) {
        self.incomplete.set(self.incomplete.get().saturating_sub(1));
    }

    pub fn incomplete(&self) -> usize {
        self.incomplete.get()
    }

    /// What its receivers may still hold another user's sender for.
    pub fn hold_available(&self, per_minute: Duration, now: Instant) -> Duration {
        let mut budget = self.hold_budget.get();
        let available = budget.available(per_minute, now);
        self.hold_budget.set(budget);
        available
    }

    /// Spend up to `wanted` of its hold budget; returns what was spent.
    pub fn take_hold(&self, wanted: Duration, per_minute: Duration, now: Instant) -> Duration {
        let mut budget = self.hold_budget.get();
        let taken = budget.take(wanted, per_minute, now);
        self.hold_budget.set(budget);
        taken
    }

    /// A hold ended before its time: the rest comes back to the budget.
    pub fn give_back_hold(&self, unused: Duration) {
        let mut budget = self.hold_budget.get();
        budget.give_back(unused);
        self.hold_budget.set(budget);
    }
}

/// The tallies of users with connections.
#[derive(Debug, Default)]
pub struct Users {
    by_uid: HashMap<u32, Weak<UserTally>>,
}

impl Users {
    /// The tally a new connection of `uid` shares with the others.
    pub fn tally(&mut self, uid: u32) -> Rc<UserTally> {
        if let Some(tally) = self.by_uid.get(&uid).and_then(Weak::upgrade) {
            return tally;
        }
        let tally = Rc::new(UserTally {
            uid,
            ..UserTally::default()
        });
        self.by_uid.insert(uid, Rc::downgrade(&tally));
        tally
    }

    /// Forget users whose last connection went (call after a close).
    pub fn forget_unused(&mut self, uid: u32) {
        if self.by_uid.get(&uid).is_some_and(|w| w.strong_count() == 0) {
            self.by_uid.remove(&uid);
        }
    }

    /// How many incomplete connections `uid` has (0 if none at all).
    pub fn incomplete_of(&self, uid: u32) -> usize {
        self.by_uid
            .get(&uid)
            .and_then(Weak::upgrade)
            .map_or(0, |tally| tally.incomplete())
    }

    pub fn len(&self) -> usize {
        self.by_uid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_of_one_user_share_a_tally() {
        let mut users = Users::default();
        let a = users.tally(1000);
        let b = users.tally(1000);
        let other = users.tally(1001);
        a.queued(100, 1);
        b.queued(50, 2);
        assert_eq!((a.out_bytes(), a.out_fds()), (150, 3));
        assert_eq!((other.out_bytes(), other.out_fds()), (0, 0));
        b.sent(120, 3);
        assert_eq!((a.out_bytes(), a.out_fds()), (30, 0));
        // Never below zero, whatever the order of events.
        a.sent(1000, 1000);
        assert_eq!(b.out_bytes(), 0);
    }

    #[test]
    fn a_user_is_forgotten_with_its_last_connection() {
        let mut users = Users::default();
        let a = users.tally(7);
        let b = users.tally(7);
        drop(a);
        users.forget_unused(7);
        assert_eq!(users.len(), 1);
        drop(b);
        users.forget_unused(7);
        assert!(users.is_empty());
        // A new connection starts from zero.
        assert_eq!(users.tally(7).out_bytes(), 0);
    }
}
