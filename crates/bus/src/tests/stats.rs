//! org.freedesktop.DBus.Debug.Stats.

use super::*;

fn stats_call(member: &str, body: Vec<Value>) -> MessageBuilder {
    MessageBuilder::method_call(BUS_PATH, member)
        .interface("org.freedesktop.DBus.Debug.Stats")
        .destination(BUS_NAME)
        .body(body)
}

fn dict_u32(reply: &Message) -> Vec<(String, Value)> {
    let Value::Array { items, .. } = reply.body_values().unwrap().remove(0) else {
        panic!("not a dict")
    };
    items
        .into_iter()
        .map(|entry| match entry {
            Value::DictEntry(k, v) => match (*k, *v) {
                (Value::String(k), Value::Variant(v)) => (k, *v),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        })
        .collect()
}

fn stat(stats: &[(String, Value)], key: &str) -> Value {
    stats
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no {key}"))
}

#[test]
fn stats_count_and_remember_peaks() {
    let mut h = Harness::new();
    let (a, name_a) = h.client();
    let (b, _) = h.client();
    let incomplete = h.connect(false);
    h.request_name(a, "org.example.One", 0);
    h.request_name(a, "org.example.Two", 0);
    h.add_match(b, "type='signal',member='Foo'");
    h.add_match(b, "type='signal'");
    h.driver(a, "ReleaseName", vec![s("org.example.Two")]);
    h.driver(b, "RemoveMatch", vec![s("type='signal'")]);
    let stats = dict_u32(&h.call(a, stats_call("GetStats", vec![])));
    assert_eq!(stat(&stats, "ActiveConnections"), Value::Uint32(2));
    assert_eq!(stat(&stats, "IncompleteConnections"), Value::Uint32(1));
    assert_eq!(stat(&stats, "MatchRules"), Value::Uint32(1));
    assert_eq!(stat(&stats, "PeakMatchRules"), Value::Uint32(2));
    assert_eq!(
        stat(&stats, "PeakMatchRulesPerConnection"),
        Value::Uint32(2)
    );
    assert_eq!(stat(&stats, "BusNames"), Value::Uint32(3));
    assert_eq!(stat(&stats, "PeakBusNames"), Value::Uint32(4));
    assert_eq!(stat(&stats, "PeakBusNamesPerConnection"), Value::Uint32(3));
    // What is queued for it counts until it is written.
    let queued = h.bus.queued_bytes(a);
    assert!(queued > 0);
    h.bus.write_up_to(a, usize::MAX, h.now, &mut h.out);
    let conn = dict_u32(&h.call(
        b,
        stats_call("GetConnectionStats", vec![s("org.example.One")]),
    ));
    assert_eq!(stat(&conn, "UniqueName"), s(&name_a));
    assert_eq!(stat(&conn, "BusNames"), Value::Uint32(2));
    assert_eq!(stat(&conn, "PeakBusNames"), Value::Uint32(3));
    assert_eq!(stat(&conn, "MatchRules"), Value::Uint32(0));
    // quickbus's own counters follow dbus-daemon's keys.
    assert!(matches!(stat(&conn, "MessagesIn"), Value::Uint64(n) if n >= 4));
    assert!(matches!(stat(&conn, "BytesOut"), Value::Uint64(n) if n > 0));
    assert_eq!(stat(&conn, "PendingReplies"), Value::Uint32(0));
    assert_eq!(stat(&conn, "OutgoingBytes"), Value::Uint32(0));
    assert_eq!(
        stat(&conn, "PeakOutgoingBytes"),
        Value::Uint32(queued as u32)
    );
    assert!(matches!(stat(&stats, "MessagesOut"), Value::Uint64(n) if n >= 8));
    let err = h.driver_error(b, stats_call("GetConnectionStats", vec![s("org.nope")]));
    assert_eq!(
        err,
        (
            errors::NAME_HAS_NO_OWNER.into(),
            "Could not get statistics of name 'org.nope': no such name".into()
        )
    );
    let err = h.driver_error(b, stats_call("GetConnectionStats", vec![s(BUS_NAME)]));
    assert_eq!(err.0, errors::INVALID_ARGS);
    // Every registered connection, also one without rules (a), as
    // dbus-daemon lists them.
    let rules = h.call(a, stats_call("GetAllMatchRules", vec![]));
    let entry = |id, items: Vec<Value>| {
        Value::DictEntry(
            Box::new(s(h.bus.unique_name(id).unwrap())),
            Box::new(Value::Array {
                elem_sig: "s".into(),
                items,
            }),
        )
    };
    assert_eq!(
        rules.body_values().unwrap(),
        vec![Value::Array {
            elem_sig: "{sas}".into(),
            items: vec![
                entry(a, vec![]),
                entry(b, vec![s("type='signal',member='Foo'")])
            ]
        }]
    );
    // Connections leaving are counted out.
    h.bus.remove_connection(b, h.now, &mut h.out);
    h.bus.remove_connection(incomplete, h.now, &mut h.out);
    let stats = dict_u32(&h.call(a, stats_call("GetStats", vec![])));
    assert_eq!(stat(&stats, "ActiveConnections"), Value::Uint32(1));
    assert_eq!(stat(&stats, "IncompleteConnections"), Value::Uint32(0));
    assert_eq!(stat(&stats, "MatchRules"), Value::Uint32(0));
    // Only on the canonical path, like dbus-daemon.
    let off_path = MessageBuilder::method_call("/", "GetStats")
        .interface("org.freedesktop.DBus.Debug.Stats")
        .destination(BUS_NAME);
    assert_eq!(h.driver_error(a, off_path).0, errors::UNKNOWN_INTERFACE);
}
