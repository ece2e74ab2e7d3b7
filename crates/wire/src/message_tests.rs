//! Tests of parse, accessors, body_values, string_args and stamp through
//! messages made by the builder (and raw bytes for malformed input).

use bytes::Bytes;

use crate::{
    flags, Endian, ErrorKind, Message, MessageBuilder, MessageType, StrArg, StrKind, Value,
};

const BOTH: [Endian; 2] = [Endian::Little, Endian::Big];

fn every_type() -> Vec<Value> {
    vec![
        Value::Byte(0xfe),
        Value::Bool(true),
        Value::Int16(-2),
        Value::Uint16(0xfffe),
        Value::Int32(-3),
        Value::Uint32(0xdead_beef),
        Value::Int64(-4),
        Value::Uint64(u64::MAX - 1),
        Value::Double(-1.25),
        Value::String("héllo".into()),
        Value::ObjectPath("/org/example/Obj".into()),
        Value::Signature("a{sv}".into()),
        Value::UnixFd(1),
        Value::Array {
            elem_sig: "{sv}".into(),
            items: vec![
                Value::DictEntry(
                    Box::new(Value::String("one".into())),
                    Box::new(Value::Variant(Box::new(Value::Uint32(1)))),
                ),
                Value::DictEntry(
                    Box::new(Value::String("two".into())),
                    Box::new(Value::Variant(Box::new(Value::Struct(vec![
                        Value::Byte(2),
                        Value::Int64(2),
                    ])))),
                ),
            ],
        },
        Value::Array {
            elem_sig: "x".into(),
            items: vec![],
        },
        Value::Struct(vec![
            Value::Byte(1),
            Value::Variant(Box::new(Value::Byte(2))),
        ]),
        Value::Variant(Box::new(Value::Array {
            elem_sig: "ay".into(),
            items: vec![Value::Array {
                elem_sig: "y".into(),
                items: vec![Value::Byte(1), Value::Byte(2), Value::Byte(3)],
            }],
        })),
    ]
}

#[test]
fn method_call_round_trip_in_both_byte_orders() {
    for endian in BOTH {
        let raw = MessageBuilder::method_call("/org/example", "Frob")
            .interface("org.example.Iface")
            .destination("org.example.Service")
            .sender(":1.7")
            .flags(flags::NO_AUTO_START)
            .unix_fds(2)
            .endian(endian)
            .body(every_type())
            .build(42)
            .unwrap();
        let m = Message::parse(raw.clone()).unwrap();
        assert_eq!(m.endian(), endian);
        assert_eq!(m.msg_type(), MessageType::MethodCall);
        assert_eq!(m.flags(), flags::NO_AUTO_START);
        assert_eq!(m.serial(), 42);
        assert_eq!(m.path(), Some("/org/example"));
        assert_eq!(m.interface(), Some("org.example.Iface"));
        assert_eq!(m.member(), Some("Frob"));
        assert_eq!(m.error_name(), None);
        assert_eq!(m.destination(), Some("org.example.Service"));
        assert_eq!(m.sender(), Some(":1.7"));
        assert_eq!(m.signature(), "ybnqiuxtdsogha{sv}ax(yv)v");
        assert_eq!(m.reply_serial(), None);
        assert_eq!(m.unix_fds(), 2);
        assert_eq!(m.raw(), &raw);
        assert_eq!(m.body_values().unwrap(), every_type());
    }
}

#[test]
fn other_message_types() {
    for endian in BOTH {
        let ret = MessageBuilder::method_return(5)
            .endian(endian)
            .build(6)
            .unwrap();
        let m = Message::parse(ret).unwrap();
        assert_eq!(m.msg_type(), MessageType::MethodReturn);
        assert_eq!(m.reply_serial(), Some(5));
        assert_eq!(m.signature(), "");
        assert!(m.body().is_empty());
        assert_eq!(m.body_values().unwrap(), vec![]);

        let err = MessageBuilder::error(5, "org.example.Error.Failed")
            .body(vec![Value::String("why".into())])
            .endian(endian)
            .build(7)
            .unwrap();
        let m = Message::parse(err).unwrap();
        assert_eq!(m.msg_type(), MessageType::Error);
        assert_eq!(m.error_name(), Some("org.example.Error.Failed"));
        assert_eq!(m.reply_serial(), Some(5));

        let sig = MessageBuilder::signal("/a", "org.example.I", "Changed")
            .endian(endian)
            .build(8)
            .unwrap();
        let m = Message::parse(sig).unwrap();
        assert_eq!(m.msg_type(), MessageType::Signal);
        assert_eq!(m.interface(), Some("org.example.I"));
    }
}

#[test]
fn string_args_sees_s_o_g() {
    for endian in BOTH {
        string_args_in(endian);
    }
}

fn string_args_in(endian: Endian) {
    let raw = MessageBuilder::signal("/a", "org.example.I", "Changed")
        .endian(endian)
        .body(vec![
            Value::String("zero".into()),
            Value::Array {
                elem_sig: "s".into(),
                items: vec![Value::String("skipped".into())],
            },
            Value::ObjectPath("/two".into()),
            Value::Struct(vec![Value::Byte(1), Value::String("x".into())]),
            Value::Variant(Box::new(Value::String("v".into()))),
            Value::Signature("ai".into()),
            Value::String("six".into()),
        ])
        .build(1)
        .unwrap();
    let m = Message::parse(raw).unwrap();
    let args = m.string_args(6);
    assert_eq!(
        args,
        vec![
            Some(StrArg {
                kind: StrKind::String,
                value: "zero"
            }),
            None,
            Some(StrArg {
                kind: StrKind::ObjectPath,
                value: "/two"
            }),
            None,
            None,
            Some(StrArg {
                kind: StrKind::Signature,
                value: "ai"
            }),
        ]
    );
    assert_eq!(m.string_args(64).len(), 7);
    assert!(m.string_args(0).is_empty());
}

#[test]
fn stamp_replaces_sender_and_shares_body() {
    for endian in BOTH {
        let raw = MessageBuilder::method_call("/org/example", "Frob")
            .interface("org.example.Iface")
            .destination("org.example.Service")
            .sender(":1.999999")
            .unix_fds(2)
            .endian(endian)
            .header_field(42, Value::String("future".into()))
            .body(every_type())
            .build(42)
            .unwrap();
        let m = Message::parse(raw).unwrap();
        let frame = m.stamp(":1.5");
        assert_eq!(frame.header.len() % 8, 0);
        assert_eq!(frame.body.as_ptr(), m.body().as_ptr(), "body is not copied");
        let mut joined = frame.header.to_vec();
        joined.extend_from_slice(&frame.body);
        let s = Message::parse(Bytes::from(joined)).unwrap();
        assert_eq!(s.sender(), Some(":1.5"));
        assert_eq!(s.endian(), endian);
        assert_eq!(s.serial(), 42);
        assert_eq!(s.path(), m.path());
        assert_eq!(s.interface(), m.interface());
        assert_eq!(s.member(), m.member());
        assert_eq!(s.destination(), m.destination());
        assert_eq!(s.signature(), m.signature());
        assert_eq!(s.unix_fds(), 2);
        assert_eq!(s.body(), m.body());
    }
}

#[test]
fn unknown_message_type_is_recognisable() {
    let mut raw = MessageBuilder::method_return(1).build(1).unwrap().to_vec();
    raw[1] = 5;
    let err = Message::parse(Bytes::from(raw.clone())).unwrap_err();
    assert!(err.is_unknown_message_type());
    assert_eq!(err.kind(), ErrorKind::UnknownMessageType(5));
    raw[1] = 0;
    let err = Message::parse(Bytes::from(raw)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Header);
}

#[test]
fn frame_splits_without_copying() {
    for endian in BOTH {
        let raw = MessageBuilder::signal("/a", "org.example.I", "S")
            .endian(endian)
            .body(vec![Value::Uint64(1)])
            .build(3)
            .unwrap();
        let m = Message::parse(raw.clone()).unwrap();
        let frame = m.frame();
        assert_eq!(frame.header.len() % 8, 0);
        assert_eq!(&frame.body[..], m.body());
        assert_eq!([&frame.header[..], &frame.body[..]].concat(), &raw[..]);
        assert_eq!(frame.header.as_ptr(), raw.as_ptr());
    }
}

#[test]
fn stamp_copies_known_fields_wherever_the_old_sender_was() {
    let last = MessageBuilder::method_call("/a", "M").sender(":1.999999");
    let middle = MessageBuilder::signal("/a", "a.B", "C")
        .sender(":1.999999")
        .body(vec![Value::Uint32(7)]);
    let first_and_only = MessageBuilder::method_return(3).sender(":1.999999");
    let without = MessageBuilder::method_call("/a", "M").destination("a.b");
    for endian in BOTH {
        for builder in [&last, &middle, &first_and_only, &without] {
            let m = Message::parse(builder.clone().endian(endian).build(9).unwrap()).unwrap();
            let frame = m.stamp(":1.5");
            assert_eq!(frame.header.len(), m.stamped_header_len(":1.5"));
            let old = b":1.999999";
            assert!(!frame.header.windows(old.len()).any(|w| w == old));
            let mut joined = frame.header.to_vec();
            joined.extend_from_slice(&frame.body);
            let s = Message::parse(Bytes::from(joined)).unwrap();
            assert_eq!(s.sender(), Some(":1.5"));
            assert_eq!(s.path(), m.path());
            assert_eq!(s.interface(), m.interface());
            assert_eq!(s.member(), m.member());
            assert_eq!(s.destination(), m.destination());
            assert_eq!(s.reply_serial(), m.reply_serial());
            assert_eq!(s.signature(), m.signature());
            assert_eq!(s.body(), m.body());
        }
    }
}

#[test]
fn the_container_instance_field_is_appended_to_a_stamped_header() {
    for endian in BOTH {
        let raw = MessageBuilder::signal("/org/example", "org.example.Iface", "Shouted")
            .unix_fds(2)
            .endian(endian)
            .body(every_type())
            .build(7)
            .unwrap();
        let m = Message::parse(raw).unwrap();
        let frame = m
            .stamp(":1.5")
            .with_container_instance("/org/freedesktop/DBus/Containers1/c12");
        assert_eq!(frame.header.len() % 8, 0);
        let mut joined = frame.header.to_vec();
        joined.extend_from_slice(&frame.body);
        let s = Message::parse(Bytes::from(joined.clone())).unwrap();
        assert_eq!(s.sender(), Some(":1.5"));
        assert_eq!(s.member(), Some("Shouted"));
        assert_eq!(s.body_values().unwrap(), every_type());
        // Field 10, type o, the path: after the sender, 8-aligned.
        let path = b"/org/freedesktop/DBus/Containers1/c12";
        let at = joined
            .windows(4)
            .position(|w| w == [10, 1, b'o', 0])
            .expect("field 10 is there");
        assert_eq!(at % 8, 0);
        let len_bytes: [u8; 4] = joined[at + 4..at + 8].try_into().unwrap();
        let len = match endian {
            Endian::Little => u32::from_le_bytes(len_bytes),
            Endian::Big => u32::from_be_bytes(len_bytes),
        };
        assert_eq!(len as usize, path.len());
        assert_eq!(&joined[at + 8..at + 8 + path.len()], path);
    }
}
