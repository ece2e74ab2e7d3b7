//! What can go wrong talking to a bus.

use std::io;

/// A failure of the connection itself (addressing, socket, authentication,
/// framing). After most of these the connection is unusable.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid bus address {address:?}: {reason}")]
    Address { address: String, reason: String },
    #[error("no supported transport in bus address {0:?} (only unix:path= and unix:abstract=)")]
    NoSupportedAddress(String),
    #[error("{0} is not set")]
    NoBusAddress(&'static str),
    #[error("cannot connect to {address}: {source}")]
    Connect {
        address: String,
        #[source]
        source: io::Error,
    },
    #[error("authentication failed: {0}")]
    Auth(String),
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    #[error("timed out waiting for the bus")]
    Timeout,
    #[error("the bus closed the connection")]
    Closed,
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("invalid message: {0}")]
    Wire(#[from] quickbus_wire::Error),
}

impl From<rustix::io::Errno> for Error {
    fn from(errno: rustix::io::Errno) -> Error {
        // A read on a socket with SO_RCVTIMEO set fails with EAGAIN when
        // the time-out expires.
        if errno == rustix::io::Errno::AGAIN {
            Error::Timeout
        } else {
            Error::Io(errno.into())
        }
    }
}

/// An error reply received from the bus or a peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}: {message}")]
pub struct DBusError {
    /// The D-Bus error name, e.g. `org.freedesktop.DBus.Error.NameHasNoOwner`.
    pub name: String,
    /// The first string argument of the error reply, or "" if it has none.
    pub message: String,
}

/// Why a method call did not return a reply.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The callee answered with an error reply.
    #[error(transparent)]
    Remote(#[from] DBusError),
    /// The connection failed before a reply came.
    #[error(transparent)]
    Connection(#[from] Error),
}

impl CallError {
    /// The D-Bus error name if this is an error reply.
    pub fn dbus_name(&self) -> Option<&str> {
        match self {
            CallError::Remote(e) => Some(&e.name),
            CallError::Connection(_) => None,
        }
    }
}

impl From<quickbus_wire::Error> for CallError {
    fn from(e: quickbus_wire::Error) -> CallError {
        CallError::Connection(Error::Wire(e))
    }
}

impl From<io::Error> for CallError {
    fn from(e: io::Error) -> CallError {
        CallError::Connection(Error::Io(e))
    }
}
