//! Flow control as the bus routes (the rule and the queues are
//! [`crate::overflow`]'s and [`crate::flow`]'s): each delivery is counted
//! and judged as it is made, senders are held and released, and a
//! receiver that lost signals hears of it before anything else reaches
//! it, and at the latest once it drains.
//!
//! Owns: nothing. May touch: queues (through their methods), peers (each
//! connection's `OutQueue`, credentials and counters), monitors (monitors
//! pace nobody and their copies are never refused), and `outgoing` for
//! MessagesLost.

use std::time::Instant;

use quickbus_wire::{MessageBuilder, Value};

use crate::accounting::UserSlot;
use crate::errors::{self, BusError};
use crate::flow::{Fill, HoldReason, Kind, OutBounds, Verdict};
use crate::outbox::{OutItem, Outbox};
use crate::overflow::{Admit, OutQueue, MESSAGES_LOST, QUICKBUS_INTERFACE};
use crate::{Action, Bus, ConnId, OutMessage, BUS_PATH};

use super::Routing;

impl Bus {
    /// The bounds of every connection's outgoing queue (the daemon's
    /// configuration; unbounded until set).
    pub fn set_out_bounds(&mut self, bounds: OutBounds) {
        self.queues.set_bounds(bounds);
    }

    /// Queue `msg` for `to` unless flow control says otherwise. `addressed`:
    /// `to` is the receiver the message is addressed to, and a call to it
    /// was admitted already ([`Bus::refuses_call`]). `routing`: the event
    /// it belongs to, whose time flow control judges by and whose sender
    /// it may hold back.
    pub(crate) fn queue_for(
        &mut self,
        to: ConnId,
        msg: OutMessage,
        addressed: bool,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        let msg = self.with_container_header(to, msg);
        let len = msg.frame.header.len() + msg.frame.body.len();
        let kind = msg.kind;
        if self.queue_item(to, OutItem::from(msg), len, kind, addressed, routing, out) {
            self.traffic.count_out(len);
        }
    }

    /// Queue copies of `msg` for each of `recipients` (none of them the
    /// receiver it is addressed to), in their order, exactly as
    /// [`Bus::queue_for`] would one at a time, but with what does not
    /// depend on the receiver done once for all: the conversion to a
    /// queue item, its length, and the bus-wide tally. Each receiver's
    /// own counters, its queue and its user's, flow control and the
    /// sender's holds stay per receiver, in order, since each delivery
    /// changes what the next one finds (two receivers of one user share
    /// its tally). Receivers that asked for the container-instance header
    /// each get a copy of their own: with any such receiver on the bus,
    /// the copies go one at a time. The last receiver takes `msg` whole:
    /// with one receiver (the common signal), the stamped header is never
    /// cloned, so it never pays for its shared block.
    pub(crate) fn queue_broadcast(
        &mut self,
        recipients: &[ConnId],
        msg: OutMessage,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        let Some((&last, others)) = recipients.split_last() else {
            return;
        };
        if self.containers.has_header_requesters() {
            for &to in others {
                self.queue_for(to, msg.clone(), false, routing, out);
            }
            self.queue_for(last, msg, false, routing, out);
            return;
        }
        let len = msg.frame.header.len() + msg.frame.body.len();
        let kind = msg.kind;
        let item = OutItem::from(msg);
        let mut known = 0;
        for &to in others {
            known += usize::from(self.queue_item(to, item.clone(), len, kind, false, routing, out));
        }
        // The last takes the item whole: one clone fewer.
        known += usize::from(self.queue_item(last, item, len, kind, false, routing, out));
        self.traffic.count_out_many(known, len);
    }

    /// [`Bus::queue_for`] of an `item` of `len` bytes, a `msg_kind`, with
    /// its header final: counted in `to`'s traffic (the bus-wide total is
    /// the caller's to count), then queued, held back or dropped as flow
    /// control says. Returns whether `to` is the bus's (and was counted).
    // Inlined into its two callers: a call of its own cost a round trip's
    // addressed delivery more than the broadcast step saved (callgrind).
    #[allow(clippy::too_many_arguments)] // the delivery's facts, each needed
    #[inline(always)]
    fn queue_item(
        &mut self,
        to: ConnId,
        item: OutItem,
        len: usize,
        msg_kind: Kind,
        addressed: bool,
        routing: Routing,
        out: &mut Vec<Action>,
    ) -> bool {
        let Some(conn) = self.conns.get_mut(&to) else {
            return false;
        };
        conn.traffic.count_out(len);
        // What the daemon hears it is to `to` (`Action::Queued`): a call
        // `to` is not the addressed receiver of (a monitor's or an
        // eavesdropper's copy, or the bus's own call, which expects no
        // reply) is a signal to it: it owes no answer.
        let told = match msg_kind {
            Kind::Call if !addressed => Kind::Signal,
            kind => kind,
        };
        let q = &mut conn.queue;
        // It hears of its losses before this message: the rare case,
        // judged as the common one after that.
        if q.owes() && !self.queues.is_full(q) {
            self.queue_in(to, item, told, routing, out);
            return true;
        }
        // The common case: room everywhere (and one lookup of the
        // receiver).
        let (own, user_full, item) = match self.queues.admit(q, item, routing.now) {
            Admit::In { paces } => {
                out.push(queued_action(to, told, q));
                if paces {
                    self.pace_sender(to, routing, out);
                }
                return true;
            }
            Admit::Over {
                own,
                user_full,
                item,
            } => (own, user_full, item),
        };
        if q.is_closing() {
            return true;
        }
        // A user's full queues make each of its connections full, but only
        // a connection's own queue can get it disconnected.
        let fill = if user_full { own.max(Fill::Full) } else { own };
        let kind = match told {
            Kind::Call => {
                self.queue_in(to, item, told, routing, out);
                return true;
            }
            Kind::Reply if !self.monitors.is_monitor(to) => Kind::Reply,
            // A copy: refusing it would fail a call that was delivered.
            _ => Kind::Signal,
        };
        let verdict = self.judge(to, kind, fill, routing);
        match verdict {
            Verdict::Queue => self.queue_in(to, item, told, routing, out),
            Verdict::QueueAndHoldSender => {
                self.push_delivery(to, item, told, routing, out);
                self.hold_sender(to, HoldReason::Full, routing, out);
            }
            Verdict::Drop | Verdict::RefuseCall => self.record_dropped(to),
            Verdict::DisconnectReceiver => {
                let q = &mut self.conns.get_mut(&to).expect("looked up above").queue;
                let reason = self.queues.close(q);
                out.push(Action::Disconnect { conn: to, reason });
                return true;
            }
        }
        // Its episode may end with another connection's writes (its
        // user's queues draining): it is looked at then.
        if let Some(conn) = self.conns.get_mut(&to) {
            self.queues.watch(to, &mut conn.queue);
        }
        true
    }

    /// The flow rule's verdict on a `kind` of delivery to a `fill`ed `to`.
    fn judge(&mut self, to: ConnId, kind: Kind, fill: Fill, routing: Routing) -> Verdict {
        // A sender can be held unless the bus itself sent it, or the
        // receiver did (holding it would stop it from ever draining).
        let sender_uid = routing
            .sender
            .filter(|&from| from != to)
            .and_then(|from| Some(self.conns.get(&from)?.creds().uid));
        let conn = self.conns.get_mut(&to).expect("looked up by the caller");
        self.queues
            .judge(&mut conn.queue, kind, fill, sender_uid, routing.now)
    }

    /// Queue it, and pause its sender if the receiver's queue passed the
    /// pacing length.
    fn queue_in(
        &mut self,
        to: ConnId,
        item: OutItem,
        kind: Kind,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        let queued = self.push_delivery(to, item, kind, routing, out);
        let paces = self
            .conns
            .get(&to)
            .is_some_and(|c| self.queues.paces(&c.queue, queued, routing.now));
        if paces {
            self.pace_sender(to, routing, out);
        }
    }

    /// `to`'s queue passed the pacing length: pause the sender, unless
    /// `to` only watches (monitors pace nobody).
    fn pace_sender(&mut self, to: ConnId, routing: Routing, out: &mut Vec<Action>) {
        if routing.sender.is_some() && !self.monitors.is_monitor(to) {
            self.hold_sender(to, HoldReason::Pace, routing, out);
        }
    }

    /// Put it in its receiver's queue (counted there and in its user's),
    /// after a MessagesLost if the receiver is owed one, and tell the
    /// daemon. Returns the bytes now queued for the receiver.
    fn push_delivery(
        &mut self,
        to: ConnId,
        item: OutItem,
        kind: Kind,
        routing: Routing,
        out: &mut Vec<Action>,
    ) -> usize {
        if self.conns.get(&to).is_some_and(|c| c.queue.owes()) {
            self.tell_before_next(to, routing, out);
        }
        let q = &mut self
            .conns
            .get_mut(&to)
            .expect("looked up by the caller")
            .queue;
        let queued = self.queues.push(q, item);
        out.push(queued_action(to, kind, q));
        queued
    }

    /// Queue what `to` is owed (MessagesLost) whatever its bounds: it is
    /// small, and comes at most once per message queued for `to` after a
    /// loss, or once per drain.
    pub(super) fn deliver_owed(
        &mut self,
        to: ConnId,
        msg: OutMessage,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        let Some(conn) = self.conns.get_mut(&to) else {
            return;
        };
        if conn.queue.is_closing() {
            return;
        }
        let len = msg.frame.header.len() + msg.frame.body.len();
        conn.traffic.count_out(len);
        self.traffic.count_out(len);
        let kind = msg.kind;
        self.push_delivery(to, OutItem::from(msg), kind, routing, out);
    }

    /// The error the caller of a method call to `target` gets when the
    /// call cannot be queued (see [`crate::flow`]), if it cannot.
    pub(crate) fn refuses_call(&self, target: ConnId) -> Option<BusError> {
        let conn = self.conns.get(&target)?;
        if !self.queues.is_full(&conn.queue) || self.monitors.is_monitor(target) {
            return None;
        }
        let receiver = conn.unique().as_deref().unwrap_or("(gone)");
        Some(BusError::new(
            errors::LIMITS_EXCEEDED,
            format!(
                "The message queue of {receiver} is full (max_outgoing_bytes or \
                 max_outgoing_unix_fds): it is not reading its messages"
            ),
        ))
    }

    /// Stop reading the connection whose message filled `receiver`'s
    /// queue (or its pacing allowance), the sender being routed, from
    /// the event's time until `receiver` drains or the hold time passes,
    /// or what is left of the receiving user's hold budget if the sender
    /// is another user's (none left: no hold).
    fn hold_sender(
        &mut self,
        receiver: ConnId,
        why: HoldReason,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        let Some(sender) = routing.sender.filter(|&s| s != receiver) else {
            return; // the bus's own message (a time-out, a disconnect)
        };
        let Some(receiving_user) = self.conns.get(&receiver).map(|r| r.queue.user()) else {
            return;
        };
        let Some(conn) = self.conns.get_mut(&sender) else {
            return;
        };
        let uid = conn.creds().uid;
        let Some(was_held) = self.queues.hold(
            &mut conn.queue,
            sender,
            uid,
            receiver,
            receiving_user,
            why,
            routing.now,
        ) else {
            return;
        };
        self.record_hold(sender, why == HoldReason::Pace);
        if !was_held {
            out.push(Action::HoldSender { conn: sender });
        }
    }

    /// When the first hold runs out, if any sender is held.
    pub(crate) fn next_hold_deadline(&self) -> Option<Instant> {
        self.queues
            .held()
            .iter()
            .filter_map(|s| Some(self.conns.get(s)?.queue.hold()?.2))
            .min()
    }

    /// Release every held sender whose receiver drained or left, or whose
    /// hold time is up (its receiver then becomes lossy).
    pub(crate) fn check_holds(&mut self, now: Instant, out: &mut Vec<Action>) {
        if self.queues.held().is_empty() {
            return;
        }
        let held = self.queues.take_held();
        for sender in held {
            let Some((on, why, until)) = self.conns.get(&sender).and_then(|c| c.queue.hold())
            else {
                continue;
            };
            let drained = self
                .conns
                .get(&on)
                .is_none_or(|r| self.queues.let_go(&r.queue, why));
            if !drained && until > now {
                self.queues.keep_held(sender);
                continue;
            }
            if !drained {
                self.hold_ran_out(on, why, out);
            }
            self.release(sender, now, out);
        }
    }

    /// A hold for `receiver` ended without it draining.
    fn hold_ran_out(&mut self, receiver: ConnId, why: HoldReason, out: &mut Vec<Action>) {
        let Some(r) = self.conns.get_mut(&receiver) else {
            return;
        };
        match why {
            HoldReason::Pace => {
                if r.queue.pause_expired() {
                    tracing::debug!(
                        uid = r.creds().uid,
                        "a receiver did not catch up within pacing_timeout: it paces nobody \
                         until its queue is empty"
                    );
                }
            }
            HoldReason::Full => {
                if r.queue.hold_expired() {
                    let name = r.unique().as_deref().unwrap_or("(no name)");
                    let c = r.creds();
                    let bounds = self.queues.bounds();
                    let message = format!(
                        "{name} is not reading: {} bytes queued for it for {:?} \
                         (max_outgoing_bytes={}); dropping signals to it until it drains, \
                         then it gets MessagesLost ({})",
                        r.queue.bytes(),
                        bounds.hold,
                        bounds.max_bytes,
                        crate::loginfo(c.uid, c.pid, c.comm.as_deref())
                    );
                    out.push(Action::Warn {
                        about: receiver,
                        kind: "receiver not reading",
                        message,
                    });
                }
            }
        }
    }

    /// End `sender`'s hold: what it did not use goes back to the budget
    /// that paid for it, and the daemon reads it again.
    fn release(&mut self, sender: ConnId, now: Instant, out: &mut Vec<Action>) {
        let Some(conn) = self.conns.get_mut(&sender) else {
            return;
        };
        let Some(held) = self.queues.release(&mut conn.queue, now) else {
            return;
        };
        self.record_held(sender, held);
        out.push(Action::ReleaseSender { conn: sender });
    }

    /// Write what is queued for `conn` at `now` with `write`, which makes
    /// one write of the slices [`Outbox::next_write`] gives and says how
    /// much the socket took (None: nothing more for now); what it took
    /// leaves the queue and its user's tally. Then, as the queue went
    /// down: a receiver whose queue went down to half its bound is back
    /// to normal, and hears how many signals it lost; senders held for it
    /// go on. The first write was made ahead, on a worker from the outbox
    /// the bus lent it (`lending`), when `written_ahead` gives its result:
    /// that write is settled first. Returns the write's outcome (Ok(true):
    /// the queue is empty), None if `conn` is not the bus's.
    // An entry point of the core that scripts/cpu-split.sh counts: kept
    // a function of its own (a call per write costs nothing measurable).
    #[inline(never)]
    pub fn write_queue<E>(
        &mut self,
        conn: ConnId,
        now: Instant,
        out: &mut Vec<Action>,
        written_ahead: Option<Result<Option<usize>, E>>,
        write: impl FnMut(&Outbox) -> Result<Option<usize>, E>,
    ) -> Option<Result<bool, E>> {
        self.assert_none_lent();
        let c = self.conns.get_mut(&conn)?;
        let (result, written) = self.queues.write(&mut c.queue, now, written_ahead, write);
        // Debug.Stats shows the queue at its fullest (before a write).
        let t = &mut c.traffic;
        t.peak_queued_bytes = t.peak_queued_bytes.max(written.before as u64);
        // What the bus sends now holds nobody back.
        let routing = Routing::by_bus(now);
        // The common case, nothing lost to tell, on the one look-up of
        // the receiver a write needs.
        match self.queues.lost_on_drain(&mut c.queue, now) {
            None => self.queues.watch(conn, &mut c.queue),
            Some(lost) => {
                self.tell_lost_on_drain(conn, lost, routing, out);
                if let Some(c) = self.conns.get_mut(&conn) {
                    self.queues.watch(conn, &mut c.queue);
                }
            }
        }
        if let Some(user) = written.user_drained {
            self.look_at_watched(user, routing, out);
        }
        self.check_holds(now, out);
        Some(result)
    }

    /// Bytes queued for `conn` and not written yet.
    pub fn queued_bytes(&self, conn: ConnId) -> usize {
        self.conns.get(&conn).map_or(0, |c| c.queue.bytes())
    }

    /// Write up to `bytes` of what is queued for `conn` at `now`, as a
    /// socket that takes that much would (the fds go with the messages).
    #[cfg(test)]
    pub(crate) fn write_up_to(
        &mut self,
        conn: ConnId,
        bytes: usize,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let mut left = bytes;
        let _ = self.write_queue(conn, now, out, None, |outbox| {
            let took = outbox.next_write_bytes().0.len().min(left);
            left -= took;
            Ok::<_, ()>((took > 0).then_some(took))
        });
    }

    /// `user`'s queues went down a level (they have room again, or are
    /// down to half their bound): each of its receivers in an overflow
    /// episode is looked at once, told what it lost if it can be, and
    /// kept in the list while its episode lasts.
    fn look_at_watched(&mut self, user: UserSlot, routing: Routing, out: &mut Vec<Action>) {
        let mut watched = self.queues.take_watched(user);
        watched.retain(|&w| {
            self.note_drained(w, routing, out);
            self.conns
                .get_mut(&w)
                .is_some_and(|c| self.queues.keep_watching(&mut c.queue))
        });
        self.queues.rewatch(user, watched);
    }

    /// A receiver whose queue went down to half its bound, while its
    /// user's queues have room, is told how many signals it lost, if any
    /// (see [`crate::overflow::Queues::lost_on_drain`]).
    fn note_drained(&mut self, id: ConnId, routing: Routing, out: &mut Vec<Action>) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if let Some(lost) = self.queues.lost_on_drain(&mut conn.queue, routing.now) {
            self.tell_lost_on_drain(id, lost, routing, out);
        }
    }

    /// Tell `id`, whose queue drained, that `lost` signals were dropped
    /// for it (what [`Bus::note_drained`] found).
    fn tell_lost_on_drain(
        &mut self,
        id: ConnId,
        lost: u64,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        let Some(conn) = self.conns.get(&id) else {
            return;
        };
        if conn.queue.in_episode() {
            // Told before its episode ends (its user's queues are not
            // down to half yet), which a reader about its bound can make
            // happen at every read: not a line at info each time.
            tracing::debug!("telling {id:?} {lost} signals were dropped for it");
            self.tell_messages_lost(id, lost, routing, out);
            return;
        }
        let name = conn.unique().as_deref().unwrap_or("(no name)");
        let c = conn.creds();
        tracing::info!(
            dbus_unique_name = name,
            dbus_peer_uid = c.uid,
            dbus_peer_pid = c.pid,
            dbus_peer_comm = c.comm.as_deref(),
            "{name} drained its queue; telling it {lost} signals were dropped for it \
             (MessagesLost) ({})",
            crate::loginfo(c.uid, c.pid, c.comm.as_deref())
        );
        self.tell_messages_lost(id, lost, routing, out);
    }

    /// Connection `id` left with `queue` at `now`: its hold ends, what
    /// was queued for it leaves its user's tally, and senders held for it
    /// go on.
    pub(crate) fn queue_gone(
        &mut self,
        id: ConnId,
        queue: &OutQueue,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        self.queues.forget(id, queue, now);
        self.check_holds(now, out);
        if let Some(user) = self.queues.leave(queue) {
            self.look_at_watched(user, Routing::by_bus(now), out);
        }
    }

    /// Something is about to be queued for `to`, which lost signals it was
    /// not told of: it hears of them first.
    fn tell_before_next(&mut self, to: ConnId, routing: Routing, out: &mut Vec<Action>) {
        let Some(lost) = self.conns.get_mut(&to).and_then(|c| c.queue.take_lost()) else {
            return;
        };
        tracing::debug!(
            "telling {to:?} {lost} signals were dropped for it before its next message"
        );
        self.tell_messages_lost(to, lost, routing, out);
    }

    /// Tell `to` that `count` signals for it were dropped while its queue
    /// was full. It goes through [`Bus::send_owed`], so monitors see it,
    /// and into `to`'s queue whatever its bounds.
    fn tell_messages_lost(
        &mut self,
        to: ConnId,
        count: u64,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        // Its Disconnect is out and nothing more goes in (its last write
        // may still drain it): a MessagesLost would be dropped, after
        // monitors had seen it go.
        if self.conns.get(&to).is_some_and(|c| c.queue.is_closing()) {
            return;
        }
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        let builder = MessageBuilder::signal(BUS_PATH, QUICKBUS_INTERFACE, MESSAGES_LOST)
            .body(vec![Value::Uint32(count)]);
        self.send_owed(to, builder, routing, out);
    }
}

/// The daemon is told that `to`'s queue, `q`, got a message of `kind`;
/// the bus's own tests also see which.
#[cfg_attr(not(test), allow(unused_variables))]
fn queued_action(to: ConnId, kind: Kind, q: &OutQueue) -> Action {
    Action::Queued {
        to,
        kind,
        // A queue written ahead this turn (`lending`) is the flush's, as
        // the messages it held before that write were.
        behind: q.outbox().len() > 1 || q.outbox().written_ahead(),
        #[cfg(test)]
        msg: q.outbox().last().expect("just queued").clone(),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::time::Duration;

    use quickbus_wire::{Message, MessageType};

    use super::*;
    use crate::flow::Pacing;
    use crate::tests::{become_monitor, call_bus, creds, parse_out, s, Harness};
    use crate::{Action, ConnId};

    const HOLD: Duration = Duration::from_secs(1);
    pub(in crate::bus) const BOUNDS: OutBounds = OutBounds {
        max_bytes: 1000,
        max_fds: 4,
        hold: HOLD,
        pacing: Pacing {
            bytes: 0,
            timeout: Duration::from_millis(100),
        },
        memory: Duration::from_secs(60),
        queues_per_user: 4,
        hold_budget: Duration::from_millis(100),
    };

    pub(in crate::bus) fn harness(bounds: OutBounds) -> Harness {
        let mut h = Harness::new();
        h.bus.set_out_bounds(bounds);
        h
    }

    /// A signal of about 400 bytes for `to`.
    fn signal_to(to: &str) -> MessageBuilder {
        MessageBuilder::signal("/", "org.example.T", "S")
            .destination(to.to_owned())
            .body(vec![s(&"x".repeat(300))])
    }

    /// Bytes and fds delivered to `to` in `out`.
    fn written(out: &[Action], to: ConnId) -> (usize, usize) {
        out.iter().fold((0, 0), |(bytes, fds), a| match a {
            Action::Queued { to: t, msg, .. } if *t == to => (
                bytes + msg.header.len() + msg.body.len(),
                fds + msg.fd_count(),
            ),
            _ => (bytes, fds),
        })
    }

    /// A connection of `uid` past Hello.
    fn client_of(h: &mut Harness, uid: u32, pid: u32) -> (ConnId, String) {
        let id = h.bus.add_connection(creds(uid, pid), true);
        let hello = h.call(id, call_bus("Hello", vec![]));
        let name = match &hello.body_values().unwrap()[0] {
            quickbus_wire::Value::String(name) => name.clone(),
            other => panic!("{other:?}"),
        };
        h.take();
        (id, name)
    }

    pub(in crate::bus) fn delivered_to(out: &[Action], to: ConnId) -> Vec<Message> {
        out.iter()
            .filter_map(|a| match a {
                Action::Queued { to: t, msg, .. } if *t == to => Some(parse_out(msg)),
                _ => None,
            })
            .collect()
    }

    /// Send `from` signals for `to` until one holds it back; returns every
    /// action so far.
    fn fill(h: &mut Harness, from: ConnId, to: &str) -> Vec<Action> {
        for _ in 0..10 {
            h.send(from, signal_to(to));
            if h.out
                .iter()
                .any(|a| matches!(a, Action::HoldSender { conn } if *conn == from))
            {
                return std::mem::take(&mut h.out);
            }
        }
        panic!("never held: {:?}", h.out);
    }

    /// The daemon wrote everything queued for `conns` so far.
    pub(in crate::bus) fn settle(h: &mut Harness, conns: &[ConnId]) {
        for &conn in conns {
            h.bus.write_up_to(conn, usize::MAX, h.now, &mut h.out);
        }
        h.out.clear();
    }

    /// The daemon wrote everything `out` delivered to `conn`.
    fn write_all(h: &mut Harness, conn: ConnId, out: &[Action]) {
        let (bytes, _) = written(out, conn);
        h.bus.write_up_to(conn, bytes, h.now, &mut h.out);
    }

    /// What the last steps queued, written out to each of `conns` as the
    /// daemon's flush would, and what those writes did in turn forgotten.
    fn write_out_to(h: &mut Harness, conns: &[ConnId]) {
        let queued = std::mem::take(&mut h.out);
        for &conn in conns {
            write_all(h, conn, &queued);
        }
        h.out.clear();
    }

    /// What all of `conn`'s user's queues hold, as the bus counts it.
    pub(in crate::bus) fn user_queued(h: &Harness, conn: ConnId) -> usize {
        let c = h.bus.conns.get(&conn).expect("a live connection");
        h.bus.queues.user_queued_bytes(&c.queue)
    }

    /// What `conn`'s queue holds: by its count, and by its items (what
    /// a write would take: all of it, with few messages and no fds).
    fn queued(h: &Harness, conn: ConnId) -> (usize, usize) {
        let outbox = h.bus.conns[&conn].queue.outbox();
        (outbox.bytes(), outbox.next_write_bytes().0.len())
    }

    #[test]
    fn a_users_tally_moves_with_the_items_of_its_queues() {
        let mut h = harness(BOUNDS);
        let (a, _) = h.client();
        let (b, name_b) = h.client();
        let (c, name_c) = h.client();
        settle(&mut h, &[a, b, c]);
        h.send(a, signal_to(&name_b));
        h.send(a, signal_to(&name_b));
        h.send(a, signal_to(&name_c));
        let (to_b, _) = written(&h.out, b);
        let (to_c, _) = written(&h.out, c);
        h.out.clear();
        let tally = |h: &Harness| user_queued(h, a);
        assert_eq!(queued(&h, b), (to_b, to_b));
        assert_eq!(tally(&h), to_b + to_c);
        // Part of b's first message is written.
        h.bus.write_up_to(b, 5, h.now, &mut h.out);
        assert_eq!(queued(&h, b), (to_b - 5, to_b - 5));
        assert_eq!(tally(&h), to_b - 5 + to_c);
        // The rest of it, and part of the second.
        h.bus.write_up_to(b, to_b / 2, h.now, &mut h.out);
        assert_eq!(queued(&h, b), (to_b / 2 - 5, to_b / 2 - 5));
        assert_eq!(h.bus.conns[&b].queue.outbox().items().count(), 1);
        assert_eq!(tally(&h), to_b / 2 - 5 + to_c);
        // All of it.
        h.bus.write_up_to(b, usize::MAX, h.now, &mut h.out);
        assert_eq!(queued(&h, b), (0, 0));
        assert_eq!(tally(&h), to_c);
        // c leaves with its queue, and its bytes leave the tally.
        h.bus.remove_connection(c, h.now, &mut h.out);
        assert_eq!(tally(&h), queued(&h, a).0 + queued(&h, b).0);
    }

    #[test]
    fn a_signal_to_a_full_receiver_holds_its_sender_until_the_receiver_drains() {
        let mut h = harness(BOUNDS);
        let (a, _) = h.client();
        let (b, name_b) = h.client();
        settle(&mut h, &[a, b]);
        let got = fill(&mut h, a, &name_b);
        // Every signal went in, the one that found the queue full too.
        let to_b = delivered_to(&got, b).len();
        assert!(to_b >= 3, "{got:?}");
        assert!(matches!(got.last(), Some(Action::HoldSender { conn }) if *conn == a));
        // Half the bound is not enough to release it: a quarter is.
        let (bytes, _) = written(&got, b);
        h.bus.write_up_to(b, bytes - 600, h.now, &mut h.out);
        assert!(h.out.is_empty(), "{:?}", h.out);
        h.bus.write_up_to(b, 600, h.now, &mut h.out);
        assert!(matches!(h.out.as_slice(), [Action::ReleaseSender { conn }] if *conn == a));
        h.out.clear();
        let t = h.bus.traffic(a).unwrap();
        assert_eq!((t.holds, t.pauses), (1, 0));
        // Nothing was lost: no MessagesLost, and no further hold at once.
        h.send(a, signal_to(&name_b));
        assert_eq!(delivered_to(&h.out, b).len(), 1);
        assert_eq!(h.bus.traffic(b).unwrap().dropped, 0);
    }

    #[test]
    fn a_hold_that_runs_out_makes_the_receiver_lossy_until_it_drains_and_hears_what_it_lost() {
        let mut h = harness(BOUNDS);
        let (a, _) = h.client();
        let (b, name_b) = h.client();
        settle(&mut h, &[a, b]);
        let mut got = fill(&mut h, a, &name_b);
        assert_eq!(h.bus.next_deadline(), Some(h.now + HOLD));
        h.now += HOLD;
        h.bus.handle_timeouts(h.now, &mut h.out);
        match h.out.as_slice() {
            [Action::Warn { about, kind, .. }, Action::ReleaseSender { conn }] => {
                assert_eq!((*about, *kind, *conn), (b, "receiver not reading", a));
            }
            other => panic!("{other:?}"),
        }
        h.out.clear();
        // Lossy: signals to it are dropped and counted, nobody is held.
        h.send(a, signal_to(&name_b));
        h.send(a, signal_to(&name_b));
        assert!(h.out.is_empty(), "{:?}", h.out);
        assert_eq!(h.bus.traffic(b).unwrap().dropped, 2);
        // Calls are refused, and the caller hears why.
        let serial = h.send(
            a,
            MessageBuilder::method_call("/", "M").destination(name_b.clone()),
        );
        let err = delivered_to(&h.out, a);
        assert_eq!(err.len(), 1, "{:?}", h.out);
        assert_eq!(err[0].error_name(), Some(errors::LIMITS_EXCEEDED));
        assert_eq!(err[0].reply_serial(), Some(serial));
        h.out.clear();
        // It drains: it is told, once.
        got.retain(|a| matches!(a, Action::Queued { .. }));
        write_all(&mut h, b, &got);
        let lost = delivered_to(&h.out, b);
        assert_eq!(lost.len(), 1, "{:?}", h.out);
        assert_eq!(lost[0].member(), Some(MESSAGES_LOST));
        assert_eq!(lost[0].interface(), Some(QUICKBUS_INTERFACE));
        assert_eq!(
            lost[0].body_values().unwrap(),
            vec![quickbus_wire::Value::Uint32(2)]
        );
        // Remembered for overflow_memory_timeout: it holds nobody, even
        // when full again.
        write_out_to(&mut h, &[b]);
        for _ in 0..4 {
            h.send(a, signal_to(&name_b));
        }
        assert!(h
            .out
            .iter()
            .all(|a| !matches!(a, Action::HoldSender { .. })));
    }

    /// Clients a, b and c and a monitor m (which sees everything); c
    /// sends b signals until it is held back, so b and m are full.
    /// Returns them, b's name and what was delivered.
    fn filled_with_a_monitor(h: &mut Harness) -> ([ConnId; 4], String, Vec<Action>) {
        let (a, _) = h.client();
        let (b, name_b) = h.client();
        let (c, _) = h.client();
        let (m, _) = h.client();
        h.send(m, become_monitor(&[]));
        h.take();
        settle(h, &[a, b, c, m]);
        let got = fill(h, c, &name_b);
        ([a, b, c, m], name_b, got)
    }

    #[test]
    fn a_receiver_the_bus_disconnects_is_not_told_its_losses_when_its_last_write_drains_it() {
        let mut h = harness(BOUNDS);
        let ([a, b, c, m], name_b, got) = filled_with_a_monitor(&mut h);
        let lost_of_b = |msg: &Message| {
            msg.member() == Some(MESSAGES_LOST) && msg.destination() == Some(name_b.as_str())
        };
        // The hold of c runs out: b is lossy, and loses one signal.
        h.now += HOLD;
        h.bus.handle_timeouts(h.now, &mut h.out);
        write_all(&mut h, m, &got);
        h.out.clear();
        h.send(c, signal_to(&name_b));
        assert_eq!(h.bus.traffic(b).unwrap().dropped, 1);
        write_out_to(&mut h, &[m]);
        // b asks for replies it has no room for: the first goes in, past
        // twice its bound; at the second the bus disconnects it.
        let name_a = h.bus.unique_name(a).expect("named").to_owned();
        let first = h.send(
            b,
            MessageBuilder::method_call("/", "M").destination(&*name_a),
        );
        let second = h.send(b, MessageBuilder::method_call("/", "M").destination(name_a));
        write_out_to(&mut h, &[m, a]);
        h.send(
            a,
            MessageBuilder::method_return(first)
                .destination(&*name_b)
                .body(vec![s(&"x".repeat(2 * BOUNDS.max_bytes))]),
        );
        // (Told first what it lost so far, as before any message.)
        let to_b: Vec<_> = delivered_to(&h.out, b).iter().map(lost_of_b).collect();
        assert_eq!(to_b, [true, false], "{:?}", h.out);
        let big = std::mem::take(&mut h.out);
        write_all(&mut h, m, &big);
        h.out.clear();
        // It loses one more, and the second reply finds it past twice its
        // bound.
        h.send(c, signal_to(&name_b));
        assert_eq!(h.bus.traffic(b).unwrap().dropped, 2);
        write_out_to(&mut h, &[m]);
        h.send(
            a,
            MessageBuilder::method_return(second).destination(&*name_b),
        );
        assert!(
            h.out
                .iter()
                .any(|x| matches!(x, Action::Disconnect { conn, .. } if *conn == b)),
            "{:?}",
            h.out
        );
        write_out_to(&mut h, &[m]);
        // The daemon's last write before the close drains b: nobody, not
        // even a monitor, hears of a MessagesLost that b never gets.
        let mut queued_for_b = got;
        queued_for_b.extend(big);
        write_all(&mut h, b, &queued_for_b);
        let told: Vec<Message> = [b, m]
            .iter()
            .flat_map(|&to| delivered_to(&h.out, to))
            .filter(|msg| lost_of_b(msg))
            .collect();
        assert!(told.is_empty(), "{told:?}");
    }

    #[test]
    fn a_call_to_a_full_receiver_is_refused_before_monitors_or_the_reply_table_see_it() {
        let mut h = harness(BOUNDS);
        h.bus.set_limits(crate::Limits {
            max_replies_per_connection: 1,
            ..crate::Limits::default()
        });
        let ([a, b, _, m], name_b, got) = filled_with_a_monitor(&mut h);
        write_all(&mut h, m, &got);
        h.out.clear();
        let serial = h.send(
            a,
            MessageBuilder::method_call("/", "Do").destination(name_b.clone()),
        );
        let to_a = delivered_to(&h.out, a);
        assert_eq!(to_a.len(), 1, "{:?}", h.out);
        assert_eq!(to_a[0].msg_type(), MessageType::Error);
        assert_eq!(to_a[0].error_name(), Some(errors::LIMITS_EXCEEDED));
        assert_eq!(to_a[0].reply_serial(), Some(serial));
        assert!(delivered_to(&h.out, b).is_empty());
        // The monitor sees the refusal, not the call.
        let seen = delivered_to(&h.out, m);
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].error_name(), Some(errors::LIMITS_EXCEEDED));
        // Not pending: with max_replies_per_connection=1, a's next call
        // to b goes through once b has drained.
        h.out.clear();
        write_all(&mut h, b, &got);
        h.out.clear();
        h.send(
            a,
            MessageBuilder::method_call("/", "Do").destination(name_b),
        );
        assert_eq!(delivered_to(&h.out, b).len(), 1, "{:?}", h.out);
    }

    #[test]
    fn a_receiver_at_twice_its_bound_that_still_asks_for_replies_is_disconnected() {
        let mut h = harness(BOUNDS);
        let (a, name_a) = h.client();
        let (b, name_b) = h.client();
        let (c, _) = h.client();
        settle(&mut h, &[a, b, c]);
        let call = h.send(b, MessageBuilder::method_call("/", "M").destination(name_a));
        h.take();
        // Held or not, c's signals go in while the hold lasts.
        while written(&h.out, b).0 < 2 * BOUNDS.max_bytes {
            h.send(c, signal_to(&name_b));
        }
        h.out.clear();
        h.send(
            a,
            MessageBuilder::method_return(call)
                .destination(name_b.clone())
                .body(vec![s("answer")]),
        );
        match h.out.as_slice() {
            [Action::Disconnect { conn, reason }] => {
                assert_eq!(*conn, b);
                assert!(reason.contains("does not read them"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // Nothing more goes to it while the daemon closes it.
        h.out.clear();
        h.send(c, signal_to(&name_b));
        assert!(h.out.is_empty(), "{:?}", h.out);
    }

    /// `a` (uid 1000) fills `b` (uid 1001), which holds it back for all
    /// of uid 1001's hold budget: 100 ms a minute, not the 1 s hold.
    /// Returns a, b, b's name and what was delivered.
    fn held_by_another_user(h: &mut Harness) -> (ConnId, ConnId, String, Vec<Action>) {
        let (a, _) = h.client();
        let (b, name_b) = client_of(h, 1001, 101);
        settle(h, &[a, b]);
        let got = fill(h, a, &name_b);
        assert_eq!(h.bus.next_deadline(), Some(h.now + BOUNDS.hold_budget));
        (a, b, name_b, got)
    }

    /// The deadline of a hold that uid 1001's budget pays for, 40 ms
    /// after a first hold took all of it and gave back what it did not
    /// use: 60 ms, and what 40 ms refilled of 100 ms a minute.
    fn deadline_with_60_ms_given_back(h: &Harness) -> Instant {
        let refilled = Duration::from_nanos(100_000_000 * 40 / 60_000);
        h.now + Duration::from_millis(60) + refilled
    }

    #[test]
    fn another_users_receiver_holds_a_sender_only_as_long_as_its_users_budget_lasts() {
        let mut h = harness(BOUNDS);
        let (a, b, name_b, got) = held_by_another_user(&mut h);
        // Released early, it gives back what it did not use.
        h.now += Duration::from_millis(40);
        write_all(&mut h, b, &got);
        assert!(matches!(h.out.as_slice(), [Action::ReleaseSender { conn }] if *conn == a));
        h.out.clear();
        let got = fill(&mut h, a, &name_b);
        assert_eq!(
            h.bus.next_deadline(),
            Some(deadline_with_60_ms_given_back(&h))
        );
        // Spent: another receiver of that user, full, holds nobody; what
        // finds it full is dropped and counted at once.
        let (b2, name_b2) = client_of(&mut h, 1001, 102);
        settle(&mut h, &[b2]);
        for _ in 0..4 {
            h.send(a, signal_to(&name_b2));
        }
        assert_eq!(delivered_to(&h.out, b2).len(), 3, "{:?}", h.out);
        assert_eq!(h.bus.traffic(b2).unwrap().dropped, 1);
        drop(got);
    }

    #[test]
    fn a_held_sender_that_leaves_gives_back_the_hold_time_it_did_not_use_when_it_left() {
        // The time of the hang-up is an argument of remove_connection:
        // 40 ms after the hold began, 60 ms of the receiving user's
        // budget go back, not the hold's whole 100 ms (nor none).
        let mut h = harness(BOUNDS);
        let (a, b, name_b, got) = held_by_another_user(&mut h);
        h.now += Duration::from_millis(40);
        h.bus.remove_connection(a, h.now, &mut h.out);
        write_all(&mut h, b, &got);
        h.out.clear();
        let (c, _) = h.client();
        settle(&mut h, &[c]);
        fill(&mut h, c, &name_b);
        assert_eq!(
            h.bus.next_deadline(),
            Some(deadline_with_60_ms_given_back(&h))
        );
    }

    #[test]
    fn a_message_that_waited_for_a_service_lookup_holds_its_sender_for_a_full_receiver() {
        // Routed once the daemon has looked for the name's file, as if it
        // had just arrived: the monitor it fills holds its sender back,
        // as the same message would straight away.
        let mut h = Harness::with_options(crate::BusOptions {
            rescan_service_files: true,
            ..crate::tests::options()
        });
        h.bus.set_out_bounds(BOUNDS);
        let ([a, b, _, m], _, got) = filled_with_a_monitor(&mut h);
        // b reads what c sent; the monitor does not.
        write_all(&mut h, b, &got);
        h.out.clear();
        assert!(written(&got, m).0 >= BOUNDS.max_bytes);
        h.send(a, signal_to("org.example.Nobody"));
        assert_eq!(h.looked_up, ["org.example.Nobody"]);
        assert!(
            h.out
                .iter()
                .any(|x| matches!(x, Action::HoldSender { conn } if *conn == a)),
            "{:?}",
            h.out
        );
        assert_eq!(h.bus.traffic(a).unwrap().holds, 1);
    }

    #[test]
    fn pacing_pauses_a_sender_until_the_receiver_catches_up_and_stops_for_one_that_does_not() {
        let pacing = Pacing {
            bytes: 1000,
            timeout: Duration::from_millis(100),
        };
        let mut h = harness(OutBounds {
            max_bytes: 100_000,
            max_fds: 4,
            pacing,
            ..BOUNDS
        });
        let (a, _) = h.client();
        let (b, name_b) = h.client();
        settle(&mut h, &[a, b]);
        let got = fill(&mut h, a, &name_b);
        let queued = written(&got, b).0;
        assert!(queued > 1000 && queued < 1500, "{queued}");
        assert_eq!(h.bus.next_deadline(), Some(h.now + pacing.timeout));
        // Down to half pacing_bytes: caught up.
        h.bus.write_up_to(b, queued - 500, h.now, &mut h.out);
        assert!(matches!(h.out.as_slice(), [Action::ReleaseSender { conn }] if *conn == a));
        h.out.clear();
        assert_eq!(h.bus.traffic(a).unwrap().pauses, 1);
        // Paused again; b does not catch up within pacing_timeout.
        let more = fill(&mut h, a, &name_b);
        h.now += pacing.timeout;
        h.bus.handle_timeouts(h.now, &mut h.out);
        assert!(matches!(h.out.as_slice(), [Action::ReleaseSender { conn }] if *conn == a));
        h.out.clear();
        // It paces nobody now, not even once it emptied (remembered).
        for _ in 0..3 {
            h.send(a, signal_to(&name_b));
        }
        let rest = std::mem::take(&mut h.out);
        assert!(rest.iter().all(|x| !matches!(x, Action::HoldSender { .. })));
        let left = written(&more, b).0 + written(&rest, b).0 + 500;
        h.bus.write_up_to(b, left, h.now, &mut h.out);
        assert!(h.out.is_empty(), "{:?}", h.out);
        h.send(a, signal_to(&name_b));
        h.send(a, signal_to(&name_b));
        h.send(a, signal_to(&name_b));
        assert!(h
            .out
            .iter()
            .all(|x| !matches!(x, Action::HoldSender { .. })));
        // Forgiven after overflow_memory_timeout.
        let got = std::mem::take(&mut h.out);
        write_all(&mut h, b, &got);
        h.now += BOUNDS.memory;
        fill(&mut h, a, &name_b);
    }

    #[test]
    fn a_departing_receiver_releases_its_senders_and_a_departing_sender_leaves_no_hold() {
        let mut h = harness(BOUNDS);
        let (a, _) = h.client();
        let (b, name_b) = h.client();
        let (c, name_c) = h.client();
        fill(&mut h, a, &name_b);
        h.bus.remove_connection(b, h.now, &mut h.out);
        assert!(
            h.out
                .iter()
                .any(|x| matches!(x, Action::ReleaseSender { conn } if *conn == a)),
            "{:?}",
            h.out
        );
        h.out.clear();
        fill(&mut h, a, &name_c);
        h.bus.remove_connection(a, h.now, &mut h.out);
        assert!(h
            .out
            .iter()
            .all(|x| !matches!(x, Action::ReleaseSender { .. })));
        assert_eq!(h.bus.next_deadline(), None);
        // c's queue still counts toward uid 1000's, and goes with it.
        h.bus.remove_connection(c, h.now, &mut h.out);
        assert_eq!(h.bus.queues.users(), 0);
    }

    /// Whether each message `out` queued for `to` went in behind others.
    fn behind_for(out: &[Action], to: ConnId) -> Vec<bool> {
        out.iter()
            .filter_map(|a| match a {
                Action::Queued { to: t, behind, .. } if *t == to => Some(*behind),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_message_queued_behind_unwritten_ones_says_so_and_only_then() {
        // The daemon lists a connection for writing on the first message
        // of its queue and skips the look-up for a signal behind others:
        // a queue that is empty, or was written to its end, must say
        // "not behind", one that holds any unwritten byte "behind".
        let mut h = harness(OutBounds {
            max_bytes: 100_000,
            ..BOUNDS
        });
        let (a, _) = h.client();
        let (b, name_b) = h.client();
        let receivers = subscribers(&mut h, 2);
        settle(&mut h, &[a, b]);
        h.send(a, signal_to(&name_b));
        h.send(a, signal_to(&name_b));
        assert_eq!(behind_for(&h.out, b), [false, true]);
        // Written but for its last byte: still behind.
        let (queued, _) = written(&h.out, b);
        h.bus.write_up_to(b, queued - 1, h.now, &mut h.out);
        h.out.clear();
        h.send(a, signal_to(&name_b));
        assert_eq!(behind_for(&h.out, b), [true]);
        // Written to its end: first again.
        settle(&mut h, &[b]);
        h.send(a, signal_to(&name_b));
        assert_eq!(behind_for(&h.out, b), [false]);
        // The same for each receiver of a broadcast.
        h.out.clear();
        h.send(a, broadcast());
        h.send(a, broadcast());
        for &r in &receivers {
            assert_eq!(behind_for(&h.out, r), [false, true], "{r:?}");
        }
    }

    /// Everything a queueing step can change, to compare two buses by:
    /// what the daemon was told, each connection's counters and queue,
    /// its user's tally, the bus-wide counters, the held senders and the
    /// next deadline.
    pub(in crate::bus) fn queueing_state(h: &Harness, conns: &[ConnId]) -> String {
        let per_conn: Vec<_> = conns
            .iter()
            .map(|&c| {
                let q = &h.bus.conns.get(&c).expect("a live connection").queue;
                (
                    h.bus.traffic(c),
                    q.bytes(),
                    q.outbox().fds(),
                    user_queued(h, c),
                )
            })
            .collect();
        format!(
            "{:?}\n{per_conn:?}\n{:?}\n{:?}\n{:?}",
            h.out,
            h.bus.total_traffic(),
            h.bus.queues.held(),
            h.bus.next_deadline()
        )
    }

    #[test]
    fn a_broadcast_queued_in_one_step_does_what_queueing_each_copy_in_turn_does() {
        // Two buses alike, one queueing each broadcast in one step, the
        // other each copy in turn (`queue_for`). Receivers of two users,
        // one of them the sender's: their queues and their users' fill
        // partway through broadcasts, so copies go in, are dropped, hold
        // the sender back, and receivers that drain are owed MessagesLost.
        let (mut buses, sender, receivers) = two_buses(BOUNDS);
        let conns = [vec![sender], receivers].concat();
        let receivers = &conns[1..];
        let mut so_far: [Vec<Action>; 2] = Default::default();
        let mut told_of_losses = 0;
        for round in 0..60 {
            for (one_step, h) in buses.iter_mut().enumerate() {
                let (mut msg, _) = h.bus.build(broadcast()).expect("a message");
                // A call's copies too (an eavesdropper's are): flow
                // control takes them for signals, addressed to none.
                if round % 3 == 2 {
                    msg.kind = Kind::Call;
                }
                let routing = Routing::sent_by(sender, h.now);
                if one_step == 0 {
                    h.bus.queue_broadcast(receivers, msg, routing, &mut h.out);
                } else {
                    for &to in receivers {
                        h.bus.queue_for(to, msg.clone(), false, routing, &mut h.out);
                    }
                }
                so_far[one_step].extend(h.out.iter().filter_map(|a| match a {
                    Action::Queued {
                        to,
                        kind,
                        behind,
                        msg,
                    } => Some(Action::Queued {
                        to: *to,
                        kind: *kind,
                        behind: *behind,
                        msg: msg.clone(),
                    }),
                    _ => None,
                }));
                // Now and then one receiver reads all it was sent, and
                // the clock moves on past a hold.
                if round % 4 == 3 {
                    let reader = receivers[round / 4 % receivers.len()];
                    write_all(h, reader, &so_far[one_step]);
                    so_far[one_step]
                        .retain(|a| !matches!(a, Action::Queued { to, .. } if *to == reader));
                    h.now += BOUNDS.hold;
                    h.bus.handle_timeouts(h.now, &mut h.out);
                }
            }
            let [one_step, in_turn] = &mut buses;
            assert_eq!(
                queueing_state(one_step, &conns),
                queueing_state(in_turn, &conns),
                "round {round}"
            );
            told_of_losses += receivers
                .iter()
                .map(|&r| lost_counts(&delivered_to(&buses[0].out, r)).len())
                .sum::<usize>();
            for h in &mut buses {
                h.out.clear();
            }
        }
        // Each way was taken, or the comparison says little.
        let totals = buses[0].bus.total_traffic();
        assert!(totals.dropped > 0 && totals.holds > 0, "{totals:?}");
        assert!(told_of_losses > 0, "no receiver was told of its losses");
    }

    /// Two buses alike: a sender, three subscribers of another user and
    /// two of its own; the sender and the receivers.
    pub(in crate::bus) fn two_buses(bounds: OutBounds) -> ([Harness; 2], ConnId, Vec<ConnId>) {
        let mut buses = [harness(bounds), harness(bounds)];
        let now = buses[0].now;
        let mut conns = Vec::new();
        for h in &mut buses {
            h.now = now;
            let (a, _) = h.client();
            let mut receivers = subscribers(h, 3);
            for i in 0..2 {
                let (r, _) = client_of(h, 1000, 300 + i);
                h.add_match(r, "type='signal',interface='org.example.T'");
                receivers.insert(1 + 2 * i as usize, r);
            }
            settle(h, &receivers);
            conns = [vec![a], receivers].concat();
        }
        let sender = conns.remove(0);
        (buses, sender, conns)
    }

    /// A broadcast signal of about 400 bytes.
    pub(in crate::bus) fn broadcast() -> MessageBuilder {
        MessageBuilder::signal("/", "org.example.T", "S").body(vec![s(&"x".repeat(300))])
    }

    /// `n` connections of uid 1001, each subscribed to [`broadcast`]s,
    /// with nothing queued.
    pub(in crate::bus) fn subscribers(h: &mut Harness, n: u32) -> Vec<ConnId> {
        (0..n)
            .map(|i| {
                let (r, _) = client_of(h, 1001, 200 + i);
                h.add_match(r, "type='signal',interface='org.example.T'");
                settle(h, &[r]);
                r
            })
            .collect()
    }

    /// `from` (uid 1000) broadcasts until uid 1001's queues are full and
    /// its hold budget is spent: from then on every broadcast is dropped
    /// for every subscriber of 1001 that has not drained. Returns what
    /// was delivered meanwhile.
    pub(in crate::bus) fn overflow_user(h: &mut Harness, from: ConnId) -> Vec<Action> {
        let mut got = Vec::new();
        let held = |out: &[Action]| {
            out.iter()
                .any(|a| matches!(a, Action::HoldSender { conn } if *conn == from))
        };
        for _ in 0..100_000 {
            if held(&got) {
                break;
            }
            h.send(from, broadcast());
            got.append(&mut h.out);
        }
        assert!(held(&got), "the sender was never held");
        h.now += BOUNDS.hold_budget;
        h.bus.handle_timeouts(h.now, &mut h.out);
        got.append(&mut h.out);
        got
    }

    /// The daemon writes everything `so_far` delivered to `r`, which
    /// reads it all; returns what that made the bus do.
    fn drain(h: &mut Harness, r: ConnId, so_far: &[Action]) -> Vec<Action> {
        write_all(h, r, so_far);
        std::mem::take(&mut h.out)
    }

    /// The MessagesLost counts among `msgs`.
    pub(in crate::bus) fn lost_counts(msgs: &[Message]) -> Vec<u32> {
        msgs.iter()
            .filter(|m| m.member() == Some(MESSAGES_LOST))
            .map(|m| match m.body_values().unwrap().as_slice() {
                [quickbus_wire::Value::Uint32(n)] => *n,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn receivers_of_a_full_user_are_looked_at_once_each_per_write_not_once_per_loss() {
        // Issue 24, item 5: every signal dropped for a subscriber of a
        // full user was remembered once more, and every write looked at
        // all of them again: the bus's turns grew with the losses.
        const RECEIVERS: u32 = 40;
        let mut h = harness(BOUNDS);
        let (a, _) = h.client();
        let receivers = subscribers(&mut h, RECEIVERS);
        settle(&mut h, &[a]);
        let mut got = overflow_user(&mut h, a);
        for _ in 0..100 {
            h.send(a, broadcast());
            got.append(&mut h.out);
        }
        for &r in &receivers {
            let before = h.bus.queues.drain_checks();
            let out = drain(&mut h, r, &got);
            let checks = h.bus.queues.drain_checks() - before;
            // The receiver written to, and each watched one at most once.
            assert!(
                checks <= RECEIVERS as usize + 1,
                "one write looked at {checks} receivers; there are {RECEIVERS}"
            );
            got.extend(out);
        }
        // Every one of them lost signals, and heard how many.
        for &r in &receivers {
            let lost = h.bus.traffic(r).unwrap().dropped;
            assert!(lost > 0, "{r:?} lost nothing");
            let told: u32 = lost_counts(&delivered_to(&got, r)).iter().sum();
            assert_eq!(u64::from(told), lost, "{r:?}");
        }
    }

    #[test]
    fn lossy_receivers_that_drain_in_turn_each_hear_of_their_losses_at_once() {
        // Issue 24, item 7: four receivers of one user, each lossy; as
        // each drains it is told at once, not when a later signal comes
        // (and after it).
        let mut h = harness(BOUNDS);
        let (a, _) = h.client();
        let receivers = subscribers(&mut h, 4);
        settle(&mut h, &[a]);
        let mut got = Vec::new();
        let dropped = |h: &Harness| h.bus.traffic(receivers[3]).unwrap().dropped;
        for _ in 0..100_000 {
            if dropped(&h) > 0 {
                break;
            }
            h.send(a, broadcast());
            got.append(&mut h.out);
            h.now += BOUNDS.hold;
            h.bus.handle_timeouts(h.now, &mut h.out);
            got.append(&mut h.out);
        }
        assert!(
            dropped(&h) > 0,
            "nothing was ever dropped for the last receiver"
        );
        for _ in 0..3 {
            h.send(a, broadcast());
        }
        got.append(&mut h.out);
        for &r in &receivers {
            let lost = h.bus.traffic(r).unwrap().dropped;
            assert!(lost > 0, "{r:?} lost nothing");
            let out = drain(&mut h, r, &got);
            assert_eq!(
                lost_counts(&delivered_to(&out, r)),
                [lost as u32],
                "{r:?} drained and was not told at once: {out:?}"
            );
            got.extend(out);
        }
    }

    #[test]
    fn a_receiver_hears_of_its_losses_before_the_next_message_it_gets() {
        // Its queue has room again but is not down to half: the next
        // signal that goes in comes after the MessagesLost.
        let mut h = harness(BOUNDS);
        let (a, _) = h.client();
        let receivers = subscribers(&mut h, 4);
        settle(&mut h, &[a]);
        let mut got = overflow_user(&mut h, a);
        for _ in 0..3 {
            h.send(a, broadcast());
        }
        got.append(&mut h.out);
        let r = receivers[0];
        let lost = h.bus.traffic(r).unwrap().dropped;
        assert!(lost > 0);
        // Two others drain: the user's queues have room again.
        for &other in &receivers[2..] {
            got.extend(drain(&mut h, other, &got));
        }
        // r reads a little, not down to half its bound.
        let (queued, _) = written(&got, r);
        assert!(queued > BOUNDS.max_bytes, "{queued}");
        h.bus.write_up_to(r, queued - 700, h.now, &mut h.out);
        h.out.clear();
        h.send(a, broadcast());
        let to_r = delivered_to(&h.out, r);
        let members: Vec<_> = to_r.iter().map(|m| m.member().unwrap()).collect();
        assert_eq!(members, [MESSAGES_LOST, "S"], "{:?}", h.out);
        assert_eq!(lost_counts(&to_r), [lost as u32]);
    }
}
