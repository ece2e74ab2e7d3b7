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
        // Receivers accept an fd index that points at no fd (libdbus
        // does); our own messages never carry one.
        let fds = self.unix_fds.unwrap_or(0);
        if self.body.iter().any(|value| indexes_fd_from(value, fds)) {
            return Err(Error::value(
                "unix fd index not below the UNIX_FDS header field",
            ));
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

/// Whether `value` holds an fd index of `fds` or above.
fn indexes_fd_from(value: &Value, fds: u32) -> bool {
    match value {
        Value::UnixFd(index) => *index >= fds,
        Value::Array { items, .. } | Value::Struct(items) => {
            items.iter().any(|item| indexes_fd_from(item, fds))
        }
        Value::DictEntry(key, value) => indexes_fd_from(key, fds) || indexes_fd_from(value, fds),
        Value::Variant(inner) => indexes_fd_from(inner, fds),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn call() -> MessageBuilder {
        MessageBuilder::method_call("/a", "M")
    }

    fn body_error(values: Vec<Value>) -> ErrorKind {
        call().body(values).build(1).unwrap_err().kind()
    }

    #[test]
    fn invalid_names_are_errors() {
        let cases = [
            MessageBuilder::method_call("a", "M"),
            MessageBuilder::method_call("/a", "a.b"),
            call().interface("nodot"),
            call().destination("a..b"),
            call().sender("1.x"),
            MessageBuilder::error(1, "bad"),
            MessageBuilder::signal("/a", "x", "S"),
            MessageBuilder::method_call("/org/freedesktop/DBus/Local", "M"),
            call().interface("org.freedesktop.DBus.Local"),
        ];
        for builder in cases {
            assert_eq!(
                builder.build(1).unwrap_err().kind(),
                ErrorKind::Name,
                "{builder:?}"
            );
        }
    }

    #[test]
    fn serial_zero_is_an_error() {
        assert!(call().build(0).is_err());
        assert!(call().build(1).is_ok());
    }

    #[test]
    fn invalid_values_are_errors() {
        assert_eq!(
            body_error(vec![Value::String("a\0b".into())]),
            ErrorKind::Value
        );
        assert_eq!(
            body_error(vec![Value::ObjectPath("a".into())]),
            ErrorKind::Value
        );
        assert_eq!(
            body_error(vec![Value::Signature("a".into())]),
            ErrorKind::Signature
        );
        assert_eq!(
            body_error(vec![Value::Struct(vec![])]),
            ErrorKind::Signature
        );
        let mismatched = Value::Array {
            elem_sig: "u".into(),
            items: vec![Value::Uint32(1), Value::Int32(2)],
        };
        assert_eq!(body_error(vec![mismatched]), ErrorKind::Value);
        let struct_key = Value::Array {
            elem_sig: "{(y)y}".into(),
            items: vec![],
        };
        assert_eq!(body_error(vec![struct_key]), ErrorKind::Signature);
        let bare_entry = Value::DictEntry(Box::new(Value::Byte(1)), Box::new(Value::Byte(2)));
        assert_eq!(body_error(vec![bare_entry]), ErrorKind::Signature);
        let entry_in_variant = Value::Variant(Box::new(Value::DictEntry(
            Box::new(Value::Byte(1)),
            Box::new(Value::Byte(2)),
        )));
        assert_eq!(body_error(vec![entry_in_variant]), ErrorKind::Signature);
        // An fd index needs a UNIX_FDS field above it.
        assert_eq!(body_error(vec![Value::UnixFd(0)]), ErrorKind::Value);
        let nested = Value::Variant(Box::new(Value::Struct(vec![Value::UnixFd(1)])));
        assert_eq!(
            call()
                .unix_fds(1)
                .body(vec![nested])
                .build(1)
                .unwrap_err()
                .kind(),
            ErrorKind::Value
        );
        assert!(call()
            .unix_fds(1)
            .body(vec![Value::UnixFd(0)])
            .build(1)
            .is_ok());
    }

    #[test]
    fn too_deep_values_are_errors() {
        let mut value = Value::Byte(1);
        for _ in 0..65 {
            value = Value::Variant(Box::new(value));
        }
        assert_eq!(body_error(vec![value]), ErrorKind::TooLarge);
    }

    #[test]
    fn too_long_signature_is_an_error() {
        assert!(call().body(vec![Value::Byte(1); 255]).build(1).is_ok());
        assert!(call().body(vec![Value::Byte(1); 256]).build(1).is_err());
    }

    #[test]
    fn unknown_header_fields() {
        let raw = call()
            .header_field(10, Value::String("x".into()))
            .header_field(
                255,
                Value::Array {
                    elem_sig: "y".into(),
                    items: vec![Value::Byte(3)],
                },
            )
            .build(1)
            .unwrap();
        let m = Message::parse(raw).unwrap();
        assert_eq!(m.member(), Some("M"));
        assert!(call()
            .header_field(3, Value::String("M".into()))
            .build(1)
            .is_err());
        assert!(call().header_field(0, Value::Byte(0)).build(1).is_err());
    }

    #[test]
    fn big_endian_layout() {
        let raw = MessageBuilder::method_return(0x0102_0304)
            .endian(Endian::Big)
            .body(vec![Value::Uint32(0x0a0b_0c0d)])
            .build(0x1122_3344)
            .unwrap();
        assert_eq!(
            &raw[..12],
            &[b'B', 2, 0, 1, 0, 0, 0, 4, 0x11, 0x22, 0x33, 0x44]
        );
        assert_eq!(&raw[raw.len() - 4..], &[0x0a, 0x0b, 0x0c, 0x0d]);
        let raw = MessageBuilder::method_return(1)
            .body(vec![Value::Uint32(0x0a0b_0c0d)])
            .build(0x1122_3344)
            .unwrap();
        assert_eq!(
            &raw[..12],
            &[b'l', 2, 0, 1, 4, 0, 0, 0, 0x44, 0x33, 0x22, 0x11]
        );
        assert_eq!(&raw[raw.len() - 4..], &[0x0d, 0x0c, 0x0b, 0x0a]);
    }

    #[test]
    fn hello_call_is_framed() {
        let raw = MessageBuilder::method_call("/org/freedesktop/DBus", "Hello")
            .interface("org.freedesktop.DBus")
            .destination("org.freedesktop.DBus")
            .build(1)
            .unwrap();
        assert_eq!(&raw[..4], b"l\x01\x00\x01");
        assert_eq!(&raw[4..8], &[0, 0, 0, 0], "no body");
        assert_eq!(raw.len() % 8, 0);
        assert_eq!(crate::frame_length(&raw).unwrap(), Some(raw.len()));
    }
}
