//! quickbus-client: a small blocking D-Bus client built on quickbus-wire.
//!
//! ```no_run
//! use quickbus_client::Connection;
//! let mut bus = Connection::session()?;
//! let id = bus.get_id()?;
//! println!("I am {}, the bus is {id}", bus.unique_name());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

mod address;
mod connection;
pub mod containers1;
mod cookie;
mod error;
mod handshake;
pub mod sasl;
mod socket;
mod transport;

pub use connection::{
    bus_call, error_of, system_bus_address, Connection, Received, DEFAULT_SYSTEM_BUS_ADDRESS,
};
pub use error::{CallError, DBusError, Error};
pub use quickbus_wire::{Message, MessageBuilder, MessageType, Value};
/// The bus driver's name, path and interface.
pub use quickbus_wire::{BUS_INTERFACE, BUS_NAME, BUS_PATH};
pub use transport::wait_readable;
