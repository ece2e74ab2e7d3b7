//! Messages with no destination that are not signals: nobody on the bus
//! is addressed, so dbus-daemon leaves them to its own libdbus connection
//! to the sender, which answers org.freedesktop.DBus.Peer itself (Ping,
//! GetMachineId) and any other method call with UnknownMethod. Before or
//! after Hello alike.
//!
//! As there: the answers go out even when the sender asked for no reply,
//! carry no SENDER (libdbus does not set one) and a DESTINATION only if
//! the message named its own sender; nothing is routed, not even to
//! monitors; replies and errors to nobody are dropped.
//!
//! Owns: nothing. May touch: peers (the sender's name) and the outgoing
//! queue (`deliver`), not monitors.

use bytes::Bytes;
use quickbus_wire::{flags, Message, MessageBuilder, MessageType, Value};

use crate::errors::{self, BusError};
use crate::{Action, Bus, ConnId, OutMessage};

use super::Routing;

const PEER_INTERFACE: &str = "org.freedesktop.DBus.Peer";

impl Bus {
    /// Answer `msg` (not a signal, no destination) from `from`.
    pub(crate) fn answer_peerless(
        &mut self,
        from: ConnId,
        msg: &Message,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        let is_call = msg.msg_type() == MessageType::MethodCall;
        let answer = if msg.interface() == Some(PEER_INTERFACE) {
            // libdbus bounces anything else on this interface, replies
            // and errors included, so the interface can grow later.
            match msg.member() {
                Some("Ping") if is_call => MessageBuilder::method_return(msg.serial()),
                Some("GetMachineId") if is_call => MessageBuilder::method_return(msg.serial())
                    .body(vec![Value::String(self.opts.machine_id.clone())]),
                _ => unknown(
                    msg,
                    "Unknown method invoked on org.freedesktop.DBus.Peer interface".into(),
                ),
            }
        } else if is_call {
            // libdbus's text, with printf's "(null)" for a missing
            // interface.
            let text = format!(
                "Method \"{}\" with signature \"{}\" on interface \"{}\" doesn't exist\n",
                msg.member().unwrap_or(""),
                msg.signature(),
                msg.interface().unwrap_or("(null)")
            );
            unknown(msg, text)
        } else {
            return;
        };
        let answer = match msg.sender() {
            Some(sender) => answer.destination(sender),
            None => answer,
        };
        self.send_unmonitored(from, answer, routing, out);
    }

    /// Send a message built by libdbus rather than the driver: no SENDER,
    /// not shown to monitors.
    fn send_unmonitored(
        &mut self,
        to: ConnId,
        builder: MessageBuilder,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        let serial = self.next_serial();
        let built: Result<Bytes, _> = builder.flags(flags::NO_REPLY_EXPECTED).build(serial);
        match built.and_then(Message::parse) {
            Ok(msg) => {
                if msg.msg_type() == MessageType::Error {
                    self.count_error(to);
                }
                let out_msg = OutMessage {
                    frame: msg.frame(),
                    fds: self.empty_fds.clone(),
                    kind: crate::flow::Kind::of(&msg),
                };
                self.deliver(to, &out_msg, routing, out);
            }
            Err(e) => tracing::error!("bus failed to build a message: {e}"),
        }
    }
}

fn unknown(msg: &Message, text: String) -> MessageBuilder {
    let err = BusError::new(errors::UNKNOWN_METHOD, text);
    MessageBuilder::error(msg.serial(), err.name).body(vec![Value::String(err.message)])
}
