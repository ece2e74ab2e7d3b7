//! Match-rule subscriptions: the bus's side of AddMatch / RemoveMatch and
//! "who wants this message". Adapter over the match engineer's
//! `match_rule` / `match_index` modules.
//!
//! TEMPORARY: until those modules land, a minimal rule parser and a scan
//! over subscribers stand in, so routing can be built and tested.

use std::collections::HashMap;

use quickbus_wire::{Message, MessageType};

use crate::errors::{self, BusError};
use crate::registry::NameRegistry;
use crate::{ConnId, BUS_NAME};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Rule {
    msg_type: Option<MessageType>,
    sender: Option<String>,
    interface: Option<String>,
    member: Option<String>,
    path: Option<String>,
    path_namespace: Option<String>,
    destination: Option<String>,
    arg0: Option<String>,
    eavesdrop: bool,
}

fn invalid(text: &str) -> BusError {
    BusError::new(
        errors::MATCH_RULE_INVALID,
        format!("Invalid match rule \"{text}\""),
    )
}

impl Rule {
    fn parse(text: &str) -> Result<Rule, BusError> {
        let mut rule = Rule::default();
        let mut rest = text.trim_start();
        while !rest.is_empty() {
            let eq = rest.find('=').ok_or_else(|| invalid(text))?;
            let key = rest[..eq].trim();
            rest = &rest[eq + 1..];
            let rest_q = rest.strip_prefix('\'').ok_or_else(|| invalid(text))?;
            let end = rest_q.find('\'').ok_or_else(|| invalid(text))?;
            let value = rest_q[..end].to_owned();
            rest = rest_q[end + 1..].trim_start();
            rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
            match key {
                "type" => {
                    rule.msg_type = Some(match value.as_str() {
                        "method_call" => MessageType::MethodCall,
                        "method_return" => MessageType::MethodReturn,
                        "error" => MessageType::Error,
                        "signal" => MessageType::Signal,
                        _ => return Err(invalid(text)),
                    })
                }
                "sender" => rule.sender = Some(value),
                "interface" => rule.interface = Some(value),
                "member" => rule.member = Some(value),
                "path" => rule.path = Some(value),
                "path_namespace" => rule.path_namespace = Some(value),
                "destination" => rule.destination = Some(value),
                "arg0" => rule.arg0 = Some(value),
                "eavesdrop" => rule.eavesdrop = value == "true",
                _ => return Err(invalid(text)),
            }
        }
        Ok(rule)
    }

    fn matches(
        &self,
        msg: &Message,
        sender: Option<ConnId>,
        addressed: Option<ConnId>,
        registry: &NameRegistry,
    ) -> bool {
        fn eq(want: &Option<String>, got: Option<&str>) -> bool {
            want.as_deref().is_none_or(|w| Some(w) == got)
        }
        if self.msg_type.is_some_and(|t| t != msg.msg_type()) {
            return false;
        }
        if let Some(want) = &self.sender {
            let ok = match sender {
                None => want == BUS_NAME,
                Some(id) => registry.owner(want) == Some(id),
            };
            if !ok {
                return false;
            }
        }
        if let Some(want) = &self.destination {
            let ok = match addressed {
                None => msg.destination() == Some(want.as_str()),
                Some(id) => registry.owner(want) == Some(id),
            };
            if !ok {
                return false;
            }
        }
        if let Some(ns) = &self.path_namespace {
            let Some(path) = msg.path() else { return false };
            let inside = ns == "/"
                || path == ns
                || (path.starts_with(ns.as_str()) && path.as_bytes().get(ns.len()) == Some(&b'/'));
            if !inside {
                return false;
            }
        }
        if let Some(want) = &self.arg0 {
            let args = msg.string_args(1);
            let got = args.first().copied().flatten().map(|a| a.value);
            if got != Some(want.as_str()) {
                return false;
            }
        }
        eq(&self.interface, msg.interface())
            && eq(&self.member, msg.member())
            && eq(&self.path, msg.path())
    }
}

/// Every connection's match rules.
#[derive(Debug, Default)]
pub(crate) struct Subscriptions {
    rules: HashMap<ConnId, Vec<Rule>>,
}

impl Subscriptions {
    pub fn new() -> Subscriptions {
        Subscriptions::default()
    }

    pub fn count(&self, conn: ConnId) -> usize {
        self.rules.get(&conn).map_or(0, Vec::len)
    }

    pub fn add(&mut self, conn: ConnId, text: &str) -> Result<(), BusError> {
        let rule = Rule::parse(text)?;
        self.rules.entry(conn).or_default().push(rule);
        Ok(())
    }

    /// Remove one rule equal to `text` (a rule added twice stays once).
    pub fn remove(&mut self, conn: ConnId, text: &str) -> Result<(), BusError> {
        let rule = Rule::parse(text)?;
        let not_found = || {
            BusError::new(
                errors::MATCH_RULE_NOT_FOUND,
                "The given match rule wasn't found and can't be removed",
            )
        };
        let rules = self.rules.get_mut(&conn).ok_or_else(not_found)?;
        let pos = rules
            .iter()
            .position(|r| *r == rule)
            .ok_or_else(not_found)?;
        rules.remove(pos);
        if rules.is_empty() {
            self.rules.remove(&conn);
        }
        Ok(())
    }

    pub fn remove_connection(&mut self, conn: ConnId) {
        self.rules.remove(&conn);
    }

    /// Connections with a rule matching `msg`, each once, in a stable
    /// order. `sender`: None for the bus itself. `addressed`: the
    /// recipient of a unicast message (then only eavesdropping rules of
    /// other connections count).
    pub fn recipients(
        &self,
        msg: &Message,
        sender: Option<ConnId>,
        addressed: Option<ConnId>,
        registry: &NameRegistry,
        out: &mut Vec<ConnId>,
    ) {
        let unicast = addressed.is_some() || msg.destination().is_some();
        for (&conn, rules) in &self.rules {
            let wanted = rules.iter().any(|r| {
                (!unicast || r.eavesdrop || Some(conn) == addressed)
                    && r.matches(msg, sender, addressed, registry)
            });
            if wanted {
                out.push(conn);
            }
        }
        out.sort_unstable();
    }
}
