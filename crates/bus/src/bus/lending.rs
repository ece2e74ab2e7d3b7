//! The queues' outboxes lent to the daemon's worker threads, each for one
//! write that also takes out of it what the socket took (issue 27).
//!
//! In a burst, taking a written message out of its queue (dropping its
//! shared bytes and fds) cost the loop's thread about a hundred
//! instructions a message (docs/performance.md, "The dequeue on the
//! workers"); lent, a queue's outbox is written and advanced on a
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

#[cfg(test)]
mod tests {
    use quickbus_wire::{MessageBuilder, Value};

    use super::super::queueing::tests::{
        broadcast, delivered_to, lost_counts, queueing_state, two_buses, BOUNDS,
    };
    use super::*;
    use crate::flow::OutBounds;
    use crate::outbox::Outbox;
    use crate::tests::{s, some_fds, Harness};

    /// What a socket does with one write.
    #[derive(Clone, Copy, Debug)]
    enum Socket {
        /// Takes up to this many bytes of what it is offered.
        Takes(usize),
        /// Takes nothing: full.
        Full,
        /// Fails (the peer hung up).
        Fails,
    }

    impl Socket {
        fn write(self, outbox: &Outbox) -> Result<Option<usize>, &'static str> {
            match self {
                Socket::Takes(n) => Ok(Some(n.min(outbox.next_write_bytes().0.len()))),
                Socket::Full => Ok(None),
                Socket::Fails => Err("EPIPE"),
            }
        }
    }

    /// `conn`'s queue written by `socket` the daemon's way without a pool:
    /// [`Bus::write_queue`], whose write after the first finds the socket
    /// full. Whether the write failed.
    fn write_in_place(h: &mut Harness, conn: ConnId, socket: Socket) -> bool {
        let mut first = Some(socket);
        let result = h.bus.write_queue(conn, h.now, &mut h.out, |outbox| {
            first.take().map_or(Ok(None), |socket| socket.write(outbox))
        });
        result.expect("a connection of the bus").is_err()
    }

    /// The same writes made the pool's way: each connection's outbox
    /// lent, written and advanced (in reverse, as threads may finish in
    /// any order), then all given back. Whether each write failed.
    fn write_lent(h: &mut Harness, writes: &[(ConnId, Socket)]) -> Vec<bool> {
        let mut lending = h.bus.lend_outboxes(h.now, &mut h.out);
        for &(conn, _) in writes {
            assert!(lending.lend(conn), "{conn:?} has nothing queued");
        }
        let mut failed = Vec::new();
        for outbox in lending.outboxes().iter_mut().rev() {
            let (_, socket) = writes.iter().find(|(c, _)| *c == outbox.conn()).unwrap();
            failed.push(outbox.write_once(|o| socket.write(o)).is_err());
        }
        lending.give_back();
        failed.reverse();
        failed
    }

    /// [`queueing_state`], and all else of each connection's queue and of
    /// the bus's queues (the items, the flow state, the tallies, the
    /// watched receivers), fd numbers left out (each bus has its own).
    fn state(h: &Harness, conns: &[ConnId]) -> String {
        let queues: Vec<String> = conns
            .iter()
            .map(|c| format!("{:?}", h.bus.conns[c].queue))
            .collect();
        let whole = format!(
            "{}\n{queues:?}\n{:?}",
            queueing_state(h, conns),
            h.bus.queues
        );
        without_fd_numbers(&without_uid_index(&whole))
    }

    /// `text` less the users' index by uid (a hash map, whose order
    /// differs from one bus to the next).
    fn without_uid_index(text: &str) -> String {
        let start = text.find("by_uid: {").expect("the users' index");
        let end = start + text[start..].find('}').expect("its end");
        format!("{}{}", &text[..start], &text[end + 1..])
    }

    fn without_fd_numbers(text: &str) -> String {
        let mut parts = text.split("fd: ");
        let mut kept = parts.next().unwrap_or_default().to_owned();
        for part in parts {
            kept.push_str("fd: _");
            kept.push_str(part.trim_start_matches(|c: char| c.is_ascii_digit()));
        }
        kept
    }

    /// A broadcast of [`broadcast`]'s size with an fd.
    fn broadcast_with_fd() -> MessageBuilder {
        MessageBuilder::signal("/", "org.example.T", "S")
            .unix_fds(1)
            .body(vec![s(&"x".repeat(300)), Value::UnixFd(0)])
    }

    #[test]
    fn a_write_made_from_a_lent_outbox_settles_as_a_write_in_place() {
        // Two buses alike, one writing each receiver's queue in place
        // (`write_queue`), the other lending it, writing and advancing it
        // as a worker does, and giving it back. The receivers' queues and
        // their users' fill, so senders are held and released, signals
        // dropped and MessagesLost owed; the writes take all, part, or
        // none of what they are offered, carry fds, or fail.
        let (mut buses, sender, receivers) = two_buses(BOUNDS);
        let sockets = [
            Socket::Takes(usize::MAX),
            Socket::Takes(150),
            Socket::Full,
            Socket::Takes(usize::MAX),
            Socket::Fails,
            Socket::Takes(1),
            Socket::Takes(usize::MAX),
        ];
        let mut conns = vec![sender];
        conns.extend(&receivers);
        let (mut told_of_losses, mut released, mut fds_written) = (0, 0, 0);
        for round in 0..120 {
            let reader = receivers[round % receivers.len()];
            let socket = sockets[round / 2 % sockets.len()];
            for (lent, h) in buses.iter_mut().enumerate() {
                if round % 3 == 1 {
                    h.send_with_fds(sender, broadcast_with_fd(), some_fds(1));
                } else {
                    h.send(sender, broadcast());
                }
                h.out.clear();
                let fds = h.bus.conns[&reader].queue.outbox().fds();
                if h.bus.conns[&reader].queue.outbox().is_empty() {
                    continue;
                }
                let failed = if lent == 1 {
                    write_lent(h, &[(reader, socket)]) == [true]
                } else {
                    write_in_place(h, reader, socket)
                };
                assert_eq!(failed, matches!(socket, Socket::Fails), "round {round}");
                if lent == 0 {
                    fds_written += fds - h.bus.conns[&reader].queue.outbox().fds();
                }
                // Now and then the clock moves on past a hold.
                if round % 4 == 3 {
                    h.now += BOUNDS.hold;
                    h.bus.handle_timeouts(h.now, &mut h.out);
                }
            }
            let [in_place, lent] = &buses;
            assert_eq!(
                state(in_place, &conns),
                state(lent, &conns),
                "round {round}"
            );
            let out = &buses[0].out;
            released += out
                .iter()
                .filter(|a| matches!(a, Action::ReleaseSender { .. }))
                .count();
            told_of_losses += receivers
                .iter()
                .map(|&r| lost_counts(&delivered_to(out, r)).len())
                .sum::<usize>();
        }
        // Each way was taken, or the comparison says little.
        let totals = buses[0].bus.total_traffic();
        assert!(totals.dropped > 0 && totals.holds > 0, "{totals:?}");
        assert!(told_of_losses > 0, "no receiver was told of its losses");
        assert!(released > 0, "no held sender was released by a write");
        assert!(fds_written > 0, "no write took fds");
    }

    #[test]
    fn lent_outboxes_each_go_back_to_their_own_queue_and_tally() {
        // Several outboxes lent at once, of two users, written ahead in
        // any order: each comes back to its own connection, and the
        // users' tallies move as writing each in place in turn moves them
        // (with room to spare, writing provokes no reaction whose order
        // could differ).
        let roomy = OutBounds {
            max_bytes: 100_000,
            max_fds: 100,
            ..BOUNDS
        };
        let (mut buses, sender, receivers) = two_buses(roomy);
        let mut conns = vec![sender];
        conns.extend(&receivers);
        let sockets = [
            Socket::Takes(usize::MAX),
            Socket::Takes(150),
            Socket::Full,
            Socket::Fails,
            Socket::Takes(1000),
        ];
        for round in 0..12 {
            let writes: Vec<(ConnId, Socket)> = receivers
                .iter()
                .enumerate()
                .map(|(i, &r)| (r, sockets[(i + round) % sockets.len()]))
                .collect();
            for (lent, h) in buses.iter_mut().enumerate() {
                for i in 0..4 {
                    if (i + round) % 3 == 0 {
                        h.send_with_fds(sender, broadcast_with_fd(), some_fds(1));
                    } else {
                        h.send(sender, broadcast());
                    }
                }
                h.out.clear();
                let failed = if lent == 1 {
                    write_lent(h, &writes)
                } else {
                    writes
                        .iter()
                        .map(|&(r, socket)| write_in_place(h, r, socket))
                        .collect()
                };
                let expected: Vec<bool> = writes
                    .iter()
                    .map(|(_, socket)| matches!(socket, Socket::Fails))
                    .collect();
                assert_eq!(failed, expected, "round {round}");
            }
            let [in_place, lent] = &buses;
            assert_eq!(
                state(in_place, &conns),
                state(lent, &conns),
                "round {round}"
            );
        }
    }

    #[test]
    // A debug build stops at the assertion; a release build refuses.
    #[cfg_attr(debug_assertions, should_panic(expected = "while an outbox is lent"))]
    fn the_place_of_a_lent_outbox_refuses_a_restart() {
        let mut h = Harness::new();
        let (a, _) = h.client();
        let (b, name_b) = h.client();
        h.send(
            a,
            MessageBuilder::signal("/", "org.example.T", "S").destination(name_b),
        );
        let lent = h.bus.conns.get_mut(&b).unwrap().queue.lend(b);
        let clock = crate::handover::Clock {
            instant: h.now,
            monotonic_ns: 1_000_000_000,
        };
        let (written, saved) =
            crate::handover::saving(clock, || postcard::to_stdvec(&h.bus.conns[&b].queue));
        assert!(written.is_err());
        assert_eq!(
            saved.refused.as_deref(),
            Some("a queue is lent out for a write (a restart happens between turns)")
        );
        drop(lent);
    }
}
