//! xdg-dbus-proxy's policy options, read as its dbus-proxy.c reads them.
//!
//! Owns: nothing. May touch: nothing.

use std::fmt;

use quickbus_wire::names::is_valid_well_known_name;

use super::rules::MessageRule;
use super::Level;
use crate::BUS_NAME;

/// Why an option cannot be used: the text AddServer's InvalidArgs error
/// carries. It names the option.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppFilterError {
    option: String,
    reason: String,
}

impl fmt::Display for AppFilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Invalid filter option \"{}\": {}",
            self.option, self.reason
        )
    }
}

impl std::error::Error for AppFilterError {}

/// What an option adds for its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    /// `--see`, `--talk`, `--own`: the level, and for TALK and OWN every
    /// call and broadcast.
    Everything,
    Call(MessageRule),
    Broadcast(MessageRule),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PolicyOption {
    /// The name without its `.*`.
    pub name: String,
    /// It ended in `.*`: the name and every name below it.
    pub subtree: bool,
    pub level: Level,
    pub rule: Rule,
}

/// `flatpak_proxy_init`'s `--talk=org.freedesktop.DBus`, which every
/// filter has.
pub(crate) fn implicit_driver_policy() -> PolicyOption {
    PolicyOption {
        name: BUS_NAME.to_owned(),
        subtree: false,
        level: Level::Talk,
        rule: Rule::Everything,
    }
}

/// One option, as dbus-proxy.c's `start_proxy` reads it.
pub(crate) fn parse_option(option: &str) -> Result<PolicyOption, AppFilterError> {
    let fail = |reason: String| AppFilterError {
        option: option.to_owned(),
        reason,
    };
    let (flag, value) = option
        .split_once('=')
        .ok_or_else(|| fail("not one of --see, --talk, --own, --call, --broadcast".into()))?;
    let level = match flag {
        "--see" => Level::See,
        "--talk" => Level::Talk,
        "--own" => Level::Own,
        "--call" | "--broadcast" => Level::Talk,
        _ => {
            return Err(fail(
                "not one of --see, --talk, --own, --call, --broadcast".into(),
            ))
        }
    };
    let (name, rule) = match flag {
        "--call" | "--broadcast" => {
            let (name, rule) = value
                .split_once('=')
                .ok_or_else(|| fail(format!("'{value}' is not a valid name + rule")))?;
            let rule = MessageRule::parse(rule);
            let rule = if flag == "--call" {
                Rule::Call(rule)
            } else {
                Rule::Broadcast(rule)
            };
            (name, rule)
        }
        _ => (value, Rule::Everything),
    };
    let (name, subtree) = match name.strip_suffix(".*") {
        Some(prefix) => (prefix, true),
        None => (name, false),
    };
    // g_dbus_is_name() and not a unique name, as for --see/--talk/--own
    // (xdg-dbus-proxy 0.1.4 does not check the NAME of --call and
    // --broadcast; such a rule could never apply, so we refuse it).
    if !is_valid_well_known_name(name) {
        return Err(fail(format!("'{name}' is not a valid dbus name")));
    }
    Ok(PolicyOption {
        name: name.to_owned(),
        subtree,
        level,
        rule,
    })
}
