//! Turning what a connection received into comparable text: one line per
//! message, with everything that legitimately varies between two runs or
//! two daemons replaced by a stable stand-in.
//!
//! - unique names (`:1.7`) become the scenario's label for that client
//!   (`:a`, `:monitor`) or `:other1`, `:other2`... in order of first
//!   appearance, also inside strings (match rules, error texts);
//! - the serials of messages the bus itself sends are `*` (each daemon
//!   counts its own): those from the driver, and those with no sender
//!   (dbus-daemon answers a call with no destination without one; every
//!   peer's message carries the sender the bus stamped); clients' serials
//!   are the harness's and stay;
//! - 32 hex digits (GetId's bus id, GetMachineId, GUIDs) become `<hex32>`,
//!   except the GUID of the bus's address, which becomes `<address-guid>`
//!   (dbus-daemon's bus id is not its address GUID: GetId shows which);
//! - this process's pid (every scenario client runs in it) becomes `<pid>`,
//!   the daemon's `<daemon-pid>`;
//! - the entries of dicts are sorted by key, and the string arrays of the
//!   driver's replies that list the driver itself (ListNames,
//!   ListActivatableNames, whose order is a hash table's) are sorted.

use std::collections::HashMap;

use bytes::Bytes;
use quickbus_client::{Message, MessageType, Value};

pub const DRIVER: &str = "org.freedesktop.DBus";

/// The unique-name map of one scenario run.
#[derive(Default)]
pub struct Names {
    map: HashMap<String, String>,
    others: usize,
    /// Process ids and what they stand for (`<pid>`, `<daemon-pid>`).
    pids: Vec<(u32, &'static str)>,
    /// The GUID in the bus's address.
    address_guid: Option<String>,
}

impl Names {
    /// Names `unique` after the scenario's `label` for it.
    pub fn label(&mut self, unique: &str, label: &str) {
        self.map.insert(unique.to_owned(), format!(":{label}"));
    }

    /// Shows `pid` as `stand_in` wherever a u32 equals it.
    pub fn pid(&mut self, pid: u32, stand_in: &'static str) {
        self.pids.push((pid, stand_in));
    }

    /// Shows the GUID of `address` (`...,guid=<32 hex>`) as `<address-guid>`.
    pub fn address(&mut self, address: &str) {
        self.address_guid = address
            .split([',', ';'])
            .find_map(|part| part.strip_prefix("guid="))
            .map(str::to_ascii_lowercase);
    }

    fn unique(&mut self, unique: &str) -> String {
        if let Some(label) = self.map.get(unique) {
            return label.clone();
        }
        self.others += 1;
        let label = format!(":other{}", self.others);
        self.map.insert(unique.to_owned(), label.clone());
        label
    }

    /// `text` with every unique name in it replaced by its label, and every
    /// run of exactly 32 hex digits by `<hex32>`.
    pub fn text(&mut self, text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        while i < bytes.len() {
            if let Some(len) = unique_name_at(bytes, i) {
                out.push_str(&self.unique(&text[i..i + len]));
                i += len;
                continue;
            }
            let run = bytes[i..]
                .iter()
                .take_while(|b| b.is_ascii_hexdigit())
                .count();
            let starts_word = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
            if run == 32 && starts_word {
                let hex = text[i..i + run].to_ascii_lowercase();
                if self.address_guid.as_deref() == Some(hex.as_str()) {
                    out.push_str("<address-guid>");
                } else {
                    out.push_str("<hex32>");
                }
                i += run;
                continue;
            }
            let ch = text[i..].chars().next().expect("in bounds");
            out.push(ch);
            i += ch.len_utf8();
        }
        out
    }
}

/// The length of a unique name (`:` digits `.` digits) starting at `i`.
fn unique_name_at(bytes: &[u8], i: usize) -> Option<usize> {
    if bytes[i] != b':' {
        return None;
    }
    let digits = |from: usize| {
        bytes[from..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    let first = digits(i + 1);
    if first == 0 || bytes.get(i + 1 + first) != Some(&b'.') {
        return None;
    }
    let second = digits(i + 2 + first);
    (second > 0).then_some(2 + first + second)
}

/// One received frame as a line (see the module documentation).
pub fn render(frame: &[u8], fds: usize, names: &mut Names) -> String {
    let message = match Message::parse(Bytes::copy_from_slice(frame)) {
        Ok(message) => message,
        Err(err) => return format!("unparseable message ({fds} fds): {err}"),
    };
    render_message(&message, fds, names)
}

pub fn render_message(m: &Message, fds: usize, names: &mut Names) -> String {
    let kind = match m.msg_type() {
        MessageType::MethodCall => "call",
        MessageType::MethodReturn => "return",
        MessageType::Error => "error",
        MessageType::Signal => "signal",
    };
    let from_bus = matches!(m.sender(), Some(DRIVER) | None);
    let mut line = kind.to_owned();
    if from_bus {
        line.push_str(" serial=*");
    } else {
        line.push_str(&format!(" serial={}", m.serial()));
    }
    let mut field = |key: &str, value: Option<String>| {
        if let Some(value) = value {
            line.push_str(&format!(" {key}={value}"));
        }
    };
    field("from", m.sender().map(|s| names.text(s)));
    field("to", m.destination().map(|s| names.text(s)));
    field("path", m.path().map(str::to_owned));
    field("iface", m.interface().map(str::to_owned));
    field("member", m.member().map(str::to_owned));
    field("error", m.error_name().map(str::to_owned));
    field("reply_to", m.reply_serial().map(|s| s.to_string()));
    field(
        "flags",
        (m.flags() != 0).then(|| format!("{:#x}", m.flags())),
    );
    field(
        "big_endian",
        (m.endian() == quickbus_wire::Endian::Big).then(String::new),
    );
    field(
        "unix_fds",
        (m.unix_fds() != 0).then(|| m.unix_fds().to_string()),
    );
    field("fds_received", (fds != 0).then(|| fds.to_string()));
    let body = match m.body_values() {
        Ok(values) => {
            let sort_lists = from_bus && m.msg_type() == MessageType::MethodReturn;
            let rendered: Vec<String> =
                values.iter().map(|v| value(v, names, sort_lists)).collect();
            rendered.join(", ")
        }
        Err(err) => format!("<undecodable: {err}>"),
    };
    line.push_str(&format!(" sig={:?} body=({body})", m.signature()));
    line
}

/// One value as text; `sort_lists` sorts string arrays that list the driver.
pub fn value(v: &Value, names: &mut Names, sort_lists: bool) -> String {
    match v {
        Value::Byte(n) => format!("y{n}"),
        Value::Bool(b) => b.to_string(),
        Value::Int16(n) => n.to_string(),
        Value::Uint16(n) => n.to_string(),
        Value::Int32(n) => n.to_string(),
        Value::Uint32(n) => match names.pids.iter().find(|(pid, _)| pid == n) {
            Some((_, stand_in)) => (*stand_in).to_owned(),
            None => n.to_string(),
        },
        Value::Int64(n) => n.to_string(),
        Value::Uint64(n) => n.to_string(),
        Value::Double(d) => format!("{d:?}"),
        Value::String(s) => format!("{:?}", names.text(s)),
        Value::ObjectPath(s) => format!("o{s:?}"),
        Value::Signature(s) => format!("g{s:?}"),
        Value::UnixFd(i) => format!("h{i}"),
        Value::Array { elem_sig, items } if elem_sig == "y" => {
            let bytes: Vec<u8> = items
                .iter()
                .map(|i| match i {
                    Value::Byte(b) => *b,
                    _ => 0,
                })
                .collect();
            format!("ay{:?}", String::from_utf8_lossy(&bytes))
        }
        Value::Array { items, .. } => {
            let mut rendered: Vec<String> =
                items.iter().map(|i| value(i, names, sort_lists)).collect();
            let is_dict = items.iter().any(|i| matches!(i, Value::DictEntry(..)));
            let lists_driver =
                sort_lists && items.iter().any(|i| *i == Value::String(DRIVER.into()));
            if is_dict || lists_driver {
                rendered.sort();
            }
            format!("[{}]", rendered.join(", "))
        }
        Value::Struct(fields) => {
            let rendered: Vec<String> =
                fields.iter().map(|f| value(f, names, sort_lists)).collect();
            format!("({})", rendered.join(", "))
        }
        Value::DictEntry(k, v) => format!(
            "{}: {}",
            value(k, names, sort_lists),
            value(v, names, sort_lists)
        ),
        Value::Variant(inner) => format!("<{}>", value(inner, names, sort_lists)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_names_and_hex_ids_are_replaced_inside_text() {
        let mut names = Names::default();
        names.label(":1.4", "a");
        assert_eq!(
            names.text("sender=':1.4',arg0=':1.40' :1.4."),
            "sender=':a',arg0=':other1' :a."
        );
        assert_eq!(names.text(":1.40 :x.1 :1."), ":other1 :x.1 :1.");
        assert_eq!(
            names.text("id 0123456789abcdef0123456789abcdef!"),
            "id <hex32>!"
        );
        // 33 hex digits are not an id.
        assert_eq!(
            names.text("0123456789abcdef0123456789abcdef0"),
            "0123456789abcdef0123456789abcdef0"
        );
    }

    #[test]
    fn the_address_guid_has_its_own_stand_in() {
        let mut names = Names::default();
        names.address("unix:path=/tmp/x/bus,guid=0123456789ABCDEF0123456789abcdef");
        assert_eq!(
            names.text("0123456789abcdef0123456789abcdef fedcba98765432100123456789abcdef"),
            "<address-guid> <hex32>"
        );
    }

    #[test]
    fn driver_serials_are_hidden_and_driver_lists_sorted() {
        let mut names = Names::default();
        let raw = quickbus_client::MessageBuilder::method_return(3)
            .sender(DRIVER)
            .destination(":1.9")
            .body(vec![Value::Array {
                elem_sig: "s".into(),
                items: vec![
                    Value::String(DRIVER.into()),
                    Value::String(":1.9".into()),
                    Value::String("a.b".into()),
                ],
            }])
            .build(77)
            .unwrap();
        let line = render(&raw, 0, &mut names);
        assert_eq!(
            line,
            r#"return serial=* from=org.freedesktop.DBus to=:other1 reply_to=3 sig="as" body=([":other1", "a.b", "org.freedesktop.DBus"])"#
        );
    }
}
