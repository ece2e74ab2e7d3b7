//! Hand-marshalled messages, for the malformed-but-routable scenarios that
//! the wire crate's builder (rightly) refuses to build: little-endian, any
//! header fields in any order, any body bytes.

/// One header field's value.
#[derive(Clone, Debug)]
pub enum Field {
    /// `s`: interface, member, error name, destination, sender.
    Str(String),
    /// `o`: path.
    Path(String),
    /// `g`: signature.
    Sig(String),
    /// `u`: reply serial, unix fds.
    U32(u32),
}

/// Header field codes (D-Bus specification).
pub mod code {
    pub const PATH: u8 = 1;
    pub const INTERFACE: u8 = 2;
    pub const MEMBER: u8 = 3;
    pub const ERROR_NAME: u8 = 4;
    pub const REPLY_SERIAL: u8 = 5;
    pub const DESTINATION: u8 = 6;
    pub const SENDER: u8 = 7;
    pub const SIGNATURE: u8 = 8;
    pub const UNIX_FDS: u8 = 9;
}

/// A message as raw parts; `bytes` marshals it as they say, checking
/// nothing.
#[derive(Clone, Debug)]
pub struct RawMessage {
    pub msg_type: u8,
    pub flags: u8,
    pub version: u8,
    pub fields: Vec<(u8, Field)>,
    pub body: Vec<u8>,
}

impl RawMessage {
    /// A signal from /x, interface com.example.Raw, member `member`, with
    /// `signature` and `body` (already marshalled) and no destination.
    pub fn signal(member: &str, signature: &str, body: Vec<u8>) -> RawMessage {
        let mut fields = vec![
            (code::PATH, Field::Path("/x".into())),
            (code::INTERFACE, Field::Str("com.example.Raw".into())),
            (code::MEMBER, Field::Str(member.into())),
        ];
        if !signature.is_empty() {
            fields.push((code::SIGNATURE, Field::Sig(signature.into())));
        }
        RawMessage {
            msg_type: 4,
            flags: 0,
            version: 1,
            fields,
            body,
        }
    }

    /// Adds (or, for a code already present, replaces) a header field.
    pub fn field(mut self, code: u8, value: Field) -> RawMessage {
        self.fields.retain(|(c, _)| *c != code);
        self.fields.push((code, value));
        self
    }

    /// The little-endian bytes with `serial`.
    pub fn bytes(&self, serial: u32) -> Vec<u8> {
        let mut out = vec![b'l', self.msg_type, self.flags, self.version];
        out.extend_from_slice(&(self.body.len() as u32).to_le_bytes());
        out.extend_from_slice(&serial.to_le_bytes());
        out.extend_from_slice(&[0; 4]); // field array length, patched below
        for (code, value) in &self.fields {
            pad(&mut out, 8);
            out.push(*code);
            match value {
                Field::Str(s) => string(&mut out, b"s", s),
                Field::Path(s) => string(&mut out, b"o", s),
                Field::Sig(s) => {
                    signature(&mut out, "g");
                    signature(&mut out, s);
                }
                Field::U32(n) => {
                    signature(&mut out, "u");
                    pad(&mut out, 4);
                    out.extend_from_slice(&n.to_le_bytes());
                }
            }
        }
        let fields_len = (out.len() - 16) as u32;
        out[12..16].copy_from_slice(&fields_len.to_le_bytes());
        pad(&mut out, 8);
        out.extend_from_slice(&self.body);
        out
    }
}

fn pad(out: &mut Vec<u8>, to: usize) {
    out.resize(out.len().next_multiple_of(to), 0);
}

fn signature(out: &mut Vec<u8>, sig: &str) {
    out.push(sig.len() as u8);
    out.extend_from_slice(sig.as_bytes());
    out.push(0);
}

fn string(out: &mut Vec<u8>, sig: &[u8], s: &str) {
    signature(out, std::str::from_utf8(sig).expect("ascii"));
    pad(out, 4);
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

/// A body of one string (`s`), little-endian, starting 8-aligned.
pub fn string_body(s: &[u8]) -> Vec<u8> {
    let mut out = (s.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(s);
    out.push(0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use quickbus_client::{Message, MessageBuilder, Value};

    #[test]
    fn a_well_formed_raw_message_is_what_the_builder_makes() {
        let raw = RawMessage::signal("S", "s", string_body(b"hi")).bytes(7);
        let built = MessageBuilder::signal("/x", "com.example.Raw", "S")
            .body(vec![Value::String("hi".into())])
            .build(7)
            .unwrap();
        assert_eq!(raw, built.to_vec());
        Message::parse(Bytes::from(raw)).unwrap();
    }

    #[test]
    fn an_fd_index_without_unix_fds_is_marshalled_as_asked() {
        let raw = RawMessage::signal("S", "h", vec![0, 0, 0, 0]).bytes(1);
        // Routable, as libdbus's loader takes it: the receiver judges.
        let msg = Message::parse(Bytes::from(raw)).unwrap();
        assert_eq!(msg.signature(), "h");
        assert_eq!(msg.unix_fds(), 0);
    }
}
