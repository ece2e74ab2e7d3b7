//! Connections and routing: where each message goes, and who is told when
//! it cannot go anywhere.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use quickbus_wire::{flags, Message, MessageBuilder, MessageType, Value};

use crate::activation::{Activations, Parked, Rescan};
use crate::errors::{self, BusError};
use crate::flow::Kind;
use crate::match_rule::{BusDriver, MatchInput, MatchRule, NameOwner};
use crate::overflow::{OutQueue, Queues};
use crate::peers::Peers;
use crate::policy::{CompiledPolicy, Delivery, Denial, PolicyConfig};
use crate::registry::{NameEvent, NameRegistry};
use crate::replies::PendingReplies;
use crate::stats::Peaks;
use crate::subscriptions::{Monitors, PeerNames, Subscriptions};
use crate::traffic::Traffic;
use crate::{
    Action, BusOptions, ConnId, Credentials, Frame, OutMessage, BUS_INTERFACE, BUS_NAME, BUS_PATH,
};

/// The broker. Feed it events; it appends the resulting [`Action`]s.
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
    pub(crate) awaiting_pidfd: Option<crate::driver::AwaitingPidfd>,
    pub(crate) peaks: Peaks,
    /// Bus-wide totals of what was routed.
    pub(crate) traffic: Traffic,
    /// Services being started and what waits for them.
    pub(crate) activations: Activations,
    /// The security policy (allow-all until the daemon sets the
    /// configured one).
    pub(crate) policy: CompiledPolicy,
    /// The security module's decisions (SELinux); None where there is
    /// none to ask. Not state: the daemon installs a new one on each
    /// start (see `mac`).
    pub(crate) mac: Option<Box<dyn crate::mac::Mediator>>,
    pub(crate) empty_fds: Arc<Vec<OwnedFd>>,
    /// Every connection's and user's queue, and held senders.
    pub(crate) queues: Queues,
}

/// Why a message does not reach its addressed recipient.
enum Refusal {
    Error(BusError),
    Denied(Denial),
    /// The recipient's queue is full (see [`crate::flow`]): the sender
    /// is told, nobody else sees the call.
    QueueFull(BusError),
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

/// Split a message we built into header and body without copying.
fn frame_of(msg: &Message) -> Frame {
    let raw = msg.raw();
    let body_start = raw.len() - msg.body().len();
    Frame {
        header: raw.slice(..body_start),
        body: raw.slice(body_start..),
    }
}

impl Bus {
    pub fn new(opts: BusOptions) -> Bus {
        Bus {
            policy: CompiledPolicy::new(PolicyConfig::allow_all()),
            opts,
            conns: Peers::default(),
            serial: 0,
            registry: NameRegistry::new(),
            replies: PendingReplies::new(),
            subs: Subscriptions::new(),
            monitors: Monitors::default(),
            selinux_enabled: false,
            own_security_label: None,
            awaiting_pidfd: None,
            peaks: Peaks::default(),
            traffic: Traffic::default(),
            activations: Activations::default(),
            mac: None,
            empty_fds: Arc::new(Vec::new()),
            queues: Queues::default(),
        }
    }

    /// Whether SELinux is enabled, and the bus process's own label: with
    /// SELinux, GetConnectionSELinuxSecurityContext returns labels.
    pub fn set_selinux(&mut self, enabled: bool, own_label: Option<Vec<u8>>) {
        self.selinux_enabled = enabled;
        self.own_security_label = own_label;
    }

    /// The environment UpdateActivationEnvironment set, for activated
    /// services.
    pub fn activation_environment(&self) -> &HashMap<String, String> {
        self.activations.environment()
    }

    /// Replace the list of activatable names (after a reload, which
    /// re-read the service directories). The ActivatableServicesChanged
    /// signal goes to every connection whose rules match it, changed or
    /// not: dbus-daemon 1.14 sends it on every reload (the differential
    /// harness's driver/ReloadConfig scenario shows it).
    pub fn set_activatable_names(&mut self, mut names: Vec<String>, out: &mut Vec<Action>) {
        names.sort_unstable();
        self.opts.activatable_names = names;
        let builder = MessageBuilder::signal(BUS_PATH, BUS_INTERFACE, "ActivatableServicesChanged");
        let Some((out_msg, msg)) = self.build(builder) else {
            return;
        };
        let (watchers, mut recipients) = self.with_input(&msg, None, None, |input| {
            let mut to = Vec::new();
            self.subs.recipients(input, None, &mut to);
            (self.monitor_recipients(input), to)
        });
        self.deliver_all(&watchers, &msg, &out_msg, out);
        self.keep_allowed(None, None, &msg, &mut recipients, out);
        self.deliver_all(&recipients, &msg, &out_msg, out);
    }

    /// New limits (a reload); existing names, rules and pending calls are
    /// kept even where they now exceed them.
    pub fn set_limits(&mut self, limits: crate::Limits) {
        self.opts.limits = limits;
    }

    pub fn options(&self) -> &BusOptions {
        &self.opts
    }

    /// The unique name of `id`, once it said Hello.
    pub fn unique_name(&self, id: ConnId) -> Option<&str> {
        self.conns.get(&id)?.unique.as_deref()
    }

    /// Number of connections (with or without Hello).
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }

    /// A new connection's id: the daemon takes one when it accepts a
    /// socket (its mio token is the same number), and it names the
    /// connection to the bus once authenticated ([`Bus::add_connection_as`]).
    /// Ids are never given twice, so nothing the bus says about a
    /// connection that left can reach another.
    pub fn next_connection_id(&mut self) -> ConnId {
        self.conns.next_id()
    }

    /// A peer finished authenticating: a new id for it, and
    /// [`Bus::add_connection_as`].
    pub fn add_connection(&mut self, creds: Credentials, unix_fds: bool) -> ConnId {
        let id = self.next_connection_id();
        self.add_connection_as(id, creds, unix_fds);
        id
    }

    /// The peer `id` (from [`Bus::next_connection_id`]) finished
    /// authenticating as `creds`; `unix_fds`: it negotiated fd passing.
    /// From here on the bus owns its identity and credentials.
    pub fn add_connection_as(&mut self, id: ConnId, creds: Credentials, unix_fds: bool) {
        if self.conns.contains_key(&id) {
            return;
        }
        let policy = self.policy.client(&creds);
        let queue = OutQueue::new(self.queues.users.join(creds.uid));
        self.conns.add(id, creds, unix_fds, policy, queue);
    }

    /// What the kernel (and authentication) said about connection `id`.
    pub fn credentials(&self, id: ConnId) -> Option<&Credentials> {
        self.conns.get(&id).map(|c| &c.creds)
    }

    /// The peer is gone (hung up, or the daemon dropped it): its match
    /// rules go first (so it hears nothing more), then its names (queues
    /// move on and NameOwnerChanged goes out), then callers waiting on it
    /// get NoReply.
    pub fn remove_connection(&mut self, id: ConnId, out: &mut Vec<Action>) {
        if !self.conns.contains_key(&id) {
            return;
        }
        self.subs.remove_connection(id);
        if let Some(unique) = self.unique_name(id) {
            let unique = unique.to_owned();
            self.subs.remove_rules_naming(&unique);
        }
        self.monitors.remove(id);
        let mut events = Vec::new();
        self.registry.remove_connection(id, &mut events);
        // Signals name the departed connection, so it stays known until
        // they are built; emit() shows its NameLost to monitors only.
        self.emit(&events, Some(id), out);
        for (caller, serial) in self.replies.remove_connection(id) {
            let err = BusError::new(
                errors::NO_REPLY,
                "Message recipient disconnected from message bus without replying",
            );
            self.send_no_reply(caller, serial, err, out);
        }
        if let Some(conn) = self.conns.remove(&id) {
            self.queue_gone(id, &conn.queue, out);
        }
    }

    /// Route one validated message from `from`. `fds` are the descriptors
    /// that arrived with it. `from` is the sender flow control may hold
    /// back for what this message fills (see [`crate::overflow`]).
    pub fn receive(
        &mut self,
        from: ConnId,
        msg: Message,
        fds: Vec<OwnedFd>,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        self.queues.sending = Some(from);
        self.queues.now = Some(now);
        self.receive_from(from, msg, fds, now, out);
        self.queues.sending = None;
    }

    fn receive_from(
        &mut self,
        from: ConnId,
        msg: Message,
        fds: Vec<OwnedFd>,
        now: Instant,
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
        if conn.unique.is_none() {
            self.receive_unregistered(from, &msg, now, out);
            return;
        }
        match msg.destination() {
            Some(BUS_NAME) => {
                // The driver keeps no fds; monitors get them with their
                // copy, as dbus-daemon passes them on.
                let mut fds = Some(fds);
                let is_call = msg.msg_type() == MessageType::MethodCall;
                if is_call {
                    self.capture_with_fds(from, &msg, fds.take(), out);
                }
                let to_bus = Delivery {
                    from: Some(from),
                    addressed: None,
                    to: None,
                    requested_reply: false,
                };
                if let Err(denial) = self.check_policy(&msg, to_bus) {
                    if !is_call {
                        self.capture_with_fds(from, &msg, fds.take(), out);
                    }
                    self.refuse(from, &msg, &denial, out);
                } else if is_call {
                    if self.driver_call(from, &msg, now, Rescan::Allowed, out) {
                        self.pass_to_eavesdroppers(from, &msg, out);
                    }
                } else {
                    // The bus makes no calls: replies to it are dropped,
                    // as dbus-daemon does; systemd's signals are heard,
                    // and (as there) the errors they cause go out before
                    // monitors see them.
                    self.driver_signal(from, &msg, out);
                    self.capture_with_fds(from, &msg, fds.take(), out);
                    if !is_activation_failure(&msg) {
                        self.pass_to_eavesdroppers(from, &msg, out);
                    }
                }
            }
            Some(dest) => self.unicast(from, &msg, fds, dest, now, Rescan::Allowed, out),
            None if msg.msg_type() == MessageType::Signal => self.broadcast(from, &msg, fds, out),
            None => self.answer_peerless(from, &msg, out),
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
        fds: Vec<OwnedFd>,
        dest: &str,
        now: Instant,
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
        if target.is_none() && self.auto_start(from, msg, &out_msg, dest, now, out) {
            return;
        }
        let watchers = if self.monitors.is_empty() {
            Vec::new()
        } else {
            self.with_input(msg, Some(from), target, |input| {
                self.monitor_recipients(input)
            })
        };
        self.route_watched(from, msg, out_msg, dest, target, &watchers, now, out);
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
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        self.route_watched(from, msg, out_msg, dest, target, &[], now, out);
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
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let target = match self.unicast_verdict(from, msg, dest, target) {
            Ok(target) => target,
            Err(Refusal::QueueFull(err)) => {
                tracing::debug!("the queue of {dest} is full: refusing a call to it");
                self.error_reply(from, msg, err, out);
                return;
            }
            Err(Refusal::Error(err)) => {
                self.deliver_all(watchers, msg, &out_msg, out);
                self.error_reply(from, msg, err, out);
                return;
            }
            Err(Refusal::Denied(denial)) => {
                self.deliver_all(watchers, msg, &out_msg, out);
                self.refuse(from, msg, &denial, out);
                return;
            }
        };
        self.deliver_all(watchers, msg, &out_msg, out);
        if expects_reply(msg) {
            let deadline = self.opts.limits.reply_timeout.map(|t| now + t);
            self.replies.expect(from, msg.serial(), target, deadline);
        }
        if !self.subs.has_eavesdroppers() {
            self.deliver_addressed(target, out_msg, out);
            return;
        }
        self.deliver_addressed(target, out_msg.clone(), out);
        let mut eavesdroppers = self.with_input(msg, Some(from), Some(target), |input| {
            let mut to = Vec::new();
            self.subs.recipients(input, Some(target), &mut to);
            to
        });
        self.keep_allowed(Some(from), Some(target), msg, &mut eavesdroppers, out);
        self.keep_fd_capable(from, msg, &mut eavesdroppers, out);
        self.deliver_all(&eavesdroppers, msg, &out_msg, out);
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
        self.keep_allowed(Some(from), None, msg, &mut eavesdroppers, out);
        if eavesdroppers.is_empty() {
            return;
        }
        let out_msg = self.stamped(from, msg, Vec::new());
        self.deliver_all(&eavesdroppers, msg, &out_msg, out);
    }

    fn broadcast(&mut self, from: ConnId, msg: &Message, fds: Vec<OwnedFd>, out: &mut Vec<Action>) {
        let out_msg = self.stamped(from, msg, fds);
        let (watchers, mut recipients) = self.with_input(msg, Some(from), None, |input| {
            let mut to = Vec::new();
            self.subs.recipients(input, None, &mut to);
            (self.monitor_recipients(input), to)
        });
        self.deliver_all(&watchers, msg, &out_msg, out);
        self.keep_allowed(Some(from), None, msg, &mut recipients, out);
        self.keep_fd_capable(from, msg, &mut recipients, out);
        self.deliver_all(&recipients, msg, &out_msg, out);
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
        out: &mut Vec<Action>,
    ) {
        let mut refused = Vec::new();
        recipients.retain(|&to| {
            let delivery = Delivery {
                from,
                addressed,
                to: Some(to),
                requested_reply: false,
            };
            match self.check_policy(msg, delivery) {
                Ok(()) => true,
                Err(denial) => {
                    refused.push(denial);
                    false
                }
            }
        });
        if let Some(from) = from.filter(|_| !self.monitors.is_empty()) {
            for denial in refused {
                self.capture_error(from, msg, &denial, out);
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
        self.send_error(from, msg.serial(), denial.to_error(), out);
    }

    /// Show monitors the AccessDenied error `from` would have got.
    fn capture_error(
        &mut self,
        from: ConnId,
        msg: &Message,
        denial: &Denial,
        out: &mut Vec<Action>,
    ) {
        self.capture_error_reply(from, msg, denial.to_error(), out);
    }

    /// Leave out the `recipients` that cannot take the fds of `msg`. As in
    /// dbus-daemon nobody is told, but monitors see the NotSupported
    /// error the sender would have got.
    fn keep_fd_capable(
        &mut self,
        from: ConnId,
        msg: &Message,
        recipients: &mut Vec<ConnId>,
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
            self.capture_error_reply(from, msg, err, out);
        }
    }

    /// Show monitors an error reply to `msg` that `from` is not sent.
    fn capture_error_reply(
        &mut self,
        from: ConnId,
        msg: &Message,
        err: BusError,
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
            self.deliver_all(&watchers, &built, &out_msg, out);
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
        out: &mut Vec<Action>,
    ) {
        self.capture_with_fds(from, msg, None, out);
    }

    /// [`Bus::capture_driver_call`] with the fds that came with the
    /// message (closed at once when no monitor takes them).
    fn capture_with_fds(
        &mut self,
        from: ConnId,
        msg: &Message,
        fds: Option<Vec<OwnedFd>>,
        out: &mut Vec<Action>,
    ) {
        if self.monitors.is_empty() {
            return;
        }
        let out_msg = self.stamped(from, msg, fds.unwrap_or_default());
        let watchers = self.with_input(msg, Some(from), None, |input| {
            self.monitor_recipients(input)
        });
        self.deliver_all(&watchers, msg, &out_msg, out);
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
        out: &mut Vec<Action>,
    ) {
        let has_fds = msg.unix_fds() > 0;
        for &to in recipients {
            if !has_fds || self.accepts_fds(to) {
                self.deliver(to, out_msg, out);
            }
        }
    }

    fn accepts_fds(&self, id: ConnId) -> bool {
        self.conns.get(&id).is_some_and(|c| c.unix_fds)
    }

    /// The message as receivers see it: SENDER set to the sender's unique
    /// name, body shared.
    fn stamped(&self, from: ConnId, msg: &Message, fds: Vec<OwnedFd>) -> OutMessage {
        let sender = self.unique_name(from).unwrap_or(BUS_NAME);
        self.stamped_as(sender, msg, fds)
    }

    /// The message with SENDER set to `sender`.
    pub(crate) fn stamped_as(&self, sender: &str, msg: &Message, fds: Vec<OwnedFd>) -> OutMessage {
        OutMessage {
            frame: msg.stamp(sender),
            fds: if fds.is_empty() {
                self.empty_fds.clone()
            } else {
                Arc::new(fds)
            },
            kind: Kind::of(msg),
        }
    }

    /// Deliver a copy of `msg` to `to` (flow control decides, see
    /// [`crate::overflow`]).
    pub(crate) fn deliver(&mut self, to: ConnId, msg: &OutMessage, out: &mut Vec<Action>) {
        self.queue_for(to, msg.clone(), false, out);
    }

    /// [`Bus::deliver`] to the receiver a message is addressed to, which
    /// takes it whole: the first clone of a freshly stamped header
    /// allocates its shared block, a move does not.
    fn deliver_addressed(&mut self, to: ConnId, msg: OutMessage, out: &mut Vec<Action>) {
        self.queue_for(to, msg, true, out);
    }

    pub(crate) fn next_serial(&mut self) -> u32 {
        self.serial = self.serial.wrapping_add(1);
        if self.serial == 0 {
            self.serial = 1;
        }
        self.serial
    }

    /// Build a message from the bus. Only fails on a bug (the bus builds
    /// only well-formed messages); then it logs and returns None.
    pub(crate) fn build(&mut self, builder: MessageBuilder) -> Option<(OutMessage, Message)> {
        self.build_with_fds(builder, Vec::new())
    }

    /// [`Bus::build`] of a message carrying `fds` (its UNIX_FDS field says
    /// how many).
    fn build_with_fds(
        &mut self,
        builder: MessageBuilder,
        fds: Vec<OwnedFd>,
    ) -> Option<(OutMessage, Message)> {
        let builder = if fds.is_empty() {
            builder
        } else {
            builder.unix_fds(fds.len() as u32)
        };
        let serial = self.next_serial();
        // Nothing answers the bus: its messages say so, as libdbus's do.
        let built: Result<Bytes, _> = builder
            .sender(BUS_NAME)
            .flags(flags::NO_REPLY_EXPECTED)
            .build(serial);
        let parsed = built.and_then(Message::parse);
        match parsed {
            Ok(msg) => Some((
                OutMessage {
                    frame: frame_of(&msg),
                    fds: if fds.is_empty() {
                        self.empty_fds.clone()
                    } else {
                        Arc::new(fds)
                    },
                    kind: Kind::of(&msg),
                },
                msg,
            )),
            Err(e) => {
                tracing::error!("bus failed to build a message: {e}");
                None
            }
        }
    }

    /// Send a bus message to one connection, with its unique name as
    /// destination.
    pub(crate) fn send_to(&mut self, to: ConnId, builder: MessageBuilder, out: &mut Vec<Action>) {
        self.send_to_with_fds(to, builder, Vec::new(), out);
    }

    /// [`Bus::send_to`] with fds attached. Monitors that cannot take fds
    /// do not see it.
    fn send_to_with_fds(
        &mut self,
        to: ConnId,
        builder: MessageBuilder,
        fds: Vec<OwnedFd>,
        out: &mut Vec<Action>,
    ) {
        let builder = match self.unique_name(to) {
            Some(name) => builder.destination(name.to_owned()),
            None => builder,
        };
        if let Some((out_msg, msg)) = self.build_with_fds(builder, fds) {
            if !self.monitors.is_empty() {
                let watchers =
                    self.with_input(&msg, None, Some(to), |input| self.monitor_recipients(input));
                self.deliver_all(&watchers, &msg, &out_msg, out);
            }
            // The bus does not insist: what the receiver's policy refuses
            // is dropped (monitors saw it), as in dbus-daemon.
            let delivery = Delivery {
                from: None,
                addressed: Some(to),
                to: Some(to),
                requested_reply: true,
            };
            match self.check_policy(&msg, delivery) {
                Ok(()) => self.deliver(to, &out_msg, out),
                Err(denial) if !self.monitors.is_empty() => {
                    // Monitors see why, addressed as dbus-daemon does: an
                    // error from the bus in reply to the bus.
                    let err = denial.to_error();
                    let builder = MessageBuilder::error(msg.serial(), err.name)
                        .destination(BUS_NAME)
                        .body(vec![Value::String(err.message)]);
                    if let Some((out_err, built)) = self.build(builder) {
                        let watchers = self.with_input(&built, None, Some(to), |input| {
                            self.monitor_recipients(input)
                        });
                        self.deliver_all(&watchers, &built, &out_err, out);
                    }
                }
                Err(_) => {}
            }
        }
    }

    /// Show monitors a bus message to `to` that `to` itself will not get.
    fn show_monitors(&mut self, to: ConnId, builder: MessageBuilder, out: &mut Vec<Action>) {
        if self.monitors.is_empty() {
            return;
        }
        let builder = match self.unique_name(to) {
            Some(name) => builder.destination(name.to_owned()),
            None => builder,
        };
        if let Some((out_msg, msg)) = self.build(builder) {
            let watchers =
                self.with_input(&msg, None, Some(to), |input| self.monitor_recipients(input));
            self.deliver_all(&watchers, &msg, &out_msg, out);
        }
    }

    /// Method return from the driver, unless the caller asked for none,
    /// with `fds` attached (closed if unsent).
    pub(crate) fn reply(
        &mut self,
        to: ConnId,
        call: &Message,
        body: Vec<Value>,
        fds: Vec<OwnedFd>,
        out: &mut Vec<Action>,
    ) {
        if call.flags() & flags::NO_REPLY_EXPECTED != 0 {
            return;
        }
        self.send_to_with_fds(
            to,
            MessageBuilder::method_return(call.serial()).body(body),
            fds,
            out,
        );
    }

    /// Error answering `call` (a message of any type), unless its sender
    /// asked for no reply.
    pub(crate) fn error_reply(
        &mut self,
        to: ConnId,
        call: &Message,
        err: BusError,
        out: &mut Vec<Action>,
    ) {
        if call.flags() & flags::NO_REPLY_EXPECTED != 0 {
            return;
        }
        self.send_error(to, call.serial(), err, out);
    }

    fn send_error(&mut self, to: ConnId, reply_serial: u32, err: BusError, out: &mut Vec<Action>) {
        self.count_error(to);
        let builder =
            MessageBuilder::error(reply_serial, err.name).body(vec![Value::String(err.message)]);
        self.send_to(to, builder, out);
    }

    /// NoReply on behalf of a callee that will never answer. Flagged
    /// NO_REPLY_EXPECTED like dbus-daemon's.
    fn send_no_reply(&mut self, caller: ConnId, serial: u32, err: BusError, out: &mut Vec<Action>) {
        if !self.conns.contains_key(&caller) {
            return;
        }
        self.count_error(caller);
        let builder =
            MessageBuilder::error(serial, err.name).body(vec![Value::String(err.message)]);
        self.send_to(caller, builder, out);
    }

    /// Announce name changes in order. `gone`: a departing connection that
    /// must not receive anything.
    pub(crate) fn emit(
        &mut self,
        events: &[NameEvent],
        gone: Option<ConnId>,
        out: &mut Vec<Action>,
    ) {
        for event in events {
            match event {
                NameEvent::OwnerChanged { name, old, new } => {
                    let unique = |id: &Option<ConnId>| {
                        id.and_then(|id| self.unique_name(id))
                            .unwrap_or("")
                            .to_owned()
                    };
                    let body = vec![
                        Value::String(name.clone()),
                        Value::String(unique(old)),
                        Value::String(unique(new)),
                    ];
                    let builder =
                        MessageBuilder::signal(BUS_PATH, BUS_INTERFACE, "NameOwnerChanged")
                            .body(body);
                    let Some((out_msg, msg)) = self.build(builder) else {
                        continue;
                    };
                    let (watchers, mut recipients) = self.with_input(&msg, None, None, |input| {
                        let mut to = Vec::new();
                        self.subs.recipients(input, None, &mut to);
                        (self.monitor_recipients(input), to)
                    });
                    recipients.retain(|&to| Some(to) != gone);
                    self.keep_allowed(None, None, &msg, &mut recipients, out);
                    for to in watchers.into_iter().chain(recipients) {
                        if Some(to) != gone {
                            self.deliver(to, &out_msg, out);
                        }
                    }
                }
                NameEvent::Lost { conn, name } | NameEvent::Acquired { conn, name } => {
                    let member = if matches!(event, NameEvent::Lost { .. }) {
                        "NameLost"
                    } else {
                        "NameAcquired"
                    };
                    let builder = MessageBuilder::signal(BUS_PATH, BUS_INTERFACE, member)
                        .body(vec![Value::String(name.clone())]);
                    if Some(*conn) == gone {
                        // dbus-daemon sends a departing connection its
                        // NameLost too: only monitors still hear it.
                        self.show_monitors(*conn, builder, out);
                    } else {
                        self.send_to(*conn, builder, out);
                    }
                }
            }
        }
    }

    /// BecomeMonitor succeeded and its reply is out: the connection drops
    /// its match rules and names (hearing NameLost for each, as with
    /// dbus-daemon) and from now on only watches.
    pub(crate) fn become_monitor(
        &mut self,
        id: ConnId,
        rules: Vec<MatchRule>,
        out: &mut Vec<Action>,
    ) {
        self.subs.remove_connection(id);
        let mut events = Vec::new();
        self.registry.remove_connection(id, &mut events);
        self.emit(&events, None, out);
        self.monitors.add(id, rules);
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
        self.queues.now = Some(now);
        self.check_holds(now, out);
        self.expire_activations(now, out);
        for (caller, serial) in self.replies.expire(now) {
            let err = BusError::new(
                errors::NO_REPLY,
                "Message did not receive a reply (timeout by message bus)",
            );
            self.send_no_reply(caller, serial, err, out);
        }
    }
}
