//! A broadcast against the sender's send rules that name the receiver
//! (`send_destination`, `send_destination_prefix`): as in dbus-daemon,
//! each receiver is checked with its own names, so one sender's signal
//! reaches some receivers and not others. (`keep_allowed` asks the send
//! rules once for all receivers only where they cannot depend on one.)

use quickbus_wire::{MessageBuilder, MessageType};

use super::{creds, Harness};
use crate::policy::{MessageRule, NameMatch, PolicyConfig, PolicyRule, RuleKind};
use crate::*;

fn send_rule(allow: bool, spec: MessageRule) -> PolicyRule {
    PolicyRule {
        allow,
        kind: RuleKind::Send(spec),
    }
}

/// Everyone may connect, own, send and receive; then `deny`.
fn config(deny: MessageRule) -> PolicyConfig {
    PolicyConfig {
        default: vec![
            PolicyRule::allow(RuleKind::User(None)),
            PolicyRule::allow(RuleKind::Own(NameMatch::Any)),
            send_rule(true, MessageRule::default()),
            PolicyRule::allow(RuleKind::Receive(MessageRule::default())),
            send_rule(false, deny),
        ],
        ..PolicyConfig::default()
    }
}

fn peer(h: &mut Harness, pid: u32) -> ConnId {
    let id = h.bus.add_connection(creds(1000, pid), true);
    h.driver(id, "Hello", vec![]);
    id
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
