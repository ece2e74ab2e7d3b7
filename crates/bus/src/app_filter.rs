//! Per-app filtering: xdg-dbus-proxy's `--filter` policy, applied by the
//! bus itself (issue 26, docs/containers.md "Per-app filtering").
//!
//! An [`AppFilter`] is compiled once from xdg-dbus-proxy's policy options
//! (`--see=NAME`, `--talk=NAME`, `--own=NAME`, `--call=NAME=RULE`,
//! `--broadcast=NAME=RULE`) by [`AppFilter::from_proxy_options`]. The
//! daemon shares one per container instance (`Arc`) and hands it to the
//! bus for each connection that comes in through that instance with
//! `Bus::set_app_filter(conn, Arc<AppFilter>)`, right after
//! `add_connection_as` and before Hello. From then on every message from
//! and to that connection is judged as flatpak-proxy.c judges it; the
//! router's side of that is `bus::app_filtering`, and what each
//! connection learned about its peers is [`view`].
//!
//! Compiled form: a map from each NAME of the options to what it grants
//! exactly and as a prefix (`NAME.*`). Judging a name walks its dotted
//! components (one map lookup each); a message's path, interface and
//! member are checked with map lookups too ([`rules`]), never by scanning
//! the rules.
//!
//! Owns: the compiled options. May touch: nothing else.

mod parse;
pub(crate) mod rules;
pub(crate) mod view;

use std::fmt;

use crate::FastMap;
use rules::{MessageFacts, RuleSet};

pub use parse::AppFilterError;

/// flatpak-proxy.c's `FlatpakPolicy`: each level implies the ones below.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum Level {
    /// Invisible: the name does not exist for the app.
    #[default]
    None,
    /// Visible: listed, its owner and credentials can be asked for,
    /// its NameOwnerChanged heard; messages to it are AccessDenied.
    See,
    /// Calls and signals may go to it (as the call rules allow), its
    /// broadcasts come in (as the broadcast rules allow).
    Talk,
    /// RequestName, ReleaseName, ListQueuedOwners; everything passes.
    Own,
}

/// What one NAME of the options grants, either to that name exactly or to
/// it and every name below it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Grant {
    pub level: Level,
    /// What calls (and unicast signals) to the name may be.
    pub call: RuleSet,
    /// What broadcasts from the name may be.
    pub broadcast: RuleSet,
}

#[derive(Clone, Debug, Default)]
struct NameGrants {
    exact: Grant,
    /// From `NAME.*` options: applies to NAME and below.
    subtree: Grant,
}

/// A compiled per-app filter. Serialized as its option strings (the bus's
/// handover carries it); deserializing compiles them again.
#[derive(Clone, serde::Serialize)]
#[serde(into = "ProxyOptions")]
pub struct AppFilter {
    options: Vec<String>,
    names: FastMap<String, NameGrants>,
}

impl fmt::Debug for AppFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppFilter")
            .field("options", &self.options)
            .finish()
    }
}

impl AppFilter {
    /// Compile xdg-dbus-proxy policy options, each spelled as on its
    /// command line. An empty list is `--filter` alone: the app may talk
    /// to the bus driver and nobody else. Fails on any other option and
    /// on a malformed one, naming it.
    pub fn from_proxy_options(options: &[impl AsRef<str>]) -> Result<AppFilter, AppFilterError> {
        let mut filter = AppFilter {
            options: options.iter().map(|o| o.as_ref().to_owned()).collect(),
            names: FastMap::default(),
        };
        // flatpak_proxy_init: the bus driver is always TALK.
        filter.add(&parse::implicit_driver_policy());
        for option in options {
            let option = parse::parse_option(option.as_ref())?;
            filter.add(&option);
        }
        Ok(filter)
    }

    /// The options it was compiled from.
    pub fn options(&self) -> &[String] {
        &self.options
    }

    fn add(&mut self, option: &parse::PolicyOption) {
        let entry = self.names.entry(option.name.clone()).or_default();
        let grant = if option.subtree {
            &mut entry.subtree
        } else {
            &mut entry.exact
        };
        grant.level = grant.level.max(option.level);
        match &option.rule {
            parse::Rule::Everything => {
                // A plain --talk or --own lets every call and broadcast
                // through; --see none.
                if option.level >= Level::Talk {
                    grant.call.allow_everything();
                    grant.broadcast.allow_everything();
                }
            }
            parse::Rule::Call(rule) => grant.call.add(rule),
            parse::Rule::Broadcast(rule) => grant.broadcast.add(rule),
        }
    }

    /// Every grant that applies to the well-known name `name`: its own
    /// entry, then the prefix entries of it and its parents.
    pub(crate) fn for_each_grant(&self, name: &str, mut f: impl FnMut(&Grant)) {
        let mut key = name;
        let mut exact = true;
        loop {
            if let Some(grants) = self.names.get(key) {
                if exact {
                    f(&grants.exact);
                }
                f(&grants.subtree);
            }
            exact = false;
            match key.rfind('.') {
                Some(dot) => key = &key[..dot],
                None => break,
            }
        }
    }

    /// The level of a well-known name (or org.freedesktop.DBus).
    pub fn level_of_name(&self, name: &str) -> Level {
        let mut level = Level::None;
        self.for_each_grant(name, |g| level = level.max(g.level));
        level
    }

    /// Whether a message with these facts may go to the well-known name
    /// `name` (whose level is TALK at least).
    pub(crate) fn call_allowed(&self, name: &str, msg: &MessageFacts<'_>) -> bool {
        self.level_and_call(name, msg).1
    }

    /// The level of the well-known name `name`, and whether a message
    /// with these facts may go to it once that level is TALK: both from
    /// one walk of its grants (a call from a filtered app pays one).
    pub(crate) fn level_and_call(&self, name: &str, msg: &MessageFacts<'_>) -> (Level, bool) {
        let mut level = Level::None;
        let mut allowed = false;
        self.for_each_grant(name, |g| {
            level = level.max(g.level);
            allowed = allowed || g.level == Level::Own || g.call.matches(msg);
        });
        (level, allowed)
    }

    /// Whether a broadcast with these facts from the owner of `name` may
    /// come in.
    pub(crate) fn broadcast_allowed(&self, name: &str, msg: &MessageFacts<'_>) -> bool {
        let mut allowed = false;
        self.for_each_grant(name, |g| {
            allowed = allowed || g.level == Level::Own || g.broadcast.matches(msg);
        });
        allowed
    }
}

/// A filter as it crosses a restart: its option strings. (A newtype,
/// which postcard writes as its content, so that the handover's layout
/// test can give the one sample it cannot make up: options that compile.)
#[derive(serde::Serialize, serde::Deserialize)]
struct ProxyOptions(Vec<String>);

impl<'de> serde::Deserialize<'de> for AppFilter {
    /// Its options compiled again; one that does not compile says which
    /// (a restart's log names it: [`crate::handover::reject`]).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<AppFilter, D::Error> {
        let ProxyOptions(options) = serde::Deserialize::deserialize(d)?;
        AppFilter::from_proxy_options(&options).map_err(crate::handover::reject)
    }
}

impl From<AppFilter> for ProxyOptions {
    fn from(filter: AppFilter) -> ProxyOptions {
        ProxyOptions(filter.options)
    }
}

#[cfg(test)]
mod tests;
