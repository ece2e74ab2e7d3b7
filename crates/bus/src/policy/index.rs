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
//!
//! Owns: the indexed rule lists. May touch: nothing else.

use quickbus_wire::MessageType;

use super::{MessageRule, NameMatch};
use crate::FastMap;

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

impl Facts<'_> {
    /// Neither a reply nobody asked for nor an eavesdropped copy: the
    /// messages every allow rule without conditions lets through.
    fn is_ordinary(&self) -> bool {
        let unrequested_reply = self.is_reply && !self.requested_reply;
        !unrequested_reply && !self.eavesdropping
    }
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

/// Positions of rules sharing a key value, ascending. Looked up for every
/// message, hence foldhash rather than SipHash.
type Buckets = FastMap<Box<str>, Vec<u32>>;

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
    open: Openness,
}

/// Whether the rules let messages through without a search: true when an
/// allow rule without conditions comes after every deny and every `log`
/// rule, since the last matching rule is then always a silent allow. The
/// default session configuration is such a set, and most checks end here.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Openness {
    /// The most fds such a rule allows on ordinary messages
    /// ([`Facts::is_ordinary`]).
    ordinary_up_to_fds: Option<u32>,
    /// The same for every message: the rule also covers unrequested
    /// replies and, on the receive side, eavesdropping.
    all_up_to_fds: Option<u32>,
}

impl Openness {
    fn add(&mut self, side: Side, allow: bool, r: &MessageRule) {
        // Every field named, so that a new rule attribute cannot be
        // overlooked here.
        let MessageRule {
            msg_type,
            path,
            interface,
            member,
            error,
            name,
            requested_reply,
            eavesdrop,
            broadcast,
            min_fds,
            max_fds,
            log,
        } = r;
        if !allow || *log {
            *self = Openness::default();
            return;
        }
        let unconditional = *name == NameMatch::Any
            && msg_type.is_none()
            && path.is_none()
            && interface.is_none()
            && member.is_none()
            && error.is_none()
            && broadcast.is_none()
            && *min_fds == 0;
        if !unconditional {
            return;
        }
        let widen =
            |limit: &mut Option<u32>| *limit = Some(limit.map_or(*max_fds, |l| l.max(*max_fds)));
        widen(&mut self.ordinary_up_to_fds);
        // See Rule::matches: eavesdrop="true" opens an allow rule to
        // eavesdropping and to unrequested replies; requested_reply="false"
        // only to the latter.
        let all = match side {
            Side::Send => *eavesdrop || *requested_reply == Some(false),
            Side::Receive => *eavesdrop,
        };
        if all {
            widen(&mut self.all_up_to_fds);
        }
    }

    /// What both `self` and `other` let through: the openness of two
    /// rule sets together, where a message must pass each.
    pub(crate) fn narrowed(self, other: Openness) -> Openness {
        let least = |a: Option<u32>, b: Option<u32>| Some(a?.min(b?));
        Openness {
            ordinary_up_to_fds: least(self.ordinary_up_to_fds, other.ordinary_up_to_fds),
            all_up_to_fds: least(self.all_up_to_fds, other.all_up_to_fds),
        }
    }

    pub(crate) fn lets_through(&self, m: &Facts<'_>) -> bool {
        let limit = if m.is_ordinary() {
            self.ordinary_up_to_fds
        } else {
            self.all_up_to_fds
        };
        limit.is_some_and(|max| m.unix_fds <= max)
    }
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
        self.open.add(self.side.unwrap_or(Side::Send), allow, &spec);
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

    /// Whether `m` is allowed, and silently, without looking at the rules
    /// one by one (see [`Openness`]). False says nothing: ask
    /// [`MessageRules::decide`].
    pub fn lets_through(&self, m: &Facts<'_>) -> bool {
        self.open.lets_through(m)
    }

    /// What [`MessageRules::lets_through`] lets through.
    pub(crate) fn openness(&self) -> Openness {
        self.open
    }

    /// Call `visit` with each candidate list for this message. With
    /// `distinct`, a prefix list shared by several names of the party is
    /// visited once (counting needs that; deciding does not, a list seen
    /// twice gives the same answer, and skipping the check saves an
    /// allocation).
    fn candidates<'s>(
        &'s self,
        m: &Facts<'_>,
        names: Names<'_>,
        distinct: bool,
        visit: &mut dyn FnMut(&'s [u32]),
    ) {
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
                    if !distinct {
                        visit(list);
                    } else if !seen_prefixes.contains(&&**key) {
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
        self.candidates(m, names, false, &mut |list| {
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
        self.candidates(m, names, true, &mut |list| {
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
mod tests;
