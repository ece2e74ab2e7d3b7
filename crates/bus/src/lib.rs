//! quickbus-bus: the broker's brain, sans-I/O.
//!
//! Input: authenticated peers' validated messages and connection events.
//! Output: [`Action`]s (deliveries and disconnects). No sockets in here, so
//! every routing and policy rule is testable in microseconds.

pub mod match_index;
pub mod match_rule;
