//! dbus-monitor's default output, byte for byte: a header line per
//! message, then the body one value per line, indented three spaces per
//! level (including its quirk: a variant's value is indented again after
//! "variant "). Matches dbus-monitor 1.14, Debian's; 1.15 added commas
//! between array items.

use std::fmt::Write;
use std::os::fd::OwnedFd;

use crate::print::format_double;
use quickbus_client::{Message, MessageType};
use quickbus_wire::Value;

const INDENT: &str = "   ";

fn type_name(t: MessageType) -> &'static str {
    match t {
        MessageType::Signal => "signal",
        MessageType::MethodCall => "method call",
        MessageType::MethodReturn => "method return",
        MessageType::Error => "error",
    }
}

/// One message as dbus-monitor prints it, received at `sec`.`usec`. `fds`
/// are the descriptors that came with it (described, never printed as
/// numbers).
pub fn format_message(msg: &Message, sec: u64, usec: u32, fds: &[OwnedFd]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "{} time={sec}.{usec:06} sender={} -> destination={}",
        type_name(msg.msg_type()),
        msg.sender().unwrap_or("(null sender)"),
        msg.destination().unwrap_or("(null destination)"),
    );
    // libdbus hands printf NULL for absent fields; glibc prints "(null)".
    let or_null = |s: Option<&str>| s.unwrap_or("(null)").to_owned();
    let _ = match msg.msg_type() {
        MessageType::MethodCall | MessageType::Signal => writeln!(
            out,
            " serial={} path={}; interface={}; member={}",
            msg.serial(),
            or_null(msg.path()),
            or_null(msg.interface()),
            or_null(msg.member())
        ),
        MessageType::MethodReturn => writeln!(
            out,
            " serial={} reply_serial={}",
            msg.serial(),
            msg.reply_serial().unwrap_or(0)
        ),
        MessageType::Error => writeln!(
            out,
            " error_name={} reply_serial={}",
            or_null(msg.error_name()),
            msg.reply_serial().unwrap_or(0)
        ),
    };
    match msg.body_values() {
        Ok(values) => {
            for value in &values {
                format_value(value, 1, fds, &mut out);
            }
        }
        Err(e) => {
            let _ = writeln!(out, "{INDENT}(undecodable body: {e})");
        }
    }
    out
}

pub(super) fn indent(depth: usize, out: &mut String) {
    for _ in 0..depth {
        out.push_str(INDENT);
    }
}

/// One value at `depth`, starting with its indentation.
fn format_value(value: &Value, depth: usize, fds: &[OwnedFd], out: &mut String) {
    indent(depth, out);
    format_bare(value, depth, fds, out);
}

/// One value at `depth`, its indentation already written.
fn format_bare(value: &Value, depth: usize, fds: &[OwnedFd], out: &mut String) {
    let _ = match value {
        Value::String(s) => writeln!(out, "string \"{s}\""),
        Value::Signature(s) => writeln!(out, "signature \"{s}\""),
        Value::ObjectPath(s) => writeln!(out, "object path \"{s}\""),
        Value::Int16(v) => writeln!(out, "int16 {v}"),
        Value::Uint16(v) => writeln!(out, "uint16 {v}"),
        Value::Int32(v) => writeln!(out, "int32 {v}"),
        Value::Uint32(v) => writeln!(out, "uint32 {v}"),
        Value::Int64(v) => writeln!(out, "int64 {v}"),
        Value::Uint64(v) => writeln!(out, "uint64 {v}"),
        Value::Double(v) => writeln!(out, "double {}", format_double(*v)),
        Value::Byte(v) => writeln!(out, "byte {v}"),
        Value::Bool(v) => writeln!(out, "boolean {v}"),
        Value::Variant(inner) => {
            out.push_str("variant ");
            format_value(inner, depth + 1, fds, out);
            Ok(())
        }
        Value::Array { elem_sig, items } if elem_sig == "y" => {
            let bytes: Vec<u8> = items
                .iter()
                .map(|v| match v {
                    Value::Byte(b) => *b,
                    _ => 0,
                })
                .collect();
            format_bytes(&bytes, depth, out);
            Ok(())
        }
        Value::Array { items, .. } => {
            out.push_str("array [\n");
            for item in items {
                format_value(item, depth + 1, fds, out);
            }
            indent(depth, out);
            out.push_str("]\n");
            Ok(())
        }
        Value::DictEntry(k, v) => {
            out.push_str("dict entry(\n");
            format_value(k, depth + 1, fds, out);
            format_value(v, depth + 1, fds, out);
            indent(depth, out);
            out.push_str(")\n");
            Ok(())
        }
        Value::Struct(fields) => {
            out.push_str("struct {\n");
            for field in fields {
                format_value(field, depth + 1, fds, out);
            }
            indent(depth, out);
            out.push_str("}\n");
            Ok(())
        }
        Value::UnixFd(index) => {
            super::fd_text::describe(fds.get(*index as usize), depth, out);
            Ok(())
        }
    };
}

/// `ay`: a string when every byte is printable ASCII (a final NUL
/// allowed), else hex rows that fit in 80 columns.
fn format_bytes(bytes: &[u8], depth: usize, out: &mut String) {
    let len = bytes.len();
    let printable = |i: usize, b: u8| (i + 1 == len && b == 0) || (32..=126).contains(&b);
    let all_ascii = bytes.iter().enumerate().all(|(i, &b)| printable(i, b));
    if all_ascii && len > 0 && bytes[len - 1] == 0 {
        let text = String::from_utf8_lossy(&bytes[..len - 1]);
        let _ = writeln!(out, "array of bytes \"{text}\" + \\0");
        return;
    }
    if all_ascii {
        let _ = writeln!(out, "array of bytes \"{}\"", String::from_utf8_lossy(bytes));
        return;
    }
    out.push_str("array of bytes [\n");
    indent(depth + 1, out);
    let columns = ((80 - (depth + 1) * INDENT.len()) / 3).max(8);
    for (i, b) in bytes.iter().enumerate() {
        let _ = write!(out, "{b:02x}");
        let n = i + 1;
        if n != len {
            if n % columns == 0 {
                out.push('\n');
                indent(depth + 1, out);
            } else {
                out.push(' ');
            }
        }
    }
    out.push('\n');
    indent(depth, out);
    out.push_str("]\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickbus_wire::MessageBuilder;

    fn parse(builder: MessageBuilder, serial: u32) -> Message {
        Message::parse(builder.build(serial).unwrap()).unwrap()
    }

    #[test]
    fn a_signal_with_nested_values() {
        let msg = parse(
            MessageBuilder::signal("/org/example", "org.example.Iface", "Changed")
                .sender(":1.7")
                .body(vec![
                    Value::String("hi".into()),
                    Value::Array {
                        elem_sig: "{sv}".into(),
                        items: vec![
                            Value::DictEntry(
                                Box::new(Value::String("a".into())),
                                Box::new(Value::Variant(Box::new(Value::Int32(5)))),
                            ),
                            Value::DictEntry(
                                Box::new(Value::String("b".into())),
                                Box::new(Value::Variant(Box::new(Value::Bool(true)))),
                            ),
                        ],
                    },
                    Value::Struct(vec![Value::Double(2.5), Value::ObjectPath("/x".into())]),
                ]),
            9,
        );
        let want = "signal time=1700000000.000042 sender=:1.7 -> destination=(null destination) serial=9 path=/org/example; interface=org.example.Iface; member=Changed
   string \"hi\"
   array [
      dict entry(
         string \"a\"
         variant             int32 5
      )
      dict entry(
         string \"b\"
         variant             boolean true
      )
   ]
   struct {
      double 2.5
      object path \"/x\"
   }
";
        assert_eq!(format_message(&msg, 1_700_000_000, 42, &[]), want);
    }

    #[test]
    fn replies_errors_and_absent_fields() {
        let ret = parse(
            MessageBuilder::method_return(3)
                .sender("org.freedesktop.DBus")
                .destination(":1.2"),
            5,
        );
        assert_eq!(
            format_message(&ret, 1, 2, &[]),
            "method return time=1.000002 sender=org.freedesktop.DBus -> destination=:1.2 serial=5 reply_serial=3\n"
        );
        let err = parse(
            MessageBuilder::error(4, "org.example.Error.Nope")
                .destination(":1.2")
                .body(vec![Value::String("no".into())]),
            6,
        );
        assert_eq!(
            format_message(&err, 1, 2, &[]),
            "error time=1.000002 sender=(null sender) -> destination=:1.2 error_name=org.example.Error.Nope reply_serial=4\n   string \"no\"\n"
        );
        let call = parse(MessageBuilder::method_call("/", "Ping"), 1);
        assert!(format_message(&call, 0, 0, &[])
            .contains(" serial=1 path=/; interface=(null); member=Ping\n"));
    }

    #[test]
    fn byte_arrays_as_text_or_hex() {
        let bytes = |b: &[u8]| {
            let mut out = String::new();
            format_bytes(b, 1, &mut out);
            out
        };
        assert_eq!(bytes(b"abc"), "array of bytes \"abc\"\n");
        assert_eq!(bytes(b"abc\0"), "array of bytes \"abc\" + \\0\n");
        assert_eq!(
            bytes(&[1, 2, 255]),
            "array of bytes [\n      01 02 ff\n   ]\n"
        );
        // 80 columns at depth 1: (80 - 6) / 3 = 24 bytes a row.
        let long = bytes(&[0u8; 25]);
        assert_eq!(
            long.lines()
                .nth(1)
                .unwrap()
                .split(' ')
                .filter(|w| !w.is_empty())
                .count(),
            24
        );
        assert_eq!(long.lines().nth(2).unwrap(), "      00");
    }
}
