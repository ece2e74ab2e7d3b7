//! Limits: names, match rules, pending replies, message size, connections.

use super::*;

#[test]
fn names_limit() {
    let mut opts = options();
    opts.limits.max_names_per_connection = 2; // the unique name counts
    let mut h = Harness::with_options(opts);
    let (a, name_a) = h.client();
    assert_eq!(h.request_name(a, "org.example.One", 0), 1);
    let (name, text) = h.driver_error(
        a,
        call_bus("RequestName", vec![s("org.example.Two"), Value::Uint32(0)]),
    );
    assert_eq!(name, errors::LIMITS_EXCEEDED);
    assert_eq!(
        text,
        format!("Connection \"{name_a}\" is not allowed to own more services (increase limits in configuration file if required; max_names_per_connection=2)")
    );
    h.driver(a, "ReleaseName", vec![s("org.example.One")]);
    assert_eq!(h.request_name(a, "org.example.Two", 0), 1);
}

#[test]
fn match_rules_limit() {
    let mut opts = options();
    opts.limits.max_match_rules_per_connection = 1;
    let mut h = Harness::with_options(opts);
    let (a, name_a) = h.client();
    h.add_match(a, "type='signal'");
    let (name, text) = h.driver_error(a, call_bus("AddMatch", vec![s("member='X'")]));
    assert_eq!(name, errors::LIMITS_EXCEEDED);
    assert_eq!(
        text,
        format!("Connection \"{name_a}\" is not allowed to add more match rules (increase limits in configuration file if required; max_match_rules_per_connection=1)")
    );
}

#[test]
fn pending_replies_limit() {
    let mut opts = options();
    opts.limits.max_replies_per_connection = 1;
    let mut h = Harness::with_options(opts);
    let (a, name_a) = h.client();
    let (b, name_b) = h.client();
    let first = h.send(
        a,
        MessageBuilder::method_call("/", "Do").destination(name_b.clone()),
    );
    assert_eq!(h.take().len(), 1);
    let err = h.driver_error(
        a,
        MessageBuilder::method_call("/", "Do").destination(name_b.clone()),
    );
    assert_eq!(
        err,
        (
            errors::LIMITS_EXCEEDED.into(),
            "The maximum number of pending replies per connection has been reached".into()
        )
    );
    assert!(h.take().is_empty(), "the refused call is not forwarded");
    // Calls without reply are not counted.
    h.send(
        a,
        MessageBuilder::method_call("/", "Do")
            .destination(name_b.clone())
            .flags(flags::NO_REPLY_EXPECTED),
    );
    assert_eq!(h.take().len(), 1);
    // Once answered, there is room again.
    h.send(b, MessageBuilder::method_return(first).destination(name_a));
    h.take();
    h.send(
        a,
        MessageBuilder::method_call("/", "Do").destination(name_b),
    );
    assert_eq!(h.take()[0].0, b);
}

#[test]
fn oversized_messages_cost_the_sender_its_connection() {
    let mut opts = options();
    opts.limits.max_message_unix_fds = 2;
    opts.limits.max_message_size = 4096;
    let mut h = Harness::with_options(opts);
    let (a, _) = h.client();
    let (b, name_b) = h.client();
    // Within the limits: delivered.
    h.send_with_fds(
        a,
        MessageBuilder::method_call("/", "TakeFds")
            .destination(name_b.clone())
            .unix_fds(2)
            .body(vec![Value::UnixFd(0), Value::UnixFd(1)]),
        some_fds(2),
    );
    assert_eq!(h.take()[0].0, b);
    // Three fds: the sender is dropped, nothing is delivered.
    h.send_with_fds(
        a,
        MessageBuilder::method_call("/", "TakeFds")
            .destination(name_b.clone())
            .unix_fds(3)
            .body(vec![Value::UnixFd(0)]),
        some_fds(3),
    );
    match h.out.as_slice() {
        [Action::Disconnect { conn, reason }] => {
            assert_eq!(*conn, a);
            assert!(reason.contains("max_message_unix_fds=2"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    h.out.clear();
    let big = "x".repeat(5000);
    h.send(
        b,
        MessageBuilder::signal("/", "org.example.I", "Big").body(vec![s(&big)]),
    );
    match h.out.as_slice() {
        [Action::Disconnect { conn, reason }] => {
            assert_eq!(*conn, b);
            assert!(reason.contains("max_message_size=4096"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn hello_beyond_max_completed_connections_is_limits_exceeded() {
    let mut opts = options();
    opts.limits.max_completed_connections = 2;
    let mut h = Harness::with_options(opts);
    let (a, _) = h.client();
    let _ = h.client();
    let late = h.connect(false);
    let (name, text) = refused_hello(&mut h, late);
    assert_eq!(name, errors::LIMITS_EXCEEDED);
    assert!(
        text.contains("maximum number of active connections"),
        "{text}"
    );
    assert_eq!(h.bus.unique_name(late), None);
    // A departure frees a place.
    h.bus.remove_connection(a, h.now, &mut h.out);
    h.take();
    let reply = h.call(late, call_bus("Hello", vec![]));
    assert_eq!(reply.msg_type(), MessageType::MethodReturn);
}

#[test]
fn hello_beyond_max_connections_per_user_is_limits_exceeded_for_that_user_only() {
    let mut opts = options();
    opts.limits.max_connections_per_user = 1;
    let mut h = Harness::with_options(opts);
    let _ = h.client(); // uid 1000
    let same_user = h.connect(false);
    let (name, text) = refused_hello(&mut h, same_user);
    assert_eq!(name, errors::LIMITS_EXCEEDED);
    assert!(text.contains("UID 1000"), "{text}");
    let other_user = h.bus.add_connection(creds(1001, 101), false);
    let reply = h.call(other_user, call_bus("Hello", vec![]));
    assert_eq!(reply.msg_type(), MessageType::MethodReturn);
}

/// Say Hello for `conn` expecting a refusal: the error, then a
/// disconnect (the daemon carries it out after writing the error).
fn refused_hello(h: &mut Harness, conn: ConnId) -> (String, String) {
    h.send(conn, call_bus("Hello", vec![]));
    let disconnect = h.out.pop();
    assert!(
        matches!(&disconnect, Some(Action::Disconnect { conn: c, reason })
            if *c == conn && reason == crate::bus::before_hello::HELLO_REFUSED),
        "{disconnect:?}"
    );
    let got = h.take();
    let [(to, err)] = got.as_slice() else {
        panic!("{got:?}");
    };
    assert_eq!(*to, conn);
    let text = match err.body_values().unwrap().first() {
        Some(Value::String(t)) => t.clone(),
        other => panic!("error without text: {other:?}"),
    };
    (err.error_name().unwrap().to_owned(), text)
}
