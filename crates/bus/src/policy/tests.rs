//! The policy matrix: each attribute, allow and deny, send and receive
//! side, order and context precedence, through whole Bus conversations.

use quickbus_wire::{flags, MessageBuilder};

use super::{MessageRule, NameMatch, PolicyRule, RuleKind};
use crate::errors;
use crate::tests::{call_bus, creds, open_policy as policy, s, Harness};

fn send(spec: MessageRule) -> RuleKind {
    RuleKind::Send(spec)
}

fn receive(spec: MessageRule) -> RuleKind {
    RuleKind::Receive(spec)
}

fn iface(name: &str) -> MessageRule {
    MessageRule {
        interface: Some(name.into()),
        ..MessageRule::default()
    }
}

/// Whether a signal on `interface` from a to b arrives.
fn unicast_arrives(h: &mut Harness, interface: &str) -> Result<(), String> {
    let (a, _) = h.client();
    let (b, name_b) = h.client();
    h.send(
        a,
        MessageBuilder::signal("/p", interface, "Sig").destination(name_b),
    );
    let got = h.take();
    if got.iter().any(|(to, _)| *to == b) {
        return Ok(());
    }
    let (to, err) = got.first().expect("an error back");
    assert_eq!(*to, a);
    assert_eq!(err.error_name(), Some(errors::ACCESS_DENIED));
    match err.body_values().unwrap().first() {
        Some(quickbus_wire::Value::String(text)) => Err(text.clone()),
        other => panic!("no text: {other:?}"),
    }
}

#[test]
fn send_and_receive_denies_by_interface() {
    let mut h = Harness::new();
    h.bus.set_policy(policy(vec![
        PolicyRule::deny(send(iface("com.example.CannotSend"))),
        PolicyRule::deny(receive(iface("com.example.CannotReceive"))),
    ]));
    assert!(unicast_arrives(&mut h, "com.example.Fine").is_ok());
    let err = unicast_arrives(&mut h, "com.example.CannotSend").unwrap_err();
    assert!(
        err.starts_with("Rejected send message, 2 matched rules; type=\"signal\""),
        "{err}"
    );
    assert!(err.contains("interface=\"com.example.CannotSend\" member=\"Sig\" error name=\"(unset)\" requested_reply=\"0\""), "{err}");
    let err = unicast_arrives(&mut h, "com.example.CannotReceive").unwrap_err();
    assert!(err.starts_with("Rejected receive message"), "{err}");
}

#[test]
fn last_matching_rule_wins_and_mandatory_comes_last() {
    let mut h = Harness::new();
    let mut config = policy(vec![
        PolicyRule::deny(send(iface("a.B"))),
        PolicyRule::allow(send(iface("a.B"))),
        PolicyRule::allow(send(iface("a.C"))),
    ]);
    config.mandatory = vec![PolicyRule::deny(send(iface("a.C")))];
    h.bus.set_policy(config);
    assert!(unicast_arrives(&mut h, "a.B").is_ok());
    assert!(unicast_arrives(&mut h, "a.C").is_err());
}

#[test]
fn user_and_group_policies_apply_to_their_members_only() {
    let mut h = Harness::new();
    let mut config = policy(vec![PolicyRule::deny(RuleKind::Own(NameMatch::Prefix(
        "org.example".into(),
    )))]);
    config.by_user.insert(
        1000,
        vec![PolicyRule::allow(RuleKind::Own(NameMatch::Exact(
            "org.example.Mine".into(),
        )))],
    );
    config.by_group.insert(
        27,
        vec![PolicyRule::allow(RuleKind::Own(NameMatch::Exact(
            "org.example.Group".into(),
        )))],
    );
    h.bus.set_policy(config);
    let (me, _) = h.client(); // uid 1000, groups 1000 and 27
    let request = |name: &str| {
        call_bus(
            "RequestName",
            vec![s(name), quickbus_wire::Value::Uint32(0)],
        )
    };
    h.call(me, request("org.example.Mine"));
    h.call(me, request("org.example.Group"));
    let err = h.driver_error(me, request("org.example.Other"));
    assert_eq!(err.0, errors::ACCESS_DENIED);
    assert!(err.1.contains(
        "is not allowed to own the service \"org.example.Other\" due to security policies"
    ));
    // Another user in neither scope.
    let other = h.bus.add_connection(creds(2000, 7), false);
    h.driver(other, "Hello", vec![]);
    let err = h.driver_error(other, request("org.example.Mine"));
    assert_eq!(err.0, errors::ACCESS_DENIED);
    // Names outside the denied prefix (word-wise) stay allowed.
    h.call(other, request("org.examples.Free"));
}

#[test]
fn connect_rules_decide_at_hello() {
    let mut h = Harness::new();
    let mut config = policy(vec![PolicyRule::deny(RuleKind::User(Some(2000)))]);
    config
        .default
        .push(PolicyRule::allow(RuleKind::Group(Some(3000))));
    h.bus.set_policy(config);
    let refused = h.bus.add_connection(creds(2000, 7), false);
    h.send(refused, call_bus("Hello", vec![]));
    assert!(matches!(
        h.out.pop(),
        Some(crate::Action::Disconnect { conn, .. }) if conn == refused
    ));
    let mut in_group = creds(2000, 8);
    in_group.groups = vec![2000, 3000];
    let allowed = h.bus.add_connection(in_group, false);
    h.driver(allowed, "Hello", vec![]);
}

#[test]
fn connect_rules_do_not_judge_anonymous_peers() {
    // A tcp peer has no uid (u32::MAX) and authenticated with ANONYMOUS,
    // which only allow_anonymous permits: the user rules are not asked.
    let mut h = Harness::new();
    h.bus
        .set_policy(policy(vec![PolicyRule::deny(RuleKind::User(None))]));
    let named = h.bus.add_connection(creds(2000, 7), false);
    h.send(named, call_bus("Hello", vec![]));
    assert!(matches!(
        h.out.pop(),
        Some(crate::Action::Disconnect { conn, .. }) if conn == named
    ));
    let mut anonymous = creds(u32::MAX, 8);
    anonymous.anonymous = true;
    let anonymous = h.bus.add_connection(anonymous, false);
    h.driver(anonymous, "Hello", vec![]);
}

#[test]
fn connecting_asks_the_database_and_group_policies_the_kernel_first() {
    let mut h = Harness::new();
    let mut config = policy(vec![PolicyRule::deny(RuleKind::Group(Some(3000)))]);
    config.by_group.insert(
        4000,
        vec![PolicyRule::deny(RuleKind::Own(NameMatch::Exact(
            "org.example.NotForGroup".into(),
        )))],
    );
    h.bus.set_policy(config);
    let request = |name: &str| {
        call_bus(
            "RequestName",
            vec![s(name), quickbus_wire::Value::Uint32(0)],
        )
    };
    // The socket says group 3000, the database does not: allowed to
    // connect (dbus-daemon's bus_policy_allow_unix_user asks the database).
    let mut listed = creds(2000, 7);
    listed.groups = vec![2000, 3000];
    listed.user_groups = crate::UserGroups::Known(vec![2000, 4000]);
    let allowed = h.bus.add_connection(listed, false);
    h.driver(allowed, "Hello", vec![]);
    // Group policies follow the kernel's groups (SO_PEERGROUPS): not in
    // 4000 by the socket, so the 4000 rule does not apply.
    h.driver(
        allowed,
        "RequestName",
        vec![
            s("org.example.NotForGroup"),
            quickbus_wire::Value::Uint32(0),
        ],
    );
    // Without groups from the kernel, the database's count.
    let mut no_kernel_groups = creds(2003, 10);
    no_kernel_groups.groups = Vec::new();
    no_kernel_groups.user_groups = crate::UserGroups::Known(vec![2003, 4000]);
    let by_database = h.bus.add_connection(no_kernel_groups, false);
    h.driver(by_database, "Hello", vec![]);
    let err = h.driver_error(by_database, request("org.example.NotForGroup"));
    assert_eq!(err.0, errors::ACCESS_DENIED);
    // The database says 3000 whatever the socket says: refused.
    let mut member = creds(2001, 8);
    member.user_groups = crate::UserGroups::Known(vec![2001, 3000]);
    let refused = h.bus.add_connection(member, false);
    h.send(refused, call_bus("Hello", vec![]));
    assert!(matches!(
        h.out.pop(),
        Some(crate::Action::Disconnect { conn, .. }) if conn == refused
    ));
    // A uid the database does not know is refused even by allow-all rules.
    let mut stranger = creds(2002, 9);
    stranger.user_groups = crate::UserGroups::UnknownUser;
    let refused = h.bus.add_connection(stranger, false);
    h.send(refused, call_bus("Hello", vec![]));
    assert!(matches!(
        h.out.pop(),
        Some(crate::Action::Disconnect { conn, .. }) if conn == refused
    ));
}

#[test]
fn destination_rules_match_any_name_the_receiver_holds() {
    let mut h = Harness::new();
    let mut base = policy(vec![]);
    base.default
        .retain(|r| !matches!(r.kind, RuleKind::Send(_)));
    base.default.push(PolicyRule::allow(send(MessageRule {
        name: NameMatch::Prefix("org.example.svc".into()),
        ..MessageRule::default()
    })));
    base.default.push(PolicyRule::allow(send(MessageRule {
        name: NameMatch::Exact(crate::BUS_NAME.into()),
        ..MessageRule::default()
    })));
    h.bus.set_policy(base);
    let (a, _) = h.client();
    let (b, name_b) = h.client();
    // b has no name under the prefix yet: refused.
    h.send(
        a,
        MessageBuilder::method_call("/", "Do").destination(name_b.clone()),
    );
    assert_eq!(h.take()[0].1.error_name(), Some(errors::ACCESS_DENIED));
    h.call(
        b,
        call_bus(
            "RequestName",
            vec![s("org.example.svc.One"), quickbus_wire::Value::Uint32(0)],
        ),
    );
    h.take();
    // Now by its unique name too.
    h.send(
        a,
        MessageBuilder::method_call("/", "Do").destination(name_b),
    );
    assert_eq!(h.take()[0].0, b);
}

#[test]
fn fd_counts_and_broadcast_attributes() {
    let mut h = Harness::new();
    h.bus.set_policy(policy(vec![
        PolicyRule::deny(send(MessageRule {
            path: Some("/max0".into()),
            max_fds: 0,
            ..MessageRule::default()
        })),
        PolicyRule::deny(send(MessageRule {
            interface: Some("a.NoBroadcast".into()),
            broadcast: Some(true),
            ..MessageRule::default()
        })),
    ]));
    let (a, _) = h.client();
    let (b, name_b) = h.client();
    // max_fds=0 matches a message without fds: denied.
    h.send(
        a,
        MessageBuilder::method_call("/max0", "Do").destination(name_b.clone()),
    );
    assert_eq!(h.take()[0].1.error_name(), Some(errors::ACCESS_DENIED));
    h.add_match(b, "type='signal'");
    h.send(a, MessageBuilder::signal("/", "a.NoBroadcast", "S"));
    assert!(h.take().is_empty(), "the broadcast is silently withheld");
    h.send(
        a,
        MessageBuilder::signal("/", "a.NoBroadcast", "S")
            .destination(name_b)
            .flags(flags::NO_REPLY_EXPECTED),
    );
    assert_eq!(h.take()[0].0, b, "unicast is not a broadcast");
}

/// dbus-daemon's `bus_client_policy_optimize`: a send or receive rule with
/// no type, path, interface, member, error or name drops every rule of its
/// side before it, even when its other conditions (here `eavesdrop`,
/// `send_broadcast`) keep it from matching what those rules matched.
#[test]
fn a_rule_without_keys_drops_the_rules_before_it() {
    // What a's unicast signal to b brings: (did b get it, a's error text).
    let outcome = |extra: MessageRule, side: fn(MessageRule) -> RuleKind| {
        let mut h = Harness::new();
        // Connected first: under these policies not even Hello's reply
        // would arrive.
        let (a, _) = h.client();
        let (b, name_b) = h.client();
        h.bus
            .set_policy(policy(vec![PolicyRule::deny(side(extra))]));
        h.send(
            a,
            MessageBuilder::signal("/p", "com.example.Any", "Sig").destination(name_b),
        );
        let got = h.take();
        let text = got.iter().find(|(to, _)| *to == a).map(|(_, err)| {
            match err.body_values().unwrap().first() {
                Some(quickbus_wire::Value::String(text)) => text.clone(),
                other => panic!("no text: {other:?}"),
            }
        });
        (got.iter().any(|(to, _)| *to == b), text)
    };
    // Only the eavesdrop-only deny is left of the receive rules: nothing
    // arrives anywhere, not even the AccessDenied error to the sender.
    let eavesdrop_only = MessageRule {
        eavesdrop: true,
        ..MessageRule::default()
    };
    assert_eq!(outcome(eavesdrop_only, receive), (false, None));
    let broadcasts_only = MessageRule {
        broadcast: Some(true),
        ..MessageRule::default()
    };
    let (arrived, err) = outcome(broadcasts_only, send);
    assert!(!arrived);
    let err = err.expect("refused");
    assert!(
        err.starts_with("Rejected send message, 0 matched rules; "),
        "{err}"
    );
    // A rule with a key drops nothing.
    let keyed = MessageRule {
        eavesdrop: true,
        ..iface("com.example.Other")
    };
    assert_eq!(outcome(keyed, receive), (true, None));
}

#[test]
fn every_receiver_lets_through_only_what_each_client_policy_built_does() {
    let tick = super::Facts {
        msg_type: quickbus_wire::MessageType::Signal,
        path: Some("/"),
        interface: Some("org.example.Test"),
        member: Some("Tick"),
        error: None,
        is_reply: false,
        broadcast: true,
        unix_fds: 0,
        requested_reply: false,
        eavesdropping: false,
    };
    let strict = PolicyRule {
        allow: false,
        kind: receive(iface("org.example.Other")),
    };
    let mut config = policy(vec![]);
    config.by_user.insert(2000, vec![strict]);
    let mut compiled = super::CompiledPolicy::new(config.clone());
    // No connection yet: nothing is known of their rules.
    assert!(!compiled.every_receiver_lets_through(&tick));
    compiled.client(&creds(1000, 1));
    assert!(compiled.every_receiver_lets_through(&tick));
    // A user whose rules look at what it receives (its deny is not about
    // this message, but only a search would say so).
    compiled.client(&creds(2000, 2));
    assert!(!compiled.every_receiver_lets_through(&tick));
    // Another connection of the open user changes nothing.
    compiled.client(&creds(1000, 3));
    assert!(!compiled.every_receiver_lets_through(&tick));
    // A policy compiled anew (a reload) starts from nothing again.
    let mut reloaded = super::CompiledPolicy::new(config);
    reloaded.client(&creds(1000, 1));
    assert!(reloaded.every_receiver_lets_through(&tick));
}
