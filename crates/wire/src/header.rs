//! Header field codes, their types, and how to write them.

use crate::write::Writer;
use crate::Error;

/// Only the bus library may use this path; messages carrying it are refused.
pub const LOCAL_PATH: &str = "/org/freedesktop/DBus/Local";
/// Only the bus library may use this interface; messages carrying it are refused.
pub const LOCAL_INTERFACE: &str = "org.freedesktop.DBus.Local";

/// The header fields the spec defines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Field {
    Path = 1,
    Interface = 2,
    Member = 3,
    ErrorName = 4,
    ReplySerial = 5,
    Destination = 6,
    Sender = 7,
    Signature = 8,
    UnixFds = 9,
}

impl Field {
    /// `Ok(None)` for a code the spec does not define (to be ignored);
    /// an error for 0, which the spec declares invalid.
    pub fn from_code(code: u8) -> Result<Option<Field>, Error> {
        Ok(Some(match code {
            0 => return Err(Error::header("header field code 0 is invalid")),
            1 => Field::Path,
            2 => Field::Interface,
            3 => Field::Member,
            4 => Field::ErrorName,
            5 => Field::ReplySerial,
            6 => Field::Destination,
            7 => Field::Sender,
            8 => Field::Signature,
            9 => Field::UnixFds,
            _ => return Ok(None),
        }))
    }

    /// The one type the field's variant may hold.
    pub fn signature(self) -> &'static [u8] {
        match self {
            Field::Path => b"o",
            Field::Interface
            | Field::Member
            | Field::ErrorName
            | Field::Destination
            | Field::Sender => b"s",
            Field::ReplySerial | Field::UnixFds => b"u",
            Field::Signature => b"g",
        }
    }
}

fn begin_field(w: &mut Writer, field: Field) {
    w.align(8);
    w.u8(field as u8);
    w.signature(field.signature());
}

/// A string or object path field (the caller has validated `value`).
pub(crate) fn write_string_field(w: &mut Writer, field: Field, value: &str) {
    begin_field(w, field);
    w.string(value);
}

pub(crate) fn write_u32_field(w: &mut Writer, field: Field, value: u32) {
    begin_field(w, field);
    w.u32(value);
}

pub(crate) fn write_signature_field(w: &mut Writer, value: &str) {
    begin_field(w, Field::Signature);
    w.signature(value.as_bytes());
}
