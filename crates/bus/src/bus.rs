//! Routing: where each message goes, and who is told when it cannot go
//! anywhere. `receive` is the entry point for every message; unicast,
//! broadcast, the driver's calls, eavesdroppers and monitors branch from
//! here, and time-outs come in through `handle_timeouts`.
//!
//! Owns: the [`Bus`] struct, which holds one of each noun (peers, names,
//! pending replies, subscriptions, monitors, activations, queues, traffic,
//! peaks, the policy). The nouns keep their own state; the bus only asks
//! and tells them. May touch: every noun, through its methods; the
//! driver (`crate::driver`) for calls to org.freedesktop.DBus.
//!
//! Its children each do one job for the router: `activating` (starting
//! services for what waits on a name), `setup` (making a bus
//! and what the daemon sets on it), `connections` (a connection's life),
//! `outgoing` (the bus's own messages and stamped copies), `announce`
//! (name signals), `queueing` (flow control as it routes), `lending` (the
//! queues' outboxes lent to the daemon's threads for a write), `policy_check` (the
//! policy and MAC checks of a delivery), `app_filtering` (per-app
//! filters, xdg-dbus-proxy's rules), `counting` (traffic counters), `before_hello` (a connection without a unique name
//! yet) and `peerless` (org.freedesktop.DBus.Peer calls without a
//! destination).

mod activating;
mod announce;
mod app_filtering;
pub(crate) mod before_hello;
mod connections;
mod counting;
pub mod lending;
mod outgoing;
mod peerless;
mod policy_check;
mod queueing;
mod setup;

use crate::fds::PassedFd;
use std::sync::Arc;
use std::time::Instant;

use quickbus_wire::{flags, Message, MessageBuilder, MessageType, Value};

use crate::activation::{Activations, Parked, Rescan};
use crate::app_filter::view::AppViews;
use crate::errors::{self, BusError};
use crate::match_rule::{BusDriver, MatchInput, NameOwner};
use crate::overflow::Queues;
use crate::peers::Peers;
use crate::policy::{CompiledPolicy, Delivery, Denial};
use crate::registry::NameRegistry;
use crate::replies::PendingReplies;
use crate::stats::Peaks;
use crate::subscriptions::{Monitors, PeerNames, Subscriptions};
use crate::traffic::Traffic;
use crate::{Action, BusOptions, ConnId, OutMessage, BUS_INTERFACE, BUS_NAME};

/// The broker. Feed it events; it appends the resulting [`Action`]s.
///
/// Private fields are the router's and its children's alone. The
/// `pub(crate)` ones are also the driver's (`crate::driver`: the options,
/// peers, names, match rules, activations, peaks and its own pidfd and
/// SELinux state), `mac`'s (the mediator, peers), and the unit tests'
/// (pending replies, monitors); each noun is used through its methods.
///
/// Serializable for a restart in place (docs/restart.md): everything here
/// is state except the mediator, which the daemon opens again, and what
/// is only set within one event. A deserialized bus must be
/// [`Bus::restored`] before use.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Bus {
    pub(crate) opts: BusOptions,
    /// Connections, their identities and unique names.
    pub(crate) conns: Peers,
    serial: u32,
    pub(crate) registry: NameRegistry,
    pub(crate) replies: PendingReplies,
    pub(crate) subs: Subscriptions,
    pub(crate) monitors: Monitors,
    /// SELinux is enabled on this machine: GetConnectionSELinuxSecurityContext
    /// answers with labels (dbus-broker's `bus_selinux_is_enabled`).
    pub(crate) selinux_enabled: bool,
    /// The bus process's own LSM label, without a trailing NUL.
    pub(crate) own_security_label: Option<Vec<u8>>,
    /// A GetConnectionCredentials reply waiting for the daemon's pidfd.
    /// Answered within the event that asked for it, so never handed over.
    #[serde(with = "crate::handover::within_an_event")]
    pub(crate) awaiting_pidfd: Option<crate::driver::AwaitingPidfd>,
    /// An AddServer call waiting for the daemon's socket. Answered within
    /// the event that asked for it, so never handed over.
    #[serde(with = "crate::handover::within_an_event")]
    pub(crate) awaiting_listener: Option<crate::driver::AwaitingListener>,
    /// Container instances (Containers1) and who came through them.
    pub(crate) containers: crate::containers::Containers,
    pub(crate) peaks: Peaks,
    /// Bus-wide totals of what was routed.
    traffic: Traffic,
    /// Services being started and what waits for them.
    pub(crate) activations: Activations,
    /// The security policy (allow-all until the daemon sets the
    /// configured one).
    policy: CompiledPolicy,
    /// The security module's decisions (SELinux); None where there is
    /// none to ask. Not state: the daemon installs a new one on each
    /// start (see `mac`).
    #[serde(skip)]
    pub(crate) mac: Option<Box<dyn crate::mac::Mediator>>,
    #[serde(skip)]
    empty_fds: Arc<Vec<PassedFd>>,
    /// The list a broadcast's receivers are gathered in, kept between
    /// messages so that a signal to many receivers does not grow a new
    /// one each time. Empty between events.
    #[serde(skip)]
    spare_recipients: Vec<ConnId>,
    /// Every connection's and user's queue, and held senders.
    queues: Queues,
    /// The outboxes lent out for writes on the daemon's threads, while
    /// they are (`lending`); empty otherwise, which the entry points check.
    #[serde(skip)]
    lent: Vec<crate::overflow::LentOutbox>,
    /// The filtered connections and what each may see (`app_filtering`).
    pub(crate) app_views: AppViews,
}

/// What each delivery is decided in, passed down from the entry point
/// that handles an event rather than kept in the bus, so that every
/// decision says which event it belongs to: the event's time (the bus
/// reads no clock), and the connection whose message is being routed,
/// the sender that flow control may hold back when a receiver is full.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Routing {
    pub now: Instant,
    /// None for the bus's own messages (on a time-out, a write, a
    /// disconnect): there is nobody to hold back.
    pub sender: Option<ConnId>,
}

impl Routing {
    /// Routing a message `from` sent, at `now`.
    pub(crate) fn sent_by(from: ConnId, now: Instant) -> Routing {
        Routing {
            now,
            sender: Some(from),
        }
    }

    /// The bus's own messages at `now`.
    pub(crate) fn by_bus(now: Instant) -> Routing {
        Routing { now, sender: None }
    }
}

/// Why a message does not reach its addressed recipient.
enum Refusal {
    Error(BusError),
    Denied(Denial),
    /// The recipient's queue is full (see [`crate::flow`]): the sender
    /// is told, nobody else sees the call.
    QueueFull(BusError),
    /// The recipient's app filter drops it: nobody is told.
    Dropped,
}

fn expects_reply(msg: &Message) -> bool {
    msg.msg_type() == MessageType::MethodCall && msg.flags() & flags::NO_REPLY_EXPECTED == 0
}

/// A Hello call to the driver (also without an interface, as dbus-daemon
/// takes it).
pub fn is_hello(msg: &Message) -> bool {
    msg.msg_type() == MessageType::MethodCall
        && msg.destination() == Some(BUS_NAME)
        && msg.member() == Some("Hello")
        && matches!(msg.interface(), None | Some(BUS_INTERFACE))
}

/// systemd's report that it could not start a service: the bus handles
/// it (or refuses a forgery), and dbus-daemon passes it to no match rule.
fn is_activation_failure(msg: &Message) -> bool {
    msg.msg_type() == MessageType::Signal
        && msg.interface() == Some(crate::activation::SYSTEMD_ACTIVATOR)
        && msg.member() == Some("ActivationFailure")
}

impl Bus {
    /// Route one validated message from `from`. `fds` are the descriptors
    /// that arrived with it. `from` is the sender flow control may hold
    /// back for what this message fills (see [`crate::overflow`]).
    pub fn receive(
        &mut self,
        from: ConnId,
        msg: Message,
        fds: Vec<PassedFd>,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        self.assert_none_lent();
        self.receive_from(from, msg, fds, Routing::sent_by(from, now), out);
    }

    fn receive_from(
        &mut self,
        from: ConnId,
        msg: Message,
        fds: Vec<PassedFd>,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        if !self.conns.contains_key(&from) {
            return;
        }
        self.count_in(from, msg.raw().len());
        let conn = &self.conns[&from];
        if let Some(reason) = self.over_message_limits(&msg, fds.len()) {
            // dbus-daemon cannot even load such a message and drops the
            // connection; so do we.
            out.push(Action::Disconnect { conn: from, reason });
            return;
        }
        if self.monitors.is_monitor(from) {
            out.push(Action::Disconnect {
                conn: from,
                reason: "Monitors are not allowed to send messages".into(),
            });
            return;
        }
        if conn.unique().is_none() {
            self.receive_unregistered(from, &msg, routing, out);
            return;
        }
        if !self.app_views.is_empty() && !self.filter_outgoing(from, &msg, routing, out) {
            return;
        }
        match msg.destination() {
            Some(BUS_NAME) => {
                // The driver keeps no fds; monitors get them with their
                // copy, as dbus-daemon passes them on.
                let mut fds = Some(fds);
                let is_call = msg.msg_type() == MessageType::MethodCall;
                if is_call {
                    self.capture_with_fds(from, &msg, fds.take(), routing, out);
                }
                let to_bus = Delivery {
                    from: Some(from),
                    addressed: None,
                    to: None,
                    requested_reply: false,
                };
                if let Err(denial) = self.check_policy(&msg, to_bus) {
                    if !is_call {
                        self.capture_with_fds(from, &msg, fds.take(), routing, out);
                    }
                    self.refuse(from, &msg, &denial, routing, out);
                } else if is_call {
                    if self.driver_call(from, &msg, routing, Rescan::Allowed, out) {
                        self.pass_to_eavesdroppers(from, &msg, routing, out);
                    }
                } else {
                    // The bus makes no calls: replies to it are dropped,
                    // as dbus-daemon does; systemd's signals are heard,
                    // and (as there) the errors they cause go out before
                    // monitors see them.
                    self.driver_signal(from, &msg, routing, out);
                    self.capture_with_fds(from, &msg, fds.take(), routing, out);
                    if !is_activation_failure(&msg) {
                        self.pass_to_eavesdroppers(from, &msg, routing, out);
                    }
                }
            }
            Some(dest) => self.unicast(from, &msg, fds, dest, routing, Rescan::Allowed, out),
            None if msg.msg_type() == MessageType::Signal => {
                self.broadcast(from, &msg, fds, routing, out)
            }
            None => self.answer_peerless(from, &msg, routing, out),
        }
    }

    /// Why a message is too big to route, if it is.
    fn over_message_limits(&self, msg: &Message, fds: usize) -> Option<String> {
        let limits = &self.opts.limits;
        let declared = msg.unix_fds() as usize;
        if declared.max(fds) > limits.max_message_unix_fds {
            return Some(format!(
                "message carries {} file descriptors, more than max_message_unix_fds={}",
                declared.max(fds),
                limits.max_message_unix_fds
            ));
        }
        if msg.raw().len() > limits.max_message_size {
            return Some(format!(
                "message of {} bytes is larger than max_message_size={}",
                msg.raw().len(),
                limits.max_message_size
            ));
        }
        None
    }

    /// `rescan`: whether a destination no known `.service` file provides
    /// may send the daemon to the service directories first.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn unicast(
        &mut self,
        from: ConnId,
        msg: &Message,
        fds: Vec<PassedFd>,
        dest: &str,
        routing: Routing,
        rescan: Rescan,
        out: &mut Vec<Action>,
    ) {
        let target = self.registry.owner(dest);
        if target.is_none() && self.wants_rescan_for(msg, dest, rescan) {
            self.park(
                Parked::Unicast {
                    from,
                    msg: msg.clone(),
                    fds,
                    dest: dest.to_owned(),
                },
                out,
            );
            return;
        }
        let out_msg = self.stamped(from, msg, fds);
        if target.is_none() && self.auto_start(from, msg, &out_msg, dest, routing, out) {
            return;
        }
        let watchers = if self.monitors.is_empty() {
            Vec::new()
        } else {
            self.with_input(msg, Some(from), target, |input| {
                self.monitor_recipients(input)
            })
        };
        self.route_watched(from, msg, out_msg, dest, target, &watchers, routing, out);
    }

    /// Deliver a message to its addressed recipient (monitors saw it
    /// already), or tell the sender why not.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn route_unicast(
        &mut self,
        from: ConnId,
        msg: &Message,
        out_msg: OutMessage,
        dest: &str,
        target: Option<ConnId>,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        self.route_watched(from, msg, out_msg, dest, target, &[], routing, out);
    }

    /// [`Bus::route_unicast`], showing the message to `watchers` (the
    /// monitors whose rules match it) first, unless it is a call refused
    /// because its receiver's queue is full: such a call never was.
    #[allow(clippy::too_many_arguments)]
    fn route_watched(
        &mut self,
        from: ConnId,
        msg: &Message,
        out_msg: OutMessage,
        dest: &str,
        target: Option<ConnId>,
        watchers: &[ConnId],
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        let target = match self.unicast_verdict(from, msg, dest, target) {
            Ok(target) => target,
            Err(Refusal::QueueFull(err)) => {
                tracing::debug!("the queue of {dest} is full: refusing a call to it");
                self.error_reply(from, msg, err, routing, out);
                return;
            }
            Err(Refusal::Error(err)) => {
                self.deliver_all(watchers, msg, &out_msg, routing, out);
                self.error_reply(from, msg, err, routing, out);
                return;
            }
            Err(Refusal::Denied(denial)) => {
                self.deliver_all(watchers, msg, &out_msg, routing, out);
                self.refuse(from, msg, &denial, routing, out);
                return;
            }
            Err(Refusal::Dropped) => {
                self.deliver_all(watchers, msg, &out_msg, routing, out);
                return;
            }
        };
        self.deliver_all(watchers, msg, &out_msg, routing, out);
        if expects_reply(msg) {
            let deadline = self.opts.limits.reply_timeout.map(|t| routing.now + t);
            self.replies.expect(from, msg.serial(), target, deadline);
        }
        if !self.subs.has_eavesdroppers() {
            self.deliver_addressed(target, out_msg, routing, out);
            return;
        }
        self.deliver_addressed(target, out_msg.clone(), routing, out);
        let mut eavesdroppers = self.with_input(msg, Some(from), Some(target), |input| {
            let mut to = Vec::new();
            self.subs.recipients(input, Some(target), &mut to);
            to
        });
        self.keep_allowed(
            Some(from),
            Some(target),
            msg,
            &mut eavesdroppers,
            routing,
            out,
        );
        self.keep_fd_capable(from, msg, &mut eavesdroppers, routing, out);
        self.deliver_all(&eavesdroppers, msg, &out_msg, routing, out);
    }

    /// Whether a message may go to its addressed recipient `target`, in
    /// the order dbus-daemon checks (the receiver's queue last). A reply
    /// it answers leaves the reply table here.
    fn unicast_verdict(
        &mut self,
        from: ConnId,
        msg: &Message,
        dest: &str,
        target: Option<ConnId>,
    ) -> Result<ConnId, Refusal> {
        // dbus-daemon tells the sender when its message cannot be
        // delivered, whatever its type; we leave out those who said they
        // want no reply.
        let Some(target) = target else {
            let err = if msg.flags() & flags::NO_AUTO_START != 0 {
                BusError::new(
                    errors::NAME_HAS_NO_OWNER,
                    format!("Name \"{dest}\" does not exist"),
                )
            } else {
                BusError::new(
                    errors::SERVICE_UNKNOWN,
                    format!("The name {dest} was not provided by any .service files"),
                )
            };
            return Err(Refusal::Error(err));
        };
        if msg.unix_fds() > 0 && !self.accepts_fds(target) {
            let err = BusError::new(
                errors::NOT_SUPPORTED,
                "Tried to send message with Unix file descriptorsto a client that doesn't support that.",
            );
            return Err(Refusal::Error(err));
        }
        let requested_reply = matches!(
            msg.msg_type(),
            MessageType::MethodReturn | MessageType::Error
        ) && msg
            .reply_serial()
            .is_some_and(|serial| self.replies.take_reply(from, target, serial));
        if !self.app_views.is_empty()
            && !self.filter_incoming_unicast(from, target, msg, requested_reply)
        {
            return Err(Refusal::Dropped);
        }
        let delivery = Delivery {
            from: Some(from),
            addressed: Some(target),
            to: Some(target),
            requested_reply,
        };
        self.check_policy(msg, delivery).map_err(Refusal::Denied)?;
        if expects_reply(msg) {
            let limit = self.opts.limits.max_replies_per_connection;
            if self.replies.waiting(from) >= limit {
                return Err(Refusal::Error(BusError::new(
                    errors::LIMITS_EXCEEDED,
                    "The maximum number of pending replies per connection has been reached",
                )));
            }
            if let Some(err) = self.refuses_call(target) {
                return Err(Refusal::QueueFull(err));
            }
        }
        Ok(target)
    }

    /// A message to org.freedesktop.DBus that the bus took (a call that
    /// succeeded, a reply or signal it ignored) goes on to the rules that
    /// eavesdrop on it, as dbus-daemon's `bus_dispatch` passes it to
    /// `bus_dispatch_matches` with no addressed recipient; the policy
    /// decides for each eavesdropper. The bus's replies are not
    /// eavesdropped (dbus-daemon sends them past the match rules too).
    pub(crate) fn pass_to_eavesdroppers(
        &mut self,
        from: ConnId,
        msg: &Message,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        if !self.subs.has_eavesdroppers() {
            return;
        }
        let mut eavesdroppers = self.with_input(msg, Some(from), None, |input| {
            let mut to = Vec::new();
            self.subs.recipients(input, None, &mut to);
            to
        });
        self.keep_allowed(Some(from), None, msg, &mut eavesdroppers, routing, out);
        if eavesdroppers.is_empty() {
            return;
        }
        let out_msg = self.stamped(from, msg, Vec::new());
        self.deliver_all(&eavesdroppers, msg, &out_msg, routing, out);
    }

    fn broadcast(
        &mut self,
        from: ConnId,
        msg: &Message,
        fds: Vec<PassedFd>,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        let out_msg = self.stamped(from, msg, fds);
        let mut to = std::mem::take(&mut self.spare_recipients);
        let (watchers, mut recipients) = self.with_input(msg, Some(from), None, |input| {
            self.subs.recipients(input, None, &mut to);
            (self.monitor_recipients(input), to)
        });
        self.deliver_all(&watchers, msg, &out_msg, routing, out);
        self.filter_broadcast(from, msg, &mut recipients);
        self.keep_allowed(Some(from), None, msg, &mut recipients, routing, out);
        self.keep_fd_capable(from, msg, &mut recipients, routing, out);
        self.queue_broadcast(&recipients, out_msg, routing, out);
        recipients.clear();
        self.spare_recipients = recipients;
    }

    /// Drop the `recipients` (not the addressed one) the policy keeps
    /// this message from. As in dbus-daemon nobody is told, but monitors
    /// see the AccessDenied the sender would have got.
    fn keep_allowed(
        &mut self,
        from: Option<ConnId>,
        addressed: Option<ConnId>,
        msg: &Message,
        recipients: &mut Vec<ConnId>,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        let mut refused = Vec::new();
        let to_none = Delivery {
            from,
            addressed,
            to: None,
            requested_reply: false,
        };
        let mut facts = policy_check::facts(msg, to_none);
        // Without a destination no receiver eavesdrops and none asked for
        // it, so every receiver sees the same facts, and the sender's send
        // rules, when they let these through whoever receives them, need
        // not be asked again per receiver (nor, without MAC, anything but
        // the receiver's own rules); and when every connection's receive
        // rules let such a message through, nobody need be asked at all.
        let only_receivers_decide = msg.destination().is_none()
            && self.mac.is_none()
            && self.sender_lets_through(from, &facts);
        if only_receivers_decide && self.policy.every_receiver_lets_through(&facts) {
            // It holds because every connection's rules were built by
            // this policy (`CompiledPolicy::client`); every test checks.
            debug_assert!(recipients.iter().all(|&to| {
                let delivery = Delivery {
                    to: Some(to),
                    ..to_none
                };
                self.check_receive(msg, delivery, &facts).is_ok()
            }));
            return;
        }
        recipients.retain(|&to| {
            let delivery = Delivery {
                to: Some(to),
                ..to_none
            };
            let verdict = if only_receivers_decide {
                self.check_receive(msg, delivery, &facts)
            } else {
                policy_check::refit_facts(&mut facts, msg, delivery);
                self.check_policy_with(msg, delivery, &facts)
            };
            match verdict {
                Ok(()) => true,
                Err(denial) => {
                    refused.push(denial);
                    false
                }
            }
        });
        if let Some(from) = from.filter(|_| !self.monitors.is_empty()) {
            for denial in refused {
                self.capture_error(from, msg, &denial, routing, out);
            }
        }
    }

    /// The policy refused `msg` from `from`: AccessDenied goes back even
    /// when the sender wants no reply, as dbus-daemon does (its monitors
    /// see it either way).
    pub(crate) fn refuse(
        &mut self,
        from: ConnId,
        msg: &Message,
        denial: &Denial,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        // dbus-daemon logs denials as security messages (auth facility,
        // notice): the daemon's log routes this target so.
        let who = self.requester(from);
        tracing::info!(
            target: "security",
            dbus_unique_name = who.as_ref().map(|r| r.unique_name.as_str()),
            dbus_peer_uid = who.as_ref().map(|r| r.uid),
            dbus_peer_pid = who.as_ref().and_then(|r| r.pid),
            dbus_peer_comm = who.as_ref().and_then(|r| r.comm.as_deref()),
            "{}",
            denial.text
        );
        self.send_error(from, msg.serial(), denial.to_error(), routing, out);
    }

    /// Show monitors the AccessDenied error `from` would have got.
    fn capture_error(
        &mut self,
        from: ConnId,
        msg: &Message,
        denial: &Denial,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        self.capture_error_reply(from, msg, denial.to_error(), routing, out);
    }

    /// Leave out the `recipients` that cannot take the fds of `msg`. As in
    /// dbus-daemon nobody is told, but monitors see the NotSupported
    /// error the sender would have got.
    fn keep_fd_capable(
        &mut self,
        from: ConnId,
        msg: &Message,
        recipients: &mut Vec<ConnId>,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        if msg.unix_fds() == 0 {
            return;
        }
        let mut refused = Vec::new();
        recipients.retain(|&to| {
            let accepts = self.accepts_fds(to);
            if !accepts {
                refused.push(to);
            }
            accepts
        });
        if self.monitors.is_empty() {
            return;
        }
        for to in refused {
            let err = BusError::new(
                errors::NOT_SUPPORTED,
                format!(
                    "broadcast cannot be delivered to {} because it does not support receiving Unix fds",
                    self.describe_connection(to)
                ),
            );
            self.capture_error_reply(from, msg, err, routing, out);
        }
    }

    /// Show monitors an error reply to `msg` that `from` is not sent.
    fn capture_error_reply(
        &mut self,
        from: ConnId,
        msg: &Message,
        err: BusError,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        let mut builder =
            MessageBuilder::error(msg.serial(), err.name).body(vec![Value::String(err.message)]);
        if let Some(name) = self.unique_name(from) {
            builder = builder.destination(name.to_owned());
        }
        if let Some((out_msg, built)) = self.build(builder) {
            let watchers = self.with_input(&built, None, Some(from), |input| {
                self.monitor_recipients(input)
            });
            self.deliver_all(&watchers, &built, &out_msg, routing, out);
        }
    }

    /// Run `f` on the message as match rules see it. `from`: the sending
    /// connection, None for the bus itself; `to`: the connection it is
    /// addressed to, if any.
    pub(crate) fn with_input<R>(
        &self,
        msg: &Message,
        from: Option<ConnId>,
        to: Option<ConnId>,
        f: impl FnOnce(&MatchInput<'_>) -> R,
    ) -> R {
        let peer = |id: Option<ConnId>| {
            let id = id?;
            let unique = self.unique_name(id)?;
            Some(PeerNames::new(id, unique, &self.registry))
        };
        let sender_peer = peer(from);
        let recipient_peer = peer(to);
        let sender: &dyn NameOwner = match &sender_peer {
            Some(p) => p,
            None => &BusDriver,
        };
        let recipient = recipient_peer.as_ref().map(|p| p as &dyn NameOwner);
        f(&MatchInput::new(msg, sender, recipient))
    }

    /// Show monitors a message addressed to the driver (stamped with the
    /// caller's unique name; for Hello, the name it was just given).
    pub(crate) fn capture_driver_call(
        &mut self,
        from: ConnId,
        msg: &Message,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        self.capture_with_fds(from, msg, None, routing, out);
    }

    /// [`Bus::capture_driver_call`] with the fds that came with the
    /// message (dropped when no monitor takes them: closed by the
    /// daemon's closer, `fds::PassedFd`).
    fn capture_with_fds(
        &mut self,
        from: ConnId,
        msg: &Message,
        fds: Option<Vec<PassedFd>>,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        if self.monitors.is_empty() {
            return;
        }
        let out_msg = self.stamped(from, msg, fds.unwrap_or_default());
        let watchers = self.with_input(msg, Some(from), None, |input| {
            self.monitor_recipients(input)
        });
        self.deliver_all(&watchers, msg, &out_msg, routing, out);
    }

    /// Monitors whose rules match; empty at once when there are none.
    pub(crate) fn monitor_recipients(&self, input: &MatchInput<'_>) -> Vec<ConnId> {
        let mut to = Vec::new();
        if !self.monitors.is_empty() {
            self.monitors.recipients(input, &mut to);
        }
        to
    }

    /// Deliver to each of `recipients`, skipping those that cannot take the
    /// message's fds (dbus-daemon skips them silently for broadcasts).
    pub(crate) fn deliver_all(
        &mut self,
        recipients: &[ConnId],
        msg: &Message,
        out_msg: &OutMessage,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        let has_fds = msg.unix_fds() > 0;
        for &to in recipients {
            if !has_fds || self.accepts_fds(to) {
                self.deliver(to, out_msg, routing, out);
            }
        }
    }

    /// Deliver a copy of `msg` to `to` (flow control decides, see
    /// [`crate::overflow`]).
    pub(crate) fn deliver(
        &mut self,
        to: ConnId,
        msg: &OutMessage,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        self.queue_for(to, msg.clone(), false, routing, out);
    }

    /// [`Bus::deliver`] to the receiver a message is addressed to, which
    /// takes it whole: the first clone of a freshly stamped header
    /// allocates its shared block, a move does not.
    fn deliver_addressed(
        &mut self,
        to: ConnId,
        msg: OutMessage,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        self.queue_for(to, msg, true, routing, out);
    }

    /// What Debug.Stats reads.
    pub(crate) fn stats_view(&self) -> crate::stats::View<'_> {
        crate::stats::View {
            peers: &self.conns,
            registry: &self.registry,
            subs: &self.subs,
            monitors: &self.monitors,
            replies: &self.replies,
            traffic: &self.traffic,
            peaks: &self.peaks,
        }
    }

    /// When the bus next needs [`Bus::handle_timeouts`].
    pub fn next_deadline(&self) -> Option<Instant> {
        [
            self.replies.next_deadline(),
            self.activations.next_deadline(),
            self.next_hold_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Answer with NoReply every call whose reply time-out has passed,
    /// fail activations whose service_start_timeout has, and end holds
    /// whose time is up.
    pub fn handle_timeouts(&mut self, now: Instant, out: &mut Vec<Action>) {
        self.assert_none_lent();
        // What the bus sends now holds nobody back.
        let routing = Routing::by_bus(now);
        self.check_holds(now, out);
        self.expire_activations(routing, out);
        for (caller, serial) in self.replies.expire(now) {
            let err = BusError::new(
                errors::NO_REPLY,
                "Message did not receive a reply (timeout by message bus)",
            );
            self.send_no_reply(caller, serial, err, routing, out);
        }
    }
}
