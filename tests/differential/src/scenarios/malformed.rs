//! Messages that are wrong but routable (what a lenient bus passes on and
//! a strict one refuses), and messages every bus must refuse.

use super::{s, Scenario};
use crate::raw::{code, string_body, Field, RawMessage};

/// Routable messages dbus-daemon passes on (or ignores) rather than
/// dropping the sender for: they are named `malformed/routable/...`.
const ROUTABLE: &[&str] = &[
    "h-without-unix-fds",
    "unknown-message-type",
    "unknown-flags",
    "dict-with-duplicate-keys",
    "unknown-header-field-odd-type",
    "signal-with-reply-serial",
    "error-name-on-signal",
];

/// (case, message): `a` sends it, `b` listens to every signal; then `a`
/// asks the bus for its id (if it is still connected) and `b` settles.
/// The cases not in [`ROUTABLE`] are messages every bus must refuse
/// (`malformed/refused/...`): dbus-daemon drops their sender.
fn messages() -> Vec<(&'static str, RawMessage)> {
    let h_signal = RawMessage::signal("Fd", "h", vec![0, 0, 0, 0]);
    let mut unknown_type = RawMessage::signal("Type5", "", vec![]);
    unknown_type.msg_type = 5;
    let mut version2 = RawMessage::signal("Version2", "", vec![]);
    version2.version = 2;
    let mut no_member_call = RawMessage::signal("X", "", vec![]);
    no_member_call.msg_type = 1;
    no_member_call.fields.retain(|(c, _)| *c != code::MEMBER);
    let mut unknown_flags = RawMessage::signal("Flags", "", vec![]);
    unknown_flags.flags = 0xf0;
    vec![
        ("h-without-unix-fds", h_signal.clone()),
        (
            "h-index-beyond-unix-fds",
            RawMessage::signal("Fd", "h", vec![1, 0, 0, 0]).field(code::UNIX_FDS, Field::U32(1)),
        ),
        (
            "unix-fds-without-fds",
            h_signal.field(code::UNIX_FDS, Field::U32(1)),
        ),
        ("unknown-message-type", unknown_type),
        ("protocol-version-2", version2),
        ("call-without-member", no_member_call),
        (
            "signal-without-interface",
            RawMessage {
                fields: vec![
                    (code::PATH, Field::Path("/x".into())),
                    (code::MEMBER, Field::Str("NoIface".into())),
                ],
                ..RawMessage::signal("NoIface", "", vec![])
            },
        ),
        ("unknown-flags", unknown_flags),
        (
            "invalid-utf8",
            RawMessage::signal("Utf8", "s", string_body(b"\xff\xfe")),
        ),
        (
            "nul-in-string",
            RawMessage::signal("Nul", "s", string_body(b"a\0b")),
        ),
        (
            "local-path",
            RawMessage::signal("Local", "", vec![]).field(
                code::PATH,
                Field::Path("/org/freedesktop/DBus/Local".into()),
            ),
        ),
        (
            "local-interface",
            RawMessage::signal("Local", "", vec![]).field(
                code::INTERFACE,
                Field::Str("org.freedesktop.DBus.Local".into()),
            ),
        ),
        (
            "header-field-wrong-type",
            RawMessage::signal("WrongType", "", vec![]).field(code::MEMBER, Field::U32(3)),
        ),
        (
            "bad-signature-field",
            RawMessage::signal("BadSig", "", vec![]).field(code::SIGNATURE, Field::Sig("a".into())),
        ),
        (
            "body-longer-than-signature",
            RawMessage::signal("Long", "", vec![1, 2, 3, 4]),
        ),
        (
            "signal-with-reply-serial",
            RawMessage::signal("Replyish", "", vec![]).field(code::REPLY_SERIAL, Field::U32(5)),
        ),
        (
            "bool-not-0-or-1",
            RawMessage::signal("Bool", "b", vec![2, 0, 0, 0]),
        ),
        (
            "invalid-object-path-value",
            RawMessage::signal("Path", "o", string_body(b"//x")),
        ),
        (
            "invalid-signature-value",
            RawMessage::signal("Sig", "g", vec![1, b'(', 0]),
        ),
        (
            "variant-bad-signature",
            RawMessage::signal("Var", "v", vec![1, b'!', 0, 0]),
        ),
        (
            "non-zero-padding-in-body",
            RawMessage::signal("Pad", "yu", vec![1, 9, 9, 9, 4, 0, 0, 0]),
        ),
        (
            "array-length-not-whole-elements",
            RawMessage::signal("Arr", "au", vec![3, 0, 0, 0, 1, 2, 3]),
        ),
        (
            "dict-with-duplicate-keys",
            RawMessage::signal(
                "Dict",
                "a{yy}",
                // Two entries with key 1, each 8-aligned (array of
                // dict entries: length 10, padding to 8, then 1:2,
                // padding, 1:3).
                vec![10, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0, 1, 3],
            ),
        ),
        (
            "unknown-header-field-odd-type",
            RawMessage::signal("Odd", "", vec![]).field(200, Field::Sig("a{sv}".into())),
        ),
        (
            "error-without-error-name",
            RawMessage {
                msg_type: 3,
                fields: vec![(code::REPLY_SERIAL, Field::U32(1))],
                ..RawMessage::signal("X", "", vec![])
            },
        ),
        (
            "return-without-reply-serial",
            RawMessage {
                msg_type: 2,
                fields: vec![],
                ..RawMessage::signal("X", "", vec![])
            },
        ),
        (
            "reply-serial-zero",
            RawMessage {
                msg_type: 2,
                fields: vec![(code::REPLY_SERIAL, Field::U32(0))],
                ..RawMessage::signal("X", "", vec![])
            },
        ),
        (
            "empty-destination",
            RawMessage::signal("Dest", "", vec![])
                .field(code::DESTINATION, Field::Str(String::new())),
        ),
        (
            "error-name-on-signal",
            RawMessage::signal("Errish", "", vec![])
                .field(code::ERROR_NAME, Field::Str("com.example.Error".into())),
        ),
    ]
}

pub fn scenarios() -> Vec<Scenario> {
    let mut all = Vec::new();
    for (case, message) in messages() {
        let kind = if ROUTABLE.contains(&case) {
            "routable"
        } else {
            "refused"
        };
        all.push(Scenario::new(
            format!("malformed/{kind}/{case}"),
            move |script| {
                script.client("a");
                script.client("b");
                script.bus("b", "AddMatch", vec![s("type='signal'")]);
                let serial = script.next_serial("a");
                script.send_raw("a", message.bytes(serial), &[]);
                script.bus("a", "GetId", vec![]);
                script.drain("b");
            },
        ));
    }
    all.push(Scenario::new("malformed/refused/serial-zero", |script| {
        script.client("a");
        script.client("b");
        script.bus("b", "AddMatch", vec![s("type='signal'")]);
        let message = RawMessage::signal("Zero", "", vec![]);
        script.send_raw("a", message.bytes(0), &[]);
        script.bus("a", "GetId", vec![]);
        script.drain("b");
    }));
    // Addressed to a peer: the call form of the dbus-fast case.
    all.push(Scenario::new(
        "malformed/routable/h-without-unix-fds-call",
        |script| {
            script.client("a");
            script.client("b");
            let b = script.unique_name("b");
            let mut call = RawMessage::signal("TakeFd", "h", vec![0, 0, 0, 0])
                .field(code::DESTINATION, Field::Str(b));
            call.msg_type = 1;
            let serial = script.next_serial("a");
            script.send_raw("a", call.bytes(serial), &[]);
            script.drain("b");
            script.drain("a");
        },
    ));
    all
}
