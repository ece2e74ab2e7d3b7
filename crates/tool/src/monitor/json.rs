//! `monitor --json`: one JSON object per message and line, for scripts
//! (jq) that would rather not parse dbus-monitor's text.

use quickbus_client::{Message, MessageType};
use quickbus_wire::Value;
use serde_json::{json, Map, Value as Json};

/// The message as one line of JSON (fields it lacks are left out).
pub fn format_line(msg: &Message, sec: u64, usec: u32) -> String {
    let kind = match msg.msg_type() {
        MessageType::MethodCall => "method_call",
        MessageType::MethodReturn => "method_return",
        MessageType::Error => "error",
        MessageType::Signal => "signal",
    };
    let mut obj = Map::new();
    obj.insert("time".into(), json!(format!("{sec}.{usec:06}")));
    obj.insert("type".into(), json!(kind));
    obj.insert("serial".into(), json!(msg.serial()));
    let optional = [
        ("sender", msg.sender()),
        ("destination", msg.destination()),
        ("path", msg.path()),
        ("interface", msg.interface()),
        ("member", msg.member()),
        ("error_name", msg.error_name()),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            obj.insert(key.into(), json!(value));
        }
    }
    if let Some(reply_serial) = msg.reply_serial() {
        obj.insert("reply_serial".into(), json!(reply_serial));
    }
    obj.insert("flags".into(), json!(msg.flags()));
    obj.insert("signature".into(), json!(msg.signature()));
    obj.insert("size".into(), json!(msg.raw().len()));
    let body = match msg.body_values() {
        Ok(values) => Json::Array(values.iter().map(to_json).collect()),
        Err(e) => json!({ "undecodable": e.to_string() }),
    };
    obj.insert("body".into(), body);
    let mut line = Json::Object(obj).to_string();
    line.push('\n');
    line
}

/// Values as JSON: numbers and strings as themselves, arrays and structs
/// as lists, a dict (array of dict entries) as a list of [key, value]
/// pairs (keys need not be strings), variants as their value.
fn to_json(value: &Value) -> Json {
    match value {
        Value::Byte(v) => json!(v),
        Value::Bool(v) => json!(v),
        Value::Int16(v) => json!(v),
        Value::Uint16(v) => json!(v),
        Value::Int32(v) => json!(v),
        Value::Uint32(v) => json!(v),
        Value::Int64(v) => json!(v),
        Value::Uint64(v) => json!(v),
        Value::UnixFd(v) => json!({ "fd_index": v }),
        Value::Double(v) => json!(v),
        Value::String(s) | Value::ObjectPath(s) | Value::Signature(s) => json!(s),
        Value::Array { items, .. } | Value::Struct(items) => {
            Json::Array(items.iter().map(to_json).collect())
        }
        Value::DictEntry(k, v) => json!([to_json(k), to_json(v)]),
        Value::Variant(inner) => to_json(inner),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickbus_wire::MessageBuilder;

    #[test]
    fn a_call_as_json() {
        let msg = Message::parse(
            MessageBuilder::method_call("/a", "Do")
                .interface("org.example.I")
                .sender(":1.1")
                .body(vec![
                    Value::String("x".into()),
                    Value::Array {
                        elem_sig: "{sv}".into(),
                        items: vec![Value::DictEntry(
                            Box::new(Value::String("k".into())),
                            Box::new(Value::Variant(Box::new(Value::Uint32(3)))),
                        )],
                    },
                ])
                .build(2)
                .unwrap(),
        )
        .unwrap();
        let line = format_line(&msg, 5, 1);
        assert!(line.ends_with('\n'));
        let parsed: Json = serde_json::from_str(&line).unwrap();
        assert_eq!(parsed["type"], "method_call");
        assert_eq!(parsed["time"], "5.000001");
        assert_eq!(parsed["sender"], ":1.1");
        assert_eq!(parsed["signature"], "sa{sv}");
        assert_eq!(parsed["body"], json!(["x", [["k", 3]]]));
        assert!(parsed.get("destination").is_none());
        assert_eq!(parsed["size"], msg.raw().len());
    }
}
