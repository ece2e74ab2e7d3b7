//! Fair share under overload (docs/reliability.md, "Fair turns"): while a
//! connection that sends little waits for an answer, connections that
//! send more than one budget per turn sit out, so that their input waits
//! in the kernel and they block in `sendmsg`.
//!
//! Bounded turns alone keep a call from waiting behind a flood inside the
//! bus. On a machine with few cores that is not enough: a bus that
//! forwards a flood as fast as it comes lets the flooder and its
//! receivers take the CPU, and the caller and the service it calls wait
//! for the scheduler instead (issue 25 measured it: on 2 cores a paced
//! flood of 100,000 signals/s left calls 5 times faster than an unpaced
//! one of 400,000). So while a call is in flight between connections that
//! send little, the heavy senders are not read:
//!
//! - a method call that expects a reply, from a light connection to
//!   another peer, starts a pause or extends the current one, to at most
//!   [`MAX_PAUSE`] after that call and four times that in all;
//! - the pause ends when as many replies (returns or errors) as it saw
//!   calls have come from light connections, or at that deadline;
//! - a connection a call was delivered to never sits out until it has
//!   replied: its reply may be what the caller waits for;
//! - after a pause the heavy senders are read for at least as long as it
//!   lasted before another may start: a flooder keeps at least half of
//!   the time, and all of it while nobody else calls.
//!
//! Pausing the flooder does not decide who runs next, though: the
//! scheduler does; [`super::hand_off`] gives the CPU to the peer a turn
//! woke.
//!
//! The rule sees only what the loop routes (types and destinations), so
//! it costs nothing per message beyond a few comparisons, and it needs no
//! bookkeeping in the bus core.

use std::time::{Duration, Instant};

/// The longest a heavy sender sits out for one call.
pub const MAX_PAUSE: Duration = Duration::from_millis(1);

/// The rule's state: the calls in flight and the current pause.
#[derive(Debug, Default)]
pub struct FairShare {
    /// Calls from light connections that began or extended the current
    /// pause and are not answered yet (by count: replies from light
    /// connections end them, whichever they answer).
    in_flight: u32,
    /// While pausing: when the pause began and when it ends at the latest.
    pause: Option<(Instant, Instant)>,
    /// No pause begins before this (heavy senders' own time).
    next_allowed: Option<Instant>,
}

/// What a routed message from a light connection means to the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exchange {
    /// A call to another peer that expects a reply.
    Call,
    /// A method return or an error.
    Reply,
    /// Anything else (signals, calls to the bus driver, calls that want
    /// no reply).
    Other,
}

impl Exchange {
    /// Classify a message by what it is to its destination
    /// (`flow::Kind`), calls to the bus driver aside.
    pub fn of(msg: &quickbus_wire::Message) -> Exchange {
        use quickbus_bus::flow::Kind;
        match Kind::of(msg) {
            Kind::Call if msg.destination() != Some(quickbus_wire::BUS_NAME) => Exchange::Call,
            Kind::Reply => Exchange::Reply,
            _ => Exchange::Other,
        }
    }
}

impl FairShare {
    /// A message from a light connection was routed at `now`.
    #[inline]
    pub fn routed(&mut self, exchange: Exchange, now: Instant) {
        match exchange {
            Exchange::Call => self.begin_or_extend(now),
            Exchange::Reply if self.pause.is_some() => {
                self.in_flight = self.in_flight.saturating_sub(1);
                if self.in_flight == 0 {
                    self.end(now);
                }
            }
            Exchange::Reply => {}
            Exchange::Other => {}
        }
    }

    fn begin_or_extend(&mut self, now: Instant) {
        match self.pause {
            Some((began, _)) => {
                self.in_flight = self.in_flight.saturating_add(1);
                self.pause = Some((began, (now + MAX_PAUSE).min(began + MAX_PAUSE * 4)));
            }
            // Heavy senders have not had their time since the last pause.
            None if self.next_allowed.is_some_and(|t| now < t) => {}
            None => {
                self.in_flight = 1;
                self.pause = Some((now, now + MAX_PAUSE));
            }
        }
    }

    fn end(&mut self, now: Instant) {
        if let Some((began, _)) = self.pause.take() {
            self.next_allowed = Some(now + now.saturating_duration_since(began));
        }
    }

    /// Whether heavy senders sit out a turn beginning at `now`.
    pub fn pausing(&mut self, now: Instant) -> bool {
        match self.pause {
            Some((_, until)) if now >= until => {
                self.in_flight = 0;
                self.end(now);
                false
            }
            Some(_) => true,
            None => false,
        }
    }

    /// When the current pause ends at the latest (the loop's poll
    /// deadline while only heavy senders have input).
    pub fn deadline(&self) -> Option<Instant> {
        self.pause.map(|(_, until)| until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_told_apart_by_what_they_are_to_their_destination() {
        use quickbus_wire::{flags, Message, MessageBuilder};
        let exchange = |raw| Exchange::of(&Message::parse(raw).unwrap());
        let call = MessageBuilder::method_call("/p", "M")
            .destination(":1.1")
            .build(1)
            .unwrap();
        assert_eq!(exchange(call), Exchange::Call);
        let no_reply = MessageBuilder::method_call("/p", "M")
            .destination(":1.1")
            .flags(flags::NO_REPLY_EXPECTED)
            .build(1)
            .unwrap();
        assert_eq!(exchange(no_reply), Exchange::Other);
        let to_driver = MessageBuilder::method_call("/org/freedesktop/DBus", "GetId")
            .destination(quickbus_wire::BUS_NAME)
            .build(1)
            .unwrap();
        assert_eq!(exchange(to_driver), Exchange::Other);
        let reply = MessageBuilder::method_return(1)
            .destination(":1.1")
            .build(2)
            .unwrap();
        assert_eq!(exchange(reply), Exchange::Reply);
        let signal = MessageBuilder::signal("/p", "o.I", "S").build(1).unwrap();
        assert_eq!(exchange(signal), Exchange::Other);
    }

    #[test]
    fn a_call_pauses_heavy_senders_until_its_reply() {
        let t0 = Instant::now();
        let mut fair = FairShare::default();
        assert!(!fair.pausing(t0));
        fair.routed(Exchange::Call, t0);
        assert!(fair.pausing(t0));
        fair.routed(Exchange::Other, t0);
        assert!(fair.pausing(t0 + MAX_PAUSE / 2));
        fair.routed(Exchange::Reply, t0 + MAX_PAUSE / 2);
        assert!(!fair.pausing(t0 + MAX_PAUSE / 2));
    }

    #[test]
    fn a_pause_ends_when_every_call_it_saw_is_answered() {
        let t0 = Instant::now();
        let mut fair = FairShare::default();
        // Replies outside a pause count for nothing.
        fair.routed(Exchange::Reply, t0);
        fair.routed(Exchange::Call, t0);
        fair.routed(Exchange::Call, t0);
        fair.routed(Exchange::Reply, t0);
        assert!(fair.pausing(t0));
        fair.routed(Exchange::Reply, t0);
        assert!(!fair.pausing(t0));
    }

    #[test]
    fn an_unanswered_call_pauses_for_at_most_the_bound() {
        let t0 = Instant::now();
        let mut fair = FairShare::default();
        fair.routed(Exchange::Call, t0);
        assert_eq!(fair.deadline(), Some(t0 + MAX_PAUSE));
        assert!(!fair.pausing(t0 + MAX_PAUSE));
        assert_eq!(fair.deadline(), None);
    }

    #[test]
    fn heavy_senders_keep_at_least_as_long_as_the_pause_before_the_next() {
        let t0 = Instant::now();
        let mut fair = FairShare::default();
        fair.routed(Exchange::Call, t0);
        let t1 = t0 + MAX_PAUSE / 2;
        fair.routed(Exchange::Reply, t1);
        // The next call comes at once: heavy senders have had no time yet.
        fair.routed(Exchange::Call, t1);
        assert!(!fair.pausing(t1));
        let t2 = t1 + MAX_PAUSE / 2;
        fair.routed(Exchange::Call, t2);
        assert!(fair.pausing(t2));
    }

    #[test]
    fn calls_one_after_another_extend_a_pause_only_so_far() {
        let t0 = Instant::now();
        let mut fair = FairShare::default();
        for step in 0..10u32 {
            fair.routed(Exchange::Call, t0 + MAX_PAUSE / 2 * step);
        }
        assert_eq!(fair.deadline(), Some(t0 + MAX_PAUSE * 4));
    }
}
