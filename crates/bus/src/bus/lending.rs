//! The queues' outboxes lent to the daemon's worker threads, each for one
//! write that also takes out of it what the socket took (issue 27).
//!
//! In a burst, taking a written message out of its queue (dropping its
//! shared bytes and fds) cost about as much as writing it did on the
//! loop's thread; lent, a queue's outbox is written and advanced on a
//! worker, and the loop only settles the counts when it comes back: the
//! user's tally, the flow state, and the reactions of
//! [`Bus::write_queue`] to a queue going down (MessagesLost, watched
//! receivers, held senders), for each connection in the order lent.
//!
//! A [`Lending`] holds the bus: while outboxes are out nothing else can
//! touch it, and every outbox comes back when the lending ends (dropped,
//! also on an early return), before any reaction runs, so that a
//! reaction queueing for another lent connection (a MessagesLost) finds
//! its queue in place. What each lent queue leaves behind takes nothing
//! in (a debug assertion) and refuses to be handed over by a restart; the
//! bus's entry points assert that nothing is lent.
//!
//! Owns: nothing (the lent outboxes are in `Bus::lent` while out). May
//! touch: the queues, through `Queues::give_back`, and what
//! `Bus::write_queue` touches after a write.

use std::time::Instant;

use super::Bus;
use crate::overflow::{LentOutbox, Written};
use crate::{Action, ConnId};

/// Outboxes lent out of the bus, given back when it is dropped
/// ([`Lending::give_back`] says so where it happens).
#[must_use = "the outboxes go back when the lending is dropped"]
pub struct Lending<'b> {
    bus: &'b mut Bus,
    /// When the writes were made, for their settling.
    now: Instant,
    /// Where the settling's actions go.
    out: &'b mut Vec<Action>,
}

impl Bus {
    /// Start lending outboxes for writes made at `now`; what settling them
    /// makes the bus do goes to `out`.
    pub fn lend_outboxes<'b>(&'b mut self, now: Instant, out: &'b mut Vec<Action>) -> Lending<'b> {
        self.assert_none_lent();
        Lending {
            bus: self,
            now,
            out,
        }
    }

    /// Nothing is lent out: an entry point of the core may run.
    #[inline]
    pub(crate) fn assert_none_lent(&self) {
        debug_assert!(
            self.lent.is_empty(),
            "the bus is used while outboxes are lent out"
        );
    }

    /// Every lent outbox back in its queue, then each write settled in
    /// the order lent: the tallies first, each as [`Bus::write_queue`]
    /// would move it, then the reactions (which may queue for any of the
    /// connections). Its count is the loop thread's part of a write made
    /// ahead (scripts/cpu-split.sh).
    #[inline(never)]
    fn settle_lent(&mut self, now: Instant, out: &mut Vec<Action>) {
        let mut lent = std::mem::take(&mut self.lent);
        let mut settled: Vec<(ConnId, Written)> = Vec::with_capacity(lent.len());
        for outbox in lent.drain(..) {
            let conn = outbox.conn();
            let Some(c) = self.conns.get_mut(&conn) else {
                // Nothing removes a connection while its outbox is out.
                debug_assert!(false, "{conn:?} left while its outbox was lent");
                continue;
            };
            let written = self.queues.give_back(&mut c.queue, outbox, now);
            settled.push((conn, written));
        }
        // The (empty) list stays, with its room, for the next lending.
        self.lent = lent;
        for (conn, written) in settled {
            self.react_to_write(conn, now, written, out);
        }
    }
}

impl Lending<'_> {
    /// Lend `conn`'s outbox if it is the bus's and holds messages; it is
    /// then one of [`Lending::outboxes`].
    pub fn lend(&mut self, conn: ConnId) -> bool {
        let Some(c) = self.bus.conns.get_mut(&conn) else {
            return false;
        };
        if c.queue.outbox().is_empty() {
            return false;
        }
        self.bus.lent.push(c.queue.lend(conn));
        true
    }

    /// The outboxes lent, in the order lent, to write from.
    pub fn outboxes(&mut self) -> &mut [LentOutbox] {
        &mut self.bus.lent
    }

    /// Give every outbox back and settle the writes (what dropping the
    /// lending does).
    pub fn give_back(self) {}
}

impl Drop for Lending<'_> {
    fn drop(&mut self) {
        self.bus.settle_lent(self.now, self.out);
    }
}
