//! The one error type of the crate: a kind the caller can match on, and a
//! human reason for logs.

use std::borrow::Cow;

/// What went wrong, coarse enough for a caller to decide what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Fewer bytes than the message says it has.
    Truncated,
    /// Over MAX_MESSAGE_SIZE, MAX_ARRAY_LEN or a nesting limit.
    TooLarge,
    /// First byte neither `l` nor `B`.
    BadEndian,
    /// Protocol version other than 1.
    BadVersion,
    /// A message type the spec does not define (> 4). The spec says such
    /// messages must be ignored, so a receiver may drop them silently.
    UnknownMessageType(u8),
    /// The header is malformed (type 0, missing or mistyped field, ...).
    Header,
    /// The body does not match its signature or has bad values.
    Body,
    /// A malformed type signature.
    Signature,
    /// A malformed bus, interface, member or error name, or object path.
    Name,
    /// A builder value that cannot be marshalled.
    Value,
}

/// A wire-format error; `Display` gives the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Error {
    kind: ErrorKind,
    reason: Cow<'static, str>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, reason: impl Into<Cow<'static, str>>) -> Error {
        Error {
            kind,
            reason: reason.into(),
        }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// True for a message of a type above 4, which the spec says to ignore.
    pub fn is_unknown_message_type(&self) -> bool {
        matches!(self.kind, ErrorKind::UnknownMessageType(_))
    }

    pub(crate) fn truncated() -> Error {
        Error::new(ErrorKind::Truncated, "message truncated")
    }
    pub(crate) fn body(reason: impl Into<Cow<'static, str>>) -> Error {
        Error::new(ErrorKind::Body, reason)
    }
    pub(crate) fn header(reason: impl Into<Cow<'static, str>>) -> Error {
        Error::new(ErrorKind::Header, reason)
    }
    pub(crate) fn signature(reason: impl Into<Cow<'static, str>>) -> Error {
        Error::new(ErrorKind::Signature, reason)
    }
    pub(crate) fn name(reason: impl Into<Cow<'static, str>>) -> Error {
        Error::new(ErrorKind::Name, reason)
    }
    pub(crate) fn value(reason: impl Into<Cow<'static, str>>) -> Error {
        Error::new(ErrorKind::Value, reason)
    }
    pub(crate) fn too_large(reason: impl Into<Cow<'static, str>>) -> Error {
        Error::new(ErrorKind::TooLarge, reason)
    }
}
