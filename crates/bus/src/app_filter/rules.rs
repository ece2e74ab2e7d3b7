//! The RULE of `--call=NAME=RULE` and `--broadcast=NAME=RULE`:
//! `[METHOD][@PATH]`, METHOD `*`, `IFACE.*` or `IFACE.MEMBER`, PATH exact
//! or ending in `/*` for a subtree (flatpak-proxy.c's
//! `filter_new_from_rule` and `filter_matches`), and the index that
//! checks a message against all of a name's rules at once.
//!
//! Owns: nothing. May touch: nothing.

use quickbus_wire::Message;

use crate::{FastMap, FastSet};

/// A message as the rules see it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MessageFacts<'a> {
    pub path: Option<&'a str>,
    pub interface: Option<&'a str>,
    pub member: Option<&'a str>,
}

impl<'a> MessageFacts<'a> {
    pub fn of(msg: &'a Message) -> MessageFacts<'a> {
        MessageFacts {
            path: msg.path(),
            interface: msg.interface(),
            member: msg.member(),
        }
    }
}

/// Which paths a rule allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PathRule {
    Any,
    Exact(String),
    /// This path and every path below it (`""` for `@/*`: all paths).
    Subtree(String),
}

/// One RULE, as flatpak-proxy.c's `filter_new_from_rule` reads it (it
/// validates nothing: a rule naming no real interface never matches).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MessageRule {
    pub interface: Option<String>,
    pub member: Option<String>,
    pub path: PathRule,
}

impl MessageRule {
    pub fn parse(rule: &str) -> MessageRule {
        let at = rule.find('@');
        let path = match at.map(|i| &rule[i + 1..]) {
            Some(path) if !path.is_empty() => match path.strip_suffix("/*") {
                Some(subtree) => PathRule::Subtree(subtree.to_owned()),
                None => PathRule::Exact(path.to_owned()),
            },
            _ => PathRule::Any,
        };
        let method = &rule[..at.unwrap_or(rule.len())];
        let (interface, member) = if method.is_empty() || method.starts_with('*') {
            (None, None)
        } else {
            match method.rsplit_once('.') {
                Some((interface, "*")) => (Some(interface.to_owned()), None),
                Some((interface, member)) => (Some(interface.to_owned()), Some(member.to_owned())),
                None => (Some(method.to_owned()), None),
            }
        };
        MessageRule {
            interface,
            member,
            path,
        }
    }
}

/// The paths allowed for one method key.
#[derive(Clone, Debug, Default)]
struct Paths {
    any: bool,
    exact: FastSet<String>,
    subtrees: FastSet<String>,
}

impl Paths {
    fn add(&mut self, path: &PathRule) {
        match path {
            PathRule::Any => self.any = true,
            PathRule::Exact(p) => {
                self.exact.insert(p.clone());
            }
            PathRule::Subtree(p) => {
                self.subtrees.insert(p.clone());
            }
        }
    }

    /// One lookup for the path, one for each of its ancestors.
    fn matches(&self, path: Option<&str>) -> bool {
        if self.any {
            return true;
        }
        let Some(path) = path else {
            return false;
        };
        if self.exact.contains(path) || self.subtrees.contains(path) {
            return true;
        }
        // "/a/b" is below "/a" and below "" (`@/*`), not below "/a/".
        !self.subtrees.is_empty()
            && path
                .match_indices('/')
                .any(|(i, _)| self.subtrees.contains(&path[..i]))
    }
}

#[derive(Clone, Debug, Default)]
struct InterfaceRules {
    /// `IFACE.*` (and `IFACE` without a dot).
    all_members: Paths,
    members: FastMap<String, Paths>,
}

/// All the rules of one kind for one name, indexed by interface and
/// member.
#[derive(Clone, Debug, Default)]
pub(crate) struct RuleSet {
    /// `*` or no METHOD.
    all_methods: Paths,
    interfaces: FastMap<String, InterfaceRules>,
}

impl RuleSet {
    pub fn add(&mut self, rule: &MessageRule) {
        match (&rule.interface, &rule.member) {
            (None, _) => self.all_methods.add(&rule.path),
            (Some(interface), member) => {
                let rules = self.interfaces.entry(interface.clone()).or_default();
                match member {
                    None => rules.all_members.add(&rule.path),
                    Some(member) => rules
                        .members
                        .entry(member.clone())
                        .or_default()
                        .add(&rule.path),
                }
            }
        }
    }

    pub fn allow_everything(&mut self) {
        self.all_methods.any = true;
    }

    pub fn matches(&self, msg: &MessageFacts<'_>) -> bool {
        if self.all_methods.matches(msg.path) {
            return true;
        }
        let Some(rules) = msg.interface.and_then(|i| self.interfaces.get(i)) else {
            return false;
        };
        rules.all_members.matches(msg.path)
            || msg
                .member
                .and_then(|m| rules.members.get(m))
                .is_some_and(|paths| paths.matches(msg.path))
    }
}
