//! What a policy check is about: one message on its way to one receiver.
//!
//! Owns: the [`Delivery`] value. May touch: nothing.

use crate::ConnId;

/// One message on its way to one receiver.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Delivery {
    /// The sending connection; None for the bus.
    pub from: Option<ConnId>,
    /// The connection the message is addressed to (None: a broadcast, or
    /// a message to the bus).
    pub addressed: Option<ConnId>,
    /// The receiver being checked (None: the bus itself).
    pub to: Option<ConnId>,
    /// A reply answering a call the bus tracked (always true for replies
    /// from the bus).
    pub requested_reply: bool,
}

impl Delivery {
    /// A message from `from` to the bus driver.
    pub(crate) fn to_bus(from: ConnId) -> Delivery {
        Delivery {
            from: Some(from),
            addressed: None,
            to: None,
            requested_reply: false,
        }
    }
}
