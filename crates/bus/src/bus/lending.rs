//! The queues' outboxes lent to the daemon's worker threads, each for the
//! first write of the queue's next flush, which also takes out of it what
//! the socket took (issue 27).
//!
//! In a burst, taking a written message out of its queue (dropping its
//! shared bytes and fds) cost the loop's thread about a hundred
//! instructions a message (docs/performance.md, "The dequeue on the
//! workers"); lent, a queue's outbox is written and its items advanced on
//! a worker, and what that write took is settled by the queue's next
//! flush on the loop's thread ([`Bus::write_queue`], given the write's
//! result as its `written_ahead`: `Outbox::write_ahead`), in the order the daemon
//! flushes. Until then the queue's counts, and so its user's tally and
//! every judgement made from them, are as before the write: the
//! reactions of each flush (MessagesLost, watched receivers, held
//! senders) see what they saw when the worker wrote from a queue it did
//! not change.
//!
//! A [`Lending`] holds the bus: while outboxes are out nothing else can
//! touch it, and every outbox comes back when the lending ends (dropped,
//! also on an early return or a panic), into the empty place it left,
//! which takes nothing in (checked in every build). A restart refuses to
//! hand over a queue lent out or not settled; the bus's entry points
//! assert that nothing is lent.
//!
//! Owns: nothing (the lent outboxes are in `Bus::lent` while out). May
//! touch: the queues' outboxes, through `OutQueue::lend`/`give_back`.

use super::Bus;
use crate::overflow::LentOutbox;
use crate::ConnId;

/// Outboxes lent out of the bus, given back when it is dropped
/// ([`Lending::give_back`] says so where it happens).
#[must_use = "the outboxes go back when the lending is dropped"]
pub struct Lending<'b> {
    bus: &'b mut Bus,
}

impl Bus {
    /// Start lending outboxes.
    pub fn lend_outboxes(&mut self) -> Lending<'_> {
        self.assert_none_lent();
        Lending { bus: self }
    }

    /// Nothing is lent out: an entry point of the core may run.
    #[inline]
    pub(crate) fn assert_none_lent(&self) {
        debug_assert!(
            self.lent.is_empty(),
            "the bus is used while outboxes are lent out"
        );
    }

    /// Every lent outbox back in its queue, its write unsettled until
    /// the queue's next flush.
    fn return_lent(&mut self) {
        for lent in self.lent.drain(..) {
            let conn = lent.conn();
            let Some(c) = self.conns.get_mut(&conn) else {
                // Nothing removes a connection while its outbox is out.
                unreachable!("{conn:?} left while its outbox was lent");
            };
            c.queue.give_back(lent);
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

    /// Give every outbox back (what dropping the lending does).
    pub fn give_back(self) {}
}

impl Drop for Lending<'_> {
    fn drop(&mut self) {
        self.bus.return_lent();
    }
}

#[cfg(test)]
mod tests {
    use quickbus_wire::{MessageBuilder, Value};

    use super::super::queueing::tests::{
        broadcast, delivered_to, harness, lost_counts, overflow_user, queueing_state, settle,
        subscribers, two_buses, user_queued, BOUNDS,
    };
    use super::*;
    use crate::flow::OutBounds;
    use crate::outbox::Outbox;
    use crate::tests::{s, some_fds, Harness};
    use crate::Action;

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
        let result = h.bus.write_queue(conn, h.now, &mut h.out, None, |outbox| {
            first.take().map_or(Ok(None), |socket| socket.write(outbox))
        });
        result.expect("a connection of the bus").is_err()
    }

    /// The writes a pool made before it lent outboxes: each connection's
    /// first write made from its queue as it stands, without changing it,
    /// then each queue flushed in turn with that write's result as its
    /// first (its next write finding the socket full), the write's
    /// bookkeeping all on the loop's thread. Whether each write failed.
    fn write_ahead_in_place(h: &mut Harness, writes: &[(ConnId, Socket)]) -> Vec<bool> {
        let results: Vec<_> = writes
            .iter()
            .map(|&(conn, socket)| socket.write(h.bus.conns[&conn].queue.outbox()))
            .collect();
        flush_in_turn(h, writes, results, false)
    }

    /// The same writes made the pool's way: each connection's outbox
    /// lent, written and advanced (in reverse, as threads may finish in
    /// any order), all given back, then each queue flushed in turn with
    /// its write's result as its first. Whether each write failed.
    fn write_lent(h: &mut Harness, writes: &[(ConnId, Socket)]) -> Vec<bool> {
        let mut lending = h.bus.lend_outboxes();
        for &(conn, _) in writes {
            assert!(lending.lend(conn), "{conn:?} has nothing queued");
        }
        let mut results = vec![None; writes.len()];
        for outbox in lending.outboxes().iter_mut().rev() {
            let i = writes
                .iter()
                .position(|(c, _)| *c == outbox.conn())
                .unwrap();
            results[i] = Some(outbox.write_ahead(|o| writes[i].1.write(o)));
        }
        lending.give_back();
        let results = results.into_iter().map(Option::unwrap).collect();
        flush_in_turn(h, writes, results, true)
    }

    /// Each of `writes`' queues flushed in turn, `results` the first
    /// write's of each, made ahead from a lent outbox if `made_ahead`,
    /// else from the queue as it stands; a write after the first finds
    /// the socket full.
    fn flush_in_turn(
        h: &mut Harness,
        writes: &[(ConnId, Socket)],
        results: Vec<Result<Option<usize>, &'static str>>,
        made_ahead: bool,
    ) -> Vec<bool> {
        writes
            .iter()
            .zip(results)
            .map(|(&(conn, _), first)| {
                let result = if made_ahead {
                    h.bus
                        .write_queue(conn, h.now, &mut h.out, Some(first), |_| Ok(None))
                } else {
                    let mut first = Some(first);
                    h.bus.write_queue(conn, h.now, &mut h.out, None, |_| {
                        first.take().unwrap_or(Ok(None))
                    })
                };
                result.expect("a connection of the bus").is_err()
            })
            .collect()
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

    /// The reactions to writes seen so far, so that a comparison of two
    /// ways of writing is known to have gone through them.
    #[derive(Default)]
    struct Reactions {
        told_of_losses: usize,
        released: usize,
    }

    impl Reactions {
        fn count(&mut self, out: &[Action], receivers: &[ConnId]) {
            self.released += out
                .iter()
                .filter(|a| matches!(a, Action::ReleaseSender { .. }))
                .count();
            self.told_of_losses += receivers
                .iter()
                .map(|&r| lost_counts(&delivered_to(out, r)).len())
                .sum::<usize>();
        }

        /// Signals were dropped and senders held, receivers told of their
        /// losses and held senders released: each way was taken, or the
        /// comparison says little.
        fn assert_each_way_taken(&self, h: &Harness) {
            let totals = h.bus.total_traffic();
            assert!(totals.dropped > 0 && totals.holds > 0, "{totals:?}");
            assert!(
                self.told_of_losses > 0,
                "no receiver was told of its losses"
            );
            assert!(self.released > 0, "no held sender was released by a write");
        }
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
        let conns = [vec![sender], receivers.clone()].concat();
        let (mut reactions, mut fds_written) = (Reactions::default(), 0);
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
            reactions.count(&buses[0].out, &receivers);
        }
        reactions.assert_each_way_taken(&buses[0]);
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
        let conns = [vec![sender], receivers.clone()].concat();
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
    fn outboxes_lent_together_settle_as_writes_made_ahead_from_unchanged_queues() {
        // Every receiver's outbox lent at once while queues and their
        // user's tally are near their bounds, so each flush's reactions
        // (MessagesLost queued for a connection flushed later, senders
        // held and released) run while later connections' writes wait to
        // be settled. Against the pool's writes before outboxes were lent
        // (each made from a queue left as it was, all bookkeeping on the
        // loop's thread): the same actions in the same order, the same
        // state, round after round.
        let (mut buses, sender, receivers) = two_buses(BOUNDS);
        let conns = [vec![sender], receivers.clone()].concat();
        let sockets = [
            Socket::Takes(usize::MAX),
            Socket::Takes(150),
            Socket::Full,
            Socket::Takes(1),
            Socket::Fails,
            Socket::Takes(1000),
            Socket::Takes(450),
        ];
        let mut reactions = Reactions::default();
        for round in 0..300 {
            let writes: Vec<(ConnId, Socket)> = receivers
                .iter()
                .enumerate()
                .map(|(i, &r)| (r, sockets[(i * 7 + round * 3) % sockets.len()]))
                .collect();
            for (lent, h) in buses.iter_mut().enumerate() {
                for i in 0..=round % 3 {
                    if (i + round) % 4 == 0 {
                        h.send_with_fds(sender, broadcast_with_fd(), some_fds(1));
                    } else {
                        h.send(sender, broadcast());
                    }
                }
                h.out.clear();
                let writes: Vec<(ConnId, Socket)> = writes
                    .iter()
                    .copied()
                    .filter(|(r, _)| !h.bus.conns[r].queue.outbox().is_empty())
                    .collect();
                if lent == 1 {
                    write_lent(h, &writes);
                } else {
                    write_ahead_in_place(h, &writes);
                }
                if round % 5 == 4 {
                    h.now += BOUNDS.hold / 3;
                    h.bus.handle_timeouts(h.now, &mut h.out);
                }
            }
            let [ahead, lent] = &buses;
            assert_eq!(state(ahead, &conns), state(lent, &conns), "round {round}");
            reactions.count(&buses[0].out, &receivers);
        }
        reactions.assert_each_way_taken(&buses[0]);
    }

    #[test]
    fn a_loss_told_to_a_later_queue_whose_write_ahead_took_all_goes_in_behind_it() {
        // One user's receivers all full and losing signals; the last has
        // written all but one message (half its bound, so it is owed its
        // losses, but its user's queues are still full, so it is not told
        // yet). Then it and three others are written ahead together,
        // each write taking everything. When an earlier flush takes the
        // user below its bound, the last receiver is told of its losses
        // before its own flush: the MessagesLost goes in behind what its
        // write ahead took, as it does behind those messages still in
        // the queue when the pool wrote without lending (the daemon then
        // leaves that signal to the flush that settles the write).
        let start = Harness::new().now;
        let buses: Vec<(Harness, Vec<ConnId>)> = (0..2)
            .map(|_| {
                let mut h = harness(BOUNDS);
                h.now = start;
                let (a, _) = h.client();
                let receivers = subscribers(&mut h, 7);
                settle(&mut h, &[a]);
                overflow_user(&mut h, a);
                h.send(a, broadcast());
                h.out.clear();
                (h, receivers)
            })
            .collect();
        let mut states = Vec::new();
        for (lent, (mut h, receivers)) in buses.into_iter().enumerate() {
            let last = receivers[6];
            let first_message = h.bus.conns[&last].queue.outbox().next_write_bytes().0.len();
            let queued = h.bus.conns[&last].queue.outbox().bytes();
            h.bus
                .write_up_to(last, queued - first_message, h.now, &mut h.out);
            assert!(h.out.is_empty(), "told too early: {:?}", h.out);
            assert!(user_queued(&h, last) >= BOUNDS.per_user().max_bytes);
            let writes: Vec<(ConnId, Socket)> = [0, 1, 2, 6]
                .iter()
                .map(|&i| (receivers[i], Socket::Takes(usize::MAX)))
                .collect();
            if lent == 1 {
                write_lent(&mut h, &writes);
            } else {
                write_ahead_in_place(&mut h, &writes);
            }
            let told = delivered_to(&h.out, last);
            assert_eq!(lost_counts(&told).len(), 1, "{:?}", h.out);
            states.push(state(&h, &receivers));
        }
        assert_eq!(states[0], states[1]);
    }

    /// A bus with a message queued for a second client, `b`.
    fn one_queued() -> (Harness, ConnId) {
        let mut h = Harness::new();
        let (a, _) = h.client();
        let (b, name_b) = h.client();
        h.send(
            a,
            MessageBuilder::signal("/", "org.example.T", "S").destination(name_b),
        );
        (h, b)
    }

    /// Why handing over `b`'s queue is refused, if it is.
    fn handover_refusal(h: &Harness, b: ConnId) -> Option<String> {
        let clock = crate::handover::Clock {
            instant: h.now,
            monotonic_ns: 1_000_000_000,
        };
        let (written, saved) =
            crate::handover::saving(clock, || postcard::to_stdvec(&h.bus.conns[&b].queue));
        assert_eq!(written.is_err(), saved.refused.is_some());
        saved.refused
    }

    const REFUSED: &str = "a queue is lent out for a write (a restart happens between turns)";

    #[test]
    // A debug build stops at the assertion; a release build refuses.
    #[cfg_attr(debug_assertions, should_panic(expected = "while an outbox is lent"))]
    fn the_place_of_a_lent_outbox_refuses_a_restart() {
        let (mut h, b) = one_queued();
        let lent = h.bus.conns.get_mut(&b).unwrap().queue.lend(b);
        assert_eq!(handover_refusal(&h, b).as_deref(), Some(REFUSED));
        drop(lent);
    }

    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "while an outbox is lent or unsettled")
    )]
    fn a_queue_whose_write_made_ahead_is_not_settled_refuses_a_restart() {
        let (mut h, b) = one_queued();
        let mut lending = h.bus.lend_outboxes();
        assert!(lending.lend(b));
        let took = lending.outboxes()[0].write_ahead(|_| Ok::<_, ()>(Some(1)));
        assert_eq!(took, Ok(Some(1)));
        lending.give_back();
        assert_eq!(handover_refusal(&h, b).as_deref(), Some(REFUSED));
    }
}
