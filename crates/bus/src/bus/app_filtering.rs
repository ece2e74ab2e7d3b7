//! The router's side of per-app filtering ([`crate::app_filter`]): what a
//! filtered connection may send, what it receives, and what it learns
//! about its peers, decided as flatpak-proxy.c decides it for a client of
//! xdg-dbus-proxy with `--filter`.
//!
//! Every entry point is behind one check of whether anybody is filtered,
//! so an unfiltered bus pays a branch.
//!
//! Owns: nothing; the views are the app filter's. May touch: the views,
//! peers and the registry (who owns what), the reply table (whether a
//! reply answers a call), and `outgoing` (the proxy's made-up answers).

use std::sync::Arc;

use quickbus_wire::{flags, Message, MessageType, StrKind, Value};

use crate::app_filter::rules::MessageFacts;
use crate::app_filter::view::AppView;
use crate::app_filter::{AppFilter, Level};
use crate::errors::{self, BusError};
use crate::match_rule::MatchRule;
use crate::{Action, Bus, ConnId, BUS_INTERFACE, BUS_NAME};

use super::Routing;

const INTROSPECTABLE: &str = "org.freedesktop.DBus.Introspectable";

/// What becomes of a message a filtered connection sends
/// (flatpak-proxy.c's `BusHandler`, resolved).
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Pass,
    /// The destination does not exist for the app.
    Hide,
    Deny,
    /// The proxy's made-up `NameHasOwner` answer: false.
    NoOwner,
    /// The proxy's made-up `GetNameOwner` error.
    NameHasNoOwner,
}

/// A call that wants an answer (`client_message_generates_reply`).
fn expects_reply(msg: &Message) -> bool {
    msg.msg_type() == MessageType::MethodCall && msg.flags() & flags::NO_REPLY_EXPECTED == 0
}

/// The first argument, if it is a string (as `validate_arg0_name` reads
/// it).
fn arg0(msg: &Message) -> Option<&str> {
    match msg.string_args(1).into_iter().next().flatten() {
        Some(arg) if arg.kind == StrKind::String => Some(arg.value),
        _ => None,
    }
}

/// Whether a match rule sets `eavesdrop`: xdg-dbus-proxy 0.1.7's test
/// (`eavesdrop`, blanks, `=`; Debian's 0.1.4 has it too, CVE-2026-34080),
/// and whatever our own parser would read as eavesdropping.
fn mentions_eavesdrop(rule: &str) -> bool {
    let textual = rule.match_indices("eavesdrop").any(|(at, key)| {
        rule[at + key.len()..]
            .trim_start_matches([' ', '\t', '\n', '\r'])
            .starts_with('=')
    });
    textual || MatchRule::parse(rule).is_ok_and(|r| r.is_eavesdrop())
}

/// The level a driver method needs of the name in its first argument.
fn needs_of_arg0(member: &str) -> Option<Level> {
    Some(match member {
        "RequestName" | "ReleaseName" | "ListQueuedOwners" => Level::Own,
        "StartServiceByName" => Level::Talk,
        "GetConnectionUnixProcessID"
        | "GetConnectionCredentials"
        | "GetAdtAuditSessionData"
        | "GetConnectionSELinuxSecurityContext"
        | "GetConnectionUnixUser" => Level::See,
        _ => return None,
    })
}

impl Bus {
    /// Filter every later message from and to `conn` with `filter`, as
    /// xdg-dbus-proxy `--filter` would. Call it right after
    /// [`Bus::add_connection_as`], before the connection's Hello. The
    /// names already owned count as if the app had watched them change
    /// hands (the proxy asks for their owners when it starts).
    pub fn set_app_filter(&mut self, conn: ConnId, filter: Arc<AppFilter>) {
        let mut view = AppView::new(filter, conn);
        for name in self.registry.names().filter(|n| !n.starts_with(':')) {
            if let Some(owner) = self.registry.owner(name) {
                view.owner_gained(owner, name);
            }
        }
        self.app_views.insert(conn, view);
    }

    /// The level `viewer`'s filter gives the bus name `name`.
    fn level_for(&self, view: &AppView, name: &str) -> Level {
        if name.starts_with(':') {
            self.registry
                .owner(name)
                .map_or(Level::None, |peer| view.peer_level(peer))
        } else {
            view.filter().level_of_name(name)
        }
    }

    /// Whether the filtered connection `viewer` may see `name` (unfiltered
    /// connections see everything): ListNames and ListActivatableNames
    /// answer with these only.
    pub(crate) fn app_may_see(&self, viewer: ConnId, name: &str) -> bool {
        self.app_views
            .get(viewer)
            .is_none_or(|view| self.level_for(view, name) >= Level::See)
    }

    /// A message from the filtered connection `from`: whether it goes on
    /// (true), or what the app is told instead (the proxy's made-up
    /// answers, only to calls that want one).
    pub(super) fn filter_outgoing(
        &mut self,
        from: ConnId,
        msg: &Message,
        routing: Routing,
        out: &mut Vec<Action>,
    ) -> bool {
        let Some(view) = self.app_views.get(from) else {
            return true;
        };
        let verdict = self.judge_outgoing(from, view, msg);
        if verdict == Verdict::Pass {
            return true;
        }
        tracing::debug!("app filter: {verdict:?} for a message from {from:?}");
        // The proxy's errors carry their own name as text.
        let error = |name: &'static str| BusError::new(name, name);
        let name = match verdict {
            Verdict::Pass => unreachable!(),
            Verdict::NoOwner => {
                let body = vec![Value::Bool(false)];
                self.reply(from, msg, body, Vec::new(), routing, out);
                return false;
            }
            _ if !expects_reply(msg) => return false,
            Verdict::Hide => {
                let dest = msg.destination().unwrap_or("");
                if dest.starts_with(':') || msg.flags() & flags::NO_AUTO_START != 0 {
                    errors::NAME_HAS_NO_OWNER
                } else {
                    errors::SERVICE_UNKNOWN
                }
            }
            Verdict::Deny => errors::ACCESS_DENIED,
            Verdict::NameHasNoOwner => errors::NAME_HAS_NO_OWNER,
        };
        self.send_error(from, msg.serial(), error(name), routing, out);
        false
    }

    /// flatpak-proxy.c's `get_dbus_method_handler` and what
    /// `got_buffer_from_client` does with its answer.
    fn judge_outgoing(&self, from: ConnId, view: &AppView, msg: &Message) -> Verdict {
        if let Some(serial) = msg.reply_serial() {
            // Only an answer to a call the app received, once (the reply
            // table forgets it when the answer is routed).
            let caller = msg.destination().and_then(|d| self.registry.owner(d));
            let pending = caller.is_some_and(|c| self.replies.is_pending(c, serial, from));
            return if pending {
                Verdict::Pass
            } else {
                Verdict::Deny
            };
        }
        let Some(dest) = msg.destination() else {
            // No destination: the bus itself, TALK.
            return Verdict::Pass;
        };
        let facts = MessageFacts::of(msg);
        // A well-known name's level and call rules come from one walk of
        // its grants; a unique name's from its cached level.
        let (level, allowed) = if dest.starts_with(':') {
            let peer = self.registry.owner(dest);
            let level = peer.map_or(Level::None, |peer| view.peer_level(peer));
            let allowed = || peer.is_some_and(|peer| view.call_allowed_to_peer(peer, &facts));
            (level, level >= Level::Talk && allowed())
        } else {
            view.filter().level_and_call(dest, &facts)
        };
        if level < Level::See {
            return Verdict::Hide;
        }
        if level < Level::Talk {
            return Verdict::Deny;
        }
        if dest != BUS_NAME {
            return if allowed {
                Verdict::Pass
            } else {
                Verdict::Deny
            };
        }
        if msg.msg_type() != MessageType::MethodCall {
            return Verdict::Deny;
        }
        match msg.interface() {
            Some(INTROSPECTABLE) => Verdict::Pass,
            Some(BUS_INTERFACE) => self.judge_driver_call(view, msg),
            _ => Verdict::Deny,
        }
    }

    /// A call to org.freedesktop.DBus's own interface.
    fn judge_driver_call(&self, view: &AppView, msg: &Message) -> Verdict {
        let Some(member) = msg.member() else {
            return Verdict::Deny;
        };
        let name_level = || arg0(msg).map_or(Level::None, |name| self.level_for(view, name));
        match member {
            "AddMatch" => match arg0(msg) {
                Some(rule) if mentions_eavesdrop(rule) => Verdict::Deny,
                _ => Verdict::Pass,
            },
            "Hello" | "RemoveMatch" | "GetId" | "ListNames" | "ListActivatableNames" => {
                Verdict::Pass
            }
            "NameHasOwner" if name_level() < Level::See => Verdict::NoOwner,
            "GetNameOwner" if name_level() < Level::See => Verdict::NameHasNoOwner,
            "NameHasOwner" | "GetNameOwner" => Verdict::Pass,
            _ => match needs_of_arg0(member) {
                Some(needed) => {
                    let level = name_level();
                    if level >= needed {
                        Verdict::Pass
                    } else if level < Level::See {
                        Verdict::Hide
                    } else {
                        Verdict::Deny
                    }
                }
                // UpdateActivationEnvironment, ReloadConfig, and any
                // method the proxy does not know.
                None => Verdict::Deny,
            },
        }
    }

    /// A message from `from` addressed to the filtered connection `to`:
    /// a method return or error only if it answers a call `to` made
    /// (`requested_reply`), anything else passes. The sender becomes
    /// visible to `to` (SEE), so it can track its caller's lifetime.
    pub(super) fn filter_incoming_unicast(
        &mut self,
        from: ConnId,
        to: ConnId,
        msg: &Message,
        requested_reply: bool,
    ) -> bool {
        let Some(view) = self.app_views.get_mut(to) else {
            return true;
        };
        let is_reply = matches!(
            msg.msg_type(),
            MessageType::MethodReturn | MessageType::Error
        );
        if is_reply && !requested_reply {
            return false;
        }
        view.grant(from, Level::See);
        true
    }

    /// Leave out of `recipients` the filtered connections that may not
    /// hear this broadcast from the peer `from`: the sender's level must
    /// be OWN, or a broadcast rule (or TALK) must match. The bus's own
    /// broadcasts are not judged here: the driver is TALK to every app
    /// (flatpak-proxy.c), and NameOwnerChanged is filtered where it is
    /// announced.
    pub(super) fn filter_broadcast(
        &self,
        from: ConnId,
        msg: &Message,
        recipients: &mut Vec<ConnId>,
    ) {
        if self.app_views.is_empty() {
            return;
        }
        let facts = MessageFacts::of(msg);
        recipients.retain(|&to| {
            self.app_views
                .get(to)
                .is_none_or(|view| view.broadcast_allowed_from_peer(from, &facts))
        });
    }

    /// NameOwnerChanged for `name`, from `old` to `new`: each filtered
    /// connection notes the new owner of a well-known name it may see,
    /// hears the signal only if it may see `name` (for a unique name: the
    /// connection it names, which may be leaving), and hears it for a
    /// well-known name it may see even without a match rule (the proxy
    /// subscribes to those for the app, and passes on what it hears).
    pub(super) fn filter_name_owner_changed(
        &mut self,
        name: &str,
        (old, new): (Option<ConnId>, Option<ConnId>),
        gone: Option<ConnId>,
        recipients: &mut Vec<ConnId>,
    ) {
        if self.app_views.is_empty() {
            return;
        }
        if name.starts_with(':') {
            let Some(subject) = new.or(old) else {
                return;
            };
            recipients.retain(|&to| {
                self.app_views
                    .get(to)
                    .is_none_or(|view| view.peer_level(subject) >= Level::See)
            });
            return;
        }
        if let Some(new) = new {
            for (_, view) in self.app_views.iter_mut() {
                view.owner_gained(new, name);
            }
        }
        recipients.retain(|&to| self.app_may_see(to, name));
        let watching: Vec<ConnId> = self
            .app_views
            .iter()
            .filter(|(conn, view)| {
                Some(**conn) != gone
                    && view.filter().level_of_name(name) >= Level::See
                    && self.conns.get(conn).is_some_and(|c| c.unique().is_some())
            })
            .map(|(conn, _)| *conn)
            .collect();
        if watching.is_empty() {
            return;
        }
        let already: crate::FastSet<ConnId> = recipients.iter().copied().collect();
        recipients.extend(watching.into_iter().filter(|c| !already.contains(c)));
    }
}
