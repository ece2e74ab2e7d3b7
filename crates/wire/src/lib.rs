//! quickbus-wire: the D-Bus wire format. No I/O.

pub mod address;
