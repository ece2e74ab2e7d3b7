//! `<policy>` and its `<allow>`/`<deny>` rules, checked as dbus-daemon
//! checks them and kept as written (attribute, value) lists: applying
//! them is the bus's policy engine's job.

use std::path::PathBuf;

use super::xml::Element;

/// Whom a `<policy>` applies to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PolicyScope {
    /// `context="default"`: everyone, before the specific policies.
    Default,
    /// `context="mandatory"`: everyone, after (and over) all others.
    Mandatory,
    /// `user="name-or-uid"` (`*` for every user), resolved later.
    User(String),
    /// `group="name-or-gid"` (`*` for every group), resolved later.
    Group(String),
    /// `at_console="true|false"`.
    AtConsole(bool),
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Policy {
    pub scope: PolicyScope,
    pub rules: Vec<Rule>,
    pub file: PathBuf,
    pub line: usize,
}

/// One `<allow>` or `<deny>`, attributes in the order written.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rule {
    pub allow: bool,
    pub attributes: Vec<(String, String)>,
    pub file: PathBuf,
    pub line: usize,
}

impl Rule {
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// How an attribute takes part in a rule.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// send_*: about messages sent.
    Send,
    /// receive_*: about messages received.
    Receive,
    /// Message-related, on either side (eavesdrop, min_fds, max_fds).
    Message,
    /// own / own_prefix: owning names.
    Own,
    /// user / group: connecting.
    Connect,
    /// log: a modifier that makes no rule on its own.
    Modifier,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    Free,
    Boolean,
    MessageType,
    FdCount,
}

const RULE_ATTRIBUTES: &[(&str, Kind, Check)] = &[
    ("send_interface", Kind::Send, Check::Free),
    ("send_member", Kind::Send, Check::Free),
    ("send_error", Kind::Send, Check::Free),
    ("send_destination", Kind::Send, Check::Free),
    ("send_destination_prefix", Kind::Send, Check::Free),
    ("send_path", Kind::Send, Check::Free),
    ("send_type", Kind::Send, Check::MessageType),
    ("send_requested_reply", Kind::Send, Check::Boolean),
    ("send_broadcast", Kind::Send, Check::Boolean),
    ("receive_interface", Kind::Receive, Check::Free),
    ("receive_member", Kind::Receive, Check::Free),
    ("receive_error", Kind::Receive, Check::Free),
    ("receive_sender", Kind::Receive, Check::Free),
    ("receive_path", Kind::Receive, Check::Free),
    ("receive_type", Kind::Receive, Check::MessageType),
    ("receive_requested_reply", Kind::Receive, Check::Boolean),
    ("eavesdrop", Kind::Message, Check::Boolean),
    ("min_fds", Kind::Message, Check::FdCount),
    ("max_fds", Kind::Message, Check::FdCount),
    ("own", Kind::Own, Check::Free),
    ("own_prefix", Kind::Own, Check::Free),
    ("user", Kind::Connect, Check::Free),
    ("group", Kind::Connect, Check::Free),
    ("log", Kind::Modifier, Check::Free),
];

/// The most fds one message can carry (the specification's 2^25 bound,
/// which dbus-daemon uses for min_fds/max_fds).
const MAX_MESSAGE_UNIX_FDS: u64 = 1 << 25;

/// The scope of a `<policy>` element: exactly one attribute of four.
pub fn scope(element: &Element) -> Result<PolicyScope, String> {
    for (key, _) in &element.attributes {
        if !matches!(key.as_str(), "context" | "user" | "group" | "at_console") {
            return Err(format!(
                "attribute \"{key}\" is invalid on <policy> element in this context"
            ));
        }
    }
    let [(key, value)] = element.attributes.as_slice() else {
        return Err(
            "<policy> element must have exactly one of (context|user|group|at_console) attributes"
                .into(),
        );
    };
    match key.as_str() {
        "context" => match value.as_str() {
            "default" => Ok(PolicyScope::Default),
            "mandatory" => Ok(PolicyScope::Mandatory),
            other => Err(format!(
                "context attribute on <policy> must have the value \"default\" or \"mandatory\", not \"{other}\""
            )),
        },
        "user" => Ok(PolicyScope::User(value.clone())),
        "group" => Ok(PolicyScope::Group(value.clone())),
        _ => match value.as_str() {
            "true" => Ok(PolicyScope::AtConsole(true)),
            "false" => Ok(PolicyScope::AtConsole(false)),
            other => Err(format!(
                "unknown value \"{other}\" for at_console, must be true or false"
            )),
        },
    }
}

/// Check an `<allow>`/`<deny>` element and keep it as a rule.
pub fn rule(element: &Element, file: &std::path::Path) -> Result<Rule, String> {
    let name = &element.name;
    let mut kinds = Vec::new();
    for (key, value) in &element.attributes {
        let Some(&(_, kind, check)) = RULE_ATTRIBUTES.iter().find(|(n, _, _)| n == key) else {
            return Err(format!(
                "attribute \"{key}\" is invalid on <{name}> element in this context"
            ));
        };
        check_value(key, value, check)?;
        kinds.push(kind);
    }
    if kinds
        .iter()
        .all(|k| matches!(k, Kind::Modifier | Kind::Message))
        && !element.attributes.iter().any(|(k, _)| k == "eavesdrop")
    {
        // log, min_fds and max_fds alone say nothing about what to match.
        return Err(format!("element <{name}> must have one or more attributes"));
    }
    let has = |kind| kinds.contains(&kind);
    let message_related = has(Kind::Send) || has(Kind::Receive) || has(Kind::Message);
    let others = kinds
        .iter()
        .filter(|k| matches!(k, Kind::Own | Kind::Connect))
        .count();
    if others > 1 || (others == 1 && message_related) {
        return Err(format!(
            "invalid combination of attributes on element <{name}>: own, own_prefix, user, group and the message-related attributes cannot be combined"
        ));
    }
    if has(Kind::Send) && has(Kind::Receive) {
        return Err(format!(
            "invalid combination of attributes on element <{name}>: send and receive attributes cannot be combined"
        ));
    }
    let attr = |key: &str| element.attribute(key);
    if attr("send_destination").is_some() && attr("send_destination_prefix").is_some() {
        return Err(format!(
            "invalid combination of attributes on element <{name}>: send_destination cannot be combined with send_destination_prefix"
        ));
    }
    for side in ["send", "receive"] {
        let member = attr(&format!("{side}_member"));
        if member.is_some()
            && attr(&format!("{side}_interface")).is_none()
            && attr(&format!("{side}_path")).is_none()
        {
            return Err(format!(
                "on element <{name}>, if you specify a member you must specify an interface or a path. Keep in mind that not all messages have an interface field."
            ));
        }
    }
    if attr("send_broadcast") == Some("true") {
        // A broadcast has no destination; dbus-daemon lets a prefix pass.
        if let Some(destination) = attr("send_destination").filter(|d| *d != "*") {
            return Err(format!(
                "rule with send_broadcast=\"true\" and send_destination=\"{destination}\" cannot match anything"
            ));
        }
    }
    Ok(Rule {
        allow: name == "allow",
        attributes: element.attributes.clone(),
        file: file.to_path_buf(),
        line: element.line,
    })
}

fn check_value(key: &str, value: &str, check: Check) -> Result<(), String> {
    match check {
        Check::Free => Ok(()),
        Check::Boolean if matches!(value, "true" | "false") => Ok(()),
        Check::Boolean => Err(format!(
            "bad value \"{value}\" for {key} attribute, must be true or false"
        )),
        Check::MessageType
            if matches!(value, "*" | "method_call" | "method_return" | "signal" | "error") =>
        {
            Ok(())
        }
        Check::MessageType => Err(format!("bad message type \"{value}\"")),
        Check::FdCount => match value.parse::<u64>() {
            Ok(n) if n <= MAX_MESSAGE_UNIX_FDS => Ok(()),
            _ => Err(format!(
                "bad value \"{value}\" for {key} attribute, must be an integer in range 0 to {MAX_MESSAGE_UNIX_FDS} inclusive"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn element(name: &str, attributes: &[(&str, &str)]) -> Element {
        Element {
            name: name.into(),
            attributes: attributes
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            text: String::new(),
            children: Vec::new(),
            line: 3,
        }
    }

    fn check(attributes: &[(&str, &str)]) -> Result<Rule, String> {
        rule(
            &element("allow", attributes),
            std::path::Path::new("f.conf"),
        )
    }

    #[test]
    fn scopes() {
        let scope_of = |a: &[(&str, &str)]| scope(&element("policy", a));
        assert_eq!(
            scope_of(&[("context", "default")]),
            Ok(PolicyScope::Default)
        );
        assert_eq!(
            scope_of(&[("context", "mandatory")]),
            Ok(PolicyScope::Mandatory)
        );
        assert_eq!(
            scope_of(&[("user", "root")]),
            Ok(PolicyScope::User("root".into()))
        );
        assert_eq!(
            scope_of(&[("group", "*")]),
            Ok(PolicyScope::Group("*".into()))
        );
        assert_eq!(
            scope_of(&[("at_console", "true")]),
            Ok(PolicyScope::AtConsole(true))
        );
        assert_eq!(
            scope_of(&[("at_console", "false")]),
            Ok(PolicyScope::AtConsole(false))
        );
        for bad in [
            &[][..],
            &[("user", "root"), ("at_console", "true")][..],
            &[("hat", "top")][..],
            &[("context", "apropos")][..],
            &[("at_console", "somewhere")][..],
        ] {
            assert!(scope_of(bad).is_err(), "{bad:?}");
        }
        assert!(scope_of(&[]).unwrap_err().contains("exactly one of"));
    }

    #[test]
    fn rules_keep_their_attributes_in_order() {
        let r = rule(
            &element(
                "deny",
                &[("send_destination", "a.b"), ("send_interface", "a.b.C")],
            ),
            std::path::Path::new("x.conf"),
        )
        .unwrap();
        assert!(!r.allow);
        assert_eq!(r.line, 3);
        assert_eq!(r.file, std::path::Path::new("x.conf"));
        assert_eq!(r.attributes[0], ("send_destination".into(), "a.b".into()));
        assert_eq!(r.attribute("send_interface"), Some("a.b.C"));
        assert!(check(&[("eavesdrop", "true")]).unwrap().allow);
    }

    #[test]
    fn valid_rules_dbus_daemon_accepts() {
        for ok in [
            &[("own", "*")][..],
            &[("own", "")][..],
            &[("own_prefix", "org.a")][..],
            &[("user", "*")][..],
            &[("user", "*"), ("log", "true")][..],
            &[("send_destination", "*"), ("eavesdrop", "true")][..],
            &[("send_destination_prefix", "a"), ("send_broadcast", "true")][..],
            &[("send_destination", "*"), ("send_broadcast", "true")][..],
            &[("send_broadcast", "false"), ("send_destination", "a.b")][..],
            &[("send_member", "x"), ("send_path", "/")][..],
            &[("receive_member", "x"), ("receive_interface", "i")][..],
            &[("send_type", "*")][..],
            &[
                ("receive_type", "error"),
                ("receive_requested_reply", "false"),
            ][..],
            &[
                ("send_destination", "*"),
                ("max_fds", "0"),
                ("min_fds", "33554432"),
            ][..],
        ] {
            assert!(check(ok).is_ok(), "{ok:?}: {:?}", check(ok));
        }
    }

    #[test]
    fn invalid_rules_are_refused_with_dbus_daemons_reasons() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[], "must have one or more attributes"),
            (&[("log", "true")], "must have one or more attributes"),
            (&[("max_fds", "3")], "must have one or more attributes"),
            (
                &[("species", "stoat")],
                "attribute \"species\" is invalid on <allow>",
            ),
            (&[("user", "*"), ("own", "a")], "cannot be combined"),
            (&[("user", "a"), ("group", "b")], "cannot be combined"),
            (&[("own", "a"), ("own_prefix", "b")], "cannot be combined"),
            (&[("own", "a"), ("eavesdrop", "true")], "cannot be combined"),
            (&[("own", "a"), ("max_fds", "3")], "cannot be combined"),
            (
                &[("receive_type", "signal"), ("send_destination", "a")],
                "send and receive attributes cannot be combined",
            ),
            (
                &[("send_destination", "a"), ("send_destination_prefix", "a")],
                "send_destination cannot be combined with send_destination_prefix",
            ),
            (
                &[("send_member", "Reboot")],
                "you must specify an interface or a path",
            ),
            (
                &[("receive_member", "X")],
                "you must specify an interface or a path",
            ),
            (
                &[
                    ("send_broadcast", "true"),
                    ("send_destination", "com.example.Bees"),
                ],
                "cannot match anything",
            ),
            (&[("send_type", "foo")], "bad message type \"foo\""),
            (&[("eavesdrop", "yes")], "must be true or false"),
            (
                &[("send_destination", "*"), ("max_fds", "x")],
                "range 0 to 33554432",
            ),
            (
                &[("send_destination", "*"), ("min_fds", "-1")],
                "range 0 to 33554432",
            ),
            (
                &[("send_destination", "*"), ("max_fds", "33554433")],
                "range 0 to 33554432",
            ),
        ];
        for (attributes, reason) in cases {
            let err = check(attributes).unwrap_err();
            assert!(err.contains(reason), "{attributes:?}: {err}");
        }
    }
}
