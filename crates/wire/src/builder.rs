//! Building messages of any type, in either byte order.

use bytes::Bytes;

use crate::header::{self, Field};
use crate::write::Writer;
use crate::{names, signature, Endian, Error, Message, MessageType, Value, MAX_MESSAGE_SIZE};

/// Builds one message; `build` checks every name and value and returns an
/// error (never panics) on anything invalid.
#[derive(Clone, Debug)]
pub struct MessageBuilder {
    msg_type: MessageType,
    endian: Endian,
    flags: u8,
    path: Option<String>,
    interface: Option<String>,
    member: Option<String>,
    error_name: Option<String>,
    reply_serial: Option<u32>,
    destination: Option<String>,
    sender: Option<String>,
    unix_fds: Option<u32>,
    body: Vec<Value>,
    /// Fields with codes the spec does not define (for tests of receivers).
    extra_fields: Vec<(u8, Value)>,
}

impl MessageBuilder {
    fn new(msg_type: MessageType) -> MessageBuilder {
        MessageBuilder {
            msg_type,
            endian: Endian::Little,
            flags: 0,
            path: None,
            interface: None,
            member: None,
            error_name: None,
            reply_serial: None,
            destination: None,
            sender: None,
            unix_fds: None,
            body: Vec::new(),
            extra_fields: Vec::new(),
        }
    }

    pub fn method_call(path: impl Into<String>, member: impl Into<String>) -> MessageBuilder {
        let mut b = MessageBuilder::new(MessageType::MethodCall);
        b.path = Some(path.into());
        b.member = Some(member.into());
        b
    }

    pub fn method_return(reply_serial: u32) -> MessageBuilder {
        let mut b = MessageBuilder::new(MessageType::MethodReturn);
        b.reply_serial = Some(reply_serial);
        b
    }

    pub fn error(reply_serial: u32, name: impl Into<String>) -> MessageBuilder {
        let mut b = MessageBuilder::new(MessageType::Error);
        b.reply_serial = Some(reply_serial);
        b.error_name = Some(name.into());
        b
    }

    pub fn signal(
        path: impl Into<String>,
        interface: impl Into<String>,
        member: impl Into<String>,
    ) -> MessageBuilder {
        let mut b = MessageBuilder::new(MessageType::Signal);
        b.path = Some(path.into());
        b.interface = Some(interface.into());
        b.member = Some(member.into());
        b
    }

    pub fn interface(mut self, interface: impl Into<String>) -> MessageBuilder {
        self.interface = Some(interface.into());
        self
    }

    pub fn destination(mut self, destination: impl Into<String>) -> MessageBuilder {
        self.destination = Some(destination.into());
        self
    }

    pub fn sender(mut self, sender: impl Into<String>) -> MessageBuilder {
        self.sender = Some(sender.into());
        self
    }

    pub fn flags(mut self, flags: u8) -> MessageBuilder {
        self.flags = flags;
        self
    }

    /// Number of fds sent with the message (UNIX_FDS field).
    pub fn unix_fds(mut self, count: u32) -> MessageBuilder {
        self.unix_fds = Some(count);
        self
    }

    pub fn endian(mut self, endian: Endian) -> MessageBuilder {
        self.endian = endian;
        self
    }

    pub fn body(mut self, values: Vec<Value>) -> MessageBuilder {
        self.body = values;
        self
    }

    /// Add a header field with a code the spec does not define (> 9), as
    /// future senders may; receivers must skip it. Known codes are refused
    /// by `build`: use the dedicated setters.
    pub fn header_field(mut self, code: u8, value: Value) -> MessageBuilder {
        self.extra_fields.push((code, value));
        self
    }

    /// Marshal the message with `serial` (must not be 0).
    pub fn build(&self, serial: u32) -> Result<Bytes, Error> {
        self.check_names()?;
        let mut signature = String::new();
        for value in &self.body {
            value.write_signature(&mut signature);
        }
        signature::validate(signature.as_bytes())?;
        let mut body = Writer::new(self.endian);
        for value in &self.body {
            body.value(value.signature().as_bytes(), value, 0)?;
        }
        let header = self.header(serial, &signature, body.buf.len())?;
        if header.len() + body.buf.len() > MAX_MESSAGE_SIZE {
            return Err(Error::too_large("message longer than 128 MiB"));
        }
        let mut bytes = header;
        bytes.extend_from_slice(&body.buf);
        let bytes = Bytes::from(bytes);
        // One full validation: whatever the builder lets through, a
        // receiver would accept too.
        Message::parse(bytes.clone())?;
        Ok(bytes)
    }

    fn check_names(&self) -> Result<(), Error> {
        fn check(value: &Option<String>, valid: fn(&str) -> bool, what: &str) -> Result<(), Error> {
            match value {
                Some(v) if !valid(v) => Err(Error::name(format!("invalid {what}: {v:?}"))),
                _ => Ok(()),
            }
        }
        check(&self.path, names::is_valid_object_path, "object path")?;
        check(&self.interface, names::is_valid_interface, "interface name")?;
        check(&self.member, names::is_valid_member, "member name")?;
        check(&self.error_name, names::is_valid_error_name, "error name")?;
        check(
            &self.destination,
            names::is_valid_bus_name,
            "destination bus name",
        )?;
        check(&self.sender, names::is_valid_bus_name, "sender bus name")?;
        if self.path.as_deref() == Some(header::LOCAL_PATH) {
            return Err(Error::name(
                "the path /org/freedesktop/DBus/Local is reserved",
            ));
        }
        if self.interface.as_deref() == Some(header::LOCAL_INTERFACE) {
            return Err(Error::name(
                "the interface org.freedesktop.DBus.Local is reserved",
            ));
        }
        Ok(())
    }

    fn header(&self, serial: u32, signature: &str, body_len: usize) -> Result<Vec<u8>, Error> {
        if serial == 0 {
            return Err(Error::value("serial must not be 0"));
        }
        let body_len = u32::try_from(body_len).map_err(|_| Error::too_large("body too long"))?;
        let mut w = Writer::with_capacity(self.endian, 128);
        w.u8(self.endian.to_byte());
        w.u8(self.msg_type as u8);
        w.u8(self.flags);
        w.u8(1);
        w.u32(body_len);
        w.u32(serial);
        let array = w.begin_array(8);
        let text_fields = [
            (Field::Path, &self.path),
            (Field::Interface, &self.interface),
            (Field::Member, &self.member),
            (Field::ErrorName, &self.error_name),
            (Field::Destination, &self.destination),
            (Field::Sender, &self.sender),
        ];
        for (field, value) in text_fields {
            if let Some(value) = value {
                header::write_string_field(&mut w, field, value);
            }
        }
        if let Some(reply_serial) = self.reply_serial {
            header::write_u32_field(&mut w, Field::ReplySerial, reply_serial);
        }
        if !signature.is_empty() {
            header::write_signature_field(&mut w, signature);
        }
        if let Some(fds) = self.unix_fds {
            header::write_u32_field(&mut w, Field::UnixFds, fds);
        }
        for (code, value) in &self.extra_fields {
            if Field::from_code(*code)?.is_some() {
                return Err(Error::value(format!(
                    "header field code {code} is a known field; use its setter"
                )));
            }
            w.align(8);
            w.u8(*code);
            w.value(b"v", &Value::Variant(Box::new(value.clone())), 2)?;
        }
        w.end_array(array)?;
        w.align(8);
        Ok(w.buf)
    }
}
