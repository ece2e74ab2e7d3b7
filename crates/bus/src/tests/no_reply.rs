//! Calls that get no reply: time-outs and departed callees.

use super::*;

#[test]
fn reply_timeout_answers_the_caller() {
    let mut opts = options();
    opts.limits.reply_timeout = Some(Duration::from_secs(5));
    let mut h = Harness::with_options(opts);
    let (a, name_a) = h.client();
    let (b, name_b) = h.client();
    assert_eq!(h.bus.next_deadline(), None);
    let serial = h.send(
        a,
        MessageBuilder::method_call("/", "Slow").destination(name_b),
    );
    h.take();
    let deadline = h.bus.next_deadline().expect("a deadline");
    assert_eq!(deadline, h.now + Duration::from_secs(5));
    h.bus
        .handle_timeouts(deadline - Duration::from_millis(1), &mut h.out);
    assert!(h.take().is_empty());
    h.bus.handle_timeouts(deadline, &mut h.out);
    let got = h.take();
    assert_eq!(got.len(), 1);
    let (to, err) = &got[0];
    assert_eq!(*to, a);
    assert_eq!(err.error_name(), Some(errors::NO_REPLY));
    assert_eq!(err.reply_serial(), Some(serial));
    assert_eq!(err.sender(), Some(BUS_NAME));
    assert_eq!(err.destination(), Some(name_a.as_str()));
    assert_eq!(
        err.body_values().unwrap(),
        vec![s(
            "Message did not receive a reply (timeout by message bus)"
        )]
    );
    assert_eq!(h.bus.next_deadline(), None);
    // The late reply is now unrequested.
    h.bus.set_policy(requested_replies_only());
    h.send(b, MessageBuilder::method_return(serial).destination(name_a));
    assert_refused(&h.take(), b);
}

#[test]
fn callee_disconnect_answers_waiting_callers() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let (b, name_b) = h.client();
    let (c, _) = h.client();
    let s1 = h.send(
        a,
        MessageBuilder::method_call("/", "Do").destination(name_b.clone()),
    );
    let s2 = h.send(
        c,
        MessageBuilder::method_call("/", "Do").destination(name_b),
    );
    h.take();
    h.bus.remove_connection(b, h.now, &mut h.out);
    let got = h.take();
    let errs: Vec<(ConnId, Option<u32>, Option<&str>)> = got
        .iter()
        .map(|(to, m)| (*to, m.reply_serial(), m.error_name()))
        .collect();
    assert_eq!(
        errs,
        vec![
            (a, Some(s1), Some(errors::NO_REPLY)),
            (c, Some(s2), Some(errors::NO_REPLY))
        ]
    );
    assert_eq!(
        got[0].1.body_values().unwrap(),
        vec![s(
            "Message recipient disconnected from message bus without replying"
        )]
    );
    assert_eq!(
        got[0].1.flags() & flags::NO_REPLY_EXPECTED,
        flags::NO_REPLY_EXPECTED
    );
}

#[test]
fn caller_disconnect_forgets_its_calls() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let (b, name_b) = h.client();
    h.send(
        a,
        MessageBuilder::method_call("/", "Do").destination(name_b),
    );
    h.take();
    h.bus.remove_connection(a, h.now, &mut h.out);
    assert!(h.bus.replies.is_empty());
    h.bus.remove_connection(b, h.now, &mut h.out);
    assert!(h.take().is_empty());
}

#[test]
fn order_of_one_senders_messages_is_kept() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let (b, name_b) = h.client();
    for i in 0..20u32 {
        h.send(
            a,
            MessageBuilder::signal("/", "org.example.I", "S")
                .destination(name_b.clone())
                .body(vec![Value::Uint32(i)]),
        );
    }
    let got = h.take();
    let seq: Vec<Value> = got
        .iter()
        .map(|(to, m)| {
            assert_eq!(*to, b);
            m.body_values().unwrap().remove(0)
        })
        .collect();
    assert_eq!(seq, (0..20).map(Value::Uint32).collect::<Vec<_>>());
}

#[test]
fn messages_from_unknown_connections_are_ignored() {
    let mut h = Harness::new();
    h.send(ConnId(999), call_bus("Hello", vec![]));
    assert!(h.out.is_empty());
}
