//! The configuration's `<policy>` elements as the bus core's
//! [`PolicyConfig`]: scopes and `user`/`group` attributes resolved to ids,
//! `*` turned into "any", attributes sorted into send, receive, own and
//! connect rules the way dbus-daemon's config parser does.

use quickbus_bus::policy::{MessageRule, NameMatch, PolicyRule, RuleKind, MAX_MESSAGE_UNIX_FDS};
use quickbus_bus::PolicyConfig;
use quickbus_wire::MessageType;

use crate::config::{Policy, PolicyScope, Rule};
use crate::userdb::UserDb;

/// Convert every policy. Unknown users and groups are skipped with a
/// warning (as dbus-daemon does); a connect rule inside a user or group
/// policy is an error.
pub fn bus_policy(
    policies: &[Policy],
    db: &UserDb,
    warn: &mut dyn FnMut(String),
) -> Result<PolicyConfig, String> {
    let mut config = PolicyConfig::default();
    for policy in policies {
        let at = |what: String| format!("{}:{}: {what}", policy.file.display(), policy.line);
        let per_client = matches!(policy.scope, PolicyScope::User(_) | PolicyScope::Group(_));
        let mut rules = Vec::new();
        for rule in &policy.rules {
            let Some(converted) = convert(rule, db, warn) else {
                continue;
            };
            if per_client && matches!(converted.kind, RuleKind::User(_) | RuleKind::Group(_)) {
                let element = if rule.allow { "allow" } else { "deny" };
                let scope = if matches!(policy.scope, PolicyScope::User(_)) {
                    "per-user"
                } else {
                    "per-group"
                };
                return Err(format!(
                    "{}:{}: <{element}> rule cannot be {scope} because it has bus-global semantics",
                    rule.file.display(),
                    rule.line
                ));
            }
            rules.push(converted);
        }
        let target = match &policy.scope {
            PolicyScope::Default => &mut config.default,
            PolicyScope::Mandatory => &mut config.mandatory,
            PolicyScope::AtConsole(true) => &mut config.at_console,
            PolicyScope::AtConsole(false) => &mut config.not_at_console,
            PolicyScope::User(name) => match db.uid(name) {
                Some(uid) => config.by_user.entry(uid).or_default(),
                None => {
                    warn(at(format!(
                        "Unknown username \"{name}\" in message bus configuration file"
                    )));
                    continue;
                }
            },
            PolicyScope::Group(name) => match db.gid(name) {
                Some(gid) => config.by_group.entry(gid).or_default(),
                None => {
                    warn(at(format!(
                        "Unknown group \"{name}\" in message bus configuration file"
                    )));
                    continue;
                }
            },
        };
        target.extend(rules);
    }
    Ok(config)
}

/// `*` means "any" for every string attribute.
fn value(rule: &Rule, key: &str) -> Option<String> {
    rule.attribute(key).filter(|v| *v != "*").map(str::to_owned)
}

fn message_type(rule: &Rule, key: &str) -> Option<MessageType> {
    match rule.attribute(key)? {
        "method_call" => Some(MessageType::MethodCall),
        "method_return" => Some(MessageType::MethodReturn),
        "error" => Some(MessageType::Error),
        "signal" => Some(MessageType::Signal),
        _ => None,
    }
}

fn boolean(rule: &Rule, key: &str) -> Option<bool> {
    rule.attribute(key).map(|v| v == "true")
}

fn fd_count(rule: &Rule, key: &str, default: u32) -> u32 {
    rule.attribute(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One checked `<allow>`/`<deny>` as a bus rule; None when it names an
/// unknown user or group.
fn convert(rule: &Rule, db: &UserDb, warn: &mut dyn FnMut(String)) -> Option<PolicyRule> {
    let has_prefix = |prefix: &str| rule.attributes.iter().any(|(k, _)| k.starts_with(prefix));
    let kind =
        if has_prefix("send_") || has_prefix("receive_") || rule.attribute("eavesdrop").is_some() {
            let send = has_prefix("send_");
            let side = if send { "send" } else { "receive" };
            let field = |name: &str| value(rule, &format!("{side}_{name}"));
            let name = if send {
                match (
                    field("destination"),
                    rule.attribute("send_destination_prefix"),
                ) {
                    (Some(exact), _) => NameMatch::Exact(exact),
                    (None, Some(prefix)) => NameMatch::Prefix(prefix.to_owned()),
                    (None, None) => NameMatch::Any,
                }
            } else {
                field("sender").map_or(NameMatch::Any, NameMatch::Exact)
            };
            let spec = MessageRule {
                msg_type: message_type(rule, &format!("{side}_type")),
                path: field("path"),
                interface: field("interface"),
                member: field("member"),
                error: field("error"),
                name,
                requested_reply: boolean(rule, &format!("{side}_requested_reply")),
                eavesdrop: boolean(rule, "eavesdrop").unwrap_or(false),
                broadcast: if send {
                    boolean(rule, "send_broadcast")
                } else {
                    None
                },
                min_fds: fd_count(rule, "min_fds", 0),
                max_fds: fd_count(rule, "max_fds", MAX_MESSAGE_UNIX_FDS),
                log: boolean(rule, "log").unwrap_or(false),
            };
            if send {
                RuleKind::Send(spec)
            } else {
                RuleKind::Receive(spec)
            }
        } else if let Some(own) = rule.attribute("own") {
            RuleKind::Own(match own {
                "*" => NameMatch::Any,
                name => NameMatch::Exact(name.to_owned()),
            })
        } else if let Some(prefix) = rule.attribute("own_prefix") {
            RuleKind::Own(NameMatch::Prefix(prefix.to_owned()))
        } else if let Some(user) = rule.attribute("user") {
            match user {
                "*" => RuleKind::User(None),
                name => match db.uid(name) {
                    Some(uid) => RuleKind::User(Some(uid)),
                    None => {
                        warn(format!(
                            "{}:{}: Unknown username \"{name}\" on element <{}>",
                            rule.file.display(),
                            rule.line,
                            if rule.allow { "allow" } else { "deny" }
                        ));
                        return None;
                    }
                },
            }
        } else if let Some(group) = rule.attribute("group") {
            match group {
                "*" => RuleKind::Group(None),
                name => match db.gid(name) {
                    Some(gid) => RuleKind::Group(Some(gid)),
                    None => {
                        warn(format!(
                            "{}:{}: Unknown group \"{name}\" on element <{}>",
                            rule.file.display(),
                            rule.line,
                            if rule.allow { "allow" } else { "deny" }
                        ));
                        return None;
                    }
                },
            }
        } else {
            // The config parser refuses rules with nothing to match.
            return None;
        };
    Some(PolicyRule {
        allow: rule.allow,
        kind,
    })
}
