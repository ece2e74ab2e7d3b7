//! Rule lists indexed by their most selective key, so that a check visits
//! only the rules that could match while "the last matching rule wins"
//! still holds: each rule keeps its position, and the answer is the
//! matching candidate with the highest position.
//!
//! A message rule is keyed by the first of: its name (destination or
//! sender), interface, member, path, error name; rules with none of these
//! go to `unkeyed`. A message lacking a keyed field still meets the rules
//! keyed by it (dbus-daemon lets path, member and error rules match
//! messages without those fields, and interface deny rules match messages
//! without an interface), so those rules are also listed per field, split
//! by message type and by whether they can apply to a requested reply: a
//! reply, which has no interface or member, does not visit every
//! method-call rule of the policy.

use std::collections::HashMap;

use quickbus_wire::MessageType;

use super::{MessageRule, NameMatch};

/// What a check needs to know about one message on its way to one
/// receiver.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Facts<'a> {
    pub msg_type: MessageType,
    pub path: Option<&'a str>,
    pub interface: Option<&'a str>,
    pub member: Option<&'a str>,
    pub error: Option<&'a str>,
    pub is_reply: bool,
    pub broadcast: bool,
    pub unix_fds: u32,
    /// A reply that answers a call the bus saw (or comes from the bus).
    pub requested_reply: bool,
    /// The receiver is not the connection the message is addressed to.
    pub eavesdropping: bool,
}

/// Which rules: send rules match the sender's messages, receive rules the
/// receiver's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Send,
    Receive,
}

#[derive(Clone, Debug)]
pub(crate) struct Rule {
    pub allow: bool,
    pub spec: MessageRule,
}

impl Rule {
    /// Everything but the name, which the index already vouched for.
    fn matches(&self, side: Side, m: &Facts<'_>) -> bool {
        let r = &self.spec;
        let allow = self.allow;
        if r.msg_type.is_some_and(|t| t != m.msg_type) {
            return false;
        }
        if side == Side::Receive {
            // eavesdrop="true" on an allow rule extends it to
            // eavesdropping; on a deny rule it limits it to that.
            if m.eavesdropping && allow && !r.eavesdrop {
                return false;
            }
            if !m.eavesdropping && !allow && r.eavesdrop {
                return false;
            }
        }
        if m.is_reply {
            let requested_only = r.requested_reply.unwrap_or(allow);
            if !m.requested_reply && allow && requested_only && !r.eavesdrop {
                return false;
            }
            if m.requested_reply && !allow && !requested_only {
                return false;
            }
        }
        if differs(&r.path, m.path) || differs(&r.member, m.member) || differs(&r.error, m.error) {
            return false;
        }
        if let Some(interface) = &r.interface {
            match m.interface {
                None if allow => return false,
                Some(i) if i != interface => return false,
                _ => {}
            }
        }
        if let Some(broadcast) = r.broadcast {
            if broadcast != m.broadcast {
                return false;
            }
        }
        (r.min_fds..=r.max_fds).contains(&m.unix_fds)
    }
}

/// A rule field that is set and the message has otherwise.
fn differs(rule: &Option<String>, message: Option<&str>) -> bool {
    matches!((rule, message), (Some(r), Some(m)) if r != m)
}

/// Positions of rules sharing a key value, ascending.
type Buckets = HashMap<Box<str>, Vec<u32>>;

/// The names of the party a rule's name condition is about: everything
/// the receiver (send rules) or sender (receive rules) owns or waits for,
/// or the message's own destination or sender string for the bus.
pub(crate) type Names<'n> = &'n dyn Fn(&mut dyn FnMut(&str));

#[derive(Debug, Default)]
pub(crate) struct MessageRules {
    side: Option<Side>,
    rules: Vec<Rule>,
    by_name: Buckets,
    by_prefix: Buckets,
    by_interface: Buckets,
    /// Interface-keyed deny rules: they apply to messages without one.
    interface_denies: Fallback,
    by_member: Buckets,
    member_keyed: Fallback,
    by_path: Buckets,
    path_keyed: Fallback,
    by_error: Buckets,
    error_keyed: Fallback,
    unkeyed: Vec<u32>,
}

/// Keyed rules that a message lacking the key's field still meets, split
/// so a message visits only those that could match it.
#[derive(Debug, Default)]
struct Fallback {
    /// Rules for one message type, by [`type_slot`].
    typed: [Vec<u32>; 4],
    /// Rules for any type.
    untyped: Vec<u32>,
    /// The untyped rules that can match a requested reply: deny rules
    /// only do with `requested_reply="true"`.
    untyped_for_requested_replies: Vec<u32>,
}

fn type_slot(t: MessageType) -> usize {
    match t {
        MessageType::MethodCall => 0,
        MessageType::MethodReturn => 1,
        MessageType::Error => 2,
        MessageType::Signal => 3,
    }
}

impl Fallback {
    fn push(&mut self, pos: u32, allow: bool, spec: &MessageRule) {
        match spec.msg_type {
            Some(t) => self.typed[type_slot(t)].push(pos),
            None => {
                self.untyped.push(pos);
                if allow || spec.requested_reply == Some(true) {
                    self.untyped_for_requested_replies.push(pos);
                }
            }
        }
    }

    fn visit<'s>(&'s self, m: &Facts<'_>, visit: &mut dyn FnMut(&'s [u32])) {
        visit(&self.typed[type_slot(m.msg_type)]);
        if m.is_reply && m.requested_reply {
            visit(&self.untyped_for_requested_replies);
        } else {
            visit(&self.untyped);
        }
    }
}

fn push(buckets: &mut Buckets, key: &str, pos: u32) {
    buckets.entry(key.into()).or_default().push(pos);
}

/// The latest rule at or after `after` in `list` (ascending) that
/// satisfies `ok`.
fn last_match(list: &[u32], after: Option<u32>, ok: &mut impl FnMut(u32) -> bool) -> Option<u32> {
    list.iter()
        .rev()
        .take_while(|&&p| after.is_none_or(|a| p > a))
        .copied()
        .find(|&p| ok(p))
}

impl MessageRules {
    pub fn new(side: Side) -> MessageRules {
        MessageRules {
            side: Some(side),
            ..MessageRules::default()
        }
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn push(&mut self, allow: bool, spec: MessageRule) {
        let pos = self.rules.len() as u32;
        match &spec.name {
            NameMatch::Exact(name) => push(&mut self.by_name, name, pos),
            NameMatch::Prefix(prefix) => push(&mut self.by_prefix, prefix, pos),
            NameMatch::Any => {
                if let Some(interface) = &spec.interface {
                    push(&mut self.by_interface, interface, pos);
                    if !allow {
                        self.interface_denies.push(pos, allow, &spec);
                    }
                } else if let Some(member) = &spec.member {
                    push(&mut self.by_member, member, pos);
                    self.member_keyed.push(pos, allow, &spec);
                } else if let Some(path) = &spec.path {
                    push(&mut self.by_path, path, pos);
                    self.path_keyed.push(pos, allow, &spec);
                } else if let Some(error) = &spec.error {
                    push(&mut self.by_error, error, pos);
                    self.error_keyed.push(pos, allow, &spec);
                } else {
                    self.unkeyed.push(pos);
                }
            }
        }
        self.rules.push(Rule { allow, spec });
    }

    /// Call `visit` with each candidate list for this message.
    fn candidates<'s>(&'s self, m: &Facts<'_>, names: Names<'_>, visit: &mut dyn FnMut(&'s [u32])) {
        visit(&self.unkeyed);
        let mut keyed =
            |buckets: &'s Buckets, fallback: &'s Fallback, value: Option<&str>| match value {
                Some(v) => visit(buckets.get(v).map_or(&[][..], Vec::as_slice)),
                None => fallback.visit(m, visit),
            };
        keyed(&self.by_interface, &self.interface_denies, m.interface);
        keyed(&self.by_member, &self.member_keyed, m.member);
        keyed(&self.by_path, &self.path_keyed, m.path);
        keyed(&self.by_error, &self.error_keyed, m.error);
        if self.by_name.is_empty() && self.by_prefix.is_empty() {
            return;
        }
        // A prefix shared by several names of the party is one list.
        let mut seen_prefixes: Vec<&'s str> = Vec::new();
        names(&mut |name| {
            if let Some(list) = self.by_name.get(name) {
                visit(list);
            }
            if self.by_prefix.is_empty() {
                return;
            }
            for (end, _) in name.match_indices('.').chain([(name.len(), "")]) {
                let prefix = &name[..end];
                if let Some((key, list)) = self.by_prefix.get_key_value(prefix) {
                    if !seen_prefixes.contains(&&**key) {
                        seen_prefixes.push(key);
                        visit(list);
                    }
                }
            }
        });
    }

    /// The rule that decides (the last matching one), if any.
    pub fn decide(&self, m: &Facts<'_>, names: Names<'_>) -> Option<&Rule> {
        let side = self.side.unwrap_or(Side::Send);
        let mut best: Option<u32> = None;
        self.candidates(m, names, &mut |list| {
            let mut ok = |p: u32| self.rules[p as usize].matches(side, m);
            if let Some(found) = last_match(list, best, &mut ok) {
                best = Some(found);
            }
        });
        best.map(|p| &self.rules[p as usize])
    }

    /// How many rules match (the "N matched rules" of a denial).
    pub fn count_matches(&self, m: &Facts<'_>, names: Names<'_>) -> usize {
        let side = self.side.unwrap_or(Side::Send);
        let mut count = 0;
        self.candidates(m, names, &mut |list| {
            count += list
                .iter()
                .filter(|&&p| self.rules[p as usize].matches(side, m))
                .count();
        });
        count
    }
}

/// `own` and `own_prefix` rules: no condition besides the name, so the
/// last rule of each candidate list is that list's answer.
#[derive(Debug, Default)]
pub(crate) struct OwnRules {
    allow: Vec<bool>,
    exact: Buckets,
    prefix: Buckets,
    any: Vec<u32>,
}

impl OwnRules {
    pub fn push(&mut self, allow: bool, name: &NameMatch) {
        let pos = self.allow.len() as u32;
        match name {
            NameMatch::Any => self.any.push(pos),
            NameMatch::Exact(n) => push(&mut self.exact, n, pos),
            NameMatch::Prefix(p) => push(&mut self.prefix, p, pos),
        }
        self.allow.push(allow);
    }

    pub fn len(&self) -> usize {
        self.allow.len()
    }

    pub fn allows(&self, name: &str) -> bool {
        let mut best = self.any.last().copied();
        let mut consider = |list: Option<&Vec<u32>>| {
            if let Some(&p) = list.and_then(|l| l.last()) {
                best = Some(best.map_or(p, |b| b.max(p)));
            }
        };
        consider(self.exact.get(name));
        if !self.prefix.is_empty() {
            for (end, _) in name.match_indices('.').chain([(name.len(), "")]) {
                consider(self.prefix.get(&name[..end]));
            }
        }
        best.is_some_and(|p| self.allow[p as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TYPES: [MessageType; 4] = [
        MessageType::MethodCall,
        MessageType::MethodReturn,
        MessageType::Error,
        MessageType::Signal,
    ];

    /// The index must decide exactly as a scan of every rule would, for
    /// rules and messages with and without each keyed field.
    #[test]
    fn indexed_decisions_equal_a_linear_scan() {
        let mut rules = MessageRules::new(Side::Send);
        let types = [None].into_iter().chain(TYPES.map(Some));
        for msg_type in types {
            for interface in [None, Some("a.I")] {
                for member in [None, Some("M")] {
                    for path in [None, Some("/p")] {
                        for requested_reply in [None, Some(true), Some(false)] {
                            for allow in [true, false] {
                                let spec = MessageRule {
                                    msg_type,
                                    interface: interface.map(Into::into),
                                    member: member.map(Into::into),
                                    path: path.map(Into::into),
                                    requested_reply,
                                    ..MessageRule::default()
                                };
                                rules.push(allow, spec);
                            }
                        }
                    }
                }
            }
        }
        let no_names = |_: &mut dyn FnMut(&str)| {};
        let mut checked = 0;
        for msg_type in TYPES {
            for interface in [None, Some("a.I"), Some("a.J")] {
                for member in [None, Some("M"), Some("N")] {
                    for path in [None, Some("/p"), Some("/q")] {
                        for (is_reply, requested_reply) in
                            [(false, false), (true, false), (true, true)]
                        {
                            let facts = Facts {
                                msg_type,
                                path,
                                interface,
                                member,
                                error: None,
                                is_reply,
                                broadcast: false,
                                unix_fds: 0,
                                requested_reply,
                                eavesdropping: false,
                            };
                            let scanned = rules
                                .rules
                                .iter()
                                .rev()
                                .find(|r| r.matches(Side::Send, &facts));
                            let indexed = rules.decide(&facts, &no_names);
                            assert!(
                                match (scanned, indexed) {
                                    (Some(a), Some(b)) => std::ptr::eq(a, b),
                                    (None, None) => true,
                                    _ => false,
                                },
                                "{facts:?}: scan {scanned:?}, index {indexed:?}"
                            );
                            let all = rules
                                .rules
                                .iter()
                                .filter(|r| r.matches(Side::Send, &facts))
                                .count();
                            assert_eq!(rules.count_matches(&facts, &no_names), all, "{facts:?}");
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 4 * 3 * 3 * 3 * 3);
    }
}
