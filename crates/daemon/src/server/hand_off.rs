//! Handing the CPU to the peer the bus just woke (docs/reliability.md,
//! "Fair turns"), within a budget.
//!
//! A Unix socket wakes its reader with a synchronous wake-up, which places
//! it on the writer's CPU on the promise that the writer will sleep soon.
//! A bus routing a flood does not sleep: a caller its write of a reply
//! woke (or a service its write of a call woke) waits for the bus's time
//! slice to end, up to a millisecond or more on a busy machine. So, while
//! connections contend, a turn that delivered a call or a reply ends with
//! the bus yielding the CPU, and the woken peer runs before the bus's next
//! turn. On 2 cores this took a call's 99th percentile during an unpaced
//! flood from 477 to 382 µs in its first version, without the budget
//! below (docs/performance.md, "Signal storm", has the final runs). A bus
//! alone with its peers sleeps in `epoll_wait` after such a turn anyway,
//! so it never yields then.
//!
//! Only a delivery wakes a peer that waits: a reply nobody asked for, a
//! call to a name nobody owns or one the policy refuses is never
//! delivered, so it hands nothing off. But clients can still deliver
//! calls and replies at will (two connections of one client calling each
//! other), and a yield is not free: on a busy machine the scheduler may
//! run others for a whole slice before the bus again. So the time the bus
//! spends yielding is bounded: at most [`ALLOWANCE`] of every [`WINDOW`]
//! (10 %), measured as the wall time each `sched_yield` took; past it,
//! turns end without yielding until the next window. Whatever clients
//! do, they cost the bus at most that share of its time this way (the
//! fair share's pauses, by comparison, may keep heavy senders out for
//! half of it). With `QUICKBUS_LOG=quickbus_daemon::server::hand_off=debug`
//! the daemon logs what each window's yields took, when the next window
//! begins ([`WindowCost`]; docs/performance.md, "The hand-off", has the
//! command and what a storm printed).

use std::fmt;
use std::time::{Duration, Instant};

use quickbus_bus::flow::Kind;

/// The stretch over which yields are counted.
pub const WINDOW: Duration = Duration::from_millis(100);
/// What the bus may spend yielding per [`WINDOW`].
pub const ALLOWANCE: Duration = Duration::from_millis(10);

/// Whether the turn under way woke a peer that waits, and what yielding
/// cost in the current window.
#[derive(Debug, Default)]
pub struct HandOff {
    /// A call or a reply was delivered since the last turn ended.
    woke_a_peer: bool,
    /// The current window began then (None before the first yield).
    window_began: Option<Instant>,
    /// Wall time spent in `sched_yield` in the current window.
    spent: Duration,
    /// Yields in the current window.
    yields: u32,
    /// Turns of the current window that woke a peer while connections
    /// contended but did not yield, its allowance spent.
    refused: u32,
}

/// What yielding cost in one window, logged at debug level when the
/// window closes: once per window at most, so that it costs nothing
/// measurable with debug off.
#[derive(Debug, PartialEq, Eq)]
pub struct WindowCost {
    pub yields: u32,
    /// Wall time spent in `sched_yield`.
    pub spent: Duration,
    /// Turns that would have yielded but for the spent allowance.
    pub refused: u32,
}

impl fmt::Display for WindowCost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let share = self.spent.as_secs_f64() / WINDOW.as_secs_f64() * 100.0;
        write!(
            f,
            "hand-off: {} sched_yield calls in a {} ms window took {} µs ({share:.1} %); \
             the allowance ({} ms) refused {} more",
            self.yields,
            WINDOW.as_millis(),
            self.spent.as_micros(),
            ALLOWANCE.as_millis(),
            self.refused
        )
    }
}

impl HandOff {
    /// The bus delivered a message of this kind (what it is to its
    /// receiver, `Action::Queued`: a monitor's or an eavesdropper's copy
    /// of a call is a signal).
    pub fn delivered(&mut self, kind: Kind) {
        self.woke_a_peer |= matches!(kind, Kind::Call | Kind::Reply);
    }

    /// At the end of a turn at `now`: whether to yield the CPU. Yes when
    /// the turn woke a peer that waits, connections `contended`, and the
    /// window's allowance is not spent. Clears the turn's mark either way.
    pub fn should_yield(&mut self, contended: bool, now: Instant) -> bool {
        if !std::mem::take(&mut self.woke_a_peer) || !contended {
            return false;
        }
        match self.window_began {
            Some(began) if now.saturating_duration_since(began) < WINDOW => {}
            _ => {
                if let Some(cost) = self.close_window() {
                    tracing::debug!("{cost}");
                }
                self.window_began = Some(now);
            }
        }
        let allowed = self.spent < ALLOWANCE;
        if !allowed {
            self.refused = self.refused.saturating_add(1);
        }
        allowed
    }

    /// A yield took `took` of wall time (the bus was off the CPU).
    pub fn yielded(&mut self, took: Duration) {
        self.spent = self.spent.saturating_add(took);
        self.yields = self.yields.saturating_add(1);
    }

    /// Ends the current window: what its yields cost, if it had any
    /// (a window in which every turn was refused had none: it opened
    /// with the allowance unspent, so it yielded at least once).
    fn close_window(&mut self) -> Option<WindowCost> {
        let cost = WindowCost {
            yields: std::mem::take(&mut self.yields),
            spent: std::mem::take(&mut self.spent),
            refused: std::mem::take(&mut self.refused),
        };
        (cost.yields > 0).then_some(cost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A turn at `at` that delivered a message of `kind`, connections
    /// contending: whether it yields.
    fn turn(hand_off: &mut HandOff, kind: Kind, at: Instant) -> bool {
        hand_off.delivered(kind);
        hand_off.should_yield(true, at)
    }

    #[test]
    fn only_a_delivered_call_or_reply_while_contended_yields_once_per_turn() {
        let now = Instant::now();
        let mut hand_off = HandOff::default();
        hand_off.delivered(Kind::Signal);
        assert!(
            !hand_off.should_yield(true, now),
            "a signal wakes nobody waiting"
        );
        hand_off.delivered(Kind::Call);
        assert!(hand_off.should_yield(true, now));
        assert!(!hand_off.should_yield(true, now), "one yield per turn");
        hand_off.delivered(Kind::Reply);
        assert!(
            !hand_off.should_yield(false, now),
            "alone, the bus sleeps anyway"
        );
        assert!(
            !hand_off.should_yield(true, now),
            "the mark went with that turn"
        );
        hand_off.delivered(Kind::Reply);
        hand_off.delivered(Kind::Signal);
        assert!(hand_off.should_yield(true, now));
    }

    #[test]
    fn yields_stop_for_the_rest_of_a_window_once_its_allowance_is_spent() {
        let t0 = Instant::now();
        let mut hand_off = HandOff::default();
        let reply = Kind::Reply;
        assert!(turn(&mut hand_off, reply, t0));
        hand_off.yielded(ALLOWANCE / 2);
        assert!(turn(&mut hand_off, reply, t0 + WINDOW / 4));
        hand_off.yielded(ALLOWANCE / 2);
        // Spent: no yield however many peers the turns wake.
        assert!(!turn(&mut hand_off, reply, t0 + WINDOW / 2));
        let last = t0 + WINDOW - Duration::from_nanos(1);
        assert!(!turn(&mut hand_off, reply, last));
        // A new window, a new allowance.
        assert!(turn(&mut hand_off, reply, t0 + WINDOW));
    }

    #[test]
    fn a_closing_window_reports_its_yields_their_time_and_the_turns_refused() {
        let t0 = Instant::now();
        let mut hand_off = HandOff::default();
        let call = Kind::Call;
        assert_eq!(hand_off.close_window(), None, "no window yet");
        for at in [t0, t0 + WINDOW / 10] {
            assert!(turn(&mut hand_off, call, at));
            hand_off.yielded(ALLOWANCE * 3 / 4);
        }
        assert!(!turn(&mut hand_off, call, t0 + WINDOW / 5));
        assert!(!turn(&mut hand_off, call, t0 + WINDOW / 4));
        let cost = hand_off.close_window().expect("it yielded");
        assert_eq!(
            cost,
            WindowCost {
                yields: 2,
                spent: ALLOWANCE * 3 / 2,
                refused: 2,
            }
        );
        assert_eq!(
            cost.to_string(),
            "hand-off: 2 sched_yield calls in a 100 ms window took 15000 µs (15.0 %); \
             the allowance (10 ms) refused 2 more"
        );
        // The next window starts from nothing.
        assert!(turn(&mut hand_off, call, t0 + WINDOW));
        assert_eq!(hand_off.close_window(), None, "no yield since");
    }
}
