//! What a connection may do before it says Hello, as dbus-daemon answers
//! it.
//!
//! dbus-daemon's security check lets an unregistered connection send only
//! Hello to the driver: anything else addressed to org.freedesktop.DBus
//! (another driver method, an unknown one, a Peer call, a signal) is
//! answered with AccessDenied and the connection stays, so a later Hello
//! still works. A message for any other destination, or a signal to
//! nobody, closes the connection. Calls with no destination are answered
//! as after Hello (see `peerless`). Monitors see the message with
//! the sender `:not.active.yet`, and the error addressed there.
//!
//! Owns: nothing. May touch: peers (giving the unique name at Hello),
//! the policy check, monitors, the driver (Hello itself), and `outgoing`.

use quickbus_wire::{Message, MessageBuilder, MessageType, Value};

use super::is_hello;
use crate::activation::Rescan;
use crate::errors::{self, BusError};
use crate::policy::Delivery;
use crate::{Action, Bus, ConnId, BUS_NAME};

use super::Routing;

/// The sender dbus-daemon stamps on an unregistered connection's messages
/// (so monitors never see a forged or missing sender), and the destination
/// of the errors it gets.
pub(crate) const NOT_ACTIVE_YET: &str = ":not.active.yet";

/// Why a connection whose Hello the bus refused is disconnected.
pub const HELLO_REFUSED: &str = "its Hello was refused";

const NOT_REGISTERED: &str =
    "Client tried to send a message other than Hello without being registered";

impl Bus {
    /// Handle `msg` from `from`, which has not said Hello yet.
    pub(crate) fn receive_unregistered(
        &mut self,
        from: ConnId,
        msg: &Message,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        // The security module speaks first, as in dbus-daemon: a domain
        // without send_msg to the bus cannot even say Hello.
        if self.mac.is_some() && msg.destination() == Some(BUS_NAME) {
            if let Err(denial) = self.check_mac(msg, Delivery::to_bus(from)) {
                self.refuse(from, msg, &denial, routing, out);
                return;
            }
        }
        match msg.destination() {
            Some(BUS_NAME) if is_hello(msg) => {
                let conn = &self.conns[&from];
                if self.allows_connection(conn.creds()) {
                    if self.driver_call(from, msg, routing, Rescan::Allowed, out) {
                        self.pass_to_eavesdroppers(from, msg, routing, out);
                    }
                    if self.unique_name(from).is_none() {
                        // Refused (max_connections_per_user,
                        // max_completed_connections): it goes after the
                        // error, where dbus-daemon would leave it
                        // incomplete until auth_timeout
                        // (docs/reliability.md).
                        out.push(Action::Disconnect {
                            conn: from,
                            reason: HELLO_REFUSED.into(),
                        });
                    }
                } else {
                    let reason = format!(
                        "uid {} is not allowed to connect by the bus policy (<allow user/group>)",
                        conn.creds().uid
                    );
                    out.push(Action::Disconnect { conn: from, reason });
                }
            }
            Some(BUS_NAME) => {
                self.capture_unregistered(from, msg, routing, out);
                // Sent even when the caller wants no reply, as there.
                let err = BusError::new(errors::ACCESS_DENIED, NOT_REGISTERED);
                self.count_error(from);
                let builder = MessageBuilder::error(msg.serial(), err.name)
                    .destination(NOT_ACTIVE_YET)
                    .body(vec![Value::String(err.message)]);
                self.send_to(from, builder, routing, out);
            }
            None if msg.msg_type() != MessageType::Signal => {
                self.answer_peerless(from, msg, routing, out)
            }
            _ => {
                self.capture_unregistered(from, msg, routing, out);
                out.push(Action::Disconnect {
                    conn: from,
                    reason: NOT_REGISTERED.into(),
                });
            }
        }
    }

    /// Show monitors what an unregistered connection sent.
    fn capture_unregistered(
        &mut self,
        from: ConnId,
        msg: &Message,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        if self.monitors.is_empty() {
            return;
        }
        let out_msg = self.stamped_as(NOT_ACTIVE_YET, msg, Vec::new());
        let watchers = self.with_input(msg, Some(from), None, |input| {
            self.monitor_recipients(input)
        });
        self.deliver_all(&watchers, msg, &out_msg, routing, out);
    }
}
