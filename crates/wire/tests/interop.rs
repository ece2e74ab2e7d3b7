//! Messages captured from real clients (libdbus's dbus-send and GLib's
//! gdbus, see fixtures/capture.py) parse, decode to the values given on
//! their command lines, and re-marshal to byte-identical bodies.

use bytes::Bytes;
use quickbus_wire::{Message, MessageBuilder, MessageType, Value};

fn fixture(name: &str) -> Message {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    Message::parse(Bytes::from(bytes)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn s(v: &str) -> Value {
    Value::String(v.into())
}

fn array(elem_sig: &str, items: Vec<Value>) -> Value {
    Value::Array {
        elem_sig: elem_sig.into(),
        items,
    }
}

fn entry(k: Value, v: Value) -> Value {
    Value::DictEntry(Box::new(k), Box::new(v))
}

fn variant(v: Value) -> Value {
    Value::Variant(Box::new(v))
}

/// Our marshalling of the decoded values must equal the client's bytes.
fn assert_remarshals(message: &Message) {
    let rebuilt = MessageBuilder::method_return(1)
        .endian(message.endian())
        .body(message.body_values().unwrap())
        .build(1)
        .unwrap();
    let rebuilt = Message::parse(rebuilt).unwrap();
    assert_eq!(rebuilt.body(), message.body());
    assert_eq!(rebuilt.signature(), message.signature());
}

fn assert_stamp_keeps(message: &Message) {
    let frame = message.stamp(":1.77");
    let joined = [&frame.header[..], &frame.body[..]].concat();
    let stamped = Message::parse(Bytes::from(joined)).unwrap();
    assert_eq!(stamped.sender(), Some(":1.77"));
    assert_eq!(stamped.member(), message.member());
    assert_eq!(
        stamped.body_values().unwrap(),
        message.body_values().unwrap()
    );
}

#[test]
fn dbus_send_signal() {
    let m = fixture("dbus-send-signal.bin");
    assert_eq!(m.msg_type(), MessageType::Signal);
    assert_eq!(m.path(), Some("/org/example/Obj"));
    assert_eq!(m.interface(), Some("org.example.Iface"));
    assert_eq!(m.member(), Some("Changed"));
    assert_eq!(m.signature(), "sitbdoynqasa{si}v");
    assert_eq!(
        m.body_values().unwrap(),
        vec![
            s("héllo"),
            Value::Int32(-5),
            Value::Uint64(7),
            Value::Bool(true),
            Value::Double(1.5),
            Value::ObjectPath("/a/b".into()),
            Value::Byte(200),
            Value::Int16(-2),
            Value::Uint16(3),
            array("s", vec![s("x"), s("yz")]),
            array(
                "{si}",
                vec![
                    entry(s("one"), Value::Int32(1)),
                    entry(s("two"), Value::Int32(2))
                ]
            ),
            variant(Value::Int32(9)),
        ]
    );
    assert_remarshals(&m);
    assert_stamp_keeps(&m);
}

#[test]
fn dbus_send_method_call() {
    let m = fixture("dbus-send-call.bin");
    assert_eq!(m.msg_type(), MessageType::MethodCall);
    assert_eq!(m.destination(), Some("org.example.Svc"));
    assert_eq!(m.member(), Some("Get"));
    assert_eq!(
        m.body_values().unwrap(),
        vec![
            array("y", vec![Value::Byte(1), Value::Byte(2), Value::Byte(3)]),
            array("{us}", vec![entry(Value::Uint32(1), s("a"))]),
            variant(s("v")),
            Value::Uint32(0),
        ]
    );
    assert_eq!(
        m.string_args(8),
        vec![None, None, None, None],
        "no top-level string arguments"
    );
    assert_remarshals(&m);
    assert_stamp_keeps(&m);
}

#[test]
fn gdbus_emit_signal() {
    let m = fixture("gdbus-emit.bin");
    assert_eq!(m.msg_type(), MessageType::Signal);
    assert_eq!(m.member(), Some("Frob"));
    assert_eq!(
        m.body_values().unwrap(),
        vec![
            s("hi"),
            array("i", vec![Value::Int32(1), Value::Int32(2), Value::Int32(3)]),
            array(
                "{sv}",
                vec![
                    entry(s("k"), variant(Value::Int64(5))),
                    entry(s("l"), variant(s("s")))
                ]
            ),
            array("y", vec![Value::Byte(1), Value::Byte(2)]),
            Value::ObjectPath("/x".into()),
            Value::Signature("a{sv}".into()),
            Value::Struct(vec![
                Value::Uint16(1),
                Value::Bool(true),
                Value::Double(2.5)
            ]),
            array("(ii)", vec![]),
            variant(variant(Value::Byte(7))),
            array("x", vec![Value::Int64(-1)]),
        ]
    );
    let first = m.string_args(1);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].map(|a| a.value), Some("hi"));
    assert_remarshals(&m);
    assert_stamp_keeps(&m);
}
