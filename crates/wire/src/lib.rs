//! quickbus-wire: the D-Bus wire format. No I/O.
//!
//! [`Message::parse`] validates a whole message once (header fields, body
//! against its signature, every limit of the spec); afterwards accessors
//! only slice the raw bytes. [`Message::stamp`] rewrites the header with the
//! bus-assigned sender and shares the body. [`MessageBuilder`] marshals
//! messages of any type in either byte order.

pub mod address;
mod builder;
mod error;
mod framing;
pub mod header;
mod message;
pub mod names;
mod read;
pub mod signature;
pub mod types;
mod value;
mod write;

pub use builder::MessageBuilder;
pub use error::{Error, ErrorKind};
pub use framing::{frame_length, MIN_HEADER_LEN};
pub use message::{Frame, Message, StrArg, StrKind};
pub use value::Value;

/// Largest message, header and body together (128 MiB).
pub const MAX_MESSAGE_SIZE: usize = 1 << 27;
/// Largest array, in bytes (64 MiB).
pub const MAX_ARRAY_LEN: usize = 1 << 26;

/// Byte order of a message, given by its first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endian {
    /// `l`
    Little,
    /// `B`
    Big,
}

impl Endian {
    pub fn from_byte(byte: u8) -> Result<Endian, Error> {
        match byte {
            b'l' => Ok(Endian::Little),
            b'B' => Ok(Endian::Big),
            _ => Err(Error::new(
                ErrorKind::BadEndian,
                "endianness byte is neither 'l' nor 'B'",
            )),
        }
    }

    pub fn to_byte(self) -> u8 {
        match self {
            Endian::Little => b'l',
            Endian::Big => b'B',
        }
    }

    /// The byte order of this machine.
    pub fn native() -> Endian {
        if cfg!(target_endian = "big") {
            Endian::Big
        } else {
            Endian::Little
        }
    }
}

/// The four message types the spec defines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[repr(u8)]
pub enum MessageType {
    MethodCall = 1,
    MethodReturn = 2,
    Error = 3,
    Signal = 4,
}

impl MessageType {
    /// Type 0 is invalid; types above 4 give an error of kind
    /// [`ErrorKind::UnknownMessageType`], which the spec says to ignore.
    pub fn from_byte(byte: u8) -> Result<MessageType, Error> {
        match byte {
            0 => Err(Error::header("message type 0 is invalid")),
            1 => Ok(MessageType::MethodCall),
            2 => Ok(MessageType::MethodReturn),
            3 => Ok(MessageType::Error),
            4 => Ok(MessageType::Signal),
            other => Err(Error::new(
                ErrorKind::UnknownMessageType(other),
                format!("unknown message type {other}"),
            )),
        }
    }
}

/// The bus driver's well-known name, also the sender of every message the
/// bus itself makes.
pub const BUS_NAME: &str = "org.freedesktop.DBus";
/// The bus driver's canonical object path.
pub const BUS_PATH: &str = "/org/freedesktop/DBus";
/// The bus driver's main interface.
pub const BUS_INTERFACE: &str = "org.freedesktop.DBus";
/// quickbus-daemon's own interface on the driver's object: restarting
/// in place (docs/restart.md).
pub const DAEMON_INTERFACE: &str = "org.quickbus.Daemon1";

/// Header flags.
pub mod flags {
    /// The caller does not want a reply.
    pub const NO_REPLY_EXPECTED: u8 = 0x1;
    /// Do not start a service to deliver this message.
    pub const NO_AUTO_START: u8 = 0x2;
    /// The caller is ready to wait for an interactive authorization.
    pub const ALLOW_INTERACTIVE_AUTHORIZATION: u8 = 0x4;
}
#[cfg(test)]
mod fuzz_regressions;
#[cfg(test)]
mod message_tests;
#[cfg(test)]
mod parse_tests;
#[cfg(test)]
mod proptests;
