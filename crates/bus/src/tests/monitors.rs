//! Monitors and eavesdropping rules.

use super::*;

#[test]
fn monitor_gives_up_its_names_and_sees_everything() {
    let mut h = Harness::new();
    let (watcher, _) = h.client();
    let (m, name_m) = h.client();
    let (a, name_a) = h.client();
    let (b, name_b) = h.client();
    h.add_match(watcher, "member='NameOwnerChanged'");
    h.request_name(m, "org.example.Mon", 0);
    h.take();
    let serial = h.send(m, become_monitor(&[]));
    assert_eq!(
        summary(&h.take()),
        vec![
            (m, "return".into(), vec![]),
            (m, "NameLost".into(), strings(&["org.example.Mon"])),
            (
                watcher,
                "NameOwnerChanged".into(),
                strings(&["org.example.Mon", &name_m, ""])
            ),
            (m, "NameLost".into(), strings(&[&name_m])),
            (
                watcher,
                "NameOwnerChanged".into(),
                strings(&[&name_m, &name_m, ""])
            ),
        ]
    );
    let _ = serial;
    // A call, its reply, and a driver call with its reply: all seen.
    let call = h.send(
        a,
        MessageBuilder::method_call("/", "Do").destination(name_b.clone()),
    );
    h.send(
        b,
        MessageBuilder::method_return(call).destination(name_a.clone()),
    );
    h.send(a, call_bus("GetId", vec![]));
    let got = h.take();
    assert_eq!(
        got.iter()
            .map(|(to, m)| (*to, m.msg_type()))
            .collect::<Vec<_>>(),
        vec![
            (m, MessageType::MethodCall),
            (b, MessageType::MethodCall),
            (m, MessageType::MethodReturn),
            (a, MessageType::MethodReturn),
            (m, MessageType::MethodCall),
            (m, MessageType::MethodReturn),
            (a, MessageType::MethodReturn),
        ]
    );
    assert_eq!(got[0].1.sender(), Some(name_a.as_str()));
    assert_eq!(got[5].1.sender(), Some(BUS_NAME));
    // Nobody can reach it, and it may not speak.
    let err = h.driver_error(
        a,
        MessageBuilder::method_call("/", "Do")
            .destination(name_m.clone())
            .flags(flags::NO_AUTO_START),
    );
    assert_eq!(err.0, errors::NAME_HAS_NO_OWNER);
    h.take();
    h.send(m, call_bus("GetId", vec![]));
    assert!(matches!(h.out.as_slice(), [Action::Disconnect { conn, .. }] if *conn == m));
    h.out.clear();
    h.bus.remove_connection(m, h.now, &mut h.out);
    h.send(a, MessageBuilder::signal("/", "org.example.I", "S"));
    assert!(h.take().is_empty());
}

#[test]
fn monitor_rules_filter() {
    let mut h = Harness::new();
    let (m, _) = h.client();
    let (a, _) = h.client();
    let (_, name_b) = h.client();
    // BecomeMonitor lives on the Monitoring interface only.
    let (name, _) = h.driver_error(m, call_bus("BecomeMonitor", vec![]));
    assert_eq!(name, errors::UNKNOWN_METHOD);
    let reply = h.call(m, become_monitor(&["type='signal',member='Wanted'"]));
    assert_eq!(reply.msg_type(), MessageType::MethodReturn);
    h.take();
    h.send(
        a,
        MessageBuilder::signal("/", "org.example.I", "Wanted").destination(name_b.clone()),
    );
    h.send(
        a,
        MessageBuilder::signal("/", "org.example.I", "Other").destination(name_b),
    );
    let to_monitor: Vec<String> = h
        .take()
        .into_iter()
        .filter(|(to, _)| *to == m)
        .map(|(_, msg)| msg.member().unwrap().to_owned())
        .collect();
    assert_eq!(to_monitor, vec!["Wanted".to_owned()]);
}

#[test]
fn become_monitor_errors() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let bad_flags = become_monitor(&[]).body(vec![
        Value::Array {
            elem_sig: "s".into(),
            items: vec![],
        },
        Value::Uint32(1),
    ]);
    assert_eq!(
        h.driver_error(a, bad_flags),
        (
            errors::INVALID_ARGS.into(),
            "BecomeMonitor does not support any flags yet".into()
        )
    );
    assert_eq!(
        h.driver_error(a, become_monitor(&["type='bogus'"])).0,
        errors::MATCH_RULE_INVALID
    );
    let other = h.bus.add_connection(creds(2000, 9), false);
    h.driver(other, "Hello", vec![]);
    assert_eq!(
        h.driver_error(other, become_monitor(&[])).0,
        errors::ACCESS_DENIED
    );
    // Still an ordinary connection after the failures.
    assert!(!h.bus.monitors.is_monitor(a));
    let reply = get_property(&mut h, a, BUS_INTERFACE, "Interfaces");
    assert_eq!(
        reply.body_values().unwrap(),
        vec![Value::Variant(Box::new(Value::Array {
            elem_sig: "s".into(),
            items: vec![
                s("org.freedesktop.DBus.Monitoring"),
                s("org.freedesktop.DBus.Debug.Stats"),
                s("org.freedesktop.DBus.Containers1"),
            ]
        }))]
    );
}

#[test]
fn eavesdropping_rule_sees_unicast() {
    let mut h = Harness::new();
    let (spy, _) = h.client();
    let (a, _) = h.client();
    let (b, name_b) = h.client();
    h.add_match(spy, "type='method_call',eavesdrop='true'");
    // The spy's own AddMatch call, which its new rule already sees (see
    // tests::eavesdrop).
    h.take();
    h.send(
        a,
        MessageBuilder::method_call("/", "Do").destination(name_b.clone()),
    );
    let to: Vec<ConnId> = h.take().into_iter().map(|(to, _)| to).collect();
    assert_eq!(to, vec![b, spy]);
    // Under a policy without eavesdrop="true" rules the rule is accepted
    // but hears only what is addressed to it.
    h.bus.set_policy(requested_replies_only());
    h.send(
        a,
        MessageBuilder::method_call("/", "Do").destination(name_b),
    );
    let to: Vec<ConnId> = h.take().into_iter().map(|(to, _)| to).collect();
    assert_eq!(to, vec![b]);
}

#[test]
fn monitors_see_hello_stamped_with_the_new_name() {
    let mut h = Harness::new();
    let (m, _) = h.client();
    h.call(m, become_monitor(&["member='Hello'"]));
    h.take();
    let a = h.connect(false);
    h.send(a, call_bus("Hello", vec![]));
    let got = h.take();
    assert_eq!(got[0].0, m);
    assert_eq!(got[0].1.member(), Some("Hello"));
    assert_eq!(got[0].1.sender(), h.bus.unique_name(a));
    assert_eq!(got[1].0, a);
}

#[test]
fn call_without_destination_is_unknown_method_and_not_routed() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let (spy, _) = h.client();
    let (m, _) = h.client();
    h.add_match(spy, "type='method_call'");
    h.call(m, become_monitor(&[]));
    h.take();
    for no_reply in [0, flags::NO_REPLY_EXPECTED] {
        let call = MessageBuilder::method_call("/x", "M")
            .interface("org.example.I")
            .flags(no_reply);
        let err = h.driver_error(a, call);
        assert_eq!(
            err,
            (
                errors::UNKNOWN_METHOD.into(),
                "Method \"M\" with signature \"\" on interface \"org.example.I\" doesn't exist\n"
                    .into()
            )
        );
        assert!(
            h.take().is_empty(),
            "neither the spy nor the monitor sees it"
        );
    }
    // libdbus's text for a call without interface.
    let err = h.driver_error(a, MessageBuilder::method_call("/x", "M"));
    assert!(err.1.contains("on interface \"(null)\""), "{}", err.1);
    // A driver method without destination is just as unknown.
    let err = h.driver_error(
        a,
        MessageBuilder::method_call(BUS_PATH, "GetId").interface(BUS_INTERFACE),
    );
    assert_eq!(err.0, errors::UNKNOWN_METHOD);
}

#[test]
fn peer_without_destination_is_answered_by_the_bus() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let (m, _) = h.client();
    h.call(m, become_monitor(&[]));
    h.take();
    let ping = h.call(a, peer_without_destination("Ping"));
    assert_eq!(ping.msg_type(), MessageType::MethodReturn);
    // Built by libdbus in dbus-daemon, not by the driver: no sender.
    assert_eq!(ping.sender(), None);
    assert_eq!(ping.destination(), None);
    assert!(ping.body_values().unwrap().is_empty());
    let id = h.call(a, peer_without_destination("GetMachineId"));
    assert_eq!(id.body_values().unwrap(), vec![s(&options().machine_id)]);
    // Answered even when no reply is wanted, as libdbus does.
    let quiet = h.call(
        a,
        peer_without_destination("Ping").flags(flags::NO_REPLY_EXPECTED),
    );
    assert_eq!(quiet.msg_type(), MessageType::MethodReturn);
    let other = h.driver_error(a, peer_without_destination("Other"));
    assert_eq!(
        other,
        (
            errors::UNKNOWN_METHOD.into(),
            "Unknown method invoked on org.freedesktop.DBus.Peer interface".into()
        )
    );
    // Even an error on that interface is bounced; other replies to
    // nobody are dropped.
    let bounced = h.call(
        a,
        MessageBuilder::error(7, "org.example.E").interface("org.freedesktop.DBus.Peer"),
    );
    assert_eq!(bounced.error_name(), Some(errors::UNKNOWN_METHOD));
    h.send(a, MessageBuilder::method_return(7));
    assert!(h.take().is_empty(), "the monitor sees none of it");
}

#[test]
fn bus_messages_expect_no_reply() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let reply = h.call(a, call_bus("GetId", vec![]));
    assert_eq!(
        reply.flags() & flags::NO_REPLY_EXPECTED,
        flags::NO_REPLY_EXPECTED
    );
}
