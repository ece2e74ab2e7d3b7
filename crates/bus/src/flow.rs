//! Flow control for receivers that do not read: what happens to a message
//! whose receiver's outgoing queue is already full.
//!
//! The rule (docs/reliability.md has it beside dbus-daemon's and
//! dbus-broker's):
//!
//! - A receiver's queue is bounded by `max_outgoing_bytes` and
//!   `max_outgoing_unix_fds`.
//! - Replies and errors go in: the receiver asked for them. Up to twice
//!   the bound, that is: a peer that keeps calling without reading its
//!   replies past that is disconnected, with a log line naming it (its
//!   queue has no other way to grow that far).
//! - A method call to a full receiver is refused: its caller gets
//!   `LimitsExceeded` at once.
//! - A signal to a full receiver still goes in, and the sender is held back
//!   (the daemon stops reading it, so the kernel pushes back on it) until
//!   the receiver drains to half its bound, or for at most the hold time
//!   (`overflow_hold_timeout`).
//!   With no sender to hold (the bus's own signal, or one the receiver
//!   sent itself) the signal is dropped and counted at once.
//! - A receiver still full when a hold ends is *lossy*: further signals to
//!   it are dropped and counted, nobody is held for it any more, and a log
//!   line names it. It gets one `MessagesLost(u count)` signal from the
//!   bus, which monitors see too, before anything else is queued for it,
//!   and at the latest once its queue is down to half its bound and its
//!   user's queues have room again. It is back to normal once its queue
//!   and its user's are both down to half their bounds.
//! - A receiver that overflowed recently holds nobody: for
//!   `overflow_memory_timeout` after an episode ends (it drained after
//!   being lossy, or emptied after a pacing pause for it timed out), a
//!   signal that finds it full is dropped and counted at once, and it
//!   paces nobody; each such episode is remembered in turn. A reader that
//!   stops and drains at will thus costs others one hold, not one per
//!   cycle. A receiver that drains while its sender is held (a slow or
//!   bursty reader, e.g. one whose few fd slots fill) is not remembered:
//!   its senders are held each time and it loses nothing.
//! - One user's receivers hold other users' senders for at most
//!   `max_hold_per_user_per_minute` (a [`crate::hold_budget::HoldBudget`] per receiving user,
//!   refilled at that many milliseconds a minute and holding no more).
//!   Holds and pauses are cut short to what the budget has left; with
//!   nothing left, signals to that user's full receivers are dropped and
//!   counted, and its receivers pace nobody of another user.
//!
//! Pacing, well below those bounds, keeps the queues of receivers that do
//! read short (quickbus's own; dbus-daemon and dbus-broker have none):
//!
//! - When a message from a peer leaves a receiver's queue longer than
//!   `pacing_bytes`, the daemon stops reading that sender until the
//!   receiver has taken the queue down to half of that. The kernel pushes
//!   back on the sender meanwhile; nothing is refused or dropped.
//! - A receiver that does not get there within `pacing_timeout` paces
//!   nobody until its queue is empty again (it may be stuck: its sender
//!   goes on, and the bounds above apply).
//! - Monitors pace nobody.
//!
//! Why: a sender faster than its receiver otherwise fills the queue up to
//! `max_outgoing_bytes`, and every message then waits behind megabytes:
//! send-to-receive latency grows with the burst, and the queued bytes
//! have left the CPU caches by the time they are written: the daemon
//! spent about 1.5 times the CPU per 128 KiB message (docs/performance.md).
//!
//! Owns: one receiver's flow state (`Receiver`) and the bounds and
//! verdicts as plain data. May touch: nothing else: the bus asks it
//! (`bus` routing, `overflow`).

use std::time::{Duration, Instant};

use quickbus_wire::{flags, Message, MessageType};

/// Default `overflow_hold_timeout`, in milliseconds: how long a
/// signal's sender is held back for one full receiver.
pub const DEFAULT_HOLD_MS: u64 = 1000;
/// Default `overflow_memory_timeout`, in milliseconds: how long after an
/// overflow episode a receiver holds and paces nobody.
pub const DEFAULT_MEMORY_MS: u64 = 60_000;
/// Default `max_hold_per_user_per_minute`, in milliseconds: about 0.17 %
/// of the time of other users' senders, enough to absorb a receiver's
/// brief stall now and then. The hostile-neighbour bench
/// (docs/performance.md) is what chose it: with 600 ms a minute a
/// cycling reader cost a well-behaved client more than dbus-daemon's
/// stalls did.
pub const DEFAULT_HOLD_BUDGET_MS: u64 = 100;
/// Default `max_outgoing_queues_per_user`: the queues of all of one
/// user's connections together hold at most this many times the
/// per-connection bound (`max_outgoing_bytes`, `max_outgoing_unix_fds`).
/// dbus-daemon has no per-user bound on queues; without one, a user with
/// `max_connections_per_user` connections that stop reading could make
/// the daemon hold that many full queues.
pub const DEFAULT_QUEUES_PER_USER: u64 = 4;

/// Default `pacing_bytes`: 256 and 512 KiB measured best on signal
/// bursts (docs/performance.md); 512 KiB leaves more room above the
/// kernel's default socket buffer (208 KiB), below which pacing starves
/// the receiver.
pub const DEFAULT_PACING_BYTES: u64 = 512 * 1024;
/// Default `pacing_timeout`, in milliseconds.
pub const DEFAULT_PACING_TIMEOUT_MS: u64 = 100;

/// The bounds of one connection's outgoing queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OutBounds {
    pub max_bytes: usize,
    pub max_fds: usize,
    /// `overflow_hold_timeout`.
    pub hold: Duration,
    pub pacing: Pacing,
    /// `overflow_memory_timeout`.
    pub memory: Duration,
    /// `max_outgoing_queues_per_user`.
    pub queues_per_user: usize,
    /// `max_hold_per_user_per_minute`.
    pub hold_budget: Duration,
}

/// No bound at all, no pacing: the bus core's own tests, and a bus whose
/// daemon did not set bounds.
impl Default for OutBounds {
    fn default() -> OutBounds {
        OutBounds {
            max_bytes: usize::MAX,
            max_fds: usize::MAX,
            hold: Duration::from_millis(DEFAULT_HOLD_MS),
            pacing: Pacing {
                bytes: 0,
                timeout: Duration::from_millis(DEFAULT_PACING_TIMEOUT_MS),
            },
            memory: Duration::from_millis(DEFAULT_MEMORY_MS),
            queues_per_user: DEFAULT_QUEUES_PER_USER as usize,
            hold_budget: Duration::from_millis(DEFAULT_HOLD_BUDGET_MS),
        }
    }
}

/// When to pause a sender for a receiver that reads (see the module
/// documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pacing {
    /// Queue length beyond which the sender is paused; 0: never.
    pub bytes: usize,
    /// Longest pause for one receiver.
    pub timeout: Duration,
}

impl Pacing {
    /// Pause the sender of the message that left `queued` bytes queued.
    pub fn pauses_at(&self, queued: usize) -> bool {
        self.bytes > 0 && queued > self.bytes
    }

    /// The receiver has caught up: its sender may go on.
    pub fn caught_up(&self, queued: usize) -> bool {
        queued <= self.bytes / 2
    }
}

/// How full a queue is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fill {
    Room,
    /// At its bound: only replies go in.
    Full,
    /// At twice its bound: not even replies.
    Overflowing,
}

impl OutBounds {
    /// The queue holds as much as it may.
    pub fn full(&self, bytes: usize, fds: usize) -> bool {
        bytes >= self.max_bytes || fds >= self.max_fds
    }

    pub fn fill(&self, bytes: usize, fds: usize) -> Fill {
        let twice = |max: usize| max.saturating_mul(2);
        if bytes >= twice(self.max_bytes) || fds >= twice(self.max_fds) {
            Fill::Overflowing
        } else if self.full(bytes, fds) {
            Fill::Full
        } else {
            Fill::Room
        }
    }

    /// The bounds of all of one user's queues together (see
    /// [`crate::accounting`]).
    pub fn per_user(&self) -> OutBounds {
        let times = self.queues_per_user;
        OutBounds {
            max_bytes: self.max_bytes.saturating_mul(times),
            max_fds: self.max_fds.saturating_mul(times),
            ..*self
        }
    }

    /// Drained enough to take more without holding anyone again.
    pub fn drained(&self, bytes: usize, fds: usize) -> bool {
        bytes <= self.max_bytes / 2 && fds <= self.max_fds / 2
    }
}

/// Why a sender is held, which says when it is released.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum HoldReason {
    /// The receiver's queue is full: until it drains to half its bound;
    /// after the hold time the receiver becomes lossy.
    Full,
    /// Pacing: until the receiver's queue is down to half `pacing_bytes`;
    /// after `pacing_timeout` the receiver stops pacing.
    Pace,
}

impl HoldReason {
    /// Whether a hold for this reason takes the place of the sender's
    /// `current` one: a full receiver's hold outranks a pacing pause (the
    /// sender then waits for the full receiver, as the slow-reader rule
    /// says); otherwise the first hold stays.
    pub fn replaces(self, current: Option<HoldReason>) -> bool {
        match current {
            None => true,
            Some(current) => current == HoldReason::Pace && self == HoldReason::Full,
        }
    }
}

/// What a delivery is, as far as flow control cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Kind {
    /// A method call to its destination that expects a reply: refused
    /// when the queue is full.
    Call,
    /// A method return or error: always queued.
    Reply,
    /// A signal, or anything a monitor watches: held, then dropped.
    Signal,
}

impl Kind {
    /// What a message is to the receiver it is addressed to. A copy of it
    /// for anyone else (a monitor, an eavesdropper) is a [`Kind::Signal`]:
    /// refusing a copy would fail a call that was delivered.
    pub fn of(msg: &Message) -> Kind {
        match msg.msg_type() {
            // A caller that wants no answer cannot hear a refusal either,
            // so its call is dealt with like a signal.
            MessageType::MethodCall if msg.flags() & flags::NO_REPLY_EXPECTED == 0 => Kind::Call,
            MessageType::MethodReturn | MessageType::Error => Kind::Reply,
            _ => Kind::Signal,
        }
    }
}

/// What to do with one delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Queue,
    /// Queue it and hold the sender back until the receiver drains.
    QueueAndHoldSender,
    /// Do not queue it; the receiver is told how many it lost later.
    Drop,
    /// Do not queue it; answer the caller with LimitsExceeded.
    RefuseCall,
    /// A reply to a receiver whose queue is at twice its bound: it does
    /// not read what it asks for; disconnect it.
    DisconnectReceiver,
}

/// One receiver's overflow state.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Receiver {
    /// When its queue last became full (None: not full since it drained).
    #[serde(with = "crate::handover::optional_instant")]
    full_since: Option<Instant>,
    /// Full for longer than a hold: signals to it are dropped.
    lossy: bool,
    /// Signals dropped since it was last told.
    lost: u64,
    /// Signals dropped over its life (for the log and stats).
    pub lost_total: u64,
    /// A pause for it timed out: it paces nobody until its queue empties.
    pacing_off: bool,
    /// Until when it holds and paces nobody, after its last episode.
    #[serde(with = "crate::handover::optional_instant")]
    remembered_until: Option<Instant>,
}

impl Receiver {
    /// Decide about a delivery to this receiver, given how full its queue
    /// is (or its user's queues together: those make it at most `Full`).
    /// `hold`: how long its sender may be held back; None when there is no
    /// sender to hold (the bus's own message, or one the receiver sent
    /// itself), or the receiving user's hold budget is spent: then a
    /// signal to a full queue is dropped and counted at once, as it is
    /// when the receiver overflowed recently.
    pub fn judge(
        &mut self,
        kind: Kind,
        fill: Fill,
        hold: Option<Duration>,
        now: Instant,
    ) -> Verdict {
        match (kind, fill) {
            (_, Fill::Room) | (Kind::Reply, Fill::Full) => return Verdict::Queue,
            (Kind::Reply, Fill::Overflowing) => return Verdict::DisconnectReceiver,
            (Kind::Call, _) => return Verdict::RefuseCall,
            (Kind::Signal, _) => {}
        }
        let since = *self.full_since.get_or_insert(now);
        if let Some(hold) = hold {
            if !self.lossy && now.saturating_duration_since(since) >= hold {
                self.lossy = true;
            }
        }
        if self.remembers(now) {
            // Still overflowing at will: this episode is remembered too.
            self.lossy = true;
        }
        if self.lossy || hold.is_none_or(|h| h.is_zero()) {
            // Saturating: a restart takes the counts as its state has
            // them, and a `lost` wrapped to 0 would never be told.
            self.lost = self.lost.saturating_add(1);
            self.lost_total = self.lost_total.saturating_add(1);
            Verdict::Drop
        } else {
            Verdict::QueueAndHoldSender
        }
    }

    /// A hold on this receiver ended without it draining: from now on its
    /// signals are dropped. True if that is news (log it once).
    pub fn hold_expired(&mut self) -> bool {
        !std::mem::replace(&mut self.lossy, true)
    }

    pub fn is_lossy(&self) -> bool {
        self.lossy
    }

    /// The queue drained to half its bound: back to normal, but remembered
    /// for `memory` if it overflowed (was lossy: a hold for it ran out, or
    /// it was remembered already). A receiver that drained while a sender
    /// was held for it was merely slow: it is not remembered. Returns how
    /// many signals it lost since it was last told, if any.
    pub fn drained(&mut self, now: Instant, memory: Duration) -> Option<u64> {
        self.full_since = None;
        if std::mem::take(&mut self.lossy) {
            self.remember(now, memory);
        }
        self.take_lost()
    }

    /// It lost signals it has not been told of.
    pub fn owes(&self) -> bool {
        self.lost > 0
    }

    /// How many signals it lost since it was last told, if any: it is
    /// being told now.
    pub fn take_lost(&mut self) -> Option<u64> {
        let lost = std::mem::take(&mut self.lost);
        (lost > 0).then_some(lost)
    }

    /// Whether a sender to it may be paused now.
    pub fn paces(&self, now: Instant) -> bool {
        !self.pacing_off && !self.remembers(now)
    }

    /// It overflowed lately: it holds and paces nobody.
    pub fn remembers(&self, now: Instant) -> bool {
        self.remembered_until.is_some_and(|until| now < until)
    }

    fn remember(&mut self, now: Instant, memory: Duration) {
        self.remembered_until = now.checked_add(memory);
    }

    /// A pause for it ended without it catching up. True if that is news.
    pub fn pause_expired(&mut self) -> bool {
        !std::mem::replace(&mut self.pacing_off, true)
    }

    /// Its queue is empty: it paces its senders again, unless a pause for
    /// it timed out (then that was an episode to remember).
    pub fn emptied(&mut self, now: Instant, memory: Duration) {
        if std::mem::take(&mut self.pacing_off) {
            self.remember(now, memory);
        }
    }

    /// Whether [`Receiver::drained`] has anything to reset.
    pub fn is_overflowing(&self) -> bool {
        self.full_since.is_some() || self.lossy || self.lost > 0
    }
}

// Tests may use the clock (see clippy.toml).
#[cfg(test)]
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    const BOUNDS: OutBounds = OutBounds {
        max_bytes: 1000,
        max_fds: 4,
        hold: Duration::from_secs(1),
        pacing: Pacing {
            bytes: 100,
            timeout: Duration::from_millis(100),
        },
        memory: Duration::from_secs(60),
        queues_per_user: 4,
        hold_budget: Duration::from_millis(600),
    };
    const MEMORY: Duration = BOUNDS.memory;

    #[test]
    fn a_full_receivers_hold_outranks_a_pacing_pause_and_nothing_else_replaces_a_hold() {
        use HoldReason::{Full, Pace};
        assert!(Full.replaces(None) && Pace.replaces(None));
        assert!(Full.replaces(Some(Pace)));
        assert!(!Pace.replaces(Some(Full)));
        assert!(!Pace.replaces(Some(Pace)));
        assert!(!Full.replaces(Some(Full)));
    }

    /// A restart in place takes the counts from its state as they are: a
    /// corrupt one at the end of its range must still be told, not wrap
    /// to "nothing lost" (or panic in a debug build).
    #[test]
    fn lost_counts_at_their_end_stay_there_and_are_still_told() {
        let mut r = Receiver {
            lost: u64::MAX,
            lost_total: u64::MAX,
            lossy: true,
            ..Receiver::default()
        };
        let now = Instant::now();
        let fill = BOUNDS.fill(1200, 0);
        assert_eq!(
            r.judge(Kind::Signal, fill, Some(BOUNDS.hold), now),
            Verdict::Drop
        );
        assert_eq!(r.lost_total, u64::MAX);
        assert_eq!(r.take_lost(), Some(u64::MAX));
    }

    #[test]
    fn pacing_pauses_past_its_size_and_resumes_at_half() {
        let pacing = BOUNDS.pacing;
        assert!(!pacing.pauses_at(100));
        assert!(pacing.pauses_at(101));
        assert!(!pacing.caught_up(51));
        assert!(pacing.caught_up(50));
        let off = Pacing { bytes: 0, ..pacing };
        assert!(!off.pauses_at(usize::MAX));
    }

    #[test]
    fn a_receiver_whose_pause_timed_out_paces_nobody_until_it_empties_and_a_while_after() {
        let mut r = Receiver::default();
        let t0 = Instant::now();
        assert!(r.paces(t0));
        // Emptying without a timed-out pause changes nothing.
        r.emptied(t0, MEMORY);
        assert!(r.paces(t0));
        assert!(r.pause_expired());
        assert!(!r.pause_expired());
        assert!(!r.paces(t0));
        let emptied = t0 + Duration::from_secs(1);
        r.emptied(emptied, MEMORY);
        // It did not keep up: remembered, it paces nobody for a while...
        assert!(!r.paces(emptied));
        assert!(!r.paces(emptied + MEMORY - Duration::from_millis(1)));
        // ...and then again.
        assert!(r.paces(emptied + MEMORY));
    }

    #[test]
    fn below_the_bound_everything_is_queued() {
        let mut r = Receiver::default();
        let now = Instant::now();
        for kind in [Kind::Call, Kind::Reply, Kind::Signal] {
            assert_eq!(
                r.judge(kind, BOUNDS.fill(999, 3), Some(BOUNDS.hold), now),
                Verdict::Queue
            );
        }
        assert!(!r.is_overflowing());
    }

    #[test]
    fn a_full_queue_refuses_calls_but_takes_replies() {
        let mut r = Receiver::default();
        let now = Instant::now();
        assert_eq!(
            r.judge(Kind::Call, BOUNDS.fill(1000, 0), Some(BOUNDS.hold), now),
            Verdict::RefuseCall
        );
        assert_eq!(
            r.judge(Kind::Call, BOUNDS.fill(0, 4), Some(BOUNDS.hold), now),
            Verdict::RefuseCall
        );
        assert_eq!(
            r.judge(Kind::Reply, BOUNDS.fill(1999, 7), Some(BOUNDS.hold), now),
            Verdict::Queue
        );
        // Twice the bound: a peer that asks and does not read.
        assert_eq!(
            r.judge(Kind::Reply, BOUNDS.fill(2000, 0), Some(BOUNDS.hold), now),
            Verdict::DisconnectReceiver
        );
        assert_eq!(
            r.judge(Kind::Reply, BOUNDS.fill(0, 8), Some(BOUNDS.hold), now),
            Verdict::DisconnectReceiver
        );
    }

    #[test]
    fn signals_hold_the_sender_then_are_dropped_and_counted() {
        let mut r = Receiver::default();
        let t0 = Instant::now();
        let v = r.judge(Kind::Signal, BOUNDS.fill(1000, 0), Some(BOUNDS.hold), t0);
        assert_eq!(v, Verdict::QueueAndHoldSender);
        let v = r.judge(
            Kind::Signal,
            BOUNDS.fill(1100, 0),
            Some(BOUNDS.hold),
            t0 + Duration::from_millis(500),
        );
        assert_eq!(v, Verdict::QueueAndHoldSender);
        // Full for a whole hold: lossy.
        let later = t0 + Duration::from_secs(1);
        assert_eq!(
            r.judge(Kind::Signal, BOUNDS.fill(1200, 0), Some(BOUNDS.hold), later),
            Verdict::Drop
        );
        assert_eq!(
            r.judge(Kind::Signal, BOUNDS.fill(1200, 0), Some(BOUNDS.hold), later),
            Verdict::Drop
        );
        assert!(r.is_lossy());
        // Replies still get through to a lossy receiver.
        assert_eq!(
            r.judge(Kind::Reply, BOUNDS.fill(1200, 0), Some(BOUNDS.hold), later),
            Verdict::Queue
        );
        assert_eq!(r.drained(later, MEMORY), Some(2));
        assert_eq!(r.lost_total, 2);
        assert!(!r.is_overflowing());
        // Told once: draining again reports nothing.
        assert_eq!(r.drained(later, MEMORY), None);
        // A new episode once the memory of this one is gone starts with a
        // new hold.
        let much_later = later + MEMORY;
        let v = r.judge(
            Kind::Signal,
            BOUNDS.fill(1000, 0),
            Some(BOUNDS.hold),
            much_later,
        );
        assert_eq!(v, Verdict::QueueAndHoldSender);
    }

    #[test]
    fn a_receiver_that_overflowed_recently_holds_nobody_and_loses_counted() {
        let mut r = Receiver::default();
        let t0 = Instant::now();
        let full = BOUNDS.fill(1000, 0);
        // First episode: a hold, which runs out: lossy, one signal lost.
        assert_eq!(
            r.judge(Kind::Signal, full, Some(BOUNDS.hold), t0),
            Verdict::QueueAndHoldSender
        );
        assert!(r.hold_expired());
        assert_eq!(
            r.judge(Kind::Signal, full, Some(BOUNDS.hold), t0 + BOUNDS.hold),
            Verdict::Drop
        );
        let drained_at = t0 + Duration::from_secs(2);
        assert_eq!(r.drained(drained_at, MEMORY), Some(1));
        assert!(r.remembers(drained_at));
        // It stops reading again at once, and again, and again: every
        // signal that finds it full is dropped and counted, nobody held.
        let mut t = drained_at;
        for episode in 1..=10u64 {
            t += Duration::from_secs(3);
            for _ in 0..5 {
                assert_eq!(
                    r.judge(Kind::Signal, full, Some(BOUNDS.hold), t),
                    Verdict::Drop
                );
            }
            // Calls and replies keep their rule.
            assert_eq!(
                r.judge(Kind::Call, full, Some(BOUNDS.hold), t),
                Verdict::RefuseCall
            );
            assert_eq!(
                r.judge(Kind::Reply, full, Some(BOUNDS.hold), t),
                Verdict::Queue
            );
            t += Duration::from_secs(1);
            // Each drain tells it what it lost: nothing is lost silently.
            assert_eq!(r.drained(t, MEMORY), Some(5));
            assert_eq!(r.lost_total, 1 + 5 * episode);
            // Each cycle is remembered anew.
            assert!(r.remembers(t + MEMORY - Duration::from_millis(1)));
        }
        // Quiet for the whole memory: forgiven, a slow moment holds again.
        let forgiven = t + MEMORY;
        assert!(!r.remembers(forgiven));
        assert_eq!(
            r.judge(Kind::Signal, full, Some(BOUNDS.hold), forgiven),
            Verdict::QueueAndHoldSender
        );
    }

    #[test]
    fn a_receiver_that_drains_while_its_sender_is_held_is_held_for_again() {
        // A bursty reader whose few fd slots fill every few messages: it
        // reads, so every hold ends with it draining, and nothing is lost.
        let mut r = Receiver::default();
        let mut t = Instant::now();
        let full = BOUNDS.fill(0, 4);
        for _ in 0..100 {
            assert_eq!(
                r.judge(Kind::Signal, full, Some(BOUNDS.hold), t),
                Verdict::QueueAndHoldSender
            );
            t += Duration::from_millis(5);
            assert_eq!(r.drained(t, MEMORY), None);
            assert!(!r.remembers(t));
            assert!(r.paces(t));
        }
        assert_eq!(r.lost_total, 0);
    }

    #[test]
    fn a_zero_hold_allowance_drops_at_once() {
        // The receiving user's hold budget is spent.
        let mut r = Receiver::default();
        let now = Instant::now();
        assert_eq!(
            r.judge(
                Kind::Signal,
                BOUNDS.fill(1000, 0),
                Some(Duration::ZERO),
                now
            ),
            Verdict::Drop
        );
        assert_eq!(r.drained(now, MEMORY), Some(1));
    }

    #[test]
    fn without_a_sender_to_hold_a_signal_to_a_full_queue_is_dropped_and_counted() {
        let mut r = Receiver::default();
        let now = Instant::now();
        let full = BOUNDS.fill(1000, 0);
        assert_eq!(r.judge(Kind::Signal, full, None, now), Verdict::Drop);
        // Not lossy for it: a signal whose sender can be held still is.
        assert!(!r.is_lossy());
        assert_eq!(
            r.judge(Kind::Signal, full, Some(BOUNDS.hold), now),
            Verdict::QueueAndHoldSender
        );
        assert_eq!(r.drained(now, MEMORY), Some(1));
    }

    #[test]
    fn an_expired_hold_makes_the_receiver_lossy_once() {
        let mut r = Receiver::default();
        let now = Instant::now();
        assert_eq!(
            r.judge(Kind::Signal, BOUNDS.fill(1000, 0), Some(BOUNDS.hold), now),
            Verdict::QueueAndHoldSender
        );
        assert!(r.hold_expired());
        assert!(!r.hold_expired());
        assert_eq!(
            r.judge(Kind::Signal, BOUNDS.fill(1000, 0), Some(BOUNDS.hold), now),
            Verdict::Drop
        );
    }

    #[test]
    fn a_call_that_wants_no_reply_is_dealt_with_like_a_signal() {
        let kind = |builder: quickbus_wire::MessageBuilder| {
            Kind::of(&Message::parse(builder.build(1).unwrap()).unwrap())
        };
        let call = || quickbus_wire::MessageBuilder::method_call("/", "M").destination("a.b");
        assert_eq!(kind(call()), Kind::Call);
        assert_eq!(kind(call().flags(flags::NO_REPLY_EXPECTED)), Kind::Signal);
        assert_eq!(
            kind(quickbus_wire::MessageBuilder::method_return(1)),
            Kind::Reply
        );
        assert_eq!(
            kind(quickbus_wire::MessageBuilder::error(1, "a.b.E")),
            Kind::Reply
        );
        assert_eq!(
            kind(quickbus_wire::MessageBuilder::signal("/", "a.b", "S")),
            Kind::Signal
        );
    }

    #[test]
    fn a_users_queues_together_may_hold_four_connections_worth() {
        let user = BOUNDS.per_user();
        assert_eq!((user.max_bytes, user.max_fds), (4000, 16));
        assert!(!user.full(3999, 15));
        assert!(user.full(4000, 0));
        let huge = OutBounds {
            max_bytes: usize::MAX,
            ..BOUNDS
        };
        assert_eq!(huge.per_user().max_bytes, usize::MAX);
    }

    #[test]
    fn draining_means_half_the_bound() {
        assert!(BOUNDS.drained(500, 2));
        assert!(!BOUNDS.drained(501, 0));
        assert!(!BOUNDS.drained(0, 3));
    }
}
