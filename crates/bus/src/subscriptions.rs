//! Match-rule subscriptions: the bus's side of AddMatch / RemoveMatch and
//! "who wants this message".
//!
//! Connections' rules live in the [`MatchIndex`]; monitors' rules (few
//! connections, usually none) in a plain map.
//!
//! Owns: connections' match rules (`Subscriptions`) and monitors' rules
//! (`Monitors`). May touch: the registry, read-only, to match `sender=`
//! rules by the names a peer owns (`PeerNames`).

use std::cell::OnceCell;
use std::collections::{BTreeMap, HashMap};

use crate::errors::BusError;
use crate::match_index::MatchIndex;
use crate::match_rule::{MatchInput, MatchRule, NameOwner};
use crate::registry::NameRegistry;
use crate::ConnId;

/// A connection as match rules see it: its unique name and the names it is
/// primary owner of, looked up in the registry (no copy unless a rule
/// enumerates them).
pub(crate) struct PeerNames<'a> {
    pub id: ConnId,
    pub unique: &'a str,
    pub registry: &'a NameRegistry,
    well_known: OnceCell<Vec<&'a str>>,
}

impl<'a> PeerNames<'a> {
    pub fn new(id: ConnId, unique: &'a str, registry: &'a NameRegistry) -> PeerNames<'a> {
        PeerNames {
            id,
            unique,
            registry,
            well_known: OnceCell::new(),
        }
    }
}

impl NameOwner for PeerNames<'_> {
    fn name(&self, index: usize) -> Option<&str> {
        if index == 0 {
            return Some(self.unique);
        }
        self.well_known
            .get_or_init(|| self.registry.primary_names(self.id, self.unique))
            .get(index - 1)
            .copied()
    }

    fn owns(&self, name: &str) -> bool {
        name == self.unique || self.registry.owner(name) == Some(self.id)
    }

    /// Every name it owns or waits for, its unique name among them: O(1),
    /// where listing its names is O(names).
    fn name_count_bound(&self) -> usize {
        self.registry.count(self.id).max(1)
    }
}

pub(crate) fn parse_rule(text: &str) -> Result<MatchRule, BusError> {
    MatchRule::parse(text).map_err(|e| BusError::new(e.dbus_error_name(), e.message()))
}

/// Every connection's match rules, indexed so a message only meets the
/// rules that can match it.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(from = "Handed")]
pub(crate) struct Subscriptions {
    index: MatchIndex<ConnId>,
    /// Eavesdropping rules per connection: when there are none, a unicast
    /// message needs no lookup at all.
    eavesdropping: HashMap<ConnId, usize>,
}

/// [`Subscriptions`] as a restart hands them over. The eavesdropping
/// counts are counted again from the rules rather than taken from the
/// state: a count the state claims that its rules do not back (0, or one
/// that overflows when a rule is added) would break the count's
/// arithmetic later.
#[derive(serde::Deserialize)]
#[serde(rename = "Subscriptions")]
struct Handed {
    index: MatchIndex<ConnId>,
    #[allow(dead_code)] // crosses, and is counted again (above)
    eavesdropping: HashMap<ConnId, usize>,
}

impl From<Handed> for Subscriptions {
    fn from(handed: Handed) -> Subscriptions {
        let mut eavesdropping: HashMap<ConnId, usize> = HashMap::new();
        for (conn, count) in handed.index.eavesdropping_counts() {
            *eavesdropping.entry(conn).or_default() += count;
        }
        Subscriptions {
            index: handed.index,
            eavesdropping,
        }
    }
}

impl Subscriptions {
    pub fn new() -> Subscriptions {
        Subscriptions::default()
    }

    /// Rules `conn` installed, duplicates counted (as the limit counts them).
    pub fn count(&self, conn: ConnId) -> usize {
        self.index.rule_count(conn)
    }

    pub fn add(&mut self, conn: ConnId, rule: MatchRule) {
        if rule.is_eavesdrop() {
            *self.eavesdropping.entry(conn).or_default() += 1;
        }
        self.index.add(conn, rule);
    }

    /// A connection left: drop every rule (of anyone) whose sender or
    /// destination is its unique name, which can never match again. The
    /// eavesdropper counts may then overcount, which only costs a lookup.
    pub fn remove_rules_naming(&mut self, unique: &str) {
        self.index.remove_rules_naming(unique);
    }

    /// Rules installed in all, duplicates counted.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// `conn`'s rules, oldest first.
    pub fn rules_of(&self, conn: ConnId) -> impl Iterator<Item = &MatchRule> + '_ {
        self.index.rules_of(conn)
    }

    /// Whether any connection has an eavesdropping rule.
    pub fn has_eavesdroppers(&self) -> bool {
        !self.eavesdropping.is_empty()
    }

    /// Remove one rule equal to `rule` (a rule added twice stays once).
    pub fn remove(&mut self, conn: ConnId, rule: &MatchRule) -> Result<(), BusError> {
        if self.index.remove(conn, rule) {
            if rule.is_eavesdrop() {
                if let Some(n) = self.eavesdropping.get_mut(&conn) {
                    *n -= 1;
                    if *n == 0 {
                        self.eavesdropping.remove(&conn);
                    }
                }
            }
            Ok(())
        } else {
            Err(BusError::new(
                crate::errors::MATCH_RULE_NOT_FOUND,
                "The given match rule wasn't found and can't be removed",
            ))
        }
    }

    pub fn remove_connection(&mut self, conn: ConnId) {
        self.eavesdropping.remove(&conn);
        self.index.remove_connection(conn);
    }

    /// Append the connections with a rule matching the message, each once,
    /// in ascending order, leaving out `addressed` (the recipient of a
    /// unicast message gets it anyway).
    pub fn recipients(
        &self,
        input: &MatchInput<'_>,
        addressed: Option<ConnId>,
        out: &mut Vec<ConnId>,
    ) {
        let start = out.len();
        self.index.matching(input, out);
        if let Some(addressed) = addressed {
            if let Some(pos) = out[start..].iter().position(|&c| c == addressed) {
                out.remove(start + pos);
            }
        }
    }
}

/// Rules of monitors (BecomeMonitor). Monitors see messages addressed to
/// anyone, so their rules always eavesdrop.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Monitors {
    rules: BTreeMap<ConnId, Vec<MatchRule>>,
}

impl Monitors {
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn is_monitor(&self, conn: ConnId) -> bool {
        self.rules.contains_key(&conn)
    }

    pub fn add(&mut self, conn: ConnId, rules: Vec<MatchRule>) {
        self.rules.insert(conn, rules);
    }

    pub fn remove(&mut self, conn: ConnId) {
        self.rules.remove(&conn);
    }

    pub fn recipients(&self, input: &MatchInput<'_>, out: &mut Vec<ConnId>) {
        for (&conn, rules) in &self.rules {
            if rules.iter().any(|r| r.matches(input)) {
                out.push(conn);
            }
        }
    }
}

/// Parse a monitor's rule and make it eavesdrop, as dbus-daemon does for
/// every monitor rule. MatchRule has no setter, so the eavesdrop key is
/// appended to the text (the last `eavesdrop` wins); should that not parse
/// (a text at the length or token limit), the rule as given is kept.
pub(crate) fn parse_monitor_rule(text: &str) -> Result<MatchRule, BusError> {
    let rule = parse_rule(text)?;
    if rule.is_eavesdrop() {
        return Ok(rule);
    }
    let base = text.trim_end().trim_end_matches(',');
    let eavesdropping = if base.trim().is_empty() {
        "eavesdrop='true'".to_owned()
    } else {
        format!("{base},eavesdrop='true'")
    };
    Ok(match MatchRule::parse(&eavesdropping) {
        Ok(r) if r.is_eavesdrop() => r,
        _ => rule,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monitor_rules_eavesdrop() {
        for text in [
            "",
            "type='signal'",
            "type='signal',",
            "eavesdrop='false'",
            "member='X'",
        ] {
            let rule = parse_monitor_rule(text).unwrap();
            assert!(rule.is_eavesdrop(), "{text:?}");
        }
        assert_eq!(
            parse_monitor_rule("type='signal'").unwrap(),
            parse_rule("type='signal',eavesdrop='true'").unwrap()
        );
        assert!(parse_monitor_rule("type='nonsense'").is_err());
    }

    #[test]
    fn remove_takes_one_copy_by_parsed_value() {
        let mut subs = Subscriptions::new();
        let a = ConnId(1);
        subs.add(a, parse_rule("type='signal'").unwrap());
        subs.add(a, parse_rule("type='signal'").unwrap());
        subs.remove(a, &parse_rule("type=signal").unwrap()).unwrap();
        assert_eq!(subs.count(a), 1);
        subs.remove(a, &parse_rule("type='signal'").unwrap())
            .unwrap();
        assert_eq!(subs.count(a), 0);
        let err = subs
            .remove(a, &parse_rule("type='signal'").unwrap())
            .unwrap_err();
        assert_eq!(err.name, crate::errors::MATCH_RULE_NOT_FOUND);
    }

    /// The state's eavesdropping counts are not trusted: 0 for a
    /// connection with an eavesdropping rule made its removal subtract
    /// below zero, and a count at the top made the next rule overflow.
    #[test]
    fn handed_over_eavesdropping_counts_are_counted_again_from_the_rules() {
        let (a, b, c) = (ConnId(1), ConnId(2), ConnId(3));
        let spy = "eavesdrop='true',type='method_call'";
        let rules = vec![
            (a, parse_rule(spy).unwrap(), 2usize),
            (b, parse_rule("type='signal'").unwrap(), 1),
        ];
        let claimed = HashMap::from([(a, 0usize), (b, usize::MAX), (c, 5)]);
        let state = postcard::to_stdvec(&(rules, claimed)).unwrap();
        let mut subs: Subscriptions = postcard::from_bytes(&state).unwrap();
        assert_eq!(subs.eavesdropping, HashMap::from([(a, 2)]));
        subs.add(b, parse_rule(spy).unwrap());
        for _ in 0..2 {
            subs.remove(a, &parse_rule(spy).unwrap()).unwrap();
        }
        subs.remove(b, &parse_rule(spy).unwrap()).unwrap();
        assert!(!subs.has_eavesdroppers());
    }

    #[test]
    fn a_peer_bounds_its_name_count_without_listing_names() {
        let mut registry = NameRegistry::new();
        let mut events = Vec::new();
        let a = ConnId(1);
        registry.add_unique(a, ":1.1", &mut events);
        let alone = PeerNames::new(a, ":1.1", &registry);
        assert_eq!(alone.name_count_bound(), 1);
        for i in 0..1_000 {
            registry.request(a, &format!("org.example.N{i}"), 0, &mut events);
        }
        let owner = PeerNames::new(a, ":1.1", &registry);
        assert_eq!(owner.name_count_bound(), 1_001);
        assert_eq!((0..).map_while(|i| owner.name(i)).count(), 1_001);
        // A connection the registry does not know still has its unique name.
        assert_eq!(
            PeerNames::new(ConnId(9), ":1.9", &registry).name_count_bound(),
            1
        );
    }

    #[test]
    fn eavesdroppers_are_counted() {
        let mut subs = Subscriptions::new();
        let (a, b) = (ConnId(1), ConnId(2));
        let spy = parse_rule("eavesdrop='true'").unwrap();
        assert!(!subs.has_eavesdroppers());
        subs.add(a, spy.clone());
        subs.add(a, spy.clone());
        subs.add(b, spy.clone());
        subs.add(b, parse_rule("type='signal'").unwrap());
        subs.remove(a, &spy).unwrap();
        subs.remove(a, &spy).unwrap();
        assert!(subs.has_eavesdroppers());
        subs.remove_connection(b);
        assert!(!subs.has_eavesdroppers());
    }
}
