//! Routing: unicast, replies, broadcasts to match rules.

use super::*;

#[test]
fn unicast_call_and_reply_travel_stamped() {
    let mut h = Harness::new();
    let (a, name_a) = h.client();
    let (b, name_b) = h.client();
    h.request_name(b, "org.example.Svc", 0);
    h.take();
    let serial = h.send(
        a,
        MessageBuilder::method_call("/obj", "Do")
            .interface("org.example.I")
            .destination("org.example.Svc")
            .sender(":1.999")
            .body(vec![s("payload")]),
    );
    let got = h.take();
    assert_eq!(got.len(), 1);
    let (to, call) = &got[0];
    assert_eq!(*to, b);
    assert_eq!(
        call.sender(),
        Some(name_a.as_str()),
        "sender is stamped, not trusted"
    );
    assert_eq!(call.serial(), serial);
    assert_eq!(call.body_values().unwrap(), vec![s("payload")]);
    // The reply is expected: it passes, once.
    let reply = MessageBuilder::method_return(serial)
        .destination(name_a.clone())
        .body(vec![s("done")]);
    h.send(b, reply);
    let got = h.take();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, a);
    assert_eq!(got[0].1.sender(), Some(name_b.as_str()));
    assert_eq!(got[0].1.reply_serial(), Some(serial));
    assert!(
        h.bus.replies.is_empty(),
        "the answered call is no longer pending"
    );
}

#[test]
fn unrequested_replies_follow_the_bus_policy() {
    // System bus policy: only answers to pending calls pass.
    let mut h = Harness::new();
    h.bus.set_policy(requested_replies_only());
    let (a, name_a) = h.client();
    let (b, name_b) = h.client();
    let (c, _) = h.client();
    let serial = h.send(
        a,
        MessageBuilder::method_call("/", "Do").destination(name_b),
    );
    h.take();
    // c answers a call made to b: refused.
    h.send(
        c,
        MessageBuilder::error(serial, "org.example.Error").destination(name_a.clone()),
    );
    assert_refused(&h.take(), c);
    // b answers a serial never sent: refused.
    h.send(
        b,
        MessageBuilder::method_return(serial + 100).destination(name_a.clone()),
    );
    assert_refused(&h.take(), b);
    // The real answer, an error, still passes; a second one does not.
    let answer = MessageBuilder::error(serial, "org.example.Error").destination(name_a);
    h.send(b, answer.clone());
    let got = h.take();
    assert_eq!(summary(&got), vec![(a, "org.example.Error".into(), vec![])]);
    h.send(b, answer);
    assert_refused(&h.take(), b);

    // Session bus policy (dbus-daemon's session.conf): delivered, and a
    // pending call is still consumed only by its callee.
    let mut h = Harness::new();
    let (a, name_a) = h.client();
    let (b, name_b) = h.client();
    let (c, _) = h.client();
    let serial = h.send(
        a,
        MessageBuilder::method_call("/", "Do").destination(name_b),
    );
    h.take();
    h.send(
        c,
        MessageBuilder::method_return(serial).destination(name_a.clone()),
    );
    assert_eq!(h.take().len(), 1);
    assert_eq!(h.bus.replies.len(), 1, "still waiting for b");
    h.bus.set_policy(requested_replies_only());
    h.send(c, MessageBuilder::method_return(serial).destination(name_a));
    assert_refused(&h.take(), c);
    let _ = b;
}

#[test]
fn replies_to_a_missing_destination_are_errors_unless_no_reply_expected() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let err = h.driver_error(
        a,
        MessageBuilder::method_return(5).destination("org.example.Nobody"),
    );
    assert_eq!(err.0, errors::SERVICE_UNKNOWN);
    h.send(
        a,
        MessageBuilder::method_return(5)
            .destination("org.example.Nobody")
            .flags(flags::NO_REPLY_EXPECTED),
    );
    assert!(h.take().is_empty());
}

#[test]
fn no_reply_expected_calls_are_not_tracked() {
    let mut h = Harness::new();
    let (a, name_a) = h.client();
    let (b, name_b) = h.client();
    let serial = h.send(
        a,
        MessageBuilder::method_call("/", "Do")
            .destination(name_b)
            .flags(flags::NO_REPLY_EXPECTED),
    );
    assert_eq!(h.take().len(), 1);
    assert!(h.bus.replies.is_empty());
    // So an answer is unrequested: refused where policy says so.
    h.bus.set_policy(requested_replies_only());
    h.send(b, MessageBuilder::method_return(serial).destination(name_a));
    assert_refused(&h.take(), b);
}

#[test]
fn unknown_destination_errors() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let err = h.driver_error(
        a,
        MessageBuilder::method_call("/", "Do").destination("org.example.Nobody"),
    );
    assert_eq!(
        err,
        (
            errors::SERVICE_UNKNOWN.into(),
            "The name org.example.Nobody was not provided by any .service files".into()
        )
    );
    let err = h.driver_error(
        a,
        MessageBuilder::method_call("/", "Do").destination(":1.42"),
    );
    assert_eq!(err.0, errors::SERVICE_UNKNOWN);
    let err = h.driver_error(
        a,
        MessageBuilder::method_call("/", "Do")
            .destination(":1.42")
            .flags(flags::NO_AUTO_START),
    );
    assert_eq!(
        err,
        (
            errors::NAME_HAS_NO_OWNER.into(),
            "Name \":1.42\" does not exist".into()
        )
    );
    // Signals are answered too (dbus-daemon does so for any message).
    let err = h.driver_error(
        a,
        MessageBuilder::signal("/", "org.example.I", "S").destination(":1.42"),
    );
    assert_eq!(err.0, errors::SERVICE_UNKNOWN);
    // Unless the sender wants no reply.
    h.send(
        a,
        MessageBuilder::method_call("/", "Do")
            .destination(":1.42")
            .flags(flags::NO_REPLY_EXPECTED),
    );
    h.send(
        a,
        MessageBuilder::signal("/", "org.example.I", "S")
            .destination(":1.42")
            .flags(flags::NO_REPLY_EXPECTED),
    );
    assert!(h.take().is_empty());
}

#[test]
fn unicast_signal_goes_to_its_destination_only() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let (b, name_b) = h.client();
    let (c, _) = h.client();
    h.add_match(c, "type='signal'");
    h.send(
        a,
        MessageBuilder::signal("/", "org.example.I", "S").destination(name_b),
    );
    let got = h.take();
    assert_eq!(summary(&got), vec![(b, "S".into(), vec![])]);
    let _ = c;
}

#[test]
fn broadcast_reaches_matching_rules_only() {
    let mut h = Harness::new();
    let (a, name_a) = h.client();
    let (b, _) = h.client();
    let (c, _) = h.client();
    let (d, _) = h.client();
    h.add_match(a, "type='signal',interface='org.example.I'");
    h.add_match(b, "type='signal',interface='org.example.I',member='S'");
    h.add_match(c, "type='signal',member='Other'");
    h.add_match(d, "type='signal',sender='org.example.Sender'");
    h.request_name(a, "org.example.Sender", 0);
    h.take();
    h.send(
        a,
        MessageBuilder::signal("/", "org.example.I", "S").body(vec![s("x")]),
    );
    let got = h.take();
    let to: Vec<ConnId> = got.iter().map(|(to, _)| *to).collect();
    assert_eq!(
        to,
        vec![a, b, d],
        "sender included when its own rule matches"
    );
    for (_, m) in &got {
        assert_eq!(m.sender(), Some(name_a.as_str()));
    }
}

#[test]
fn broadcast_shares_one_message_between_receivers() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let (b, _) = h.client();
    let (c, _) = h.client();
    h.add_match(b, "type='signal'");
    h.add_match(c, "type='signal'");
    h.send(
        a,
        MessageBuilder::signal("/", "org.example.I", "S").body(vec![s("shared")]),
    );
    let bodies: Vec<&Bytes> = h
        .out
        .iter()
        .map(|act| match act {
            Action::Queued { msg, .. } => &msg.body,
            _ => panic!(),
        })
        .collect();
    assert_eq!(bodies.len(), 2);
    assert_eq!(
        bodies[0].as_ptr(),
        bodies[1].as_ptr(),
        "one body, no per-receiver copy"
    );
}

#[test]
fn remove_match_and_its_errors() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let (b, _) = h.client();
    h.add_match(b, "type='signal'");
    h.driver(b, "RemoveMatch", vec![s("type='signal'")]);
    h.send(a, MessageBuilder::signal("/", "org.example.I", "S"));
    assert!(h.take().is_empty());
    let err = h.driver_error(b, call_bus("RemoveMatch", vec![s("type='signal'")]));
    assert_eq!(err.0, errors::MATCH_RULE_NOT_FOUND);
    let err = h.driver_error(b, call_bus("AddMatch", vec![s("type='nonsense'")]));
    assert_eq!(err.0, errors::MATCH_RULE_INVALID);
}

#[test]
fn rules_naming_a_departed_unique_name_go_with_it() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let (b, name_b) = h.client();
    h.add_match(a, &format!("type='signal',sender='{name_b}'"));
    h.add_match(a, "type='signal',member='Kept'");
    h.bus.remove_connection(b, h.now, &mut h.out);
    h.take();
    let err = h.driver_error(
        a,
        call_bus(
            "RemoveMatch",
            vec![s(&format!("type='signal',sender='{name_b}'"))],
        ),
    );
    assert_eq!(err.0, errors::MATCH_RULE_NOT_FOUND);
    h.driver(a, "RemoveMatch", vec![s("type='signal',member='Kept'")]);
}
