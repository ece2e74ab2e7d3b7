//! The security policy: who may connect, own which names, send and receive
//! which messages. Semantics are dbus-daemon's (`bus/policy.c`):
//!
//! - A connection's rules are, in this order, the `default` context, the
//!   policies of each of its groups, of its user, the `at_console="false"`
//!   ones (nobody counts as at the console), then the `mandatory` context;
//!   within each, document order. The last rule that matches decides; when
//!   none matches, the answer is no.
//! - Connect rules (`user`, `group`) live in the default and mandatory
//!   contexts only; the bus's own user may connect unless a rule says
//!   otherwise.
//! - Send rules are checked for the sender against each receiver, receive
//!   rules for each receiver. Messages from the bus itself skip the send
//!   check; replies the bus sends count as requested.
//!
//! The daemon describes the configuration with [`PolicyConfig`] (names
//! already resolved to uids and gids); [`compiled`] turns it into per-user
//! rule lists indexed so a check only visits rules that could match.
//!
//! Owns: the configuration types and the compiled policy; a connection's
//! rules are in its `Connection`. May touch: nothing else; the bus asks
//! it in `bus::policy_check`.

mod compiled;
mod delivery;
mod denial;
mod index;

#[cfg(test)]
mod tests;

use std::collections::HashMap;

use quickbus_wire::MessageType;

pub use compiled::{ClientPolicy, CompiledPolicy};
pub(crate) use delivery::Delivery;
pub(crate) use denial::Party;
pub(crate) use denial::{loginfo, Denial, Refusal};
pub(crate) use index::Facts;

/// The whole `<policy>` configuration, scopes resolved.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PolicyConfig {
    /// `<policy context="default">`, all of them in document order.
    pub default: Vec<PolicyRule>,
    /// `<policy context="mandatory">`.
    pub mandatory: Vec<PolicyRule>,
    /// `<policy user="...">` by uid.
    pub by_user: HashMap<u32, Vec<PolicyRule>>,
    /// `<policy group="...">` by gid.
    pub by_group: HashMap<u32, Vec<PolicyRule>>,
    /// `<policy at_console="true">`: never applied (nobody is at the
    /// console as far as this bus knows), kept for completeness.
    pub at_console: Vec<PolicyRule>,
    /// `<policy at_console="false">`: applies to every connection.
    pub not_at_console: Vec<PolicyRule>,
}

impl PolicyConfig {
    /// Anyone may connect, send, receive, eavesdrop and own anything:
    /// dbus-daemon's stock session.conf policy plus `<allow user="*"/>`
    /// (there, authentication keeps other users out). The bus starts with
    /// this until told otherwise.
    pub fn allow_all() -> PolicyConfig {
        PolicyConfig {
            default: vec![
                PolicyRule::allow(RuleKind::User(None)),
                PolicyRule::allow(RuleKind::Send(MessageRule {
                    eavesdrop: true,
                    ..MessageRule::default()
                })),
                PolicyRule::allow(RuleKind::Receive(MessageRule {
                    eavesdrop: true,
                    ..MessageRule::default()
                })),
                PolicyRule::allow(RuleKind::Own(NameMatch::Any)),
            ],
            ..PolicyConfig::default()
        }
    }
}

/// One `<allow>` or `<deny>`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PolicyRule {
    pub allow: bool,
    pub kind: RuleKind,
}

impl PolicyRule {
    pub fn allow(kind: RuleKind) -> PolicyRule {
        PolicyRule { allow: true, kind }
    }

    pub fn deny(kind: RuleKind) -> PolicyRule {
        PolicyRule { allow: false, kind }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RuleKind {
    /// `user="..."`: None for `*`.
    User(Option<u32>),
    /// `group="..."`: None for `*`.
    Group(Option<u32>),
    /// `own` / `own_prefix`.
    Own(NameMatch),
    /// `send_*` attributes (and eavesdrop, min_fds, max_fds, log with them).
    Send(MessageRule),
    /// `receive_*` attributes, or `eavesdrop` alone.
    Receive(MessageRule),
}

/// A bus name condition: `*`, one name, or a name and the names below it
/// (`a.b` covers `a.b` and `a.b.c`, not `a.bc`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum NameMatch {
    Any,
    Exact(String),
    Prefix(String),
}

/// The message attributes of a send or receive rule. None means `*` (or
/// absent): matches anything.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MessageRule {
    pub msg_type: Option<MessageType>,
    pub path: Option<String>,
    pub interface: Option<String>,
    pub member: Option<String>,
    pub error: Option<String>,
    /// send_destination(_prefix) on send rules, receive_sender on receive
    /// rules: a name the other party owns or is queued for.
    pub name: NameMatch,
    /// `*_requested_reply`; when absent, true for allow rules and false
    /// for deny rules (dbus-daemon's defaults).
    pub requested_reply: Option<bool>,
    pub eavesdrop: bool,
    /// `send_broadcast`: true for signals without a destination only.
    pub broadcast: Option<bool>,
    pub min_fds: u32,
    pub max_fds: u32,
    /// `log="true"`: an allowed message this rule decided is logged.
    pub log: bool,
}

/// The most fds a message may carry (the specification's bound).
pub const MAX_MESSAGE_UNIX_FDS: u32 = 1 << 25;

impl Default for MessageRule {
    fn default() -> MessageRule {
        MessageRule {
            msg_type: None,
            path: None,
            interface: None,
            member: None,
            error: None,
            name: NameMatch::Any,
            requested_reply: None,
            eavesdrop: false,
            broadcast: None,
            min_fds: 0,
            max_fds: MAX_MESSAGE_UNIX_FDS,
            log: false,
        }
    }
}
