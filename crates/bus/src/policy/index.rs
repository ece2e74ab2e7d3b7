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
//! without an interface), so those rules are also listed per field.

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
    interface_denies: Vec<u32>,
    by_member: Buckets,
    member_keyed: Vec<u32>,
    by_path: Buckets,
    path_keyed: Vec<u32>,
    by_error: Buckets,
    error_keyed: Vec<u32>,
    unkeyed: Vec<u32>,
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
                        self.interface_denies.push(pos);
                    }
                } else if let Some(member) = &spec.member {
                    push(&mut self.by_member, member, pos);
                    self.member_keyed.push(pos);
                } else if let Some(path) = &spec.path {
                    push(&mut self.by_path, path, pos);
                    self.path_keyed.push(pos);
                } else if let Some(error) = &spec.error {
                    push(&mut self.by_error, error, pos);
                    self.error_keyed.push(pos);
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
        let keyed = |buckets: &'s Buckets, all: &'s [u32], value: Option<&str>| -> &'s [u32] {
            match value {
                Some(v) => buckets.get(v).map_or(&[][..], Vec::as_slice),
                None => all,
            }
        };
        visit(keyed(
            &self.by_interface,
            &self.interface_denies,
            m.interface,
        ));
        visit(keyed(&self.by_member, &self.member_keyed, m.member));
        visit(keyed(&self.by_path, &self.path_keyed, m.path));
        visit(keyed(&self.by_error, &self.error_keyed, m.error));
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
