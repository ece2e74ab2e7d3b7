//! Property tests: random value trees of random types round-trip through
//! build -> parse -> body_values in both byte orders; stamp keeps every
//! field; corrupted messages never panic the parser.

use bytes::Bytes;
use proptest::prelude::*;

use crate::{Endian, Message, MessageBuilder, MessageType, Value};

/// A random D-Bus type, from which values are drawn.
#[derive(Clone, Debug)]
enum Ty {
    Basic(u8),
    Array(Box<Ty>),
    Dict(u8, Box<Ty>),
    Struct(Vec<Ty>),
    Variant,
}

impl Ty {
    fn signature(&self, out: &mut String) {
        match self {
            Ty::Basic(c) => out.push(*c as char),
            Ty::Array(elem) => {
                out.push('a');
                elem.signature(out);
            }
            Ty::Dict(key, value) => {
                out.push_str("a{");
                out.push(*key as char);
                value.signature(out);
                out.push('}');
            }
            Ty::Struct(fields) => {
                out.push('(');
                fields.iter().for_each(|f| f.signature(out));
                out.push(')');
            }
            Ty::Variant => out.push('v'),
        }
    }
}

const FDS: u32 = 1000;
const BASIC: &[u8] = b"ybnqiuxtdsogh";

fn basic_code() -> impl Strategy<Value = u8> {
    proptest::sample::select(BASIC)
}

fn arb_type() -> impl Strategy<Value = Ty> {
    let leaf = prop_oneof![4 => basic_code().prop_map(Ty::Basic), 1 => Just(Ty::Variant)];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            inner.clone().prop_map(|t| Ty::Array(Box::new(t))),
            (basic_code(), inner.clone()).prop_map(|(k, v)| Ty::Dict(k, Box::new(v))),
            proptest::collection::vec(inner, 1..4).prop_map(Ty::Struct),
        ]
    })
}

fn basic_value(code: u8) -> BoxedStrategy<Value> {
    match code {
        b'y' => any::<u8>().prop_map(Value::Byte).boxed(),
        b'b' => any::<bool>().prop_map(Value::Bool).boxed(),
        b'n' => any::<i16>().prop_map(Value::Int16).boxed(),
        b'q' => any::<u16>().prop_map(Value::Uint16).boxed(),
        b'i' => any::<i32>().prop_map(Value::Int32).boxed(),
        b'u' => any::<u32>().prop_map(Value::Uint32).boxed(),
        b'x' => any::<i64>().prop_map(Value::Int64).boxed(),
        b't' => any::<u64>().prop_map(Value::Uint64).boxed(),
        // NaN != NaN would make the comparison fail for the wrong reason.
        b'd' => any::<f64>()
            .prop_filter("not NaN", |d| !d.is_nan())
            .prop_map(Value::Double)
            .boxed(),
        b's' => "[^\u{0}]{0,10}".prop_map(Value::String).boxed(),
        b'o' => "/|(/[A-Za-z0-9_]{1,4}){1,3}"
            .prop_map(Value::ObjectPath)
            .boxed(),
        b'g' => arb_type()
            .prop_map(|t| {
                let mut s = String::new();
                t.signature(&mut s);
                Value::Signature(s)
            })
            .boxed(),
        _ => (0..FDS).prop_map(Value::UnixFd).boxed(),
    }
}

fn value_of(ty: &Ty) -> BoxedStrategy<Value> {
    match ty {
        Ty::Basic(code) => basic_value(*code),
        Ty::Array(elem) => {
            let mut elem_sig = String::new();
            elem.signature(&mut elem_sig);
            proptest::collection::vec(value_of(elem), 0..4)
                .prop_map(move |items| Value::Array {
                    elem_sig: elem_sig.clone(),
                    items,
                })
                .boxed()
        }
        Ty::Dict(key, value) => {
            let mut elem_sig = format!("{{{}", *key as char);
            value.signature(&mut elem_sig);
            elem_sig.push('}');
            let entry = (basic_value(*key), value_of(value))
                .prop_map(|(k, v)| Value::DictEntry(Box::new(k), Box::new(v)));
            proptest::collection::vec(entry, 0..4)
                .prop_map(move |items| Value::Array {
                    elem_sig: elem_sig.clone(),
                    items,
                })
                .boxed()
        }
        Ty::Struct(fields) => fields
            .iter()
            .map(value_of)
            .collect::<Vec<_>>()
            .prop_map(Value::Struct)
            .boxed(),
        Ty::Variant => arb_type()
            .prop_flat_map(|t| value_of(&t))
            .prop_map(|v| Value::Variant(Box::new(v)))
            .boxed(),
    }
}

fn arb_value() -> impl Strategy<Value = Value> {
    arb_type().prop_flat_map(|t| value_of(&t))
}

fn arb_body() -> impl Strategy<Value = Vec<Value>> {
    proptest::collection::vec(arb_value(), 0..5)
}

fn arb_endian() -> impl Strategy<Value = Endian> {
    prop_oneof![Just(Endian::Little), Just(Endian::Big)]
}

fn arb_bus_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "(:[0-9]{1,3}\\.[0-9]{1,5})",
        "[a-z][a-z0-9_-]{0,5}(\\.[A-Za-z_][A-Za-z0-9_-]{0,5}){1,3}",
    ]
}

fn arb_interface() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_]{0,5}(\\.[A-Za-z_][A-Za-z0-9_]{0,5}){1,3}"
}

/// A message of any type with optional fields and a random body.
fn arb_builder() -> impl Strategy<Value = MessageBuilder> {
    let kind = prop_oneof![
        ("(/[a-z]{1,3}){0,3}", "[A-Za-z_][A-Za-z0-9_]{0,8}").prop_map(|(p, m)| {
            MessageBuilder::method_call(if p.is_empty() { "/".into() } else { p }, m)
        }),
        (1..u32::MAX).prop_map(MessageBuilder::method_return),
        (1..u32::MAX, arb_interface()).prop_map(|(r, e)| MessageBuilder::error(r, e)),
        (arb_interface(), "[A-Z][a-z]{0,8}").prop_map(|(i, m)| MessageBuilder::signal("/s", i, m)),
    ];
    (
        kind,
        proptest::option::of(arb_interface()),
        proptest::option::of(arb_bus_name()),
        proptest::option::of(arb_bus_name()),
        any::<u8>(),
        arb_endian(),
        proptest::option::of((10u8..=255, arb_value())),
        arb_body(),
    )
        .prop_map(|(b, iface, dest, sender, flags, endian, extra, body)| {
            let mut b = b.flags(flags).endian(endian).unix_fds(FDS).body(body);
            if let Some(i) = iface {
                b = b.interface(i);
            }
            if let Some(d) = dest {
                b = b.destination(d);
            }
            if let Some(s) = sender {
                b = b.sender(s);
            }
            if let Some((code, value)) = extra {
                b = b.header_field(code, value);
            }
            b
        })
}

fn body_signature(body: &[Value]) -> String {
    body.iter().map(Value::signature).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn values_round_trip(body in arb_body(), serial in 1..u32::MAX) {
        prop_assume!(body_signature(&body).len() <= 255);
        for endian in [Endian::Little, Endian::Big] {
            let raw = MessageBuilder::method_call("/p", "M")
                .endian(endian)
                .unix_fds(FDS)
                .body(body.clone())
                .build(serial)
                .unwrap();
            prop_assert_eq!(crate::frame_length(&raw).unwrap(), Some(raw.len()));
            let message = Message::parse(raw).unwrap();
            prop_assert_eq!(message.serial(), serial);
            prop_assert_eq!(message.signature(), body_signature(&body));
            prop_assert_eq!(&message.body_values().unwrap(), &body);
        }
    }

    #[test]
    fn stamp_keeps_every_field_and_the_body(
        builder in arb_builder(),
        sender in arb_bus_name(),
        serial in 1..u32::MAX,
    ) {
        let Ok(raw) = builder.build(serial) else {
            // Only an over-long signature may make a random builder fail.
            return Ok(());
        };
        let original = Message::parse(raw).unwrap();
        let frame = original.stamp(&sender);
        prop_assert_eq!(frame.header.len() % 8, 0);
        // Sized in advance exactly, so the buffer needs no second allocation.
        prop_assert_eq!(frame.header.len(), original.stamped_header_len(&sender));
        let mut joined = frame.header.to_vec();
        joined.extend_from_slice(&frame.body);
        let stamped = Message::parse(Bytes::from(joined)).unwrap();
        prop_assert_eq!(stamped.sender(), Some(sender.as_str()));
        prop_assert_eq!(stamped.endian(), original.endian());
        prop_assert_eq!(stamped.msg_type(), original.msg_type());
        prop_assert_eq!(stamped.flags(), original.flags());
        prop_assert_eq!(stamped.serial(), original.serial());
        prop_assert_eq!(stamped.path(), original.path());
        prop_assert_eq!(stamped.interface(), original.interface());
        prop_assert_eq!(stamped.member(), original.member());
        prop_assert_eq!(stamped.error_name(), original.error_name());
        prop_assert_eq!(stamped.destination(), original.destination());
        prop_assert_eq!(stamped.reply_serial(), original.reply_serial());
        prop_assert_eq!(stamped.signature(), original.signature());
        prop_assert_eq!(stamped.unix_fds(), original.unix_fds());
        prop_assert_eq!(stamped.body(), original.body());
        prop_assert_eq!(stamped.body_values().unwrap(), original.body_values().unwrap());
        prop_assert_eq!(stamped.string_args(8), original.string_args(8));
    }

    #[test]
    fn corrupted_messages_never_panic(
        builder in arb_builder(),
        edits in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<proptest::sample::Index>(),
    ) {
        let Ok(raw) = builder.build(7) else { return Ok(()) };
        let mut bytes = raw.to_vec();
        for (at, byte) in &edits {
            let i = at.index(bytes.len());
            bytes[i] = *byte;
        }
        check_consistent(&bytes);
        check_consistent(&bytes[..cut.index(bytes.len())]);
    }
}

/// Whatever `parse` accepts, every other accessor must handle too.
fn check_consistent(bytes: &[u8]) {
    let _ = crate::frame_length(bytes);
    let Ok(message) = Message::parse(Bytes::copy_from_slice(bytes)) else {
        return;
    };
    message.body_values().expect("an accepted body decodes");
    let _ = message.string_args(64);
    let _ = (message.path(), message.interface(), message.member());
    let _ = (
        message.error_name(),
        message.destination(),
        message.sender(),
    );
    let frame = message.stamp(":1.1");
    let mut joined = frame.header.to_vec();
    joined.extend_from_slice(&frame.body);
    let stamped = Message::parse(Bytes::from(joined)).expect("a stamped message parses");
    assert_eq!(stamped.msg_type(), message.msg_type());
    assert!(matches!(
        message.msg_type(),
        MessageType::MethodCall
            | MessageType::MethodReturn
            | MessageType::Error
            | MessageType::Signal
    ));
}

/// Regression inputs for `check_consistent`, found by fuzzing or by hand.
pub(crate) fn check_regression(bytes: &[u8]) {
    check_consistent(bytes);
}

#[test]
fn empty_and_tiny_inputs() {
    for len in 0..32 {
        check_regression(&vec![0u8; len]);
        let mut start = b"l\x01\x00\x01".to_vec();
        start.resize(len.max(4), 0xff);
        check_regression(&start);
    }
}
