//! Hello: unique names, and what a connection may do before it.

use super::*;

#[test]
fn hello_assigns_unique_names_then_announces_them() {
    let mut h = Harness::new();
    let (watcher, _) = h.client();
    h.add_match(watcher, "type='signal',member='NameOwnerChanged'");
    let a = h.connect(false);
    let serial = h.send(a, call_bus("Hello", vec![]));
    let got = h.take();
    assert_eq!(
        summary(&got),
        vec![
            (a, "return".into(), strings(&[":1.1"])),
            (
                watcher,
                "NameOwnerChanged".into(),
                strings(&[":1.1", "", ":1.1"])
            ),
            (a, "NameAcquired".into(), strings(&[":1.1"])),
        ]
    );
    let reply = &got[0].1;
    assert_eq!(reply.reply_serial(), Some(serial));
    assert_eq!(reply.sender(), Some(BUS_NAME));
    assert_eq!(reply.destination(), Some(":1.1"));
    assert_eq!(got[2].1.destination(), Some(":1.1"));
    assert_eq!(got[1].1.sender(), Some(BUS_NAME));
    assert_eq!(got[1].1.path(), Some(BUS_PATH));
    assert_eq!(got[1].1.destination(), None);
    assert_eq!(h.bus.unique_name(a), Some(":1.1"));
}

#[test]
fn unique_names_are_never_reused() {
    let mut h = Harness::new();
    let (a, name_a) = h.client();
    h.bus.remove_connection(a, h.now, &mut h.out);
    let (_, name_b) = h.client();
    assert_eq!(name_a, ":1.0");
    assert_eq!(name_b, ":1.1");
}

#[test]
fn bus_serials_increase() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let first = h.call(a, call_bus("GetId", vec![])).serial();
    let second = h.call(a, call_bus("GetId", vec![])).serial();
    assert!(second > first);
}

#[test]
fn second_hello_fails() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let err = h.driver_error(a, call_bus("Hello", vec![]));
    assert_eq!(
        err,
        (
            errors::FAILED.into(),
            "Already handled an Hello message".into()
        )
    );
}

#[test]
fn hello_without_interface_is_accepted() {
    let mut h = Harness::new();
    let a = h.connect(false);
    let reply = h.call(
        a,
        MessageBuilder::method_call(BUS_PATH, "Hello").destination(BUS_NAME),
    );
    assert_eq!(reply.msg_type(), MessageType::MethodReturn);
}

#[test]
fn driver_messages_before_hello_are_refused_and_hello_still_works() {
    let mut h = Harness::new();
    let (first, name_first) = h.client();
    let a = h.connect(false);
    for builder in [
        call_bus("GetId", vec![]),
        call_bus("RequestName", vec![s("org.example.A"), Value::Uint32(0)]),
        call_bus("NoSuchMethod", vec![]),
        call_bus("GetId", vec![]).flags(flags::NO_REPLY_EXPECTED),
        MessageBuilder::method_call("/", "Ping")
            .interface("org.freedesktop.DBus.Peer")
            .destination(BUS_NAME),
        MessageBuilder::signal("/", "org.example.I", "S").destination(BUS_NAME),
    ] {
        let serial = h.send(a, builder);
        let got = h.take();
        assert_eq!(got.len(), 1, "{:?}", summary(&got));
        let (to, err) = &got[0];
        assert_eq!(*to, a);
        assert_eq!(err.error_name(), Some(errors::ACCESS_DENIED));
        assert_eq!(err.reply_serial(), Some(serial));
        assert_eq!(err.destination(), Some(":not.active.yet"));
        assert_eq!(err.sender(), Some(BUS_NAME));
        assert_eq!(
            err.body_values().unwrap(),
            vec![s(
                "Client tried to send a message other than Hello without being registered"
            )]
        );
    }
    // No name was used up: Hello gets the next one.
    let hello = h.call(a, call_bus("Hello", vec![]));
    let number = |name: &str| name.rsplit('.').next().unwrap().parse::<u64>().unwrap();
    match hello.body_values().unwrap().as_slice() {
        [Value::String(name)] => assert_eq!(number(name), number(&name_first) + 1),
        other => panic!("Hello returned {other:?}"),
    }
    let _ = first;
}

#[test]
fn monitors_see_refused_messages_before_hello_from_not_active_yet() {
    let mut h = Harness::new();
    let (m, _) = h.client();
    h.call(m, become_monitor(&[]));
    h.take();
    let a = h.connect(false);
    h.send(a, call_bus("GetId", vec![]));
    let got = h.take();
    let seen: Vec<(ConnId, MessageType, Option<&str>, Option<&str>)> = got
        .iter()
        .map(|(to, msg)| (*to, msg.msg_type(), msg.sender(), msg.destination()))
        .collect();
    assert_eq!(
        seen,
        vec![
            (
                m,
                MessageType::MethodCall,
                Some(":not.active.yet"),
                Some(BUS_NAME)
            ),
            (
                m,
                MessageType::Error,
                Some(BUS_NAME),
                Some(":not.active.yet")
            ),
            (
                a,
                MessageType::Error,
                Some(BUS_NAME),
                Some(":not.active.yet")
            ),
        ]
    );
}

#[test]
fn other_messages_before_hello_disconnect() {
    for builder in [
        MessageBuilder::method_call("/", "Hello").destination("org.example.Other"),
        MessageBuilder::signal("/", "org.example.I", "S"),
    ] {
        let mut h = Harness::new();
        let a = h.connect(false);
        h.send(a, builder);
        match h.out.as_slice() {
            [Action::Disconnect { conn, reason }] => {
                assert_eq!(*conn, a);
                assert!(reason.contains("Hello"), "{reason}");
            }
            other => panic!("expected a disconnect, got {other:?}"),
        }
    }
}

#[test]
fn calls_to_nobody_before_hello_are_answered_like_after() {
    let mut h = Harness::new();
    let a = h.connect(false);
    let ping = h.call(a, peer_without_destination("Ping"));
    assert_eq!(ping.msg_type(), MessageType::MethodReturn);
    let other = h.call(a, MessageBuilder::method_call("/", "M"));
    assert_eq!(other.error_name(), Some(errors::UNKNOWN_METHOD));
    assert!(h.take().is_empty());
    h.call(a, call_bus("Hello", vec![]));
}

#[test]
fn connection_ids_are_never_given_twice_and_a_departed_one_gets_nothing() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let reserved = h.bus.next_connection_id();
    assert!(reserved > a);
    h.bus.remove_connection(a, h.now, &mut h.out);
    h.take();
    // The daemon's next connection gets a new id, whatever left.
    let b = h.bus.next_connection_id();
    assert!(b > reserved && b != a);
    h.bus.add_connection_as(b, creds(1000, 100), true);
    assert!(h.bus.credentials(b).is_some());
    assert!(h.bus.credentials(a).is_none());
    // Nothing for the departed id: a message to its name fails, and the
    // bus says nothing about it.
    let (c, _) = h.client();
    h.send(
        c,
        MessageBuilder::signal("/", "org.example.T", "S").destination(":1.0"),
    );
    assert!(h.out.iter().all(|action| match action {
        Action::Queued { to, .. } => *to != a,
        Action::Disconnect { conn, .. }
        | Action::HoldSender { conn }
        | Action::ReleaseSender { conn } => *conn != a,
        _ => true,
    }));
}
