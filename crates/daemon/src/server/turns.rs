//! Bounded turns: how much one connection may send through the bus in one
//! turn of the loop before the others get theirs (docs/reliability.md,
//! "Fair turns").
//!
//! Each turn serves every connection with input, oldest first, and routes
//! at most one budget of each one's messages; whatever a connection has
//! left (in its input buffer or in the kernel) waits for the next turn,
//! where it comes round again. All deliveries of a turn are flushed at its
//! end, so a message that arrives while another connection floods waits
//! for at most one budget of that connection's messages, not for
//! everything its socket held.
//!
//! The budget depends on whether connections contend: whether, lately
//! ([`CONTENTION_MEMORY`]), a turn routed messages of two connections or
//! more and one of them sent more than a [`CONTENDED`] budget, so that the
//! small budget would have made it wait. Then each gets that small
//! budget, the size that served calls best in the trials that
//! docs/reliability.md ("Fair turns") reports. A connection that has the
//! bus to itself gets [`ALONE`], large enough that a burst is still
//! written with one `writev` per receiver for hundreds of messages (in a
//! trial build with the small budget for everyone, not kept, 32 B fan-out
//! to 10 receivers lost about a quarter of its rate to the extra writes);
//! the first message of a newcomer then waits for at most one such budget.

use std::time::{Duration, Instant};

/// What one connection may route in one turn, at most (a message larger
/// than `bytes` still goes through, alone in its turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub messages: u32,
    pub bytes: usize,
}

/// Each connection's budget while connections contend.
pub const CONTENDED: Limits = Limits {
    messages: 16,
    bytes: 8 * 1024,
};
/// The budget of a connection that has the bus to itself.
pub const ALONE: Limits = Limits {
    messages: 1024,
    bytes: 256 * 1024,
};
/// Connections contend for this long after a turn in which two or more of
/// them had messages routed, one of them more than a [`CONTENDED`] budget.
pub const CONTENTION_MEMORY: Duration = Duration::from_millis(2);
/// `recvmsg` calls per connection per turn, at most: the bound on a turn
/// for input that is not messages yet (authentication, partial frames).
pub const READS_PER_TURN: usize = 32;

/// Whether connections contend for the bus, from what the last turns
/// routed.
#[derive(Debug, Default)]
pub struct Contention {
    /// The last turn in which connections contended.
    last_seen: Option<Instant>,
    /// Connections that had messages routed in the turn under way.
    routing_now: u32,
    /// One of them routed more than a contended budget.
    heavy_now: bool,
}

impl Contention {
    /// The budgets of a turn beginning at `now`.
    pub fn limits(&mut self, now: Instant) -> Limits {
        self.routing_now = 0;
        self.heavy_now = false;
        match self.last_seen {
            Some(seen) if now.saturating_duration_since(seen) < CONTENTION_MEMORY => CONTENDED,
            _ => ALONE,
        }
    }

    /// A connection's turn ended, having routed `budget`'s messages.
    pub fn served(&mut self, budget: &TurnBudget, now: Instant) {
        if budget.messages == 0 {
            return;
        }
        self.routing_now += 1;
        self.heavy_now |= budget.reached(CONTENDED);
        if self.routing_now >= 2 && self.heavy_now {
            self.last_seen = Some(now);
        }
    }
}

/// What one connection has used of its turn so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnBudget {
    limits: Limits,
    messages: u32,
    bytes: usize,
}

impl TurnBudget {
    pub fn new(limits: Limits) -> TurnBudget {
        TurnBudget {
            limits,
            messages: 0,
            bytes: 0,
        }
    }

    /// Count one routed message of `bytes`.
    pub fn charge(&mut self, bytes: usize) {
        self.messages += 1;
        self.bytes += bytes;
    }

    /// Whether the connection has had its turn: its next message waits.
    pub fn spent(&self) -> bool {
        self.reached(self.limits)
    }

    fn reached(&self, limits: Limits) -> bool {
        self.messages >= limits.messages || self.bytes >= limits.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_ends_at_the_message_or_the_byte_bound_whichever_comes_first() {
        for limits in [CONTENDED, ALONE] {
            let mut small = TurnBudget::new(limits);
            for _ in 0..limits.messages - 1 {
                small.charge(16);
            }
            assert!(!small.spent());
            small.charge(16);
            assert!(small.spent());

            let mut large = TurnBudget::new(limits);
            large.charge(limits.bytes - 1);
            assert!(!large.spent());
            large.charge(1);
            assert!(large.spent());

            let mut one_huge = TurnBudget::new(limits);
            assert!(!one_huge.spent(), "the first message always goes");
            one_huge.charge(4 * limits.bytes);
            assert!(one_huge.spent());
        }
    }

    #[test]
    fn budgets_are_small_while_a_heavy_sender_shared_a_turn_lately() {
        let t0 = Instant::now();
        let mut contention = Contention::default();
        let budget_of = |bytes| {
            let mut b = TurnBudget::new(ALONE);
            b.charge(bytes);
            b
        };
        let (light, heavy, idle) = (budget_of(100), budget_of(CONTENDED.bytes), budget_of(0));
        let idle = TurnBudget {
            messages: 0,
            ..idle
        };
        assert_eq!(contention.limits(t0), ALONE);
        // A heavy sender beside one with nothing; two light ones: no
        // contention.
        contention.served(&heavy, t0);
        contention.served(&idle, t0);
        assert_eq!(contention.limits(t0), ALONE);
        contention.served(&light, t0);
        contention.served(&light, t0);
        assert_eq!(contention.limits(t0), ALONE);
        // A light one and a heavy one in one turn, in either order.
        for pair in [[&light, &heavy], [&heavy, &light]] {
            let mut contention = Contention::default();
            assert_eq!(contention.limits(t0), ALONE);
            for budget in pair {
                contention.served(budget, t0);
            }
            let later = t0 + CONTENTION_MEMORY / 2;
            assert_eq!(contention.limits(later), CONTENDED);
            contention.served(&heavy, later);
            assert_eq!(contention.limits(t0 + CONTENTION_MEMORY), ALONE);
        }
    }
}
