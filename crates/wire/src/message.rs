//! A validated message: the raw bytes plus offsets of its header fields.
//! `parse` is the one validation; accessors only slice.

use bytes::Bytes;

use crate::header::{self, Field};
use crate::read::{self, Reader};
use crate::signature::{Parsed, MAX_SIGNATURE_LEN};
use crate::write::Writer;
use crate::{framing, names, Endian, Error, ErrorKind, MessageType, Value};

/// Where a validated UTF-8 string lies in `Message::raw`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    start: u32,
    len: u32,
}

impl Span {
    fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.start as usize + self.len as usize
    }
}

/// A complete, fully validated D-Bus message.
#[derive(Clone, Debug)]
pub struct Message {
    raw: Bytes,
    endian: Endian,
    msg_type: MessageType,
    flags: u8,
    serial: u32,
    body_start: u32,
    path: Option<Span>,
    interface: Option<Span>,
    member: Option<Span>,
    error_name: Option<Span>,
    destination: Option<Span>,
    sender: Option<Span>,
    signature: Option<Span>,
    reply_serial: Option<u32>,
    unix_fds: Option<u32>,
    /// Where the header field array ends (before the padding to the body).
    fields_end: u32,
    /// The SENDER field's bytes, from its 8-aligned start to its value's
    /// end: what [`Message::stamp`] leaves out when it copies the fields.
    sender_field: Option<(u32, u32)>,
    /// Fields of codes this library does not know: stamping drops them, so
    /// it cannot copy the field array as it is.
    unknown_fields: bool,
}

/// A message split for sending: the stamped header and the shared body.
/// `header ++ body` is a valid message and `header.len() % 8 == 0`.
///
/// A restart in place writes it with `quickbus_bus::handover::shared_frame`,
/// which keeps the bytes shared with every other queue that holds them.
#[derive(Clone, Debug)]
pub struct Frame {
    pub header: Bytes,
    pub body: Bytes,
}

/// The header field dbus-daemon's Containers1 adds for a receiver that
/// asked for it (RequestHeader): the sender's container instance, an
/// object path (`/` for none).
pub const CONTAINER_INSTANCE_FIELD: u8 = 10;

impl Frame {
    /// This frame with header field 10 (`CONTAINER_INSTANCE`, `o`)
    /// appended: `path` must be a valid object path, and the header one
    /// that [`Message::stamp`] made (which keeps no field 10 of a peer's).
    pub fn with_container_instance(&self, path: &str) -> Frame {
        debug_assert!(crate::names::is_valid_object_path(path));
        let header = &self.header[..];
        let big = header.first() == Some(&b'B');
        let read_u32 = |at: usize| {
            let b = [header[at], header[at + 1], header[at + 2], header[at + 3]];
            if big {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        let put_u32 = |buf: &mut Vec<u8>, v: u32| {
            buf.extend_from_slice(&if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            })
        };
        let fields_len = read_u32(12) as usize;
        let fields_end = framing::MIN_HEADER_LEN + fields_len;
        let field_at = fields_end.next_multiple_of(8);
        let mut buf = Vec::with_capacity(field_at + 16 + path.len());
        buf.extend_from_slice(&header[..fields_end]);
        buf.resize(field_at, 0);
        // Code, signature "o", then the path (its length 4-aligned: the
        // field starts 8-aligned and the signature takes 4 bytes).
        buf.extend_from_slice(&[CONTAINER_INSTANCE_FIELD, 1, b'o', 0]);
        put_u32(&mut buf, path.len() as u32);
        buf.extend_from_slice(path.as_bytes());
        buf.push(0);
        let new_len = (buf.len() - framing::MIN_HEADER_LEN) as u32;
        let len_bytes = if big {
            new_len.to_be_bytes()
        } else {
            new_len.to_le_bytes()
        };
        buf[12..16].copy_from_slice(&len_bytes);
        buf.resize(buf.len().next_multiple_of(8), 0);
        Frame {
            header: Bytes::from(buf),
            body: self.body.clone(),
        }
    }
}

/// What kind of string argument a match rule sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrKind {
    String,
    ObjectPath,
    Signature,
}

/// A top-level string-like argument of a message body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StrArg<'a> {
    pub kind: StrKind,
    pub value: &'a str,
}

impl Message {
    /// Validate `raw` (exactly one message) fully: fixed header, every
    /// header field, and the body against its signature.
    pub fn parse(raw: Bytes) -> Result<Message, Error> {
        let data: &[u8] = &raw;
        let total = framing::frame_length(data)?.ok_or_else(Error::truncated)?;
        if data.len() < total {
            return Err(Error::truncated());
        }
        if data.len() > total {
            return Err(Error::header("bytes after the end of the message"));
        }
        let endian = Endian::from_byte(data[0])?;
        let msg_type = MessageType::from_byte(data[1])?;
        let flags = data[2];
        let mut fixed = Reader::new(data, 4, endian);
        let body_len = fixed.u32()? as usize;
        let serial = fixed.u32()?;
        if serial == 0 {
            return Err(Error::header("serial is 0"));
        }
        let fields_len = fixed.u32()? as usize;
        let fields_end = framing::MIN_HEADER_LEN + fields_len;
        let body_start = fields_end.next_multiple_of(8);
        let fields_data = data.get(..fields_end).ok_or_else(Error::truncated)?;
        let mut message = Message {
            raw: Bytes::new(),
            endian,
            msg_type,
            flags,
            serial,
            body_start: body_start as u32,
            path: None,
            interface: None,
            member: None,
            error_name: None,
            destination: None,
            sender: None,
            signature: None,
            reply_serial: None,
            unix_fds: None,
            fields_end: fields_end as u32,
            sender_field: None,
            unknown_fields: false,
        };
        message.parse_fields(Reader::new(fields_data, 16, endian))?;
        let signature = match message.signature {
            Some(span) => data.get(span.range()).ok_or_else(Error::truncated)?,
            None => &[],
        };
        let mut table = [0; MAX_SIGNATURE_LEN];
        let signature = Parsed::new(signature, &mut table)?;
        let padding = data
            .get(fields_end..body_start)
            .ok_or_else(Error::truncated)?;
        if padding.iter().any(|&b| b != 0) {
            return Err(Error::header("non-zero padding after the header"));
        }
        message.check_required_fields()?;
        let body = data.get(body_start..).ok_or_else(Error::truncated)?;
        if body.len() != body_len {
            return Err(Error::truncated());
        }
        Reader::new(body, 0, endian).values_to_end(&signature, None)?;
        message.raw = raw;
        Ok(message)
    }

    fn parse_fields(&mut self, mut r: Reader<'_>) -> Result<(), Error> {
        while !r.at_end() {
            r.align(8)?;
            let field_start = r.pos() as u32;
            let code = r.u8()?;
            let (sig, _) = r.signature_bytes()?;
            let Some(field) = Field::from_code(code)? else {
                // Unknown field: the spec says to ignore it, but its value
                // must still be well formed.
                let mut table = [0; MAX_SIGNATURE_LEN];
                let sig = Parsed::single(sig, &mut table)?;
                r.value(&sig, 0, 3, None)?;
                self.unknown_fields = true;
                continue;
            };
            // Comparing with the one expected type also validates `sig`.
            if sig != field.signature() {
                return Err(Error::header(format!(
                    "header field {field:?} has the wrong type"
                )));
            }
            let duplicate = match field {
                Field::Path => set_span(&mut self.path, path_field(&mut r)?),
                Field::Interface => set_span(&mut self.interface, interface_field(&mut r)?),
                Field::Member => set_span(
                    &mut self.member,
                    checked_string(&mut r, names::member_bytes)?,
                ),
                Field::ErrorName => set_span(
                    &mut self.error_name,
                    checked_string(&mut r, names::interface_bytes)?,
                ),
                Field::Destination => set_span(
                    &mut self.destination,
                    checked_string(&mut r, names::bus_name_bytes)?,
                ),
                Field::Sender => {
                    let value = checked_string(&mut r, names::bus_name_bytes)?;
                    self.sender_field = Some((field_start, r.pos() as u32));
                    set_span(&mut self.sender, value)
                }
                Field::Signature => {
                    // Validated once, right after the fields, by the parse
                    // the body check needs anyway.
                    let (sig, start) = r.signature_bytes()?;
                    set_span(&mut self.signature, span(start, sig.len()))
                }
                Field::ReplySerial => {
                    let v = r.u32()?;
                    if v == 0 {
                        return Err(Error::header("reply serial is 0"));
                    }
                    self.reply_serial.replace(v).is_some()
                }
                Field::UnixFds => self.unix_fds.replace(r.u32()?).is_some(),
            };
            if duplicate {
                return Err(Error::header(format!(
                    "header field {field:?} appears twice"
                )));
            }
        }
        Ok(())
    }

    fn check_required_fields(&self) -> Result<(), Error> {
        let missing = |what: &'static str| Err(Error::header(what));
        match self.msg_type {
            MessageType::MethodCall => {
                if self.path.is_none() {
                    return missing("method call without PATH");
                }
                if self.member.is_none() {
                    return missing("method call without MEMBER");
                }
            }
            MessageType::MethodReturn => {
                if self.reply_serial.is_none() {
                    return missing("method return without REPLY_SERIAL");
                }
            }
            MessageType::Error => {
                if self.error_name.is_none() {
                    return missing("error without ERROR_NAME");
                }
                if self.reply_serial.is_none() {
                    return missing("error without REPLY_SERIAL");
                }
            }
            MessageType::Signal => {
                if self.path.is_none() {
                    return missing("signal without PATH");
                }
                if self.interface.is_none() {
                    return missing("signal without INTERFACE");
                }
                if self.member.is_none() {
                    return missing("signal without MEMBER");
                }
            }
        }
        Ok(())
    }

    pub fn endian(&self) -> Endian {
        self.endian
    }
    pub fn msg_type(&self) -> MessageType {
        self.msg_type
    }
    pub fn flags(&self) -> u8 {
        self.flags
    }
    pub fn serial(&self) -> u32 {
        self.serial
    }
    pub fn path(&self) -> Option<&str> {
        self.str_at(self.path)
    }
    pub fn interface(&self) -> Option<&str> {
        self.str_at(self.interface)
    }
    pub fn member(&self) -> Option<&str> {
        self.str_at(self.member)
    }
    pub fn error_name(&self) -> Option<&str> {
        self.str_at(self.error_name)
    }
    pub fn destination(&self) -> Option<&str> {
        self.str_at(self.destination)
    }
    pub fn sender(&self) -> Option<&str> {
        self.str_at(self.sender)
    }
    /// The body signature, "" when the SIGNATURE field is absent.
    pub fn signature(&self) -> &str {
        self.str_at(self.signature).unwrap_or("")
    }
    pub fn reply_serial(&self) -> Option<u32> {
        self.reply_serial
    }
    /// Number of fds the message says it carries, 0 when absent.
    pub fn unix_fds(&self) -> u32 {
        self.unix_fds.unwrap_or(0)
    }
    pub fn body(&self) -> &[u8] {
        self.raw.get(self.body_start as usize..).unwrap_or_default()
    }
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    // The one unsafe line outside the daemon's syscall module (the
    // workspace denies unsafe_code): a hot accessor, argued below.
    #[allow(unsafe_code)]
    fn str_at(&self, span: Option<Span>) -> Option<&str> {
        let bytes = self.raw.get(span?.range())?;
        debug_assert!(std::str::from_utf8(bytes).is_ok());
        // SAFETY: spans are private and only `parse` creates them, each from
        // a `&str` that `std::str::from_utf8` accepted (or from a signature,
        // which validation restricts to ASCII type codes, or from a name or
        // path field that the `names::*_bytes` validators, which accept
        // ASCII name characters only, passed) at exactly this
        // range of the bytes being parsed. `parse` then stores those very
        // `Bytes` in `raw` (moving or cloning a `Bytes` keeps its contents)
        // and nothing ever mutates or replaces `raw` afterwards, so the range
        // is still valid UTF-8. Skipping the re-check keeps accessors free.
        Some(unsafe { std::str::from_utf8_unchecked(bytes) })
    }

    /// The message as it is, split into header and body without copying
    /// (for messages that need no stamping, e.g. ones the bus built).
    pub fn frame(&self) -> Frame {
        Frame {
            header: self.raw.slice(..self.body_start as usize),
            body: self.raw.slice(self.body_start as usize..),
        }
    }

    /// Decode the whole body into values. This allocates per value (a
    /// 64 MiB `ay` becomes 64 Mi `Value`s): on untrusted messages check
    /// `signature()` first and decode only the bodies you expect.
    pub fn body_values(&self) -> Result<Vec<Value>, Error> {
        let mut out = Vec::new();
        let mut table = [0; MAX_SIGNATURE_LEN];
        let sig = Parsed::new(self.signature().as_bytes(), &mut table)?;
        Reader::new(self.body(), 0, self.endian).values_to_end(&sig, Some(&mut out))?;
        Ok(out)
    }

    /// Top-level args 0..max as match rules see them: `Some` for `s`, `o`
    /// and `g` arguments, `None` for others. Shorter than `max` when the
    /// body has fewer arguments.
    pub fn string_args(&self, max: usize) -> Vec<Option<StrArg<'_>>> {
        let mut out = Vec::new();
        let mut table = [0; MAX_SIGNATURE_LEN];
        let Ok(sig) = Parsed::new(self.signature().as_bytes(), &mut table) else {
            return out;
        };
        let mut r = Reader::new(self.body(), 0, self.endian);
        let mut at = 0;
        while at < sig.len() && out.len() < max {
            let arg = match sig.code(at) {
                b's' => r.string().ok().map(|(value, _)| StrArg {
                    kind: StrKind::String,
                    value,
                }),
                b'o' => r.string().ok().map(|(value, _)| StrArg {
                    kind: StrKind::ObjectPath,
                    value,
                }),
                b'g' => r.signature_bytes().ok().and_then(|(sig, _)| {
                    Some(StrArg {
                        kind: StrKind::Signature,
                        value: std::str::from_utf8(sig).ok()?,
                    })
                }),
                _ => {
                    if r.skip(&sig, at).is_err() {
                        break;
                    }
                    None
                }
            };
            out.push(arg);
            let next = sig.end(at);
            if next <= at {
                break;
            }
            at = next;
        }
        out
    }

    /// The message with its header rewritten: SENDER = `sender` (the old one
    /// and any unknown field dropped), body shared with `self` (no copy).
    /// `sender` must be a valid bus name for the result to be valid. The
    /// header can grow by up to ~270 bytes, so a message right at
    /// MAX_MESSAGE_SIZE may exceed it once stamped: check the total if that
    /// matters.
    pub fn stamp(&self, sender: &str) -> Frame {
        debug_assert!(names::is_valid_bus_name(sender));
        if self.unknown_fields {
            return self.stamp_rewritten(sender);
        }
        // Copy the validated field array but for the old SENDER, then
        // append the new one: a few memcpys instead of re-marshalling every
        // field (which was a sixth of a small message's cost).
        let fields_end = self.fields_end as usize;
        let (before, after) = match self.sender_field {
            Some((start, end)) => {
                // The next field starts 8-aligned, so what follows keeps its
                // alignment when moved up by the removed length.
                let next = (end as usize).next_multiple_of(8).min(fields_end);
                (framing::MIN_HEADER_LEN..start as usize, next..fields_end)
            }
            None => (framing::MIN_HEADER_LEN..fields_end, fields_end..fields_end),
        };
        let sender_at = (framing::MIN_HEADER_LEN + before.len() + after.len()).next_multiple_of(8);
        let header_len = (sender_at + 8 + sender.len() + 1).next_multiple_of(8);
        let mut w = Writer::with_capacity(self.endian, header_len);
        // Endianness, type, flags, version, body length, serial: unchanged.
        w.buf.extend_from_slice(&self.raw[..12]);
        let array = w.begin_array(8);
        w.buf.extend_from_slice(&self.raw[before]);
        w.buf.extend_from_slice(&self.raw[after]);
        header::write_string_field(&mut w, Field::Sender, sender);
        let _ = w.end_array(array);
        w.align(8);
        debug_assert_eq!(w.buf.len(), header_len);
        Frame {
            header: Bytes::from(w.buf),
            body: self.raw.slice(self.body_start as usize..),
        }
    }

    /// [`Message::stamp`] by writing every known field anew, dropping the
    /// unknown ones.
    fn stamp_rewritten(&self, sender: &str) -> Frame {
        let header_len = self.stamped_header_len(sender);
        let mut w = Writer::with_capacity(self.endian, header_len);
        w.u8(self.endian.to_byte());
        w.u8(self.msg_type as u8);
        w.u8(self.flags);
        w.u8(1);
        w.u32(self.body().len() as u32);
        w.u32(self.serial);
        let array = w.begin_array(8);
        let text_fields = [
            (Field::Path, self.path()),
            (Field::Interface, self.interface()),
            (Field::Member, self.member()),
            (Field::ErrorName, self.error_name()),
            (Field::Destination, self.destination()),
            (Field::Sender, Some(sender)),
        ];
        for (field, value) in text_fields {
            if let Some(value) = value {
                header::write_string_field(&mut w, field, value);
            }
        }
        if let Some(serial) = self.reply_serial {
            header::write_u32_field(&mut w, Field::ReplySerial, serial);
        }
        if self.signature.is_some() {
            header::write_signature_field(&mut w, self.signature());
        }
        if let Some(fds) = self.unix_fds {
            header::write_u32_field(&mut w, Field::UnixFds, fds);
        }
        // The header field array is far below its 64 MiB limit here: the
        // original one was, and only a bus name (<= 255 bytes) is added.
        let _ = w.end_array(array);
        w.align(8);
        debug_assert_eq!(w.buf.len(), header_len);
        Frame {
            // Length equal to capacity: Bytes takes the buffer over
            // without allocating a shared block of its own.
            header: Bytes::from(w.buf),
            body: self.raw.slice(self.body_start as usize..),
        }
    }
}

impl Message {
    /// The exact length of the header [`Message::stamp`] writes, so that
    /// its buffer is allocated once at its final size.
    pub(crate) fn stamped_header_len(&self, sender: &str) -> usize {
        // The fixed part and the field array's length; then each field
        // starts 8-aligned with its code and one-character signature.
        let mut len: usize = 16;
        let mut field = |value_len: usize| len = len.next_multiple_of(8) + 4 + value_len;
        let texts = [
            self.path(),
            self.interface(),
            self.member(),
            self.error_name(),
            self.destination(),
            Some(sender),
        ];
        for text in texts.into_iter().flatten() {
            // u32 length, the bytes, the nul.
            field(4 + text.len() + 1);
        }
        if self.reply_serial.is_some() {
            field(4);
        }
        if self.signature.is_some() {
            // u8 length, the bytes, the nul.
            field(1 + self.signature().len() + 1);
        }
        if self.unix_fds.is_some() {
            field(4);
        }
        len.next_multiple_of(8)
    }
}

fn span(start: usize, len: usize) -> Span {
    Span {
        start: start as u32,
        len: len as u32,
    }
}

/// Record a field; true if it was already there.
fn set_span(slot: &mut Option<Span>, value: Span) -> bool {
    slot.replace(value).is_some()
}

/// A name field: the validators accept only ASCII name characters, so
/// bytes that pass need no NUL or UTF-8 check of their own (and are valid
/// UTF-8 for `str_at`). Bytes that fail get the error reading them as a
/// string gives first, as before.
fn checked_string(r: &mut Reader<'_>, valid: fn(&[u8]) -> bool) -> Result<Span, Error> {
    let (bytes, start) = r.string_bytes()?;
    if !valid(bytes) {
        let s = read::text(bytes)?;
        return Err(Error::new(
            ErrorKind::Header,
            format!("invalid name {s:?} in header"),
        ));
    }
    Ok(span(start, bytes.len()))
}

fn path_field(r: &mut Reader<'_>) -> Result<Span, Error> {
    let (path, start) = r.string_bytes()?;
    if !names::object_path_bytes(path) {
        read::text(path)?;
        return Err(Error::body("invalid object path"));
    }
    if path == header::LOCAL_PATH.as_bytes() {
        return Err(Error::header(
            "the path /org/freedesktop/DBus/Local is reserved",
        ));
    }
    Ok(span(start, path.len()))
}

fn interface_field(r: &mut Reader<'_>) -> Result<Span, Error> {
    let (interface, start) = r.string_bytes()?;
    if !names::interface_bytes(interface) {
        let interface = read::text(interface)?;
        return Err(Error::header(format!(
            "invalid interface {interface:?} in header"
        )));
    }
    if interface == header::LOCAL_INTERFACE.as_bytes() {
        return Err(Error::header(
            "the interface org.freedesktop.DBus.Local is reserved",
        ));
    }
    Ok(span(start, interface.len()))
}
