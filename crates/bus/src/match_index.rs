//! Match-rule index: which connections have a rule matching a message,
//! without looking at rules that cannot match it.
//!
//! A rule's *shape* is the set of keys it carries among those a message can
//! be looked up by: type, interface, member, arg0 (exact or namespace), path
//! (exact or namespace), sender, destination, plus its eavesdrop flag. Rules
//! of one shape live in one table, bucketed by a keyed hash of their values
//! for those keys. For a message, each table is probed with the message's
//! own values (every name its sender owns, every namespace its path and
//! arg0 lie in), and only the rules in the probed buckets are checked in
//! full. So the cost of a message depends on the number of shapes in use
//! and on the message, never on how many rules do not match it. When a
//! message would need more probes in a table than the table has rules (a
//! sender owning thousands of names, a very deep path), the table is
//! scanned instead: cost stays bounded by the smaller of the two.
//!
//! Owns: the rule tables. May touch: nothing else; it is generic over
//! the key it stores.

use std::cell::OnceCell;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::sync::Arc;

use quickbus_wire::StrKind;

use crate::match_rule::{ArgKind, MatchInput, MatchRule, NameOwner, PathMatch};
use crate::{FastMap, FastSet};

/// Which lookup keys a rule carries (bit set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Shape(u16);

impl Shape {
    const TYPE: u16 = 1;
    const INTERFACE: u16 = 1 << 1;
    const MEMBER: u16 = 1 << 2;
    const ARG0: u16 = 1 << 3;
    const ARG0_NAMESPACE: u16 = 1 << 4;
    const PATH: u16 = 1 << 5;
    const PATH_NAMESPACE: u16 = 1 << 6;
    const SENDER: u16 = 1 << 7;
    const DESTINATION: u16 = 1 << 8;
    const EAVESDROP: u16 = 1 << 9;

    fn of(rule: &MatchRule) -> Shape {
        let mut bits = 0;
        let mut set = |present: bool, bit: u16| {
            if present {
                bits |= bit
            }
        };
        set(rule.msg_type().is_some(), Shape::TYPE);
        set(rule.interface().is_some(), Shape::INTERFACE);
        set(rule.member().is_some(), Shape::MEMBER);
        match rule.arg(0).map(|a| a.kind) {
            Some(ArgKind::Exact) => set(true, Shape::ARG0),
            Some(ArgKind::Namespace) => set(true, Shape::ARG0_NAMESPACE),
            // argNpath also matches when the *argument* is a prefix of the
            // rule's value, which no hash probe can find: not a lookup key.
            Some(ArgKind::Path) | None => {}
        }
        match rule.path() {
            Some(PathMatch::Exact(_)) => set(true, Shape::PATH),
            Some(PathMatch::Namespace(_)) => set(true, Shape::PATH_NAMESPACE),
            None => {}
        }
        set(rule.sender().is_some(), Shape::SENDER);
        set(rule.destination().is_some(), Shape::DESTINATION);
        set(rule.is_eavesdrop(), Shape::EAVESDROP);
        Shape(bits)
    }

    fn has(self, bit: u16) -> bool {
        self.0 & bit != 0
    }
}

/// The lookup values of a rule, in hashing order; `None` for absent keys.
struct RuleKeys<'r> {
    msg_type: Option<u8>,
    singles: [Option<&'r str>; 2], // interface, member
    dims: [Option<&'r str>; 4],    // arg0, path, sender, destination
}

impl<'r> RuleKeys<'r> {
    fn of(rule: &'r MatchRule) -> RuleKeys<'r> {
        let arg0 = rule
            .arg(0)
            .filter(|a| a.kind != ArgKind::Path)
            .map(|a| a.value.as_str());
        let path = rule.path().map(|p| match p {
            PathMatch::Exact(p) | PathMatch::Namespace(p) => p.as_str(),
        });
        RuleKeys {
            msg_type: rule.msg_type().map(|t| t as u8),
            singles: [rule.interface(), rule.member()],
            dims: [arg0, path, rule.sender(), rule.destination()],
        }
    }
}

/// Hashes are already keyed and uniform: the bucket map uses them as is.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

type Buckets = HashMap<u64, Bucket, BuildHasherDefault<PassThrough>>;

/// The keyed hash of a rule's (or a message's) lookup values: foldhash's
/// quality variant (the bucket map takes its output as is, so every bit
/// must be well mixed), keyed per index from the OS's randomness (see
/// [`bucket_seed`]). std's SipHash cost 9 % of the daemon's instructions in
/// a 32 B signal burst.
type BucketSeed = foldhash::quality::SeedableRandomState;

/// A key for one index's bucket hashes drawn from the OS's randomness, as
/// std's `RandomState` draws its keys: foldhash's own random state mixes
/// addresses and the time, which a machine without ASLR makes guessable,
/// and a client that could predict the key could put all its rules in
/// the bucket everyone else's messages are checked against.
fn bucket_seed() -> BucketSeed {
    use std::collections::hash_map::RandomState;
    let key = RandomState::new().build_hasher().finish();
    BucketSeed::with_seed(key, foldhash::SharedSeed::global_random())
}

/// The slots sharing one key. Most keys have one rule: kept inline, so
/// most rules cost no allocation of their own here.
enum Bucket {
    One(usize),
    Many(Vec<usize>),
}

impl Bucket {
    fn ids(&self) -> &[usize] {
        match self {
            Bucket::One(id) => std::slice::from_ref(id),
            Bucket::Many(ids) => ids,
        }
    }

    /// Add `id`; returns its position.
    fn push(&mut self, id: usize) -> usize {
        match self {
            Bucket::One(first) => {
                *self = Bucket::Many(vec![*first, id]);
                1
            }
            Bucket::Many(ids) => {
                ids.push(id);
                ids.len() - 1
            }
        }
    }

    /// Remove the id at `pos` (the last one moves there). Returns the id now
    /// at `pos`, if any; `None` from a bucket of one means it is now empty.
    fn swap_remove(&mut self, pos: usize) -> Option<usize> {
        let Bucket::Many(ids) = self else {
            return None;
        };
        ids.swap_remove(pos);
        let moved = ids.get(pos).copied();
        if let [only] = ids[..] {
            *self = Bucket::One(only);
        }
        moved
    }

    fn is_single(&self) -> bool {
        matches!(self, Bucket::One(_))
    }
}

/// The rules of one shape.
#[derive(Default)]
struct ShapeTable {
    buckets: Buckets,
    /// Distinct rules (slots) in the table.
    len: usize,
}

/// One distinct rule of one connection, installed `count` times.
struct Slot<K> {
    owner: K,
    rule: Arc<MatchRule>,
    count: usize,
    shape: Shape,
    key: u64,
    /// Index in its bucket, so removal is O(1).
    pos: usize,
    /// Order of first installation, for [`MatchIndex::rules_of`].
    seq: u64,
}

#[derive(Default)]
struct ConnRules {
    slots: FastMap<Arc<MatchRule>, usize>,
    instances: usize,
}

/// Every connection's match rules, indexed for lookup by message.
///
/// `K` is the connection id. The same rule may be added several times by a
/// connection (dbus-daemon keeps each `AddMatch`); `remove` takes one away.
pub struct MatchIndex<K> {
    slots: Vec<Option<Slot<K>>>,
    free: Vec<usize>,
    conns: FastMap<K, ConnRules>,
    /// Slots whose sender or destination key is a unique name, by name.
    naming_unique: FastMap<Box<str>, FastSet<usize>>,
    shapes: BTreeMap<Shape, ShapeTable>,
    /// Each distinct rule once, shared by every slot holding an equal
    /// rule, with how many slots do: connections that all subscribe to
    /// the same signals (every client of a service watching its
    /// PropertiesChanged) share one rule, which a message is checked
    /// against once for all of them ([`MatchIndex::matching`]).
    shared_rules: FastMap<Arc<MatchRule>, usize>,
    /// Keys the bucket hashes, a random key per index ([`bucket_seed`]).
    seed: BucketSeed,
    next_seq: u64,
    instances: usize,
    #[cfg(test)]
    checks: std::cell::Cell<usize>,
}

impl<K> Default for MatchIndex<K> {
    fn default() -> Self {
        MatchIndex {
            slots: Vec::new(),
            free: Vec::new(),
            conns: FastMap::default(),
            naming_unique: FastMap::default(),
            shapes: BTreeMap::new(),
            shared_rules: FastMap::default(),
            seed: bucket_seed(),
            next_seq: 0,
            instances: 0,
            #[cfg(test)]
            checks: std::cell::Cell::new(0),
        }
    }
}

impl<K> std::fmt::Debug for MatchIndex<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MatchIndex")
            .field("rules", &self.instances)
            .field("connections", &self.conns.len())
            .field("shapes", &self.shapes.len())
            .finish()
    }
}

/// A restart in place (docs/restart.md) hands the rules over as a list,
/// each distinct rule with its owner and how many times it was added, in
/// the order they were first added; the index (its hashes are seeded per
/// process) is built again by adding them in that order, so every lookup
/// lists them as before.
impl<K: Copy + Eq + Hash + Ord + serde::Serialize> serde::Serialize for MatchIndex<K> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut slots: Vec<&Slot<K>> = self.slots.iter().flatten().collect();
        slots.sort_unstable_by_key(|slot| slot.seq);
        s.collect_seq(
            slots
                .iter()
                .map(|slot| (slot.owner, &*slot.rule, RuleCount(slot.count))),
        )
    }
}

/// How many times a connection installed a rule, as a restart hands it
/// over. (A newtype, which postcard writes as its content, so that the
/// handover's layout test can give the sample it cannot make up: a count
/// that is not 0, `handover::layout::MatchRuleCount`.)
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct RuleCount(pub usize);

impl<'de, K> serde::Deserialize<'de> for MatchIndex<K>
where
    K: Copy + Eq + Hash + Ord + serde::Deserialize<'de>,
{
    /// Each rule is added once with its count: a count is a number the
    /// state claims, not work to do, so one that no connection can have
    /// is refused (a restart's log names it: [`crate::handover::reject`])
    /// rather than looped over.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<MatchIndex<K>, D::Error> {
        let mut index = MatchIndex::new();
        for (owner, rule, RuleCount(count)) in
            <Vec<(K, MatchRule, RuleCount)> as serde::Deserialize>::deserialize(d)?
        {
            index
                .add_handed_over(owner, rule, count)
                .map_err(crate::handover::reject::<D::Error>)?;
        }
        Ok(index)
    }
}

/// The most match rules one connection can hold: its limit can be set no
/// higher (`max_match_rules_per_connection` is an `int`, as in
/// dbus-daemon), and `AddMatch` stops at the limit. A reload may lower the
/// limit below what a connection already holds, so the limit of the
/// moment bounds nothing that crosses a restart; this does.
pub const MOST_RULES_PER_CONNECTION: usize = i32::MAX as usize;

/// The one copy of a rule equal to `rule` in `shared` that every slot
/// holding it shares, counting one more slot. (A function of the map
/// alone, so that `MatchIndex::add` keeps its borrow of the connection's
/// rules.)
fn share(shared: &mut FastMap<Arc<MatchRule>, usize>, rule: MatchRule) -> Arc<MatchRule> {
    // One probe: the entry keeps the map's own key when the rule is
    // already there, and the new `Arc` is then dropped unused.
    match shared.entry(Arc::new(rule)) {
        Entry::Occupied(mut held) => {
            *held.get_mut() += 1;
            Arc::clone(held.key())
        }
        Entry::Vacant(new) => {
            let shared = Arc::clone(new.key());
            new.insert(1);
            shared
        }
    }
}

impl<K: Copy + Eq + Hash + Ord> MatchIndex<K> {
    pub fn new() -> MatchIndex<K> {
        MatchIndex::default()
    }

    /// Install `rule` for `conn` (once more, if it already has it).
    pub fn add(&mut self, conn: K, rule: MatchRule) {
        self.add_times(conn, rule, 1);
    }

    /// A rule as a restart hands it over: installed `count` times by
    /// `conn`, which the state lists once per distinct rule. Refused
    /// where no connection can be in that state.
    fn add_handed_over(&mut self, conn: K, rule: MatchRule, count: usize) -> Result<(), String> {
        if count == 0 {
            return Err(format!("the match rule \"{rule}\" installed 0 times"));
        }
        let held = self.conns.get(&conn);
        if held.is_some_and(|held| held.slots.contains_key(&rule)) {
            return Err(format!(
                "the match rule \"{rule}\" listed twice for one connection"
            ));
        }
        let held = held.map_or(0, |held| held.instances);
        if count > MOST_RULES_PER_CONNECTION - held {
            return Err(format!(
                "a connection with more than {MOST_RULES_PER_CONNECTION} match rules \
                 (max_match_rules_per_connection can be no higher)"
            ));
        }
        self.add_times(conn, rule, count);
        Ok(())
    }

    /// Install `rule` for `conn` `count` times more (`count` > 0).
    fn add_times(&mut self, conn: K, rule: MatchRule, count: usize) {
        self.instances += count;
        let conn_rules = self.conns.entry(conn).or_default();
        conn_rules.instances += count;
        if let Some(&id) = conn_rules.slots.get(&rule) {
            if let Some(slot) = self.slots[id].as_mut() {
                slot.count += count;
            }
            return;
        }
        let shape = Shape::of(&rule);
        let key = rule_hash(&self.seed, shape, &RuleKeys::of(&rule));
        let rule = share(&mut self.shared_rules, rule);
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        conn_rules.slots.insert(Arc::clone(&rule), id);
        for name in unique_names_in(&rule) {
            self.naming_unique
                .entry(name.into())
                .or_default()
                .insert(id);
        }
        let table = self.shapes.entry(shape).or_default();
        let pos = match table.buckets.entry(key) {
            Entry::Occupied(mut bucket) => bucket.get_mut().push(id),
            Entry::Vacant(place) => {
                place.insert(Bucket::One(id));
                0
            }
        };
        table.len += 1;
        self.slots[id] = Some(Slot {
            owner: conn,
            rule,
            count,
            shape,
            key,
            pos,
            seq: self.next_seq,
        });
        self.next_seq += 1;
    }

    /// Remove one instance of a rule equal to `rule` from `conn`; false if
    /// it has none (`MatchRuleNotFound`).
    pub fn remove(&mut self, conn: K, rule: &MatchRule) -> bool {
        let Some(conn_rules) = self.conns.get_mut(&conn) else {
            return false;
        };
        let Some(&id) = conn_rules.slots.get(rule) else {
            return false;
        };
        conn_rules.instances -= 1;
        self.instances -= 1;
        let slot = self.slots[id].as_mut().expect("slot of a listed rule");
        slot.count -= 1;
        if slot.count == 0 {
            conn_rules.slots.remove(rule);
            if conn_rules.slots.is_empty() {
                self.conns.remove(&conn);
            }
            self.unlink(id);
        }
        true
    }

    /// Remove every rule of `conn`.
    pub fn remove_connection(&mut self, conn: K) {
        let Some(conn_rules) = self.conns.remove(&conn) else {
            return;
        };
        self.instances -= conn_rules.instances;
        for (_, id) in conn_rules.slots {
            self.unlink(id);
        }
    }

    /// A slot holding `rule` went: the last one takes the shared copy.
    fn unshare(&mut self, rule: &MatchRule) {
        if let Some(slots) = self.shared_rules.get_mut(rule) {
            *slots -= 1;
            if *slots == 0 {
                self.shared_rules.remove(rule);
            }
        }
    }

    /// Take slot `id` out of its bucket and free it.
    fn unlink(&mut self, id: usize) {
        let slot = self.slots[id].take().expect("live slot");
        self.unshare(&slot.rule);
        for name in unique_names_in(&slot.rule) {
            if let Some(ids) = self.naming_unique.get_mut(name) {
                ids.remove(&id);
                if ids.is_empty() {
                    self.naming_unique.remove(name);
                }
            }
        }
        self.free.push(id);
        let table = self
            .shapes
            .get_mut(&slot.shape)
            .expect("table of a live slot");
        table.len -= 1;
        let bucket = table
            .buckets
            .get_mut(&slot.key)
            .expect("bucket of a live slot");
        if bucket.is_single() {
            table.buckets.remove(&slot.key);
        } else if let Some(moved) = bucket.swap_remove(slot.pos) {
            if let Some(moved) = self.slots[moved].as_mut() {
                moved.pos = slot.pos;
            }
        }
        if table.len == 0 {
            self.shapes.remove(&slot.shape);
        }
    }

    /// Remove every rule, of any connection, whose `sender` or
    /// `destination` is `unique_name`, as dbus-daemon does when that
    /// connection leaves: unique names are never reused, so those rules can
    /// never match again (and `RemoveMatch` on them then finds nothing).
    /// Returns how many rule instances went.
    pub fn remove_rules_naming(&mut self, unique_name: &str) -> usize {
        let Some(ids) = self.naming_unique.remove(unique_name) else {
            return 0;
        };
        let mut removed = 0;
        for id in ids {
            let Some(slot) = self.slots[id].as_ref() else {
                continue;
            };
            let (owner, count, rule) = (slot.owner, slot.count, Arc::clone(&slot.rule));
            if let Some(conn_rules) = self.conns.get_mut(&owner) {
                conn_rules.slots.remove(&*rule);
                conn_rules.instances -= count;
                if conn_rules.slots.is_empty() {
                    self.conns.remove(&owner);
                }
            }
            self.instances -= count;
            removed += count;
            self.unlink(id);
        }
        removed
    }

    /// How many rules `conn` has installed, each duplicate counted.
    pub fn rule_count(&self, conn: K) -> usize {
        self.conns.get(&conn).map_or(0, |c| c.instances)
    }

    /// Each eavesdropping rule's owner and how many times it installed
    /// it, the rules of one owner summing to at most its
    /// [`MatchIndex::rule_count`].
    pub fn eavesdropping_counts(&self) -> impl Iterator<Item = (K, usize)> + '_ {
        self.slots
            .iter()
            .flatten()
            .filter(|slot| slot.rule.is_eavesdrop())
            .map(|slot| (slot.owner, slot.count))
    }

    /// How many rules are installed in all, each duplicate counted.
    pub fn len(&self) -> usize {
        self.instances
    }

    pub fn is_empty(&self) -> bool {
        self.instances == 0
    }

    /// `conn`'s rules in the order they were first added, a rule added n
    /// times listed n times.
    pub fn rules_of(&self, conn: K) -> impl Iterator<Item = &MatchRule> + '_ {
        let mut slots: Vec<&Slot<K>> = self
            .conns
            .get(&conn)
            .into_iter()
            .flat_map(|c| c.slots.values())
            .filter_map(|&id| self.slots[id].as_ref())
            .collect();
        slots.sort_by_key(|s| s.seq);
        slots
            .into_iter()
            .flat_map(|s| std::iter::repeat_n(&*s.rule, s.count))
    }

    /// Append to `out` every connection with a rule matching the message,
    /// each once, in ascending order. The addressed recipient is not added
    /// for being the recipient (only if one of its rules eavesdrops on the
    /// message): the caller delivers to it anyway and must not do so twice.
    pub fn matching(&self, input: &MatchInput<'_>, out: &mut Vec<K>) {
        let start = out.len();
        let probe = Probe::new(input);
        for (&shape, table) in &self.shapes {
            // Listing the names of a sender (or recipient) that owns more
            // names than the table has rules would cost more than checking
            // those rules: a service owning 100,000 names must not pay for
            // them on every signal it sends.
            if probe.names_outnumber(shape, table.len) {
                let mut verdicts = Verdicts::default();
                for id in table.buckets.values().flat_map(Bucket::ids) {
                    self.check_shared(*id, input, out, &mut verdicts);
                }
                continue;
            }
            let Some(keys) = probe.keys_for(shape) else {
                continue;
            };
            let probes = keys
                .dims
                .iter()
                .flatten()
                .fold(1usize, |n, values| n.saturating_mul(values.len()));
            if probes == 0 {
                continue;
            }
            if probes > table.len {
                let mut verdicts = Verdicts::default();
                for id in table.buckets.values().flat_map(Bucket::ids) {
                    self.check_shared(*id, input, out, &mut verdicts);
                }
                continue;
            }
            let mut hasher = self.seed.build_hasher();
            hash_fixed(&mut hasher, shape, keys.msg_type, &keys.singles);
            for_each_combination(hasher, &keys.dims, &mut |hash| {
                if let Some(bucket) = table.buckets.get(&hash) {
                    // Equal rules share one copy and one bucket: the
                    // message is checked against each copy once.
                    let mut verdicts = Verdicts::default();
                    for &id in bucket.ids() {
                        self.check_shared(id, input, out, &mut verdicts);
                    }
                }
            });
        }
        let found = &mut out[start..];
        found.sort_unstable();
        let mut kept = 0;
        for i in 0..found.len() {
            if i == 0 || found[i] != found[kept - 1] {
                found[kept] = found[i];
                kept += 1;
            }
        }
        out.truncate(start + kept);
    }

    /// Add slot `id`'s owner to `out` if its rule matches, reusing a
    /// verdict on the same shared rule from `verdicts`, the last few rules
    /// this message was checked against.
    fn check_shared(
        &self,
        id: usize,
        input: &MatchInput<'_>,
        out: &mut Vec<K>,
        verdicts: &mut Verdicts,
    ) {
        let Some(slot) = &self.slots[id] else {
            return;
        };
        let matches = verdicts.get_or_check(&slot.rule, || {
            #[cfg(test)]
            self.checks.set(self.checks.get() + 1);
            slot.rule.matches(input)
        });
        if matches {
            out.push(slot.owner);
        }
    }
}

/// Whether one message matched the last few shared rules it was checked
/// against, by the rule's address: slots holding an equal rule hold the
/// same copy ([`MatchIndex::share`]), so a bucket of many connections'
/// equal rules, even mixed with a few others, costs one check per
/// distinct rule. An address is only compared, never followed, and no
/// rule goes away while a message is being matched.
#[derive(Default)]
struct Verdicts {
    seen: [Option<(*const MatchRule, bool)>; VERDICTS_KEPT],
    next: usize,
}

/// How many distinct rules [`Verdicts`] remembers.
const VERDICTS_KEPT: usize = 4;

impl Verdicts {
    fn get_or_check(&mut self, rule: &Arc<MatchRule>, check: impl FnOnce() -> bool) -> bool {
        let address = Arc::as_ptr(rule);
        let known = self
            .seen
            .iter()
            .flatten()
            .find(|(seen, _)| *seen == address);
        if let Some(&(_, verdict)) = known {
            return verdict;
        }
        let verdict = check();
        self.seen[self.next] = Some((address, verdict));
        self.next = (self.next + 1) % VERDICTS_KEPT;
        verdict
    }
}

/// The unique names (`:1.x`) a rule's sender and destination keys name.
fn unique_names_in(rule: &MatchRule) -> impl Iterator<Item = &str> {
    [rule.sender(), rule.destination()]
        .into_iter()
        .flatten()
        .filter(|name| name.starts_with(':'))
}

/// A rule's bucket: its lookup values hashed with the index's key.
fn rule_hash(seed: &BucketSeed, shape: Shape, keys: &RuleKeys<'_>) -> u64 {
    let mut hasher = seed.build_hasher();
    hash_fixed(&mut hasher, shape, keys.msg_type, &keys.singles);
    for value in keys.dims.iter().flatten() {
        value.hash(&mut hasher);
    }
    hasher.finish()
}

fn hash_fixed(
    hasher: &mut impl Hasher,
    shape: Shape,
    msg_type: Option<u8>,
    singles: &[Option<&str>],
) {
    shape.hash(hasher);
    if let Some(t) = msg_type {
        t.hash(hasher);
    }
    for value in singles.iter().flatten() {
        value.hash(hasher);
    }
}

/// Hash every combination of one value per present dimension, in order,
/// the same way [`rule_hash`] hashes a rule's values.
fn for_each_combination<H: Hasher + Clone>(
    hasher: H,
    dims: &[Option<&[&str]>],
    f: &mut dyn FnMut(u64),
) {
    match dims.split_first() {
        None => f(hasher.finish()),
        Some((None, rest)) => for_each_combination(hasher, rest, f),
        Some((Some(values), rest)) => {
            for value in *values {
                let mut h = hasher.clone();
                value.hash(&mut h);
                for_each_combination(h, rest, f);
            }
        }
    }
}

/// A message's lookup values for one shape.
struct ProbeKeys<'p, 'a> {
    msg_type: Option<u8>,
    singles: [Option<&'a str>; 2],
    dims: [Option<&'p [&'a str]>; 4],
}

/// What a message offers for lookups, each list worked out at most once per
/// message and only when a shape asks for it. An empty list: the message
/// lacks that key, no rule carrying it can match.
struct Probe<'i, 'a> {
    input: &'i MatchInput<'a>,
    arg0: OnceCell<Vec<&'a str>>,
    arg0_namespaces: OnceCell<Vec<&'a str>>,
    path: OnceCell<Vec<&'a str>>,
    path_namespaces: OnceCell<Vec<&'a str>>,
    sender_names: OnceCell<Vec<&'a str>>,
    destination_names: OnceCell<Vec<&'a str>>,
}

impl<'i, 'a> Probe<'i, 'a> {
    fn new(input: &'i MatchInput<'a>) -> Probe<'i, 'a> {
        Probe {
            input,
            arg0: OnceCell::new(),
            arg0_namespaces: OnceCell::new(),
            path: OnceCell::new(),
            path_namespaces: OnceCell::new(),
            sender_names: OnceCell::new(),
            destination_names: OnceCell::new(),
        }
    }

    /// Whether a table of `shape` with `rules` rules would have to be probed
    /// with more sender (or recipient) names than it has rules.
    fn names_outnumber(&self, shape: Shape, rules: usize) -> bool {
        let many = |owner: &dyn NameOwner| owner.name_count_bound() > rules;
        (shape.has(Shape::SENDER) && many(self.input.sender()))
            || (shape.has(Shape::DESTINATION) && self.input.recipient().is_some_and(many))
    }

    fn string_arg0(&self) -> Option<&'a str> {
        self.input
            .arg(0)
            .filter(|a| a.kind == StrKind::String)
            .map(|a| a.value)
    }

    /// The values to probe a table of `shape` with; `None` if no rule of
    /// that shape can match the message.
    fn keys_for<'p>(&'p self, shape: Shape) -> Option<ProbeKeys<'p, 'a>> {
        let msg = self.input.message();
        let to_someone = msg.destination().is_some();
        // Without eavesdrop a rule sees broadcasts only; with a destination
        // key it sees nothing but messages to that destination.
        if to_someone && !shape.has(Shape::EAVESDROP) {
            return None;
        }
        if shape.has(Shape::DESTINATION) && !(to_someone && shape.has(Shape::EAVESDROP)) {
            return None;
        }
        let wanted = |bit: u16, value: Option<&'a str>| -> Option<Option<&'a str>> {
            if shape.has(bit) {
                value.map(Some)
            } else {
                Some(None)
            }
        };
        let singles = [
            wanted(Shape::INTERFACE, msg.interface())?,
            wanted(Shape::MEMBER, msg.member())?,
        ];
        let list = |bit: u16, cell: &'p OnceCell<Vec<&'a str>>, make: &dyn Fn() -> Vec<&'a str>| {
            shape.has(bit).then(|| cell.get_or_init(make).as_slice())
        };
        // Mutually exclusive pairs: a rule has one arg0 key and one path key.
        let arg0 = list(Shape::ARG0, &self.arg0, &|| {
            self.string_arg0().into_iter().collect()
        })
        .or_else(|| {
            list(Shape::ARG0_NAMESPACE, &self.arg0_namespaces, &|| {
                self.string_arg0()
                    .map_or_else(Vec::new, |v| prefixes(v, '.'))
            })
        });
        let path = list(Shape::PATH, &self.path, &|| {
            msg.path().into_iter().collect()
        })
        .or_else(|| {
            list(Shape::PATH_NAMESPACE, &self.path_namespaces, &|| {
                msg.path().map_or_else(Vec::new, path_namespaces)
            })
        });
        let sender = list(Shape::SENDER, &self.sender_names, &|| {
            let owner = self.input.sender();
            (0..).map_while(|i| owner.name(i)).collect()
        });
        let destination = list(Shape::DESTINATION, &self.destination_names, &|| match self
            .input
            .recipient()
        {
            Some(owner) => (0..).map_while(|i| owner.name(i)).collect(),
            None => msg.destination().into_iter().collect(),
        });
        Some(ProbeKeys {
            msg_type: shape.has(Shape::TYPE).then(|| msg.msg_type() as u8),
            singles,
            dims: [arg0, path, sender, destination],
        })
    }
}

/// `a.b.c` -> `a`, `a.b`, `a.b.c`: the namespaces a bus name lies in.
fn prefixes(value: &str, separator: char) -> Vec<&str> {
    value
        .match_indices(separator)
        .map(|(i, _)| &value[..i])
        .chain(std::iter::once(value))
        .collect()
}

/// `/a/b` -> `/`, `/a`, `/a/b`: the path namespaces a path lies in.
fn path_namespaces(path: &str) -> Vec<&str> {
    let mut out = vec!["/"];
    if path.len() > 1 {
        out.extend(path.match_indices('/').skip(1).map(|(i, _)| &path[..i]));
        out.push(path);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::match_rule::{BusDriver, NameOwner, OwnedNames};
    use proptest::prelude::*;
    use quickbus_wire::{Message, MessageBuilder, Value};

    fn rule(text: &str) -> MatchRule {
        MatchRule::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    fn message(builder: MessageBuilder) -> Message {
        Message::parse(builder.build(1).expect("build")).expect("parse")
    }

    fn signal(path: &str, member: &str, body: Vec<Value>) -> Message {
        message(MessageBuilder::signal(path, "org.example.I", member).body(body))
    }

    const SENDER: OwnedNames<'static, &'static str> = OwnedNames {
        unique: ":1.1",
        well_known: &["org.example.Owned"],
    };

    fn matching(index: &MatchIndex<u32>, msg: &Message) -> Vec<u32> {
        let mut out = Vec::new();
        index.matching(&MatchInput::new(msg, &SENDER, None), &mut out);
        out
    }

    /// How many rules `matching` checked in full for `msg`.
    fn checks(index: &MatchIndex<u32>, msg: &Message) -> usize {
        index.checks.set(0);
        matching(index, msg);
        index.checks.get()
    }

    #[test]
    fn finds_each_matching_connection_once_in_order() {
        let mut index = MatchIndex::new();
        index.add(9, rule("member='Changed'"));
        index.add(9, rule("type='signal'"));
        index.add(3, rule("path_namespace='/a'"));
        index.add(5, rule("member='Other'"));
        index.add(1, rule(""));
        let msg = signal("/a/b", "Changed", vec![]);
        let mut out = vec![42];
        index.matching(&MatchInput::new(&msg, &SENDER, None), &mut out);
        assert_eq!(out, [42, 1, 3, 9], "appends, keeps what was there");
    }

    #[test]
    fn equal_rules_of_many_connections_are_checked_once_per_message() {
        let mut index = MatchIndex::new();
        let watch = "type='signal',interface='org.example.I',member='Changed'";
        // arg1 is no lookup key: these share the bucket, interleaved, and
        // do not match (the signal has no arguments).
        let picky = format!("{watch},arg1='x'");
        for conn in 0..100 {
            index.add(conn, rule(watch));
            index.add(1000 + conn, rule(&picky));
        }
        index.add(100, rule(&picky));
        let msg = signal("/a", "Changed", vec![]);
        assert_eq!(matching(&index, &msg), (0..100).collect::<Vec<_>>());
        assert_eq!(checks(&index, &msg), 2, "each distinct rule once");
        assert_eq!(
            index.shared_rules.len(),
            2,
            "one copy of each distinct rule"
        );
        for conn in 1000..1100 {
            index.remove_connection(conn);
        }

        // Removing connections leaves the others' shared rule in place,
        // and the last one takes it.
        for conn in 0..99 {
            index.remove_connection(conn);
        }
        assert_eq!(matching(&index, &msg), [99]);
        assert!(index.remove(99, &rule(watch)));
        assert!(matching(&index, &msg).is_empty());
        assert_eq!(index.shared_rules.len(), 1);
        index.remove_connection(100);
        assert!(index.shared_rules.is_empty());
    }

    #[test]
    fn duplicates_are_counted_and_removed_one_at_a_time() {
        let mut index = MatchIndex::new();
        let r = rule("member='Changed'");
        index.add(7, r.clone());
        index.add(7, rule("type=signal,member=Changed"));
        index.add(7, rule("member='Changed'"));
        assert_eq!(index.rule_count(7), 3);
        assert_eq!(index.len(), 3);
        let msg = signal("/", "Changed", vec![]);
        assert_eq!(matching(&index, &msg), [7]);
        assert!(index.remove(7, &r));
        assert_eq!(index.rule_count(7), 2);
        assert_eq!(matching(&index, &msg), [7]);
        assert!(index.remove(7, &r));
        assert!(!index.remove(7, &r), "both instances gone");
        assert_eq!(matching(&index, &msg), [7], "the typed rule is still there");
        assert!(index.remove(7, &rule("member=Changed,type='signal'")));
        assert!(matching(&index, &msg).is_empty());
        assert!(index.is_empty());
        assert_eq!(index.rule_count(7), 0);
        assert!(
            index.shapes.is_empty() && index.conns.is_empty(),
            "nothing left behind"
        );
    }

    #[test]
    fn remove_needs_an_equal_rule_of_the_same_connection() {
        let mut index = MatchIndex::new();
        index.add(1, rule("member='M'"));
        assert!(!index.remove(2, &rule("member='M'")));
        assert!(!index.remove(1, &rule("member='M',eavesdrop=true")));
        assert!(!index.remove(1, &rule("member='N'")));
        assert!(index.remove(1, &rule("eavesdrop=false,member=M")));
    }

    #[test]
    fn remove_connection_drops_all_its_rules_only() {
        let mut index = MatchIndex::new();
        for conn in [1, 2] {
            index.add(conn, rule("member='M'"));
            index.add(conn, rule("member='M'"));
            index.add(conn, rule("path='/x'"));
        }
        index.remove_connection(1);
        index.remove_connection(8);
        assert_eq!(index.rule_count(1), 0);
        assert_eq!(index.len(), 3);
        assert_eq!(matching(&index, &signal("/", "M", vec![])), [2]);
        assert_eq!(matching(&index, &signal("/x", "Q", vec![])), [2]);
        index.add(1, rule("path='/x'"));
        assert_eq!(matching(&index, &signal("/x", "Q", vec![])), [1, 2]);
    }

    #[test]
    fn rules_naming_a_departed_unique_name_are_dropped() {
        let mut index = MatchIndex::new();
        index.add(1, rule("sender=':1.5',member='M'"));
        index.add(1, rule("sender=':1.5',member='M'"));
        index.add(1, rule("sender=':1.6'"));
        index.add(2, rule("destination=':1.5',eavesdrop=true"));
        index.add(2, rule("sender=':1.6',destination=':1.5',eavesdrop=true"));
        index.add(3, rule("sender='org.example.Name'"));
        index.add(3, rule("arg0=':1.5'"));
        assert_eq!(index.remove_rules_naming(":1.5"), 4);
        assert_eq!(index.remove_rules_naming(":1.5"), 0);
        assert_eq!(
            (
                index.rule_count(1),
                index.rule_count(2),
                index.rule_count(3)
            ),
            (1, 0, 2)
        );
        assert_eq!(index.len(), 3);
        assert!(!index.remove(1, &rule("sender=':1.5',member='M'")));
        let from_16 = OwnedNames {
            unique: ":1.6",
            well_known: &["org.example.Name"],
        };
        let msg = signal("/", "M", vec![Value::String(":1.5".into())]);
        let mut out = Vec::new();
        index.matching(&MatchInput::new(&msg, &from_16, None), &mut out);
        assert_eq!(out, [1, 3]);
        assert_eq!(index.remove_rules_naming(":1.6"), 1);
        index.remove_connection(3);
        assert!(index.is_empty() && index.naming_unique.is_empty() && index.shapes.is_empty());
    }

    #[test]
    fn many_connections_sharing_one_rule_come_and_go_in_any_order() {
        let mut index = MatchIndex::new();
        for conn in 0..6 {
            index.add(conn, rule("member='M'"));
        }
        let msg = signal("/", "M", vec![]);
        for (gone, left) in [
            (2, vec![0, 1, 3, 4, 5]),
            (5, vec![0, 1, 3, 4]),
            (0, vec![1, 3, 4]),
            (4, vec![1, 3]),
            (1, vec![3]),
        ] {
            assert!(index.remove(gone, &rule("member='M'")));
            assert_eq!(matching(&index, &msg), left);
        }
        index.add(7, rule("member='M'"));
        assert_eq!(matching(&index, &msg), [3, 7]);
        assert!(index.remove(3, &rule("member='M'")));
        assert!(index.remove(7, &rule("member='M'")));
        assert!(index.shapes.is_empty());
    }

    #[test]
    fn rules_of_lists_each_instance_in_first_added_order() {
        let mut index = MatchIndex::new();
        index.add(1, rule("member='B'"));
        index.add(1, rule("member='A'"));
        index.add(2, rule("member='C'"));
        index.add(1, rule("member='B'"));
        let listed: Vec<String> = index.rules_of(1).map(|r| r.to_string()).collect();
        assert_eq!(listed, ["member='B'", "member='B'", "member='A'"]);
        assert_eq!(index.rules_of(1).count(), index.rule_count(1));
        assert_eq!(index.rules_of(3).count(), 0);
    }

    #[test]
    fn rules_that_cannot_match_are_never_looked_at() {
        let mut index = MatchIndex::new();
        const N: u32 = 100_000;
        for i in 0..N {
            let r = match i % 6 {
                0 => format!("type='signal',interface='org.example.I',member='M{i}'"),
                1 => format!("sender=':1.{}'", i + 10),
                2 => format!("path_namespace='/p/n{i}'"),
                3 => format!("member='NameOwnerChanged',arg0='org.n{i}'"),
                4 => format!("arg0namespace='org.n{i}'"),
                _ => format!("path='/q/n{i}',member='Changed'"),
            };
            index.add(i, rule(&r));
        }
        assert_eq!(checks(&index, &signal("/elsewhere", "Nothing", vec![])), 0);
        assert_eq!(
            checks(&index, &signal("/p/n2/deeper/still", "M", vec![])),
            1
        );
        let msg = signal("/p", "M6", vec![]);
        assert_eq!(checks(&index, &msg), 1);
        assert_eq!(matching(&index, &msg), [6]);
        let owner_changed = signal(
            "/",
            "NameOwnerChanged",
            vec![Value::String("org.n9".into())],
        );
        assert_eq!(checks(&index, &owner_changed), 1);
        assert_eq!(matching(&index, &owner_changed), [9]);
        let namespaced = signal("/", "X", vec![Value::String("org.n4.sub".into())]);
        assert_eq!(matching(&index, &namespaced), [4]);
        assert_eq!(checks(&index, &namespaced), 1);
        // Every rule here ignores messages with a destination.
        let call = message(MessageBuilder::method_call("/p/n2", "M0").destination(":1.1"));
        assert_eq!(checks(&index, &call), 0);
        // A sender key is looked up by the sender's names only.
        let from_11 = OwnedNames {
            unique: ":1.11",
            well_known: &["org.a.B"],
        };
        let msg = signal("/x", "Y", vec![]);
        let mut out = Vec::new();
        index.checks.set(0);
        index.matching(&MatchInput::new(&msg, &from_11, None), &mut out);
        assert_eq!((out, index.checks.get()), (vec![1], 1));
    }

    #[test]
    fn a_table_is_scanned_when_that_is_cheaper_than_probing() {
        let mut index = MatchIndex::new();
        index.add(1, rule("sender='org.example.N40'"));
        index.add(2, rule("sender='org.example.N99'"));
        let names: Vec<String> = (0..50).map(|i| format!("org.example.N{i}")).collect();
        let many = OwnedNames {
            unique: ":1.1",
            well_known: &names[..],
        };
        let msg = signal("/", "M", vec![]);
        let mut out = Vec::new();
        index.checks.set(0);
        index.matching(&MatchInput::new(&msg, &many, None), &mut out);
        assert_eq!(out, [1]);
        assert_eq!(index.checks.get(), 2, "scanned the two rules, no 51 probes");
    }

    /// A party owning many names that counts how often they are listed.
    struct CountingOwner {
        names: Vec<String>,
        listed: std::cell::Cell<usize>,
    }

    impl NameOwner for CountingOwner {
        fn name(&self, index: usize) -> Option<&str> {
            self.listed.set(self.listed.get() + 1);
            self.names.get(index).map(String::as_str)
        }

        fn owns(&self, name: &str) -> bool {
            self.names.iter().any(|n| n == name)
        }

        fn name_count_bound(&self) -> usize {
            self.names.len()
        }
    }

    #[test]
    fn a_sender_owning_many_names_is_not_listed_for_a_few_rules() {
        let mut index = MatchIndex::new();
        index.add(1, rule("sender='org.example.N7000'"));
        index.add(2, rule("sender='org.example.Other'"));
        index.add(3, rule("member='M'"));
        let mut names = vec![":1.1".to_owned()];
        names.extend((0..10_000).map(|i| format!("org.example.N{i}")));
        let owner = CountingOwner {
            names,
            listed: std::cell::Cell::new(0),
        };
        let msg = signal("/", "M", vec![]);
        let mut out = Vec::new();
        index.checks.set(0);
        index.matching(&MatchInput::new(&msg, &owner, None), &mut out);
        assert_eq!(out, [1, 3]);
        assert_eq!(owner.listed.get(), 0, "no name listed");
        assert_eq!(
            index.checks.get(),
            3,
            "two sender rules scanned, one probed"
        );
    }

    #[test]
    fn eavesdroppers_and_destinations() {
        let mut index = MatchIndex::new();
        index.add(1, rule("member='M'"));
        index.add(2, rule("member='M',eavesdrop='true'"));
        index.add(3, rule("destination='org.example.Svc',eavesdrop='true'"));
        index.add(4, rule("destination=':1.8',eavesdrop='true'"));
        index.add(5, rule("destination=':1.8'"));
        let call = message(MessageBuilder::method_call("/", "M").destination("org.example.Svc"));
        let svc = OwnedNames {
            unique: ":1.8",
            well_known: &["org.example.Svc"],
        };
        let mut out = Vec::new();
        index.matching(&MatchInput::new(&call, &SENDER, Some(&svc)), &mut out);
        assert_eq!(out, [2, 3, 4]);
        out.clear();
        index.matching(&MatchInput::new(&call, &SENDER, None), &mut out);
        assert_eq!(out, [2, 3]);
        out.clear();
        index.matching(
            &MatchInput::new(&signal("/", "M", vec![]), &BusDriver, None),
            &mut out,
        );
        assert_eq!(out, [1, 2]);
    }

    // ---- the index agrees with checking every rule ----

    const RULE_PARTS: &[&[&str]] = &[
        &["", "type='signal'", "type='method_call'"],
        &["", "interface='org.a.I'", "interface='org.b.I'"],
        &["", "member='M'", "member='N'"],
        &[
            "",
            "path='/a'",
            "path='/a/b'",
            "path_namespace='/'",
            "path_namespace='/a'",
            "path_namespace='/a/b'",
        ],
        &[
            "",
            "sender=':1.1'",
            "sender=':1.2'",
            "sender='org.x.A'",
            "sender='org.x.B'",
            "sender='org.freedesktop.DBus'",
        ],
        &["", "", "destination=':1.3'", "destination='org.y.C'"],
        &["", "", "eavesdrop='true'"],
        &[
            "",
            "arg0='x'",
            "arg0='org.x'",
            "arg0namespace='org'",
            "arg0namespace='org.x'",
            "arg0path='/a/'",
            "arg0path='/a/b'",
        ],
        &["", "", "arg1='x'", "arg1path='/a/'"],
    ];

    fn arb_rule() -> impl Strategy<Value = MatchRule> {
        let picks: Vec<_> = RULE_PARTS.iter().map(|part| 0..part.len()).collect();
        picks.prop_map(|picks| {
            let text: Vec<&str> = picks
                .iter()
                .zip(RULE_PARTS)
                .map(|(&i, part)| part[i])
                .filter(|p| !p.is_empty())
                .collect();
            rule(&text.join(","))
        })
    }

    fn arb_arg() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::String("x".into())),
            Just(Value::String("org".into())),
            Just(Value::String("org.x".into())),
            Just(Value::String("org.x.y".into())),
            Just(Value::String("orgx".into())),
            Just(Value::String("/a/".into())),
            Just(Value::String("/a/b/c".into())),
            Just(Value::ObjectPath("/a/b".into())),
            Just(Value::ObjectPath("/".into())),
            Just(Value::Uint32(1)),
        ]
    }

    #[derive(Debug, Clone)]
    struct TestMessage {
        signal: bool,
        path: &'static str,
        interface: Option<&'static str>,
        member: &'static str,
        destination: Option<&'static str>,
        body: Vec<Value>,
        sender: usize,
        recipient_known: bool,
    }

    fn arb_message() -> impl Strategy<Value = TestMessage> {
        (
            any::<bool>(),
            prop::sample::select(vec!["/", "/a", "/a/b", "/a/bc", "/b"]),
            prop::sample::select(vec![None, Some("org.a.I"), Some("org.b.I")]),
            prop::sample::select(vec!["M", "N", "O"]),
            prop::sample::select(vec![
                None,
                None,
                Some(":1.3"),
                Some("org.y.C"),
                Some(":1.4"),
            ]),
            prop::collection::vec(arb_arg(), 0..3),
            0..SENDERS.len() + 1,
            any::<bool>(),
        )
            .prop_map(
                |(signal, path, interface, member, destination, body, sender, known)| TestMessage {
                    signal,
                    path,
                    interface: if signal {
                        interface.or(Some("org.a.I"))
                    } else {
                        interface
                    },
                    member,
                    destination,
                    body,
                    sender,
                    recipient_known: known,
                },
            )
    }

    const SENDERS: &[OwnedNames<'static, &'static str>] = &[
        OwnedNames {
            unique: ":1.1",
            well_known: &[],
        },
        OwnedNames {
            unique: ":1.2",
            well_known: &["org.x.A"],
        },
        OwnedNames {
            unique: ":1.5",
            well_known: &["org.x.A", "org.x.B"],
        },
    ];

    /// Who owns what the test messages may be addressed to.
    fn recipient_of(destination: &str) -> OwnedNames<'static, &'static str> {
        match destination {
            ":1.3" | "org.y.C" => OwnedNames {
                unique: ":1.3",
                well_known: &["org.y.C"],
            },
            _ => OwnedNames {
                unique: ":1.4",
                well_known: &[],
            },
        }
    }

    fn build(m: &TestMessage) -> Message {
        let mut b = if m.signal {
            MessageBuilder::signal(m.path, m.interface.unwrap_or("org.a.I"), m.member)
        } else {
            let b = MessageBuilder::method_call(m.path, m.member);
            match m.interface {
                Some(i) => b.interface(i),
                None => b,
            }
        };
        if let Some(d) = m.destination {
            b = b.destination(d);
        }
        message(b.body(m.body.clone()))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn index_agrees_with_checking_every_rule(
            installed in prop::collection::vec((0u32..12, arb_rule()), 0..60),
            removals in prop::collection::vec(0usize..60, 0..20),
            departed in prop::option::of(prop::sample::select(vec![":1.1", ":1.2", ":1.3"])),
            dropped in prop::option::of(0u32..12),
            messages in prop::collection::vec(arb_message(), 1..8),
        ) {
            let mut index = MatchIndex::new();
            let mut all: Vec<(u32, MatchRule)> = Vec::new();
            for (conn, r) in &installed {
                index.add(*conn, r.clone());
                all.push((*conn, r.clone()));
            }
            for i in removals {
                if i < all.len() {
                    let (conn, r) = all.remove(i);
                    prop_assert!(index.remove(conn, &r));
                }
            }
            if let Some(name) = departed {
                let before = all.len();
                all.retain(|(_, r)| r.sender() != Some(name) && r.destination() != Some(name));
                prop_assert_eq!(index.remove_rules_naming(name), before - all.len());
            }
            if let Some(conn) = dropped {
                all.retain(|(c, _)| *c != conn);
                index.remove_connection(conn);
            }
            prop_assert_eq!(index.len(), all.len());
            for conn in 0..12 {
                let mut listed: Vec<String> = index.rules_of(conn).map(|r| r.to_string()).collect();
                let mut expected: Vec<String> =
                    all.iter().filter(|(c, _)| *c == conn).map(|(_, r)| r.to_string()).collect();
                listed.sort();
                expected.sort();
                prop_assert_eq!(index.rule_count(conn), expected.len());
                prop_assert_eq!(listed, expected);
            }
            for m in &messages {
                let msg = build(m);
                let recipient = m.destination.map(recipient_of);
                let recipient: Option<&dyn NameOwner> = match &recipient {
                    Some(r) if m.recipient_known => Some(r),
                    _ => None,
                };
                let sender: &dyn NameOwner = match SENDERS.get(m.sender) {
                    Some(s) => s,
                    None => &BusDriver,
                };
                let input = MatchInput::new(&msg, sender, recipient);
                let mut expected: Vec<u32> = all
                    .iter()
                    .filter(|(_, r)| r.matches(&input))
                    .map(|(c, _)| *c)
                    .collect();
                expected.sort_unstable();
                expected.dedup();
                let mut got = Vec::new();
                index.matching(&input, &mut got);
                prop_assert_eq!(got, expected, "{:?}", m);
            }
        }
    }

    /// `listed` (owner, rule, count) as a restart hands the rules over,
    /// read back: the index, or the reason it was refused.
    fn handed_over(listed: &[(u32, &str, usize)]) -> Result<MatchIndex<u32>, String> {
        let listed: Vec<(u32, MatchRule, usize)> = listed
            .iter()
            .map(|&(owner, text, count)| (owner, rule(text), count))
            .collect();
        crate::handover::tests::read_back(&postcard::to_stdvec(&listed).unwrap())
    }

    /// A count is not looped over: one no connection can have is refused
    /// at once, saying why, and the previous image serves on.
    #[test]
    fn a_handed_over_count_no_connection_can_have_is_refused() {
        const MOST: usize = MOST_RULES_PER_CONNECTION;
        let why = "a connection with more than 2147483647 match rules \
                   (max_match_rules_per_connection can be no higher)";
        for listed in [
            vec![(1, "member='A'", MOST + 1)],
            vec![(1, "member='A'", usize::MAX)],
            // Each rule within the bound, the connection's together not.
            vec![
                (1, "member='A'", MOST),
                (2, "member='A'", 1),
                (1, "member='B'", 1),
            ],
        ] {
            let refusal = handed_over(&listed).unwrap_err();
            assert!(refusal.ends_with(why), "{listed:?}: {refusal}");
        }
        // As many as a connection can have, on each of two connections.
        let index = handed_over(&[(1, "member='A'", MOST), (2, "member='A'", MOST)]).unwrap();
        assert_eq!(index.rule_count(1), MOST);
        assert_eq!(index.rule_count(2), MOST);
        assert_eq!(index.len(), 2 * MOST);
    }

    #[test]
    fn a_handed_over_rule_installed_0_times_is_refused() {
        let refusal = handed_over(&[(1, "member='A'", 0)]).unwrap_err();
        assert!(
            refusal.ends_with("the match rule \"member='A'\" installed 0 times"),
            "{refusal}"
        );
    }

    /// The old image lists each distinct rule of a connection once, with
    /// its count.
    #[test]
    fn a_rule_handed_over_twice_for_one_connection_is_refused() {
        let refusal = handed_over(&[
            (1, "type='signal',member='A'", 2),
            (2, "type='signal',member='A'", 1),
            (1, "member='A',type='signal'", 1),
        ])
        .unwrap_err();
        assert!(
            refusal.ends_with(
                "the match rule \"type='signal',member='A'\" listed twice for one connection"
            ),
            "{refusal}"
        );
    }

    /// Counted rules read back in one go are listed, matched, counted and
    /// removed as the rules added one by one were.
    #[test]
    fn handed_over_rules_are_listed_and_matched_as_before() {
        let mut index = MatchIndex::new();
        index.add(1, rule("member='A'"));
        index.add(2, rule("type='signal'"));
        index.add(1, rule("type='signal'"));
        index.add(1, rule("member='A'"));
        index.add(1, rule("member='A'"));
        index.add(3, rule("member='A'"));
        let state = postcard::to_stdvec(&index).unwrap();
        let listed: Vec<(u32, MatchRule, usize)> = postcard::from_bytes(&state).unwrap();
        let listed: Vec<(u32, String, usize)> = listed
            .into_iter()
            .map(|(owner, rule, count)| (owner, rule.to_string(), count))
            .collect();
        let handed: Vec<(u32, &str, usize)> = listed
            .iter()
            .map(|(owner, text, count)| (*owner, text.as_str(), *count))
            .collect();
        let mut read = handed_over(&handed).unwrap();
        let texts = |index: &MatchIndex<u32>, conn| {
            index
                .rules_of(conn)
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        for conn in 1..=3 {
            assert_eq!(texts(&read, conn), texts(&index, conn), "connection {conn}");
            assert_eq!(read.rule_count(conn), index.rule_count(conn));
        }
        assert_eq!(
            texts(&read, 1),
            ["member='A'", "member='A'", "member='A'", "type='signal'"]
        );
        assert_eq!(read.len(), 6);
        assert_eq!(read.shared_rules.len(), 2, "one copy of each distinct rule");
        let msg = signal("/", "A", vec![]);
        assert_eq!(matching(&read, &msg), matching(&index, &msg));
        // Three instances, taken away one at a time.
        for _ in 0..3 {
            assert!(read.remove(1, &rule("member='A'")));
        }
        assert!(!read.remove(1, &rule("member='A'")));
        assert_eq!(texts(&read, 1), ["type='signal'"]);
    }

    #[test]
    fn namespace_prefixes() {
        assert_eq!(prefixes("a.b.c", '.'), ["a", "a.b", "a.b.c"]);
        assert_eq!(prefixes("a", '.'), ["a"]);
        assert_eq!(path_namespaces("/"), ["/"]);
        assert_eq!(path_namespaces("/a"), ["/", "/a"]);
        assert_eq!(path_namespaces("/a/b/c"), ["/", "/a", "/a/b", "/a/b/c"]);
    }
}
