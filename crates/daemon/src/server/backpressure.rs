//! The server's side of flow control (the rule is in [`crate::flow`]):
//! queueing a delivery or not, holding senders back and releasing them,
//! telling drained receivers what they lost, and the fds a peer sends ahead
//! of their message (`max_incoming_unix_fds`, `pending_fd_timeout`).

use std::cmp::Reverse;
use std::time::{Duration, Instant};

use mio::Token;
use quickbus_bus::{ConnId, OutMessage};
use tracing::{debug, info, warn};

use super::{Conn, Hold, Phase, Server};
use crate::flow::{Fill, HoldReason, Kind, OutBounds, Verdict};
use crate::transport::OutItem;

impl Server {
    /// Queue `msg` for `to`, unless its queue is full (then the flow rule
    /// decides).
    pub(super) fn deliver(&mut self, to: ConnId, msg: OutMessage) {
        let Some(&token) = self.tokens.get(&to) else {
            return;
        };
        let (bounds, user_bounds) = (self.opts.out_bounds, self.user_bounds);
        // A sender can be held unless the bus itself sent it, or the
        // receiver did (holding it would stop it from ever draining).
        let sender_uid = self
            .routing_from
            .filter(|&(from, _)| from != token)
            .map(|(_, uid)| uid);
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        let own = bounds.fill(conn.transport.queued_bytes(), conn.transport.queued_fds());
        // The common case in four comparisons: room everywhere.
        let user_full = user_bounds.full(conn.user.out_bytes(), conn.user.out_fds());
        let verdict = if own == Fill::Room && !user_full {
            Verdict::Queue
        } else {
            // A user's full queues make each of its connections full, but
            // only a connection's own queue can get it disconnected.
            let fill = if user_full { own.max(Fill::Full) } else { own };
            let kind = Kind::of(&msg.frame.header, self.bus.is_monitor(to));
            let now = Instant::now();
            // Another user's sender waits only while the receiving user's
            // hold budget lasts.
            let hold = sender_uid.map(|uid| {
                if uid == conn.user.uid {
                    bounds.hold
                } else {
                    conn.user
                        .hold_available(bounds.hold_budget, now)
                        .min(bounds.hold)
                }
            });
            conn.flow.judge(kind, fill, hold, now)
        };
        match verdict {
            Verdict::Queue | Verdict::QueueAndHoldSender => {
                let len = msg.frame.header.len() + msg.frame.body.len();
                conn.user.queued(len, msg.fds.len());
                conn.transport.queue(OutItem {
                    header: msg.frame.header,
                    body: msg.frame.body,
                    fds: (!msg.fds.is_empty()).then_some(msg.fds),
                });
                self.dirty.push(token);
                if verdict == Verdict::QueueAndHoldSender {
                    self.hold_sender(token, HoldReason::Full);
                } else if bounds.pacing.pauses_at(conn.transport.queued_bytes())
                    && conn.flow.paces(Instant::now())
                    && !self.bus.is_monitor(to)
                {
                    self.hold_sender(token, HoldReason::Pace);
                }
            }
            Verdict::Drop => {
                // Debug.Stats counts it (the receiver hears the total later).
                self.bus.record_dropped(to, 1);
                // Full only through its user's other queues: nothing of its
                // own may be left to flush, so look at it at the end of the
                // turn.
                if own == Fill::Room {
                    self.dirty.push(token);
                }
            }
            Verdict::RefuseCall => {
                debug!("{to:?}'s queue is full: refusing a call to it");
                self.bus.call_not_queued(to, &msg, &mut self.actions);
            }
            Verdict::DisconnectReceiver => {
                let reason = format!(
                    "{} bytes and {} fds are queued for it, twice max_outgoing_bytes={} or \
                     max_outgoing_unix_fds={}: it asks for replies and does not read them",
                    conn.transport.queued_bytes(),
                    conn.transport.queued_fds(),
                    bounds.max_bytes,
                    bounds.max_fds
                );
                self.close(token, &reason);
            }
        }
    }

    /// Stop reading the connection whose message filled `receiver`'s
    /// queue (or its pacing allowance), until `receiver` drains or the
    /// hold time passes, or what is left of the receiving user's hold
    /// budget if the sender is another user's (none left: no hold).
    fn hold_sender(&mut self, receiver: Token, why: HoldReason) {
        let Some((sender, _)) = self.routing_from else {
            return; // the bus's own message (a time-out, a disconnect)
        };
        if sender == receiver {
            return;
        }
        let bounds = self.opts.out_bounds;
        let wanted = match why {
            HoldReason::Full => bounds.hold,
            HoldReason::Pace => bounds.pacing.timeout,
        };
        let Some(receiving_user) = self.conns.get(&receiver).map(|r| r.user.clone()) else {
            return;
        };
        let Some(conn) = self.conns.get_mut(&sender) else {
            return;
        };
        if !why.replaces(conn.hold.as_ref().map(|h| h.why)) {
            return;
        }
        let now = Instant::now();
        let charged_to = (conn.creds.uid != receiving_user.uid).then_some(receiving_user);
        let how_long = match &charged_to {
            Some(user) => user.take_hold(wanted, bounds.hold_budget, now),
            None => wanted,
        };
        if how_long.is_zero() {
            return;
        }
        if why == HoldReason::Full {
            // Nothing is lost by a hold, so nobody is told; the log says it.
            debug!(
                uid = conn.creds.uid,
                "holding a sender back for a full receiver"
            );
        }
        let replaced = conn.hold.take();
        let was_held = replaced.is_some();
        let hung_up = replaced.as_ref().is_some_and(|h| h.hung_up);
        let since = replaced.as_ref().map_or(now, |h| h.since);
        if let Some(old) = replaced {
            old.give_back(now);
        }
        conn.hold = Some(Hold {
            on: receiver,
            why,
            since,
            until: now + how_long,
            hung_up,
            charged_to,
        });
        if let Phase::Running { id } = conn.phase {
            self.bus.record_hold(id, why == HoldReason::Pace);
        }
        if !was_held {
            self.held.push(sender);
        }
    }

    /// After a flush: a receiver whose queue went down to half its bound
    /// is back to normal, and hears how many signals it lost.
    pub(super) fn note_drained(&mut self, token: Token) {
        let bounds = self.opts.out_bounds;
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        if conn.transport.queued_bytes() == 0 {
            conn.flow.emptied(Instant::now(), bounds.memory);
        }
        if !conn.flow.is_overflowing() || !drained(conn, &bounds) {
            return;
        }
        let lost = conn.flow.drained(Instant::now(), bounds.memory);
        if let (Some(lost), Phase::Running { id }) = (lost, &conn.phase) {
            let id = *id;
            let name = self.bus.unique_name(id).unwrap_or("(no name)");
            let c = &conn.creds;
            info!(
                dbus_unique_name = name,
                dbus_peer_uid = c.uid,
                dbus_peer_pid = c.pid,
                dbus_peer_comm = c.comm.as_deref(),
                "{name} drained its queue; telling it {lost} signals were dropped for it \
                 (MessagesLost) ({})",
                quickbus_bus::loginfo(c.uid, c.pid, c.comm.as_deref())
            );
            self.bus.tell_messages_lost(id, lost, &mut self.actions);
        }
    }

    /// Release every held sender whose receiver drained or left, or whose
    /// hold time is up (its receiver then becomes lossy). Released senders
    /// are read on the next turn.
    pub(super) fn release_holds(&mut self, now: Instant) {
        if self.held.is_empty() {
            return;
        }
        let bounds = self.opts.out_bounds;
        let held = std::mem::take(&mut self.held);
        for sender in held {
            let Some(hold) = self.conns.get(&sender).and_then(|c| c.hold.as_ref()) else {
                continue;
            };
            let (on, why, until) = (hold.on, hold.why, hold.until);
            let receiver = self.conns.get_mut(&on);
            let drained = receiver.as_ref().is_none_or(|r| match why {
                HoldReason::Full => drained(r, &bounds),
                HoldReason::Pace => bounds.pacing.caught_up(r.transport.queued_bytes()),
            });
            if !drained && until > now {
                self.held.push(sender);
                continue;
            }
            match receiver {
                Some(r) if !drained => match why {
                    HoldReason::Pace => {
                        if r.flow.pause_expired() {
                            debug!(
                                uid = r.creds.uid,
                                "a receiver did not catch up within pacing_timeout: it \
                                 paces nobody until its queue is empty"
                            );
                        }
                    }
                    HoldReason::Full => {
                        if r.flow.hold_expired() {
                            let name = match r.phase {
                                Phase::Running { id } => {
                                    self.bus.unique_name(id).unwrap_or("(no name)")
                                }
                                Phase::Nonce { .. } | Phase::Authenticating { .. } => {
                                    "(authenticating)"
                                }
                            };
                            let c = &r.creds;
                            if self.log_limiter.admits("receiver not reading") {
                                warn!(
                                    dbus_unique_name = name,
                                    dbus_peer_uid = c.uid,
                                    dbus_peer_pid = c.pid,
                                    dbus_peer_comm = c.comm.as_deref(),
                                    "{name} is not reading: {} bytes queued for it for {:?} \
                                 (max_outgoing_bytes={}); dropping signals to it until it \
                                 drains, then it gets MessagesLost ({})",
                                    r.transport.queued_bytes(),
                                    bounds.hold,
                                    bounds.max_bytes,
                                    quickbus_bus::loginfo(c.uid, c.pid, c.comm.as_deref())
                                );
                            }
                        }
                    }
                },
                _ => {}
            }
            let Some(conn) = self.conns.get_mut(&sender) else {
                continue;
            };
            if let Some(hold) = conn.hold.take() {
                hold.give_back(now);
                if let Phase::Running { id } = conn.phase {
                    self.bus
                        .record_held(id, now.saturating_duration_since(hold.since));
                }
                self.unfinished_reads.push((sender, hold.hung_up));
            }
        }
    }

    /// After reading: fds that came ahead of their message are bounded in
    /// number (`max_incoming_unix_fds`) and in time (`pending_fd_timeout`).
    pub(super) fn check_pending_fds(&mut self, token: Token) -> Result<(), String> {
        let Some(conn) = self.conns.get_mut(&token) else {
            return Ok(());
        };
        let pending = conn.transport.pending_fds();
        if pending == 0 {
            conn.fd_deadline = None;
            return Ok(());
        }
        if pending > self.opts.max_incoming_unix_fds {
            return Err(format!(
                "{pending} file descriptors sent ahead of their message, more than \
                 max_incoming_unix_fds={}",
                self.opts.max_incoming_unix_fds
            ));
        }
        if conn.fd_deadline.is_none() {
            let deadline = Instant::now() + self.opts.pending_fd_timeout;
            conn.fd_deadline = Some(deadline);
            self.fd_deadlines.push(Reverse((deadline, token)));
        }
        Ok(())
    }

    /// Close connections whose early fds waited past `pending_fd_timeout`.
    pub(super) fn expire_pending_fds(&mut self, now: Instant) {
        while let Some(&Reverse((deadline, token))) = self.fd_deadlines.peek() {
            if deadline > now {
                break;
            }
            self.fd_deadlines.pop();
            let expired = self
                .conns
                .get(&token)
                .is_some_and(|c| c.fd_deadline == Some(deadline));
            if expired {
                let reason = format!(
                    "file descriptors pending for too long without their message \
                     (pending_fd_timeout={} ms)",
                    self.opts.pending_fd_timeout.as_millis()
                );
                self.close(token, &reason);
            }
        }
    }
}

impl Hold {
    /// The hold ends at `now`: what it did not use of the receiving user's
    /// hold budget goes back to it.
    pub(super) fn give_back(&self, now: Instant) {
        if let Some(user) = &self.charged_to {
            let unused: Duration = self.until.saturating_duration_since(now);
            user.give_back_hold(unused);
        }
    }
}

/// A receiver's queue, and its user's queues together, went down to half
/// their bounds.
fn drained(conn: &Conn, bounds: &OutBounds) -> bool {
    bounds.drained(conn.transport.queued_bytes(), conn.transport.queued_fds())
        && bounds
            .per_user()
            .drained(conn.user.out_bytes(), conn.user.out_fds())
}
