//! What is queued for each connection and each user, and what happens
//! to a message whose receiver's queue is full. The rule is in
//! [`crate::flow`]; the bus applies it as it routes, as dbus-broker does,
//! so every action it emits is final:
//!
//! - a delivery that goes in is put in its receiver's queue (an
//!   [`crate::outbox::Outbox`]; the daemon hears of it by an
//!   [`crate::Action::Queued`]) and counts toward its user's until the
//!   daemon writes it ([`crate::Bus::write_queue`]);
//! - a signal dropped for a full receiver never leaves the bus (Debug.Stats
//!   counts it, and the receiver gets `MessagesLost` before anything else
//!   reaches it, and at the latest once it drains: see [`Queues::watch`]);
//! - a call to a full receiver is answered with `LimitsExceeded` before
//!   monitors or the reply table see it (see `Bus::route_watched`);
//! - a sender to hold back is an [`crate::Action::HoldSender`], and an
//!   [`crate::Action::ReleaseSender`] follows when its receiver drains, leaves, or
//!   the hold's time is up ([`crate::Bus::handle_timeouts`]);
//! - a receiver at twice its bound that still gets replies is an
//!   [`crate::Action::Disconnect`].
//!
//! The daemon only carries these out and writes the queues: it keeps no
//! queue of its own but SASL replies, nor any accounting.
//!
//! Owns: `Queues` (the bounds, each user's tally and the receivers to
//! look at when its queues drain, held senders) and each connection's
//! `OutQueue` (the items queued, its flow state, its hold), behind
//! private fields; a queue's outbox lent to a worker for a write is a
//! `LentOutbox`, which goes back only to its own queue
//! (`OutQueue::give_back`). It keeps nothing of the event being handled: the
//! bus reads no clock, so each decision that depends on the time takes
//! the event's `now` as an argument, and a hold the sender it holds
//! back. May touch: the per-user tallies ([`crate::accounting`])
//! and the flow rule ([`crate::flow`]); nothing of the bus. Where the
//! bus applies it as it routes (who is a monitor, what is counted, what
//! is sent, which sender is held) is `bus::queueing`.

use std::time::{Duration, Instant};

use crate::accounting::{UserSlot, Users};
use crate::flow::{Fill, HoldReason, Kind, OutBounds, Receiver, Verdict};
use crate::outbox::{OutItem, Outbox};
use crate::{ConnId, FastSet};

/// The interface of quickbus's own signals from the bus.
pub const QUICKBUS_INTERFACE: &str = "org.quickbus.Bus";
/// `MessagesLost(u count)`: sent by the bus, addressed to a receiver that
/// did not read for so long that `count` signals for it were dropped.
pub const MESSAGES_LOST: &str = "MessagesLost";

/// The bus-wide side of flow control.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Queues {
    /// Each connection's bounds, and (`user_bounds`) all of one user's
    /// connections' together.
    bounds: OutBounds,
    user_bounds: OutBounds,
    users: Users,
    /// Connections held back (see [`Hold`]).
    held: Vec<ConnId>,
    /// Receivers looked at to see whether they drained, for the tests.
    #[cfg(test)]
    #[serde(skip)]
    drain_checks: usize,
}

/// One connection's outgoing queue: its items and their counts (the
/// [`Outbox`]), and their place in its user's tally, which every change
/// of the items moves in the same call.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct OutQueue {
    out: Outbox,
    flow: Receiver,
    user: UserSlot,
    /// Set while it is held back as a sender.
    hold: Option<Hold>,
    /// A Disconnect for it is out: nothing more goes in.
    closing: bool,
    /// It is in its user's list of receivers to look at when the user's
    /// queues drain (see [`Queues::watch`]).
    watched: bool,
}

/// A sender held back for one receiver.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Hold {
    on: ConnId,
    why: HoldReason,
    /// When it started (a hold that replaced a pause keeps the pause's).
    #[serde(with = "crate::handover::instant")]
    since: Instant,
    #[serde(with = "crate::handover::instant")]
    until: Instant,
    /// The receiving user whose hold budget pays for it (None: the
    /// sender's own user, which has no budget; see crate::hold_budget).
    charged_to: Option<UserSlot>,
}

/// What [`Queues::admit`] did with a delivery.
pub(crate) enum Admit {
    /// It went in (room everywhere); `paces`: its sender is to be paused.
    In { paces: bool },
    /// Its receiver (`own`) or its user (`user_full`) has no room: flow
    /// control decides what becomes of `item`.
    Over {
        own: Fill,
        user_full: bool,
        item: OutItem,
    },
}

/// A connection's outbox out of its queue, for one write on one of the
/// daemon's worker threads, which takes out what the socket took (see
/// `crate::bus::lending`). It goes back to its queue, and only there,
/// through `OutQueue::give_back`.
#[derive(Debug)]
pub struct LentOutbox {
    conn: ConnId,
    out: Outbox,
}

impl LentOutbox {
    /// The connection whose outbox this is.
    #[inline]
    pub fn conn(&self) -> ConnId {
        self.conn
    }

    /// The first write of the queue's next flush, made ahead with
    /// `write` (see [`Outbox::write_ahead`]): what the socket took leaves
    /// the outbox, and is dropped here, on the writing thread; its counts
    /// are settled by that flush. Returns what `write` said.
    #[inline]
    pub fn write_ahead<E>(
        &mut self,
        write: impl FnOnce(&Outbox) -> Result<Option<usize>, E>,
    ) -> Result<Option<usize>, E> {
        self.out.write_ahead(write)
    }
}

impl OutQueue {
    /// Lend its outbox, for connection `conn`'s write on another thread:
    /// it leaves an empty place that takes nothing in until
    /// [`OutQueue::give_back`] (O(1): the items do not move).
    pub(crate) fn lend(&mut self, conn: ConnId) -> LentOutbox {
        let out = std::mem::replace(&mut self.out, Outbox::lent_out());
        LentOutbox { conn, out }
    }

    /// `lent`, its outbox, back from a write made ahead on another
    /// thread: its counts are settled by the queue's next write
    /// ([`Queues::write`]), so until then the queue and its user's
    /// tally weigh what they weighed before that write.
    pub(crate) fn give_back(&mut self, lent: LentOutbox) {
        // Checked in every build: what went into the empty place would
        // be lost with it (nothing can, while the bus is lent out).
        assert!(
            self.out.is_lent_out() && self.out.is_empty(),
            "an outbox given back to a queue that is not lent out, or took messages"
        );
        self.out = lent.out;
    }

    /// Bytes queued (not written yet).
    #[inline]
    pub(crate) fn bytes(&self) -> usize {
        self.out.bytes()
    }

    /// The items queued, in order.
    pub(crate) fn outbox(&self) -> &Outbox {
        &self.out
    }

    /// A Disconnect for it is out.
    #[inline]
    pub(crate) fn is_closing(&self) -> bool {
        self.closing
    }

    /// Its user's slot (for [`Queues::hold`]).
    #[inline]
    pub(crate) fn user(&self) -> UserSlot {
        self.user
    }

    /// The receiver it is held for, why, and until when, if it is held.
    #[inline]
    pub(crate) fn hold(&self) -> Option<(ConnId, HoldReason, Instant)> {
        self.hold.as_ref().map(|h| (h.on, h.why, h.until))
    }

    /// A pause for it ran out: whether that starts a lossy episode (see
    /// [`Receiver::pause_expired`]).
    pub(crate) fn pause_expired(&mut self) -> bool {
        self.flow.pause_expired()
    }

    /// A hold for it ran out (see [`Receiver::hold_expired`]).
    pub(crate) fn hold_expired(&mut self) -> bool {
        self.flow.hold_expired()
    }

    /// It is in an overflow episode (see [`Receiver::is_overflowing`]).
    pub(crate) fn in_episode(&self) -> bool {
        self.flow.is_overflowing()
    }

    /// It lost signals it has not been told of.
    #[inline]
    pub(crate) fn owes(&self) -> bool {
        self.flow.owes()
    }

    /// The signals it lost and is being told of now, if any.
    pub(crate) fn take_lost(&mut self) -> Option<u64> {
        self.flow.take_lost()
    }
}

/// How far a user's queues together are from their bound; the order is
/// from emptiest to fullest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum UserLevel {
    /// Down to half the bound: its receivers may be back to normal.
    Drained,
    /// Below the bound: its receivers may be told what they lost.
    Room,
    Full,
}

/// What writing part of a queue changed (see [`Queues::write`]).
pub(crate) struct Written {
    /// Bytes queued before.
    pub before: usize,
    /// The receiver's user's queues got to a lower [`UserLevel`], and its
    /// watched receivers are to be looked at (see `Queues::worth_a_look`).
    pub user_drained: Option<UserSlot>,
}

impl Queues {
    /// After a restart in place: each user's tally counted again from its
    /// connections' `queues` (each with its id and its user's uid:
    /// [`Users::recount`]), the hold of each charged to a user with a
    /// tally (the hold's end gives back to it), and the held senders found
    /// again from the holds (see [`Queues::find_held_again`]).
    pub(crate) fn recount<'a>(
        &mut self,
        queues: impl IntoIterator<Item = (ConnId, u32, &'a OutQueue)>,
    ) -> Result<Vec<u32>, String> {
        let queues: Vec<(ConnId, u32, &OutQueue)> = queues.into_iter().collect();
        let charged = queues
            .iter()
            .filter_map(|(_, _, q)| q.hold.as_ref()?.charged_to);
        for slot in charged {
            if !self.users.has_tally(slot) {
                return Err(format!("a hold charged to {slot:?}, which has no tally"));
            }
        }
        self.find_held_again(
            queues
                .iter()
                .filter(|(_, _, q)| q.hold.is_some())
                .map(|(id, _, _)| *id),
        );
        self.users.recount(
            queues
                .into_iter()
                .map(|(_, uid, q)| (q.user, uid, q.out.bytes(), q.out.fds())),
        )
    }

    /// The held senders, found again from `holding` (the connections
    /// whose queue holds a hold): the holds are what counts, and the list
    /// crossed beside them. A sender the list left out was never looked
    /// at again, so never released; one listed twice, or not held, is
    /// dropped. The list's order (the order the holds are looked at) is
    /// kept, and those it left out follow by id.
    fn find_held_again(&mut self, holding: impl IntoIterator<Item = ConnId>) {
        let mut holding: FastSet<ConnId> = holding.into_iter().collect();
        let mut held: Vec<ConnId> = std::mem::take(&mut self.held)
            .into_iter()
            .filter(|id| holding.remove(id))
            .collect();
        let mut left_out: Vec<ConnId> = holding.into_iter().collect();
        left_out.sort_unstable();
        held.append(&mut left_out);
        self.held = held;
    }

    /// The bounds of every connection's outgoing queue.
    pub(crate) fn set_bounds(&mut self, bounds: OutBounds) {
        self.bounds = bounds;
        self.user_bounds = bounds.per_user();
    }

    pub(crate) fn bounds(&self) -> &OutBounds {
        &self.bounds
    }

    /// A queue for a new connection of `uid`.
    pub(crate) fn join(&mut self, uid: u32) -> OutQueue {
        OutQueue {
            out: Outbox::default(),
            flow: Receiver::default(),
            user: self.users.join(uid),
            hold: None,
            closing: false,
            watched: false,
        }
    }

    /// Users with a tally (a connection).
    #[cfg(test)]
    pub(crate) fn users(&self) -> usize {
        self.users.len()
    }

    /// Put `item` in `q` at `now` if `q` and its user have room: the
    /// common case, in four comparisons. (Always inlined: out of line,
    /// its call cost a round trip's delivery a tenth of what it does.)
    #[inline(always)]
    pub(crate) fn admit(&mut self, q: &mut OutQueue, item: OutItem, now: Instant) -> Admit {
        let (own, user_full) = self.room(q);
        if own == Fill::Room && !user_full {
            let queued = self.push(q, item);
            let paces = self.bounds.pacing.pauses_at(queued) && q.flow.paces(now);
            return Admit::In { paces };
        }
        Admit::Over {
            own,
            user_full,
            item,
        }
    }

    /// How full `q` is, and whether its user's queues are.
    #[inline]
    pub(crate) fn room(&self, q: &OutQueue) -> (Fill, bool) {
        let user = self.users.get(q.user);
        (
            self.bounds.fill(q.out.bytes(), q.out.fds()),
            self.user_bounds.full(user.out_bytes, user.out_fds),
        )
    }

    /// Put `item` in `q`, counted in its user's tally, whatever the
    /// bounds. Returns the bytes now queued in `q`.
    #[inline]
    pub(crate) fn push(&mut self, q: &mut OutQueue, item: OutItem) -> usize {
        self.users
            .get_mut(q.user)
            .queued(item.len(), item.fd_count());
        q.out.push(item);
        q.out.bytes()
    }

    /// Whether `q`, now holding `queued` bytes, passed the pacing length
    /// while it still paces its senders at `now`.
    #[inline]
    pub(crate) fn paces(&self, q: &OutQueue, queued: usize, now: Instant) -> bool {
        self.bounds.pacing.pauses_at(queued) && q.flow.paces(now)
    }

    /// The flow rule's verdict on a `kind` of delivery to `q`, `fill`ed,
    /// at `now`; `sender_uid`: the user of a sender that may be held
    /// (None: there is none to hold).
    pub(crate) fn judge(
        &mut self,
        q: &mut OutQueue,
        kind: Kind,
        fill: Fill,
        sender_uid: Option<u32>,
        now: Instant,
    ) -> Verdict {
        let bounds = self.bounds;
        let user = self.users.get_mut(q.user);
        // Another user's sender waits only while the receiving user's hold
        // budget lasts.
        let hold = sender_uid.map(|uid| {
            if uid == user.uid {
                bounds.hold
            } else {
                user.hold_available(bounds.hold_budget, now)
                    .min(bounds.hold)
            }
        });
        let verdict = q.flow.judge(kind, fill, hold, now);
        if verdict == Verdict::Drop {
            user.unseen_losses = true;
        }
        verdict
    }

    /// `q`, connection `id`'s queue, is in an overflow episode: it
    /// joins its user's list of receivers to look at when the user's
    /// queues drain (once). Whatever it waits for that its own writes do
    /// not bring (its user's queues getting room, then draining to half),
    /// another connection's writes do: those look at the list when they
    /// take the user's queues to a lower level ([`Written::user_drained`]).
    /// A receiver leaves the list once its episode is over, so a write
    /// looks at each receiver of the user at most once, however many
    /// signals they lost.
    pub(crate) fn watch(&mut self, id: ConnId, q: &mut OutQueue) {
        if !q.watched && q.flow.is_overflowing() {
            q.watched = true;
            self.users.get_mut(q.user).watched.push(id);
        }
    }

    /// `user`'s watched receivers, to look at; give back those still to
    /// watch with [`Queues::rewatch`].
    pub(crate) fn take_watched(&mut self, user: UserSlot) -> Vec<ConnId> {
        std::mem::take(&mut self.users.get_mut(user).watched)
    }

    /// `watch` are still to be watched, before any added meanwhile.
    pub(crate) fn rewatch(&mut self, user: UserSlot, mut watch: Vec<ConnId>) {
        let watched = &mut self.users.get_mut(user).watched;
        watch.append(watched);
        *watched = watch;
    }

    /// Whether `q`, taken from its user's list, stays in it: only while
    /// its episode lasts.
    pub(crate) fn keep_watching(&self, q: &mut OutQueue) -> bool {
        q.watched = q.flow.is_overflowing();
        q.watched
    }

    /// Close `q` (nothing more goes in): the reason for its Disconnect.
    pub(crate) fn close(&self, q: &mut OutQueue) -> String {
        q.closing = true;
        format!(
            "{} bytes and {} fds are queued for it, twice max_outgoing_bytes={} or \
             max_outgoing_unix_fds={}: it asks for replies and does not read them",
            q.out.bytes(),
            q.out.fds(),
            self.bounds.max_bytes,
            self.bounds.max_fds
        )
    }

    /// Whether `q` or its user's queues are full.
    #[inline]
    pub(crate) fn is_full(&self, q: &OutQueue) -> bool {
        let (own, user_full) = self.room(q);
        own != Fill::Room || user_full
    }

    /// Hold back the sender `sender` (of `sender_uid`, with queue `q`)
    /// for the receiver `receiver` of user `receiving_user`, from `now`
    /// for the hold time or what is left of the receiving user's hold
    /// budget if the sender is another user's. None: no hold (nothing
    /// left, or a hold that this one does not replace); else whether it
    /// was held already.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn hold(
        &mut self,
        q: &mut OutQueue,
        sender: ConnId,
        sender_uid: u32,
        receiver: ConnId,
        receiving_user: UserSlot,
        why: HoldReason,
        now: Instant,
    ) -> Option<bool> {
        let bounds = self.bounds;
        let wanted = match why {
            HoldReason::Full => bounds.hold,
            HoldReason::Pace => bounds.pacing.timeout,
        };
        let receiving_uid = self.users.get(receiving_user).uid;
        if !why.replaces(q.hold.as_ref().map(|h| h.why)) {
            return None;
        }
        let charged_to = (sender_uid != receiving_uid).then_some(receiving_user);
        let how_long = match charged_to {
            Some(user) => self
                .users
                .get_mut(user)
                .take_hold(wanted, bounds.hold_budget, now),
            None => wanted,
        };
        if how_long.is_zero() {
            return None;
        }
        if why == HoldReason::Full {
            // Nothing is lost by a hold, so nobody is told; the log says it.
            tracing::debug!(
                uid = sender_uid,
                "holding a sender back for a full receiver"
            );
        }
        let replaced = q.hold.take();
        let was_held = replaced.is_some();
        let since = replaced.as_ref().map_or(now, |h| h.since);
        q.hold = Some(Hold {
            on: receiver,
            why,
            since,
            until: now + how_long,
            charged_to,
        });
        if let Some(old) = replaced {
            give_back(&mut self.users, &old, now);
        }
        if !was_held {
            self.held.push(sender);
        }
        Some(was_held)
    }

    /// The held senders.
    #[inline]
    pub(crate) fn held(&self) -> &[ConnId] {
        &self.held
    }

    /// The held senders, to look at; those still held go back with
    /// [`Queues::keep_held`].
    pub(crate) fn take_held(&mut self) -> Vec<ConnId> {
        std::mem::take(&mut self.held)
    }

    pub(crate) fn keep_held(&mut self, sender: ConnId) {
        self.held.push(sender);
    }

    /// Whether the receiver `r` let go of what its senders are held for:
    /// it drained (a hold), or caught up (a pause).
    pub(crate) fn let_go(&self, r: &OutQueue, why: HoldReason) -> bool {
        match why {
            HoldReason::Full => self.drained(r),
            HoldReason::Pace => self.bounds.pacing.caught_up(r.out.bytes()),
        }
    }

    /// End `q`'s hold at `now`: what it did not use goes back to the
    /// budget that paid for it. Returns how long it was held, if it was.
    pub(crate) fn release(&mut self, q: &mut OutQueue, now: Instant) -> Option<Duration> {
        let hold = q.hold.take()?;
        give_back(&mut self.users, &hold, now);
        Some(now.saturating_duration_since(hold.since))
    }

    /// Write `q` at `now` with `write`, its first write made ahead if
    /// `written_ahead` gives its result (see [`Outbox::flush`]): what the
    /// socket took leaves `q` and its user's tally. Returns the write's
    /// outcome and what it changed.
    pub(crate) fn write<E>(
        &mut self,
        q: &mut OutQueue,
        now: Instant,
        written_ahead: Option<Result<Option<usize>, E>>,
        write: impl FnMut(&Outbox) -> Result<Option<usize>, E>,
    ) -> (Result<bool, E>, Written) {
        let (before, fds_before) = (q.out.bytes(), q.out.fds());
        let level = self.user_level(q.user);
        let result = q.out.flush(written_ahead, write);
        // Also when the write failed part way: what was written is gone.
        self.users
            .get_mut(q.user)
            .sent(before - q.out.bytes(), fds_before - q.out.fds());
        if q.out.bytes() == 0 {
            q.flow.emptied(now, self.bounds.memory);
        }
        let written = Written {
            before,
            user_drained: self.worth_a_look(q.user, level).then_some(q.user),
        };
        (result, written)
    }

    /// Whether `user`'s watched receivers are worth looking at, now that
    /// its queues were at `level`: they went down to half their bound
    /// (episodes may end), or got room again after a receiver lost a
    /// signal since the last look (it may be told). A user whose queues
    /// hover about their bound is thus looked at once per loss at most,
    /// not once per write.
    fn worth_a_look(&mut self, user: UserSlot, level: UserLevel) -> bool {
        // Down to half already (the common case): no lower level to reach.
        if level == UserLevel::Drained {
            return false;
        }
        let now = self.user_level(user);
        let tally = self.users.get_mut(user);
        let worth = now < level && (now == UserLevel::Drained || tally.unseen_losses);
        if worth {
            tally.unseen_losses = false;
        }
        worth
    }

    fn user_level(&self, user: UserSlot) -> UserLevel {
        let user = self.users.get(user);
        if self.user_bounds.drained(user.out_bytes, user.out_fds) {
            UserLevel::Drained
        } else if self.user_bounds.full(user.out_bytes, user.out_fds) {
            UserLevel::Full
        } else {
            UserLevel::Room
        }
    }

    /// Bytes queued for all of `q`'s user's connections, as counted.
    #[cfg(test)]
    pub(crate) fn user_queued_bytes(&self, q: &OutQueue) -> usize {
        self.users.get(q.user).out_bytes
    }

    /// Receivers looked at so far to see whether they drained.
    #[cfg(test)]
    pub(crate) fn drain_checks(&self) -> usize {
        self.drain_checks
    }

    /// What `q` is to be told it lost at `now`, if anything: its queue is
    /// down to half its bound and its user's queues have room. When they
    /// are down to half theirs too, its episode is over (see
    /// [`Receiver::drained`]).
    pub(crate) fn lost_on_drain(&mut self, q: &mut OutQueue, now: Instant) -> Option<u64> {
        #[cfg(test)]
        {
            self.drain_checks += 1;
        }
        if !q.flow.is_overflowing() || !self.bounds.drained(q.out.bytes(), q.out.fds()) {
            return None;
        }
        match self.user_level(q.user) {
            UserLevel::Drained => q.flow.drained(now, self.bounds.memory),
            UserLevel::Room => q.flow.take_lost(),
            UserLevel::Full => None,
        }
    }

    /// A queue, and its user's queues together, went down to half their
    /// bounds.
    fn drained(&self, q: &OutQueue) -> bool {
        let user = self.users.get(q.user);
        self.bounds.drained(q.out.bytes(), q.out.fds())
            && self.user_bounds.drained(user.out_bytes, user.out_fds)
    }

    /// Connection `id` left with `queue` at `now`: its hold ends and
    /// nobody waits for it to drain; then [`Queues::leave`].
    pub(crate) fn forget(&mut self, id: ConnId, queue: &OutQueue, now: Instant) {
        if queue.watched {
            self.users.get_mut(queue.user).watched.retain(|&w| w != id);
        }
        if let Some(hold) = &queue.hold {
            give_back(&mut self.users, hold, now);
            self.held.retain(|&s| s != id);
        }
    }

    /// What was queued in `queue` leaves its user's tally. Returns the
    /// user if that took its queues to a lower level and it has other
    /// connections: their watched receivers are to be looked at, as after
    /// a write.
    pub(crate) fn leave(&mut self, queue: &OutQueue) -> Option<UserSlot> {
        let level = self.user_level(queue.user);
        let stays = self
            .users
            .leave(queue.user, queue.out.bytes(), queue.out.fds());
        (stays && self.worth_a_look(queue.user, level)).then_some(queue.user)
    }
}

/// A hold ends at `now`: what it did not use of the receiving user's hold
/// budget goes back to it.
fn give_back(users: &mut Users, hold: &Hold, now: Instant) {
    if let Some(user) = hold.charged_to {
        let unused: Duration = hold.until.saturating_duration_since(now);
        users.get_mut(user).give_back_hold(unused);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::Harness;
    use crate::Action;

    /// A hold the state charges to a user slot without a tally would
    /// index past the tallies (or take another user's budget) when it
    /// ends: the restart is refused instead.
    #[test]
    fn a_handed_over_hold_charged_to_a_user_without_a_tally_is_refused() {
        let mut queues = Queues::default();
        let mut receiver = queues.join(1000);
        let gone = queues.join(2000);
        queues.leave(&gone);
        #[allow(clippy::disallowed_methods)] // a test's clock
        let now = Instant::now();
        receiver.hold = Some(Hold {
            on: ConnId(2),
            why: HoldReason::Full,
            since: now,
            until: now,
            charged_to: Some(gone.user),
        });
        assert_eq!(
            queues.recount([(ConnId(1), 1000, &receiver)]),
            Err(format!(
                "a hold charged to {:?}, which has no tally",
                gone.user
            ))
        );
        receiver.hold.as_mut().unwrap().charged_to = Some(receiver.user);
        assert_eq!(queues.recount([(ConnId(1), 1000, &receiver)]), Ok(vec![]));
    }

    /// A hold the state carries for a sender its list of held senders
    /// left out: found again from the hold, the sender is released when
    /// the hold runs out (it was never looked at, so held for good).
    #[test]
    fn a_handed_over_hold_missing_from_the_held_senders_still_runs_out() {
        let mut h = Harness::new();
        let (sender, _) = h.client();
        let (receiver, _) = h.client();
        let until = h.now + Duration::from_secs(1);
        h.bus.conns.get_mut(&sender).unwrap().queue.hold = Some(Hold {
            on: receiver,
            why: HoldReason::Pace,
            since: h.now,
            until,
            charged_to: None,
        });
        assert_eq!(h.bus.check_handed_over(), Ok(vec![]));
        assert_eq!(h.bus.next_hold_deadline(), Some(until));
        let mut out = Vec::new();
        h.bus.check_holds(until, &mut out);
        assert!(
            out.iter()
                .any(|a| matches!(a, Action::ReleaseSender { conn } if *conn == sender)),
            "{out:?}"
        );
        assert_eq!(h.bus.next_hold_deadline(), None);
    }

    /// The held senders are found again from the holds: the list's order
    /// kept, those it left out after it by id, those not held or listed
    /// twice dropped.
    #[test]
    fn the_held_senders_are_found_again_from_the_holds() {
        let mut queues = Queues {
            held: [9, 4, 4, 7, 2].map(ConnId).into(),
            ..Queues::default()
        };
        queues.find_held_again([1, 4, 9, 5].map(ConnId));
        assert_eq!(queues.held(), [9, 4, 1, 5].map(ConnId));
    }

    /// A connection whose queue counts toward another user's tally would
    /// fill that user's bounds and spend its hold budget: refused.
    #[test]
    fn a_handed_over_queue_in_another_users_tally_is_refused() {
        let mut h = Harness::new();
        let (ours, _) = h.client();
        let theirs = h.bus.add_connection(crate::tests::creds(1001, 101), true);
        let their_slot = h.bus.conns[&theirs].queue.user;
        h.bus.conns.get_mut(&ours).unwrap().queue.user = their_slot;
        let why = h.bus.check_handed_over().unwrap_err();
        assert!(
            why.starts_with("a connection of uid 1000 counted in user slot ")
                && why.ends_with(", uid 1001's tally"),
            "{why}"
        );
    }
}
