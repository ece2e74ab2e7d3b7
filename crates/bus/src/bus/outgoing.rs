//! Messages from the bus itself, and messages as receivers see them:
//! serials, building, stamping SENDER, and sending a reply, an error or a
//! signal to one connection (monitors see it; the receiver's policy may
//! refuse it).
//!
//! Owns: the bus's serial counter and the one shared empty fd list.
//! May touch: peers (unique names), monitors (to show them what the bus
//! sends), the policy check, traffic counters (errors sent), and delivery
//! (see `overflow`).

use crate::fds::PassedFd;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use quickbus_wire::{flags, Message, MessageBuilder, Value};

use crate::errors::BusError;
use crate::flow::Kind;
use crate::policy::Delivery;
use crate::{Action, Bus, ConnId, Frame, OutMessage, BUS_NAME};

use super::Routing;

impl Bus {
    /// The message as receivers see it: SENDER set to the sender's unique
    /// name, body shared.
    pub(super) fn stamped(&self, from: ConnId, msg: &Message, fds: Vec<PassedFd>) -> OutMessage {
        let sender = self.unique_name(from).unwrap_or(BUS_NAME);
        self.stamped_as(sender, msg, fds)
    }

    /// The message with SENDER set to `sender`.
    pub(crate) fn stamped_as(&self, sender: &str, msg: &Message, fds: Vec<PassedFd>) -> OutMessage {
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
    pub(super) fn build_with_fds(
        &mut self,
        builder: MessageBuilder,
        fds: Vec<PassedFd>,
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

    /// A signal from the bus to every connection whose rules match it and
    /// whose policy lets it in, and to monitors.
    pub(crate) fn broadcast_from_bus(
        &mut self,
        builder: MessageBuilder,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        let Some((out_msg, msg)) = self.build(builder) else {
            return;
        };
        let (watchers, mut recipients) = self.with_input(&msg, None, None, |input| {
            let mut to = Vec::new();
            self.subs.recipients(input, None, &mut to);
            (self.monitor_recipients(input), to)
        });
        self.deliver_all(&watchers, &msg, &out_msg, routing, out);
        self.keep_allowed(None, None, &msg, &mut recipients, routing, out);
        self.queue_broadcast(&recipients, out_msg, routing, out);
    }

    /// Send a bus message to one connection, with its unique name as
    /// destination.
    pub(crate) fn send_to(
        &mut self,
        to: ConnId,
        builder: MessageBuilder,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        self.send_to_with_fds(to, builder, Vec::new(), routing, out);
    }

    /// [`Bus::send_to`] with fds attached. Monitors that cannot take fds
    /// do not see it.
    pub(super) fn send_to_with_fds(
        &mut self,
        to: ConnId,
        builder: MessageBuilder,
        fds: Vec<PassedFd>,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        self.send_from_bus(to, builder, fds, false, routing, out);
    }

    /// [`Bus::send_to`] of what `to` is owed (MessagesLost): it goes into
    /// `to`'s queue whatever its bounds (see [`Bus::deliver_owed`]).
    pub(super) fn send_owed(
        &mut self,
        to: ConnId,
        builder: MessageBuilder,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        self.send_from_bus(to, builder, Vec::new(), true, routing, out);
    }

    fn send_from_bus(
        &mut self,
        to: ConnId,
        builder: MessageBuilder,
        fds: Vec<PassedFd>,
        owed: bool,
        routing: Routing,
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
                self.deliver_all(&watchers, &msg, &out_msg, routing, out);
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
                Ok(()) if owed => self.deliver_owed(to, out_msg, routing, out),
                Ok(()) => self.deliver(to, &out_msg, routing, out),
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
                        self.deliver_all(&watchers, &built, &out_err, routing, out);
                    }
                }
                Err(_) => {}
            }
        }
    }

    /// Show monitors a bus message to `to` that `to` itself will not get.
    pub(super) fn show_monitors(
        &mut self,
        to: ConnId,
        builder: MessageBuilder,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
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
            self.deliver_all(&watchers, &msg, &out_msg, routing, out);
        }
    }

    /// Method return from the driver, unless the caller asked for none,
    /// with `fds` attached (closed if unsent).
    pub(crate) fn reply(
        &mut self,
        to: ConnId,
        call: &Message,
        body: Vec<Value>,
        fds: Vec<PassedFd>,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        if call.flags() & flags::NO_REPLY_EXPECTED != 0 {
            return;
        }
        self.send_to_with_fds(
            to,
            MessageBuilder::method_return(call.serial()).body(body),
            fds,
            routing,
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
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        if call.flags() & flags::NO_REPLY_EXPECTED != 0 {
            return;
        }
        self.send_error(to, call.serial(), err, routing, out);
    }

    pub(super) fn send_error(
        &mut self,
        to: ConnId,
        reply_serial: u32,
        err: BusError,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        self.count_error(to);
        let builder =
            MessageBuilder::error(reply_serial, err.name).body(vec![Value::String(err.message)]);
        self.send_to(to, builder, routing, out);
    }

    /// The daemon's answer to [`Action::Restart`]: an empty method return
    /// once the restarted bus serves, or why it refused to restart.
    /// Nothing if the caller left meanwhile.
    pub fn restart_answered(
        &mut self,
        requester: crate::RestartRequester,
        result: Result<(), BusError>,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let routing = Routing::by_bus(now);
        if !self.conns.contains_key(&requester.conn) {
            return;
        }
        match result {
            Ok(()) => self.send_to(
                requester.conn,
                MessageBuilder::method_return(requester.serial),
                routing,
                out,
            ),
            Err(err) => self.send_error(requester.conn, requester.serial, err, routing, out),
        }
    }

    /// NoReply on behalf of a callee that will never answer. Flagged
    /// NO_REPLY_EXPECTED like dbus-daemon's.
    pub(super) fn send_no_reply(
        &mut self,
        caller: ConnId,
        serial: u32,
        err: BusError,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        if !self.conns.contains_key(&caller) {
            return;
        }
        self.count_error(caller);
        let builder =
            MessageBuilder::error(serial, err.name).body(vec![Value::String(err.message)]);
        self.send_to(caller, builder, routing, out);
    }
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
