//! Activation as the bus routes: a message or StartServiceByName for an
//! activatable name nobody owns starts (or joins) a pending activation,
//! a new owner completes it, and the daemon, systemd or a time-out fails
//! it (see [`crate::activation`] for the rules).
//!
//! Owns: nothing; the pending activations are `Activations`'. May touch:
//! activations, the options (activatable names, systemd units), the
//! registry (who owns a name now), peers (who asked), the policy check,
//! monitors, and `outgoing` and routing to deliver what waited.

use std::collections::HashMap;
use std::time::Instant;

use quickbus_wire::{flags, Message, MessageBuilder, MessageType, Value};

use crate::activation::{
    FoundService, Parked, Pending, Rescan, Waiter, START_REPLY_ALREADY_RUNNING,
    START_REPLY_SUCCESS, SYSTEMD_ACTIVATOR, SYSTEMD_NAME,
};
use crate::errors::{self, BusError};
use crate::policy::Delivery;
use crate::registry::NameEvent;
use crate::{Action, Bus, ConnId, OutMessage, Requester, BUS_PATH};

use super::Routing;

/// What starting a service means for the bus.
enum Start {
    /// Ask the daemon to spawn the service's Exec line.
    Spawn,
    /// Ask systemd to start this unit.
    Systemd(String),
    /// Wait for systemd to connect (the name is systemd's own).
    AwaitSystemd,
}

fn error_builder(reply_serial: u32, name: &str, text: &str) -> MessageBuilder {
    MessageBuilder::error(reply_serial, name).body(vec![Value::String(text.to_owned())])
}

impl Bus {
    /// Whether `name` could be started: a known .service file provides
    /// it, or it is systemd itself in systemd mode.
    fn is_activatable(&self, name: &str) -> bool {
        (self.opts.systemd_activation && name == SYSTEMD_NAME)
            || self.opts.activatable_names.iter().any(|n| n == name)
    }

    /// Whether the daemon should read the service directories for `name`
    /// before the bus decides nobody provides it.
    pub(crate) fn wants_rescan(&self, name: &str, rescan: Rescan) -> bool {
        rescan == Rescan::Allowed
            && self.opts.rescan_service_files
            && !self.is_activatable(name)
            && quickbus_wire::names::is_valid_well_known_name(name)
    }

    /// [`Bus::wants_rescan`] for a message to `dest`, which nobody owns:
    /// only when it may start a service.
    pub(crate) fn wants_rescan_for(&self, msg: &Message, dest: &str, rescan: Rescan) -> bool {
        msg.flags() & flags::NO_AUTO_START == 0 && self.wants_rescan(dest, rescan)
    }

    /// Hold `parked` and ask the daemon to look for its name's file.
    pub(crate) fn park(&mut self, parked: Parked, out: &mut Vec<Action>) {
        let name = match &parked {
            Parked::Unicast { dest, .. } => dest.clone(),
            Parked::DriverCall { msg, .. } => match msg.body_values().ok().as_deref() {
                Some([Value::String(name), ..]) => name.clone(),
                _ => return,
            },
        };
        if let Some(earlier) = self.activations.park(parked) {
            // The daemon broke the contract; the earlier message is lost
            // rather than routed out of order.
            tracing::error!("a message waiting for a service lookup was dropped: {earlier:?}");
        }
        out.push(Action::LookUpService { name });
    }

    /// The daemon's answer to [`Action::LookUpService`]: `found` when a
    /// `.service` file for `name` appeared since the directories were
    /// last read. The held message then goes on as if it had just
    /// arrived, with `name` activatable or not.
    pub fn service_looked_up(
        &mut self,
        name: &str,
        found: Option<FoundService>,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        if let Some(found) = found {
            if !self.is_activatable(name) {
                tracing::info!("found a new service file for {name}");
                self.opts.activatable_names.push(name.to_owned());
            }
            if let Some(unit) = found.systemd_unit {
                self.opts.systemd_units.insert(name.to_owned(), unit);
            }
            if let Some(label) = found.assumed_apparmor_label {
                self.opts
                    .assumed_apparmor_labels
                    .insert(name.to_owned(), label);
            }
        }
        let Some(parked) = self.activations.unpark() else {
            return;
        };
        // As if it had just arrived: flow control may hold its sender.
        let routing = Routing::sent_by(parked.sender(), now);
        match parked {
            Parked::Unicast {
                from,
                msg,
                fds,
                dest,
            } => {
                if self.conns.contains_key(&from) {
                    self.unicast(from, &msg, fds, &dest, routing, Rescan::Done, out);
                }
            }
            Parked::DriverCall { from, msg } => {
                if self.conns.contains_key(&from)
                    && self.driver_call(from, &msg, routing, Rescan::Done, out)
                {
                    self.pass_to_eavesdroppers(from, &msg, routing, out);
                }
            }
        }
    }

    /// A message (`stamped` as receivers see it) for `dest`, which has no
    /// owner. False when it starts nothing (the caller answers
    /// ServiceUnknown or NameHasNoOwner).
    pub(crate) fn auto_start(
        &mut self,
        from: ConnId,
        msg: &Message,
        stamped: &OutMessage,
        dest: &str,
        routing: Routing,
        out: &mut Vec<Action>,
    ) -> bool {
        if msg.flags() & flags::NO_AUTO_START != 0 || !self.is_activatable(dest) {
            return false;
        }
        if let Err(err) = self.check_pending_limit(dest) {
            self.capture_unicast(from, msg, stamped, routing, out);
            self.error_reply(from, msg, err, routing, out);
            return true;
        }
        // What the policy can say before the service exists: may the
        // sender send to this name at all? (Receive rules are checked when
        // the queued message is delivered.)
        let to_service = Delivery {
            from: Some(from),
            addressed: None,
            to: None,
            requested_reply: false,
        };
        if let Err(denial) = self.check_policy(msg, to_service) {
            self.capture_unicast(from, msg, stamped, routing, out);
            self.refuse(from, msg, &denial, routing, out);
            return true;
        }
        let waiter = Waiter::Message {
            from,
            msg: msg.clone(),
            stamped: stamped.clone(),
        };
        // dbus-daemon shows monitors the activation request before the
        // message that caused it.
        self.join_or_start(dest, waiter, routing, out);
        self.capture_unicast(from, msg, stamped, routing, out);
        true
    }

    /// Show monitors a message whose recipient does not exist yet.
    fn capture_unicast(
        &mut self,
        from: ConnId,
        msg: &Message,
        stamped: &OutMessage,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        if self.monitors.is_empty() {
            return;
        }
        let watchers = self.with_input(msg, Some(from), None, |input| {
            self.monitor_recipients(input)
        });
        self.deliver_all(&watchers, msg, stamped, routing, out);
    }

    /// StartServiceByName: Ok(Some(reply)) to answer at once, Ok(None)
    /// when the answer waits for the activation.
    /// The actions starting the service go to `out`.
    pub(crate) fn start_service_by_name(
        &mut self,
        from: ConnId,
        call: &Message,
        name: &str,
        routing: Routing,
        out: &mut Vec<Action>,
    ) -> Result<Option<u32>, BusError> {
        if !self.is_activatable(name) {
            return Err(BusError::new(
                errors::SERVICE_UNKNOWN,
                format!("The name {name} was not provided by any .service files"),
            ));
        }
        if self.registry.has_owner(name) {
            return Ok(Some(START_REPLY_ALREADY_RUNNING));
        }
        self.check_pending_limit(name)?;
        let waiter = Waiter::Start {
            from,
            call: call.clone(),
        };
        self.join_or_start(name, waiter, routing, out);
        Ok(None)
    }

    fn check_pending_limit(&self, name: &str) -> Result<(), BusError> {
        let limit = self.opts.limits.max_pending_service_starts;
        if self.activations.waiting() >= limit {
            return Err(BusError::new(
                errors::LIMITS_EXCEEDED,
                format!("The maximum number of pending activations has been reached, activation of {name} failed (max_pending_service_starts={limit})"),
            ));
        }
        Ok(())
    }

    /// Queue `waiter` on the activation of `name`, starting one if none is
    /// under way.
    fn join_or_start(
        &mut self,
        name: &str,
        waiter: Waiter,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        if self.activations.is_pending(name) {
            self.activations.push(name, waiter);
            return;
        }
        let start = if self.opts.systemd_activation && name == SYSTEMD_NAME {
            Start::AwaitSystemd
        } else {
            match self.opts.systemd_units.get(name) {
                Some(unit) if self.opts.systemd_activation => Start::Systemd(unit.clone()),
                _ => Start::Spawn,
            }
        };
        let deadline = routing.now + self.opts.limits.service_start_timeout;
        let requested_by = waiter.caller().and_then(|(from, _)| self.requester(from));
        let systemd_unit = match &start {
            Start::Systemd(unit) => Some(unit.clone()),
            _ => None,
        };
        let spawned = matches!(start, Start::Spawn);
        self.activations
            .open(name, deadline, systemd_unit, spawned, waiter);
        match start {
            // The daemon logs the start: it knows how it starts services.
            Start::Spawn => out.push(Action::Activate {
                name: name.to_owned(),
                requested_by,
            }),
            Start::AwaitSystemd => {}
            Start::Systemd(unit) => {
                self.request_systemd_unit(name, &unit, requested_by.as_ref(), routing, out)
            }
        }
    }

    /// Send systemd `ActivationRequest(unit)`, or queue it until systemd
    /// connects.
    fn request_systemd_unit(
        &mut self,
        name: &str,
        unit: &str,
        requested_by: Option<&Requester>,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        // dbus-daemon's texts; a start the bus needs itself names nobody.
        let by = requested_by.map_or_else(String::new, |r| {
            format!(" requested by '{}' ({})", r.unique_name, r.loginfo())
        });
        let builder = MessageBuilder::signal(BUS_PATH, SYSTEMD_ACTIVATOR, "ActivationRequest")
            .destination(SYSTEMD_NAME)
            .body(vec![Value::String(unit.to_owned())]);
        let Some((out_msg, msg)) = self.build(builder) else {
            return;
        };
        let systemd = self.registry.owner(SYSTEMD_NAME);
        // Monitors see the request once, when the bus decides to send it,
        // even if systemd is not there to receive it yet.
        if !self.monitors.is_empty() {
            let watchers =
                self.with_input(&msg, None, systemd, |input| self.monitor_recipients(input));
            self.deliver_all(&watchers, &msg, &out_msg, routing, out);
        }
        match systemd {
            Some(owner) => {
                tracing::info!(
                    dbus_unique_name = requested_by.map(|r| r.unique_name.as_str()),
                    dbus_peer_uid = requested_by.map(|r| r.uid),
                    dbus_peer_pid = requested_by.and_then(|r| r.pid),
                    dbus_peer_comm = requested_by.and_then(|r| r.comm.as_deref()),
                    "Activating via systemd: service name='{name}' unit='{unit}'{by}"
                );
                self.deliver(owner, &out_msg, routing, out);
            }
            None => {
                tracing::info!(
                    dbus_unique_name = requested_by.map(|r| r.unique_name.as_str()),
                    dbus_peer_uid = requested_by.map(|r| r.uid),
                    dbus_peer_pid = requested_by.and_then(|r| r.pid),
                    dbus_peer_comm = requested_by.and_then(|r| r.comm.as_deref()),
                    "Activating systemd to hand-off: service name='{name}' unit='{unit}'{by}"
                );
                self.join_or_start(SYSTEMD_NAME, Waiter::FromBus(out_msg), routing, out);
            }
        }
    }

    /// Send `msg` (built by the bus, addressed to systemd's well-known
    /// name) now, or once systemd connects.
    pub(crate) fn send_to_systemd(
        &mut self,
        builder: MessageBuilder,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        match self.registry.owner(SYSTEMD_NAME) {
            // Without activation the destination is systemd's unique name,
            // as with dbus-daemon.
            Some(owner) => self.send_to(owner, builder, routing, out),
            None => {
                let Some((out_msg, msg)) = self.build(builder.destination(SYSTEMD_NAME)) else {
                    return;
                };
                if !self.monitors.is_empty() {
                    let watchers =
                        self.with_input(&msg, None, None, |input| self.monitor_recipients(input));
                    self.deliver_all(&watchers, &msg, &out_msg, routing, out);
                }
                if self.check_pending_limit(SYSTEMD_NAME).is_ok() {
                    self.join_or_start(SYSTEMD_NAME, Waiter::FromBus(out_msg), routing, out);
                }
            }
        }
    }

    /// Connection `id` as log lines name it.
    pub(crate) fn requester(&self, id: ConnId) -> Option<Requester> {
        let conn = self.conns.get(&id)?;
        Some(Requester {
            unique_name: conn.unique().clone().unwrap_or_default(),
            uid: conn.creds().uid,
            pid: conn.creds().pid,
            comm: conn.creds().comm.clone(),
        })
    }

    /// After a driver call: names that just got an owner complete their
    /// activations.
    pub(crate) fn names_owned(
        &mut self,
        events: &[NameEvent],
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        if self.activations.is_empty() {
            return;
        }
        for event in events {
            if let NameEvent::OwnerChanged {
                name,
                new: Some(owner),
                ..
            } = event
            {
                if let Some(pending) = self.activations.take(name) {
                    tracing::info!("Successfully activated service '{name}'");
                    self.activation_succeeded(name, *owner, pending, routing, out);
                }
            }
        }
    }

    fn activation_succeeded(
        &mut self,
        name: &str,
        owner: ConnId,
        pending: Pending,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        for waiter in pending.waiters {
            match waiter {
                Waiter::Message { from, msg, stamped } => {
                    // Resume routing where the message stopped: monitors
                    // saw it already.
                    if self.conns.contains_key(&from) {
                        let target = self.registry.owner(name);
                        self.route_unicast(from, &msg, stamped, name, target, routing, out);
                    }
                }
                Waiter::FromBus(msg) => {
                    if self.conns.contains_key(&owner) {
                        self.deliver(owner, &msg, routing, out);
                    }
                }
                Waiter::Start { from, call } => {
                    if self.conns.contains_key(&from) {
                        let body = vec![Value::Uint32(START_REPLY_SUCCESS)];
                        self.reply(from, &call, body, Vec::new(), routing, out);
                    }
                }
            }
        }
    }

    /// The daemon could not start `name` (or it died before taking its
    /// name): every waiter gets `error`.
    pub fn activation_failed(
        &mut self,
        name: &str,
        error: BusError,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let routing = Routing::by_bus(now);
        let _ = self.fail_activation(name, error.name, &error.message, routing, out);
    }

    /// The `AssumedAppArmorLabel=` of the activatable names (after a
    /// reload).
    pub fn set_assumed_apparmor_labels(&mut self, labels: HashMap<String, String>) {
        self.opts.assumed_apparmor_labels = labels;
    }

    /// The `SystemdService=` units of the activatable names (after a
    /// reload). Pending activations keep the unit they started with.
    pub fn set_systemd_units(&mut self, units: HashMap<String, String>) {
        self.opts.systemd_units = units;
    }

    /// Whether an activation of `name` is under way (the daemon ignores the
    /// exit of a service whose activation already ended).
    pub fn activation_pending(&self, name: &str) -> bool {
        self.activations.is_pending(name)
    }

    /// Ends the activation of `name` with `error`; returns whether a
    /// program was started for it.
    fn fail_activation(
        &mut self,
        name: &str,
        error: &str,
        text: &str,
        routing: Routing,
        out: &mut Vec<Action>,
    ) -> bool {
        let Some(pending) = self.activations.take(name) else {
            return false;
        };
        tracing::info!("Activated service '{name}' failed: {text}");
        for waiter in &pending.waiters {
            // dbus-daemon tells every waiter, even one whose message asked
            // for no reply: the message is lost and the sender must know.
            if let Some((to, msg)) = waiter.caller() {
                if self.conns.contains_key(&to) {
                    let serial = msg.serial();
                    self.send_to(to, error_builder(serial, error, text), routing, out);
                }
            }
        }
        pending.spawned
    }

    /// Fail activations whose `service_start_timeout` passed.
    pub(crate) fn expire_activations(&mut self, routing: Routing, out: &mut Vec<Action>) {
        let timeout = self.opts.limits.service_start_timeout.as_millis();
        while let Some(name) = self.activations.first_expired(routing.now) {
            let text = format!(
                "Failed to activate service '{name}': timed out (service_start_timeout={timeout}ms)"
            );
            tracing::warn!("{text}");
            if self.fail_activation(&name, errors::TIMED_OUT, &text, routing, out) {
                out.push(Action::CancelActivation { name });
            }
        }
    }

    /// A signal addressed to the bus: systemd reporting that it could not
    /// start a unit. Only the owner of org.freedesktop.systemd1 is heard.
    pub(crate) fn driver_signal(
        &mut self,
        from: ConnId,
        msg: &Message,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        if msg.msg_type() != MessageType::Signal
            || msg.interface() != Some(SYSTEMD_ACTIVATOR)
            || msg.member() != Some("ActivationFailure")
        {
            return;
        }
        if self.registry.owner(SYSTEMD_NAME) != Some(from) {
            let who = self.unique_name(from).unwrap_or("(unknown)");
            tracing::warn!("ignoring forged ActivationFailure message from connection {who}");
            return;
        }
        if !self.opts.systemd_activation {
            tracing::warn!("ignoring ActivationFailure while not using systemd activation");
            return;
        }
        let args = match msg.body_values() {
            Ok(values) => values,
            Err(_) => return,
        };
        let [Value::String(unit), Value::String(error), Value::String(text)] = &args[..] else {
            tracing::warn!(
                "ignoring ActivationFailure with arguments ({}), expected (sss)",
                msg.signature()
            );
            return;
        };
        // An invalid error name cannot go on the wire; Spawn.Failed keeps
        // the text.
        let error = if quickbus_wire::names::is_valid_error_name(error) {
            error.as_str()
        } else {
            errors::SPAWN_FAILED
        };
        tracing::info!("Activation via systemd failed for unit '{unit}': {text}");
        let names = self.activations.names_for_unit(unit);
        for name in names {
            let _ = self.fail_activation(&name, error, text, routing, out);
        }
    }

    /// UpdateActivationEnvironment in systemd mode: systemd gets the same
    /// variables (`SetEnvironment`), so the services it starts see them.
    pub(crate) fn forward_environment(
        &mut self,
        pairs: &[(String, String)],
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        if !self.opts.systemd_activation {
            return;
        }
        let items = pairs
            .iter()
            .map(|(k, v)| Value::String(format!("{k}={v}")))
            .collect();
        let builder = MessageBuilder::method_call("/org/freedesktop/systemd1", "SetEnvironment")
            .interface("org.freedesktop.systemd1.Manager")
            .body(vec![Value::Array {
                elem_sig: "s".into(),
                items,
            }]);
        self.send_to_systemd(builder, routing, out);
    }
}
