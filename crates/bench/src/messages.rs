//! Pre-built bench messages: each is marshalled once, then only its
//! serial, reply serial and send timestamp are patched in place, so the
//! sender's cost per message is a few stores, the same for every bus.

use std::sync::OnceLock;
use std::time::Instant;

use quickbus_wire::{Message, MessageBuilder, Value};

pub const PATH: &str = "/org/quickbus/Bench";
pub const INTERFACE: &str = "org.quickbus.Bench";
pub const SIGNAL: &str = "Burst";
pub const METHOD: &str = "Echo";
/// Tells an echo server to stop (no reply).
pub const QUIT: &str = "Quit";
pub const MATCH_RULE: &str = "type='signal',interface='org.quickbus.Bench',member='Burst'";

/// Offset of the serial in every message header.
const SERIAL_OFFSET: usize = 8;
/// A reply serial nobody uses, to find where the reply's lands.
const REPLY_SERIAL_MARKER: u32 = 0x5eed_b00c;

/// Nanoseconds since the bench started, the clock of send timestamps
/// (senders and receivers are threads of this process).
pub fn now_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

fn payload(size: usize) -> Value {
    Value::Array {
        elem_sig: "y".into(),
        items: vec![Value::Byte(0xa5); size],
    }
}

/// A message whose serial (and optionally reply serial and trailing
/// timestamp) are rewritten before each send.
pub struct Template {
    bytes: Vec<u8>,
    little: bool,
    reply_serial_at: Option<usize>,
}

impl Template {
    /// A broadcast signal with body (ay of `size` bytes, u64 timestamp).
    pub fn signal(size: usize) -> Template {
        let bytes = MessageBuilder::signal(PATH, INTERFACE, SIGNAL)
            .body(vec![payload(size), Value::Uint64(0)])
            .build(1)
            .expect("bench signal marshals");
        Template::new(bytes.to_vec(), false)
    }

    /// A call of `member` on `destination` with body (ay of `size` bytes).
    pub fn call(destination: &str, member: &str, size: usize) -> Template {
        let bytes = MessageBuilder::method_call(PATH, member)
            .interface(INTERFACE)
            .destination(destination)
            .body(vec![payload(size)])
            .build(1)
            .expect("bench call marshals");
        Template::new(bytes.to_vec(), false)
    }

    /// A method return to `destination` with body (ay of `size` bytes).
    pub fn reply(destination: &str, size: usize) -> Template {
        let bytes = MessageBuilder::method_return(REPLY_SERIAL_MARKER)
            .destination(destination)
            .body(vec![payload(size)])
            .build(1)
            .expect("bench reply marshals");
        Template::new(bytes.to_vec(), true)
    }

    fn new(bytes: Vec<u8>, has_reply_serial: bool) -> Template {
        let little = bytes[0] == b'l';
        let marker = if little {
            REPLY_SERIAL_MARKER.to_le_bytes()
        } else {
            REPLY_SERIAL_MARKER.to_be_bytes()
        };
        // The REPLY_SERIAL header field: code 5, signature "u", padding, value.
        let field = [5, 1, b'u', 0, marker[0], marker[1], marker[2], marker[3]];
        let reply_serial_at = has_reply_serial.then(|| {
            bytes
                .windows(field.len())
                .position(|w| w == field)
                .expect("reply serial field in header")
                + 4
        });
        Template {
            bytes,
            little,
            reply_serial_at,
        }
    }

    fn put_u32(&mut self, at: usize, value: u32) {
        let raw = if self.little {
            value.to_le_bytes()
        } else {
            value.to_be_bytes()
        };
        self.bytes[at..at + 4].copy_from_slice(&raw);
    }

    pub fn with_serial(&mut self, serial: u32) -> &mut Template {
        self.put_u32(SERIAL_OFFSET, serial);
        self
    }

    pub fn with_reply_serial(&mut self, serial: u32) -> &mut Template {
        let at = self.reply_serial_at.expect("a reply template");
        self.put_u32(at, serial);
        self
    }

    /// Store `ns` in the trailing u64 of a signal body.
    pub fn with_timestamp(&mut self, ns: u64) -> &mut Template {
        let raw = if self.little {
            ns.to_le_bytes()
        } else {
            ns.to_be_bytes()
        };
        let end = self.bytes.len();
        self.bytes[end - 8..].copy_from_slice(&raw);
        self
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// The send timestamp carried by a bench signal (its trailing u64).
pub fn timestamp_of(message: &Message) -> Option<u64> {
    let body = message.body();
    let raw: [u8; 8] = body.get(body.len().checked_sub(8)?..)?.try_into().ok()?;
    Some(match message.endian() {
        quickbus_wire::Endian::Little => u64::from_le_bytes(raw),
        quickbus_wire::Endian::Big => u64::from_be_bytes(raw),
    })
}

/// Whether `message` is one of the bench's burst signals.
pub fn is_burst(message: &Message) -> bool {
    message.msg_type() == quickbus_wire::MessageType::Signal && message.member() == Some(SIGNAL)
}

/// Length of the `ay` payload of a call or reply body.
pub fn payload_len(message: &Message) -> usize {
    message.body().len().saturating_sub(4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn parse(t: &Template) -> Message {
        Message::parse(Bytes::copy_from_slice(t.bytes())).unwrap()
    }

    #[test]
    fn patched_signals_stay_valid_and_carry_their_timestamp() {
        let mut t = Template::signal(100);
        t.with_serial(77).with_timestamp(123_456_789);
        let m = parse(&t);
        assert_eq!(m.serial(), 77);
        assert!(is_burst(&m));
        assert_eq!(timestamp_of(&m), Some(123_456_789));
        match &m.body_values().unwrap()[0] {
            Value::Array { items, .. } => assert_eq!(items.len(), 100),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn patched_replies_answer_the_right_call() {
        let mut t = Template::reply(":1.7", 3);
        t.with_serial(9).with_reply_serial(4242);
        let m = parse(&t);
        assert_eq!(m.serial(), 9);
        assert_eq!(m.reply_serial(), Some(4242));
        assert_eq!(m.destination(), Some(":1.7"));
        assert_eq!(payload_len(&m), 3);
    }

    #[test]
    fn calls_carry_their_payload() {
        let mut t = Template::call(":1.3", METHOD, 0);
        t.with_serial(5);
        let m = parse(&t);
        assert_eq!(m.member(), Some(METHOD));
        assert_eq!(payload_len(&m), 0);
        assert!(!is_burst(&m));
    }
}
