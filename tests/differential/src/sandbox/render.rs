//! One received message as a line of a sandbox transcript. Coarser than
//! [`crate::normalize::render_message`], because a proxy and a bus may
//! legitimately spell the same answer differently:
//!
//! - serials and reply serials are dropped (the stream's order says which
//!   reply answers which call, and the proxy makes up its own);
//! - an error is its name and its sender only: xdg-dbus-proxy's own errors
//!   repeat the name as their text, a bus explains;
//! - a reply the bus or a proxy made (sender the driver, or none: the
//!   proxy's answers have none) is `from=bus`, without flags (the proxy
//!   sets NO_REPLY_EXPECTED on its own), and its string lists are sorted
//!   (ListNames' order is a hash table's);
//! - GetConnectionCredentials' ProcessFD is left out: quickbus adds it
//!   (as dbus-daemon 1.15.6 does), dbus-daemon 1.14 has none; the main
//!   differential list (differences.toml) already says so, and here it
//!   would hide what the filter does with the rest of the answer;
//! - a reply whose body the case marks as each bus's own (the driver's
//!   introspection XML, listed in differences.toml) shows as `(...)`;
//! - unique names, pids and ids as in [`crate::normalize`].

use quickbus_client::{Message, MessageType, Value};

use crate::normalize::{self, Names, DRIVER};

pub fn line(m: &Message, fds: usize, elide_body: bool, names: &mut Names) -> String {
    let from_bus = matches!(m.sender(), Some(DRIVER) | None);
    let from = if from_bus {
        "bus".to_owned()
    } else {
        names.text(m.sender().unwrap_or_default())
    };
    match m.msg_type() {
        MessageType::Error => format!(
            "error from={from} name={}",
            m.error_name().unwrap_or_default()
        ),
        MessageType::MethodReturn => {
            if elide_body {
                return format!("return from={from} (...)");
            }
            format!("return from={from}{}", body(m, names, from_bus))
        }
        MessageType::MethodCall | MessageType::Signal => {
            let kind = if m.msg_type() == MessageType::Signal {
                "signal"
            } else {
                "call"
            };
            let mut line = format!("{kind} from={from}");
            let mut field = |key: &str, value: Option<String>| {
                if let Some(value) = value {
                    line.push_str(&format!(" {key}={value}"));
                }
            };
            field("to", m.destination().map(|d| names.text(d)));
            field("path", m.path().map(str::to_owned));
            field("iface", m.interface().map(str::to_owned));
            field("member", m.member().map(str::to_owned));
            field(
                "flags",
                (m.flags() != 0).then(|| format!("{:#x}", m.flags())),
            );
            field("fds", (fds != 0).then(|| fds.to_string()));
            line.push_str(&body(m, names, false));
            line
        }
    }
}

fn body(m: &Message, names: &mut Names, sort_lists: bool) -> String {
    let values = match m.body_values() {
        Ok(values) => values,
        Err(err) => return format!(" <undecodable: {err}>"),
    };
    let rendered: Vec<String> = values
        .into_iter()
        .map(|v| {
            let v = if sort_lists {
                sorted(without_process_fd(v))
            } else {
                v
            };
            normalize::value(&v, names, sort_lists)
        })
        .collect();
    format!(" ({})", rendered.join(", "))
}

/// A dict without its `ProcessFD` entry.
fn without_process_fd(v: Value) -> Value {
    match v {
        Value::Array { elem_sig, items } if elem_sig == "{sv}" => Value::Array {
            elem_sig,
            items: items
                .into_iter()
                .filter(|item| {
                    !matches!(item, Value::DictEntry(key, _) if **key == Value::String("ProcessFD".into()))
                })
                .collect(),
        },
        other => other,
    }
}

/// A string array with its items sorted (after the names in it are
/// normalised, so the order does not depend on the bus's numbering).
fn sorted(v: Value) -> Value {
    match v {
        Value::Array {
            elem_sig,
            mut items,
        } if elem_sig == "s" => {
            items.sort_by_key(|item| match item {
                Value::String(s) => sort_key(s),
                _ => String::new(),
            });
            Value::Array { elem_sig, items }
        }
        other => other,
    }
}

/// Unique names sort after well-known ones, among themselves by their
/// number's length then digits (so `:1.10` follows `:1.9`).
fn sort_key(name: &str) -> String {
    match name.strip_prefix(':') {
        Some(rest) => format!("~{:08}{rest}", rest.len()),
        None => name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickbus_client::MessageBuilder;

    fn parse(builder: MessageBuilder) -> Message {
        Message::parse(builder.build(9).unwrap()).unwrap()
    }

    #[test]
    fn errors_are_names_and_bus_replies_have_no_serials_or_flags() {
        let mut names = Names::default();
        names.label(":1.3", "app");
        let error = parse(
            MessageBuilder::error(4, "org.freedesktop.DBus.Error.AccessDenied")
                .flags(1)
                .body(vec![Value::String("why".into())]),
        );
        assert_eq!(
            line(&error, 0, false, &mut names),
            "error from=bus name=org.freedesktop.DBus.Error.AccessDenied"
        );
        let list = parse(
            MessageBuilder::method_return(5)
                .sender(DRIVER)
                .destination(":1.3")
                .body(vec![Value::Array {
                    elem_sig: "s".into(),
                    items: vec![
                        Value::String(":1.10".into()),
                        Value::String("b.c".into()),
                        Value::String(":1.9".into()),
                        Value::String("a.b".into()),
                    ],
                }]),
        );
        assert_eq!(
            line(&list, 0, false, &mut names),
            r#"return from=bus (["a.b", "b.c", ":other1", ":other2"])"#
        );
    }

    #[test]
    fn calls_keep_their_header() {
        let mut names = Names::default();
        names.label(":1.3", "app");
        let call = parse(
            MessageBuilder::method_call("/o", "M")
                .interface("a.B")
                .sender(":1.3")
                .destination("org.example.S")
                .flags(2)
                .body(vec![Value::Uint32(7)]),
        );
        assert_eq!(
            line(&call, 0, false, &mut names),
            "call from=:app to=org.example.S path=/o iface=a.B member=M flags=0x2 (7)"
        );
    }
}
