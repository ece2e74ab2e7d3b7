//! What the bus says when a receiver's queue is full (the daemon decides
//! that; see quickbus-daemon's `flow` module): the caller of a call that
//! could not be queued gets `LimitsExceeded`, and a receiver that lost
//! signals is told how many with [`MESSAGES_LOST`]. Both go through
//! [`Bus::send_to`], so monitors see them.

use bytes::BytesMut;
use quickbus_wire::{Message, MessageBuilder, Value};

use crate::errors::{self, BusError};
use crate::{Action, Bus, ConnId, OutMessage, BUS_PATH};

/// The interface of quickbus's own signals from the bus.
pub const QUICKBUS_INTERFACE: &str = "org.quickbus.Bus";
/// `MessagesLost(u count)`: sent by the bus, addressed to a receiver that
/// did not read for so long that `count` signals for it were dropped.
pub const MESSAGES_LOST: &str = "MessagesLost";

impl Bus {
    /// Whether `id` is a monitor (it only watches; copies of calls it gets
    /// are not the calls themselves).
    pub fn is_monitor(&self, id: ConnId) -> bool {
        self.monitors.is_monitor(id)
    }

    /// The method call `msg` could not be queued for `to` (its queue is
    /// full): the call is no longer pending and its caller gets
    /// `LimitsExceeded`, unless it asked for no reply.
    pub fn call_not_queued(&mut self, to: ConnId, msg: &OutMessage, out: &mut Vec<Action>) {
        // The failure path only: rebuild one buffer to read the header.
        let mut raw = BytesMut::with_capacity(msg.frame.header.len() + msg.frame.body.len());
        raw.extend_from_slice(&msg.frame.header);
        raw.extend_from_slice(&msg.frame.body);
        let Ok(call) = Message::parse(raw.freeze()) else {
            return;
        };
        let Some(caller) = call.sender().and_then(|s| self.registry.owner(s)) else {
            return;
        };
        self.replies.take_reply(to, caller, call.serial());
        let receiver = self.unique_name(to).unwrap_or("(gone)").to_owned();
        let err = BusError::new(
            errors::LIMITS_EXCEEDED,
            format!(
                "The message queue of {receiver} is full (max_outgoing_bytes or \
                 max_outgoing_unix_fds): it is not reading its messages"
            ),
        );
        self.error_reply(caller, &call, err, out);
    }

    /// Tell `to` that `count` signals for it were dropped while its queue
    /// was full.
    pub fn tell_messages_lost(&mut self, to: ConnId, count: u64, out: &mut Vec<Action>) {
        if !self.conns.contains_key(&to) {
            return;
        }
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        let builder = MessageBuilder::signal(BUS_PATH, QUICKBUS_INTERFACE, MESSAGES_LOST)
            .body(vec![Value::Uint32(count)]);
        self.send_to(to, builder, out);
    }
}

#[cfg(test)]
mod tests {
    use quickbus_wire::MessageType;

    use super::*;
    use crate::tests::{call_bus, options, s, Harness};

    fn become_monitor() -> MessageBuilder {
        MessageBuilder::method_call(BUS_PATH, "BecomeMonitor")
            .interface("org.freedesktop.DBus.Monitoring")
            .destination(crate::BUS_NAME)
            .body(vec![
                Value::Array {
                    elem_sig: "s".into(),
                    items: vec![],
                },
                Value::Uint32(0),
            ])
    }

    #[test]
    fn a_call_not_queued_fails_its_caller_and_is_no_longer_pending() {
        let mut opts = options();
        opts.limits.max_replies_per_connection = 1;
        let mut h = Harness::with_options(opts);
        let (a, _) = h.client();
        let (b, name_b) = h.client();
        let (m, _) = h.client();
        h.send(m, become_monitor());
        h.take();
        let serial = h.send(
            a,
            MessageBuilder::method_call("/", "Do").destination(name_b.clone()),
        );
        let call = std::mem::take(&mut h.out)
            .into_iter()
            .find_map(|action| match action {
                Action::Deliver { to, msg } if to == b => Some(msg),
                _ => None,
            })
            .expect("the call went to b");
        h.bus.call_not_queued(b, &call, &mut h.out);
        let got: Vec<_> = h.take();
        let to_a: Vec<_> = got.iter().filter(|(to, _)| *to == a).collect();
        assert_eq!(to_a.len(), 1, "{got:?}");
        let err = &to_a[0].1;
        assert_eq!(err.msg_type(), MessageType::Error);
        assert_eq!(err.error_name(), Some(errors::LIMITS_EXCEEDED));
        assert_eq!(err.reply_serial(), Some(serial));
        assert!(
            got.iter()
                .any(|(to, msg)| *to == m && msg.error_name() == Some(errors::LIMITS_EXCEEDED)),
            "the monitor saw the refusal"
        );
        // The refused call no longer counts against max_replies_per_connection.
        h.send(
            a,
            MessageBuilder::method_call("/", "Do").destination(name_b),
        );
        let got = h.take();
        assert!(got.iter().any(|(to, _)| *to == b), "{got:?}");
    }

    #[test]
    fn a_receiver_is_told_how_many_signals_it_lost_and_monitors_see_it() {
        let mut h = Harness::new();
        let (b, name_b) = h.client();
        let (m, _) = h.client();
        h.send(m, become_monitor());
        h.take();
        h.bus.tell_messages_lost(b, 41_000, &mut h.out);
        let got = h.take();
        assert_eq!(got.len(), 2, "the receiver and the monitor");
        for (to, msg) in &got {
            assert!(*to == b || *to == m);
            assert_eq!(msg.msg_type(), MessageType::Signal);
            assert_eq!(msg.interface(), Some(QUICKBUS_INTERFACE));
            assert_eq!(msg.member(), Some(MESSAGES_LOST));
            assert_eq!(msg.destination(), Some(name_b.as_str()));
            assert_eq!(msg.body_values().unwrap(), vec![Value::Uint32(41_000)]);
        }
        assert!(h.bus.is_monitor(m));
        assert!(!h.bus.is_monitor(b));
        // Nothing for a connection that is gone.
        h.send(b, call_bus("ReleaseName", vec![s("x.y")]));
        h.take();
        h.bus.remove_connection(b, &mut h.out);
        h.take();
        h.bus.tell_messages_lost(b, 1, &mut h.out);
        assert!(h.take().iter().all(|(to, _)| *to != b));
    }
}
