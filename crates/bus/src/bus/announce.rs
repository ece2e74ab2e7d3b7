//! Telling connections about names: NameOwnerChanged to whoever listens,
//! NameAcquired and NameLost to the owner, and a new monitor's names let
//! go of.
//!
//! Owns: nothing. May touch: peers (unique names), subscriptions and
//! monitors (who hears a signal), the registry (a new monitor's names),
//! the policy check, and `outgoing`.

use quickbus_wire::{MessageBuilder, Value};

use crate::match_rule::MatchRule;
use crate::registry::NameEvent;
use crate::{Action, Bus, ConnId, BUS_INTERFACE, BUS_PATH};

use super::Routing;

impl Bus {
    /// Announce name changes in order. `gone`: a departing connection that
    /// must not receive anything.
    pub(crate) fn emit(
        &mut self,
        events: &[NameEvent],
        gone: Option<ConnId>,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        for event in events {
            match event {
                NameEvent::OwnerChanged { name, old, new } => {
                    let unique = |id: &Option<ConnId>| {
                        id.and_then(|id| self.unique_name(id))
                            .unwrap_or("")
                            .to_owned()
                    };
                    let body = vec![
                        Value::String(name.clone()),
                        Value::String(unique(old)),
                        Value::String(unique(new)),
                    ];
                    let builder =
                        MessageBuilder::signal(BUS_PATH, BUS_INTERFACE, "NameOwnerChanged")
                            .body(body);
                    let Some((out_msg, msg)) = self.build(builder) else {
                        continue;
                    };
                    let (watchers, mut recipients) = self.with_input(&msg, None, None, |input| {
                        let mut to = Vec::new();
                        self.subs.recipients(input, None, &mut to);
                        (self.monitor_recipients(input), to)
                    });
                    recipients.retain(|&to| Some(to) != gone);
                    self.filter_name_owner_changed(name, (*old, *new), gone, &mut recipients);
                    self.keep_allowed(None, None, &msg, &mut recipients, routing, out);
                    for to in watchers.into_iter().chain(recipients) {
                        if Some(to) != gone {
                            self.deliver(to, &out_msg, routing, out);
                        }
                    }
                }
                NameEvent::Lost { conn, name } | NameEvent::Acquired { conn, name } => {
                    let member = if matches!(event, NameEvent::Lost { .. }) {
                        "NameLost"
                    } else {
                        "NameAcquired"
                    };
                    let builder = MessageBuilder::signal(BUS_PATH, BUS_INTERFACE, member)
                        .body(vec![Value::String(name.clone())]);
                    if Some(*conn) == gone {
                        // dbus-daemon sends a departing connection its
                        // NameLost too: only monitors still hear it.
                        self.show_monitors(*conn, builder, routing, out);
                    } else {
                        self.send_to(*conn, builder, routing, out);
                    }
                }
            }
        }
    }

    /// BecomeMonitor succeeded and its reply is out: the connection drops
    /// its match rules and names (hearing NameLost for each, as with
    /// dbus-daemon) and from now on only watches.
    pub(crate) fn become_monitor(
        &mut self,
        id: ConnId,
        rules: Vec<MatchRule>,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        self.subs.remove_connection(id);
        let mut events = Vec::new();
        self.registry.remove_connection(id, &mut events);
        self.emit(&events, None, routing, out);
        self.monitors.add(id, rules);
    }
}
