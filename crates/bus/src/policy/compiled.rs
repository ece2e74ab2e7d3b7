//! From [`PolicyConfig`] to what checks use: the connect rules, and one
//! [`ClientPolicy`] per distinct set of applicable scopes, built when a
//! connection with those credentials first appears and shared by every
//! connection with the same ones.
//!
//! Owns: the compiled rules. May touch: nothing else.

use std::collections::HashMap;
use std::sync::Arc;

use super::index::{Facts, MessageRules, Openness, OwnRules, Side};
use super::{MessageRule, NameMatch, PolicyConfig, PolicyRule, RuleKind};
use crate::{Credentials, UserGroups};

/// The rules that apply to one connection, in dbus-daemon's order.
#[derive(Debug)]
pub struct ClientPolicy {
    pub(crate) send: MessageRules,
    pub(crate) receive: MessageRules,
    pub(crate) own: OwnRules,
}

impl ClientPolicy {
    /// No rules at all: a placeholder for a connection's rules, only
    /// between deserializing a bus and [`crate::Bus::restored`].
    pub(crate) fn unresolved() -> Arc<ClientPolicy> {
        Arc::new(ClientPolicy::build(std::iter::empty()))
    }

    fn build<'a>(lists: impl Iterator<Item = &'a [PolicyRule]>) -> ClientPolicy {
        let mut send = Vec::new();
        let mut receive = Vec::new();
        let mut own = Vec::new();
        for rule in lists.flatten() {
            match &rule.kind {
                RuleKind::Send(spec) => keep(&mut send, rule.allow, spec),
                RuleKind::Receive(spec) => keep(&mut receive, rule.allow, spec),
                RuleKind::Own(name) => {
                    if *name == NameMatch::Any {
                        own.clear();
                    }
                    own.push((rule.allow, name));
                }
                // Bus-wide: checked once at connection time.
                RuleKind::User(_) | RuleKind::Group(_) => {}
            }
        }
        let mut policy = ClientPolicy {
            send: MessageRules::new(Side::Send),
            receive: MessageRules::new(Side::Receive),
            own: OwnRules::default(),
        };
        for (allow, spec) in send {
            policy.send.push(allow, spec.clone());
        }
        for (allow, spec) in receive {
            policy.receive.push(allow, spec.clone());
        }
        for (allow, name) in own {
            policy.own.push(allow, name);
        }
        policy
    }

    /// Whether the connection may own `name` (RequestName).
    pub fn can_own(&self, name: &str) -> bool {
        self.own.allows(name)
    }

    /// Rules in all (tests and diagnostics).
    pub fn len(&self) -> usize {
        self.send.len() + self.receive.len() + self.own.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Append a send or receive rule, first dropping the rules before it when
/// it is one of those dbus-daemon's `bus_client_policy_optimize` takes
/// for "overrides everything before": no type, path, interface, member,
/// error or name. dbus-daemon ignores the rule's other conditions there
/// (`eavesdrop`, `*_requested_reply`, `send_broadcast`, `min_fds`,
/// `max_fds`), so a message those conditions keep the rule from matching
/// then matches nothing before it either, and is refused: after
/// `<allow receive_sender="*"/>`, `<deny eavesdrop="true"/>` refuses every
/// receive. Clients see dbus-daemon's decisions, so this bus drops the
/// same rules. It can only refuse more than the rules say, never allow more.
fn keep<'a>(rules: &mut Vec<(bool, &'a MessageRule)>, allow: bool, spec: &'a MessageRule) {
    let overrides_all = spec.msg_type.is_none()
        && spec.path.is_none()
        && spec.interface.is_none()
        && spec.member.is_none()
        && spec.error.is_none()
        && spec.name == NameMatch::Any;
    if overrides_all {
        rules.clear();
    }
    rules.push((allow, spec));
}

/// Which scopes apply to a connection: its uid if it has a user policy,
/// and its groups that have group policies, in the order it lists them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ScopeKey {
    uid: Option<u32>,
    groups: Vec<u32>,
}

/// The whole policy, ready for checks.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct CompiledPolicy {
    config: PolicyConfig,
    /// Client policies built so far, by the scopes they combine (a cache,
    /// built again after a restart).
    #[serde(skip)]
    clients: HashMap<ScopeKey, Arc<ClientPolicy>>,
    /// What the receive rules of every client policy built so far let
    /// through (None before the first): every connection's rules are
    /// among them, so a message this lets through passes each
    /// receiver's rules, silently.
    #[serde(skip)]
    every_receiver_open: Option<Openness>,
}

impl CompiledPolicy {
    pub fn new(config: PolicyConfig) -> CompiledPolicy {
        CompiledPolicy {
            config,
            clients: HashMap::new(),
            every_receiver_open: None,
        }
    }

    pub fn config(&self) -> &PolicyConfig {
        &self.config
    }

    /// Whether a peer with `creds` may connect: `bus_uid` (the bus's own
    /// user) may by default, then the user and group rules of the default
    /// and mandatory contexts decide, the last matching one winning.
    pub fn allows_connection(&self, creds: &Credentials, bus_uid: Option<u32>) -> bool {
        if creds.user_groups == UserGroups::UnknownUser {
            return false;
        }
        let groups = database_groups_of(creds);
        let mut allowed = Some(creds.uid) == bus_uid;
        for rule in self.config.default.iter().chain(&self.config.mandatory) {
            let applies = match rule.kind {
                RuleKind::User(uid) => uid.is_none_or(|u| u == creds.uid),
                RuleKind::Group(gid) => gid.is_none_or(|g| groups.contains(&g)),
                _ => false,
            };
            if applies {
                allowed = rule.allow;
            }
        }
        allowed
    }

    /// The rules for a connection with `creds`.
    pub fn client(&mut self, creds: &Credentials) -> Arc<ClientPolicy> {
        let key = ScopeKey {
            uid: self
                .config
                .by_user
                .contains_key(&creds.uid)
                .then_some(creds.uid),
            groups: Vec::new(),
        };
        let mut key = key;
        for &gid in groups_of(creds) {
            if self.config.by_group.contains_key(&gid) && !key.groups.contains(&gid) {
                key.groups.push(gid);
            }
        }
        if let Some(policy) = self.clients.get(&key) {
            return policy.clone();
        }
        let config = &self.config;
        let groups = key
            .groups
            .iter()
            .filter_map(|g| config.by_group.get(g).map(Vec::as_slice));
        let user = key
            .uid
            .and_then(|u| config.by_user.get(&u).map(Vec::as_slice));
        let lists = std::iter::once(config.default.as_slice())
            .chain(groups)
            .chain(user)
            .chain([
                config.not_at_console.as_slice(),
                config.mandatory.as_slice(),
            ]);
        let policy = Arc::new(ClientPolicy::build(lists));
        let open = policy.receive.openness();
        self.every_receiver_open = Some(
            self.every_receiver_open
                .map_or(open, |every| every.narrowed(open)),
        );
        self.clients.insert(key, policy.clone());
        policy
    }

    /// Whether every connection's receive rules let a message with
    /// `facts` through, silently, whoever receives it: a broadcast then
    /// need not ask each receiver.
    pub(crate) fn every_receiver_lets_through(&self, facts: &Facts<'_>) -> bool {
        self.every_receiver_open
            .is_some_and(|open| open.lets_through(facts))
    }
}

/// The connection's groups for its group policies, as dbus-daemon's
/// `bus_connection_get_unix_groups` takes them: the kernel's
/// (`SO_PEERGROUPS`, the process's own groups at connect time) when it gave
/// any, else the user database's.
fn groups_of(creds: &Credentials) -> &[u32] {
    if !creds.groups.is_empty() {
        return &creds.groups;
    }
    match &creds.user_groups {
        UserGroups::Known(groups) => groups,
        UserGroups::UnknownUser => &[],
        UserGroups::Unresolved => std::slice::from_ref(&creds.gid),
    }
}

/// The groups that decide whether the uid may connect at all: the user
/// database's, as dbus-daemon's `bus_policy_allow_unix_user` asks it (the
/// socket's groups where nobody looked the uid up).
fn database_groups_of(creds: &Credentials) -> &[u32] {
    match &creds.user_groups {
        UserGroups::Known(groups) => groups,
        UserGroups::UnknownUser => &[],
        UserGroups::Unresolved => groups_of(creds),
    }
}
