//! The bus's side of the policy: dbus-daemon's
//! `bus_context_check_security_policy` over this bus's connections and
//! names (the rules themselves are [`crate::policy`]'s).
//!
//! Owns: nothing; it is the router's glue to the policy and to `mac`.
//! May touch: the compiled policy, peers (their client policy and
//! credentials), the registry (the names a sender or receiver owns), the
//! reply table's verdict (via `Delivery`), and the MAC check.

use quickbus_wire::{Message, MessageType};

use crate::policy::{
    loginfo, CompiledPolicy, Delivery, Denial, Facts, Party, PolicyConfig, Refusal,
};
use crate::Bus;
use crate::{ConnId, Credentials, BUS_NAME};

impl Bus {
    /// Replace the policy; every connection gets its new rules at once
    /// (ReloadConfig, SIGHUP). Nobody is disconnected, even a peer the new
    /// connect rules would refuse (dbus-daemon only checks at connect).
    pub fn set_policy(&mut self, config: PolicyConfig) {
        self.policy = CompiledPolicy::new(config);
        for conn in self.conns.values_mut() {
            let policy = self.policy.client(conn.creds());
            conn.set_policy(policy);
        }
    }

    /// Whether a peer with these credentials may connect (checked at Hello).
    /// An anonymous peer has no user for the rules to judge: as in
    /// dbus-daemon (libdbus never asks the bus about it), `allow_anonymous`,
    /// without which it could not have authenticated, is the whole answer.
    pub fn allows_connection(&self, creds: &Credentials) -> bool {
        creds.anonymous || self.policy.allows_connection(creds, self.opts.own_uid)
    }

    /// Whether `to` may own `name` (RequestName).
    pub(crate) fn can_own(&self, from: ConnId, name: &str) -> bool {
        self.conns
            .get(&from)
            .is_some_and(|c| c.policy().can_own(name))
    }

    /// Who `id` is, for log lines and error texts (None: the bus).
    pub(crate) fn party(&self, id: Option<ConnId>) -> Option<Party<'_>> {
        let conn = self.conns.get(&id?)?;
        Some(Party {
            name: conn.unique().as_deref(),
            uid: conn.creds().uid,
            pid: conn.creds().pid,
            comm: conn.creds().comm.as_deref(),
            label: conn.creds().security_label.as_deref(),
        })
    }

    /// dbus-daemon's name and "loginfo" of a connection, as its error
    /// texts name a connection: `:1.7 (uid=1000 pid=42 comm="...")`.
    pub(crate) fn describe_connection(&self, id: ConnId) -> String {
        let party = self.party(Some(id));
        let name = party.as_ref().and_then(|p| p.name).unwrap_or("(inactive)");
        format!("{name} ({})", loginfo(party.as_ref(), "bus"))
    }

    /// Call `f` with the names of `id` (everything it owns or waits for),
    /// or with `literal` when the party is the bus.
    fn names_of(&self, id: Option<ConnId>, literal: Option<&str>, f: &mut dyn FnMut(&str)) {
        match id {
            Some(id) => self.registry.for_each_held(id, f),
            None => {
                if let Some(name) = literal {
                    f(name);
                }
            }
        }
    }

    /// May `msg` go from `d.from` to `d.to`? The sender's send rules, then
    /// the receiver's receive rules, as dbus-daemon checks them.
    pub(crate) fn check_policy(&self, msg: &Message, d: Delivery) -> Result<(), Denial> {
        self.check_policy_with(msg, d, &facts(msg, d))
    }

    /// [`Bus::check_policy`] with the message's `facts` for this delivery
    /// already read: a broadcast reads them once for all its receivers
    /// ([`refit_facts`]).
    pub(crate) fn check_policy_with(
        &self,
        msg: &Message,
        d: Delivery,
        facts: &Facts<'_>,
    ) -> Result<(), Denial> {
        if self.mac.is_some() {
            self.check_mac(msg, d)?;
        }
        self.check_send(msg, d, facts)?;
        self.check_receive(msg, d, facts)
    }

    /// Whether the sender's send rules let a message with `facts` through
    /// without looking at its receiver (then [`Bus::check_send`] passes
    /// for every receiver with those facts): true too when the bus sends,
    /// or when the sender is gone (as `check_send` then lets it pass).
    pub(crate) fn sender_lets_through(&self, from: Option<ConnId>, facts: &Facts<'_>) -> bool {
        from.and_then(|id| self.conns.get(&id))
            .is_none_or(|c| c.policy().send.lets_through(facts))
    }

    /// The sender's send rules.
    fn check_send(&self, msg: &Message, d: Delivery, facts: &Facts<'_>) -> Result<(), Denial> {
        if let Some(sender) = d
            .from
            .and_then(|id| self.conns.get(&id))
            .filter(|c| !c.policy().send.lets_through(facts))
        {
            let receiver_names =
                |f: &mut dyn FnMut(&str)| self.names_of(d.to, msg.destination(), f);
            match sender.policy().send.decide(facts, &receiver_names) {
                Some(rule) if rule.allow => {
                    if rule.spec.log {
                        let would = self.denial(Refusal::Send, 1, msg, d).text;
                        tracing::info!(
                            target: "security",
                            "{}",
                            would.replacen("Rejected", "Would reject", 1)
                        );
                    }
                }
                _ => {
                    let count = sender.policy().send.count_matches(facts, &receiver_names);
                    return Err(self.denial(Refusal::Send, count, msg, d));
                }
            }
        }
        Ok(())
    }

    /// The receiver's receive rules.
    pub(crate) fn check_receive(
        &self,
        msg: &Message,
        d: Delivery,
        facts: &Facts<'_>,
    ) -> Result<(), Denial> {
        // A connection before Hello only ever hears from the bus, and
        // dbus-daemon lets it hear anything.
        let Some(receiver) =
            d.to.and_then(|id| self.conns.get(&id))
                .filter(|c| c.unique().is_some())
        else {
            return Ok(());
        };
        if receiver.policy().receive.lets_through(facts) {
            return Ok(());
        }
        let sender_names = |f: &mut dyn FnMut(&str)| self.names_of(d.from, Some(BUS_NAME), f);
        match receiver.policy().receive.decide(facts, &sender_names) {
            Some(rule) if rule.allow => Ok(()),
            _ => {
                let count = receiver
                    .policy()
                    .receive
                    .count_matches(facts, &sender_names);
                Err(self.denial(Refusal::Receive, count, msg, d))
            }
        }
    }

    /// The refusal of `msg` on its way `d`, naming both parties.
    fn denial(&self, refusal: Refusal, count: usize, msg: &Message, d: Delivery) -> Denial {
        let sender = self.party(d.from);
        let recipient = self.party(d.to);
        Denial::new(
            refusal,
            count,
            msg,
            sender.as_ref(),
            recipient.as_ref(),
            d.requested_reply,
        )
    }
}

/// What the rules look at in `msg` on its way to `d.to`.
pub(crate) fn facts(msg: &Message, d: Delivery) -> Facts<'_> {
    Facts {
        msg_type: msg.msg_type(),
        path: msg.path(),
        interface: msg.interface(),
        member: msg.member(),
        error: msg.error_name(),
        is_reply: msg.reply_serial().is_some(),
        broadcast: msg.destination().is_none() && msg.msg_type() == MessageType::Signal,
        unix_fds: msg.unix_fds(),
        requested_reply: d.requested_reply,
        eavesdropping: eavesdropping(msg, d),
    }
}

/// Make `facts`, read from `msg` for another delivery of it, those of
/// `d`: only whether it is eavesdropped and whether it was asked for
/// depend on the delivery.
pub(crate) fn refit_facts(facts: &mut Facts<'_>, msg: &Message, d: Delivery) {
    facts.requested_reply = d.requested_reply;
    facts.eavesdropping = eavesdropping(msg, d);
}

/// The receiver is not the connection the message is addressed to.
fn eavesdropping(msg: &Message, d: Delivery) -> bool {
    d.to != d.addressed && msg.destination().is_some()
}
