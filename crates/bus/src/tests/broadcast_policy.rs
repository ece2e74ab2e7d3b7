//! A broadcast against rules that differ by receiver: the sender's send
//! rules that name the receiver (`send_destination`,
//! `send_destination_prefix`), and one user's receive rules. As in
//! dbus-daemon, each receiver is checked on its own, so one sender's
//! signal reaches some receivers and not others. (`keep_allowed` asks the
//! send rules once for all receivers only where they cannot depend on
//! one, and skips the receive rules only where every connection's let
//! the message through.)

use quickbus_wire::{MessageBuilder, MessageType};

use super::{creds, open_policy, send_rule, Harness};
use crate::policy::{MessageRule, NameMatch, PolicyConfig, PolicyRule, RuleKind};
use crate::*;

/// Everyone may connect, own, send and receive; then `deny`.
fn config(deny: MessageRule) -> PolicyConfig {
    open_policy(vec![send_rule(false, deny)])
}

fn peer(h: &mut Harness, pid: u32) -> ConnId {
    peer_of(h, 1000, pid)
}

fn peer_of(h: &mut Harness, uid: u32, pid: u32) -> ConnId {
    let id = h.bus.add_connection(creds(uid, pid), true);
    h.driver(id, "Hello", vec![]);
    id
}

/// Everyone may connect, own, send and receive; but user `uid` may not
/// receive `deny`, when given.
fn config_denying_receive(uid: u32, deny: Option<MessageRule>) -> PolicyConfig {
    let mut config = open_policy(vec![]);
    if let Some(deny) = deny {
        let rule = PolicyRule {
            allow: false,
            kind: RuleKind::Receive(deny),
        };
        config.by_user.insert(uid, vec![rule]);
    }
    config
}

#[test]
fn a_send_rule_naming_a_receiver_keeps_a_broadcast_from_that_receiver_only() {
    let to_secret = |name: NameMatch| MessageRule {
        msg_type: Some(MessageType::Signal),
        name,
        ..MessageRule::default()
    };
    for deny in [
        to_secret(NameMatch::Exact("com.example.Secret".into())),
        to_secret(NameMatch::Prefix("com.example".into())),
    ] {
        let mut h = Harness::new();
        h.bus.set_policy(config(deny.clone()));
        let sender = peer(&mut h, 1);
        let secret = peer(&mut h, 2);
        let open = peer(&mut h, 3);
        assert_eq!(h.request_name(secret, "com.example.Secret", 0), 1);
        for receiver in [secret, open] {
            h.add_match(receiver, "type='signal',member='Tick'");
        }
        h.take();
        let tick = || MessageBuilder::signal("/", "org.example.Test", "Tick");
        h.send(sender, tick());
        let got: Vec<ConnId> = h.take().into_iter().map(|(to, _)| to).collect();
        assert_eq!(got, vec![open], "{deny:?}");
        // Without the name, the rule no longer names it.
        h.driver(
            secret,
            "ReleaseName",
            vec![quickbus_wire::Value::String("com.example.Secret".into())],
        );
        h.take();
        h.send(sender, tick());
        let mut got: Vec<ConnId> = h.take().into_iter().map(|(to, _)| to).collect();
        got.sort();
        assert_eq!(got, vec![secret, open], "{deny:?}");
    }
}

#[test]
fn one_users_receive_rule_keeps_a_broadcast_from_that_users_connections_only() {
    let tick = || MessageBuilder::signal("/", "org.example.Test", "Tick");
    let no_ticks = MessageRule {
        msg_type: Some(MessageType::Signal),
        member: Some("Tick".into()),
        ..MessageRule::default()
    };
    // The strict user's connection comes first, then last (its rules are
    // built first, then last): they count wherever they come.
    for strict_first in [true, false] {
        let mut h = Harness::new();
        h.bus
            .set_policy(config_denying_receive(2000, Some(no_ticks.clone())));
        let (sender, strict, open) = if strict_first {
            let strict = peer_of(&mut h, 2000, 2);
            (peer(&mut h, 1), strict, peer(&mut h, 3))
        } else {
            let (sender, open) = (peer(&mut h, 1), peer(&mut h, 3));
            (sender, peer_of(&mut h, 2000, 2), open)
        };
        for receiver in [strict, open] {
            h.add_match(receiver, "type='signal',member='Tick'");
        }
        h.take();
        let receivers = |h: &mut Harness| {
            h.send(sender, tick());
            let mut got: Vec<ConnId> = h.take().into_iter().map(|(to, _)| to).collect();
            got.sort();
            got
        };
        assert_eq!(
            receivers(&mut h),
            vec![open],
            "strict first: {strict_first}"
        );
        // A reload without the rule lets it hear them; one with the rule
        // again does not.
        h.bus.set_policy(config_denying_receive(2000, None));
        let mut both = vec![strict, open];
        both.sort();
        assert_eq!(receivers(&mut h), both);
        h.bus
            .set_policy(config_denying_receive(2000, Some(no_ticks.clone())));
        assert_eq!(
            receivers(&mut h),
            vec![open],
            "strict first: {strict_first}"
        );
    }
}
