//! The activatable service of the differential scenarios:
//!
//!     activatable NAME
//!
//! Connects to `$DBUS_STARTER_ADDRESS` (set by the bus that started it),
//! takes NAME, and answers every method call with a return carrying the
//! call's own body (an echo), until the bus goes away. Deterministic on
//! purpose: its traffic is part of what the scenarios compare.

use quickbus_client::{Connection, MessageBuilder, MessageType};

fn main() {
    let name = std::env::args().nth(1).expect("usage: activatable NAME");
    let address = std::env::var("DBUS_STARTER_ADDRESS").expect("DBUS_STARTER_ADDRESS");
    let mut bus = Connection::connect(&address).expect("connect to the starter bus");
    bus.request_name(&name, 0).expect("RequestName");
    while let Ok((call, _fds)) = bus.receive() {
        if call.msg_type() != MessageType::MethodCall {
            continue;
        }
        let (Some(sender), Ok(body)) = (call.sender(), call.body_values()) else {
            continue;
        };
        let reply = MessageBuilder::method_return(call.serial())
            .destination(sender)
            .body(body);
        if bus.send(reply, &[]).is_err() {
            break;
        }
    }
}
