//! Owning names: RequestName, ReleaseName, queues and their signals.

use super::*;

#[test]
fn request_name_replies_after_its_signals() {
    let mut h = Harness::new();
    let (a, name_a) = h.client();
    h.add_match(a, "type='signal'");
    let serial = h.send(
        a,
        call_bus("RequestName", vec![s("org.example.Svc"), Value::Uint32(0)]),
    );
    let got = h.take();
    assert_eq!(
        summary(&got),
        vec![
            (
                a,
                "NameOwnerChanged".into(),
                strings(&["org.example.Svc", "", &name_a])
            ),
            (a, "NameAcquired".into(), strings(&["org.example.Svc"])),
            (a, "return".into(), vec![]),
        ]
    );
    assert_eq!(got[2].1.reply_serial(), Some(serial));
    assert_eq!(got[2].1.body_values().unwrap(), vec![Value::Uint32(1)]);
}

#[test]
fn request_name_queue_and_replacement_through_the_driver() {
    let mut h = Harness::new();
    let (a, name_a) = h.client();
    let (b, name_b) = h.client();
    let (c, name_c) = h.client();
    assert_eq!(
        h.request_name(a, "org.example.Svc", registry::ALLOW_REPLACEMENT),
        1
    );
    assert_eq!(
        h.request_name(a, "org.example.Svc", registry::ALLOW_REPLACEMENT),
        4
    );
    assert_eq!(h.request_name(b, "org.example.Svc", 0), 2);
    assert_eq!(
        h.request_name(c, "org.example.Svc", registry::DO_NOT_QUEUE),
        3
    );
    let owners = h.driver(c, "ListQueuedOwners", vec![s("org.example.Svc")]);
    assert_eq!(
        string_list(&owners[0]),
        vec![name_a.clone(), name_b.clone()]
    );
    h.take();
    assert_eq!(
        h.request_name(c, "org.example.Svc", registry::REPLACE_EXISTING),
        1
    );
    assert_eq!(
        summary(&h.take()),
        vec![
            (a, "NameLost".into(), strings(&["org.example.Svc"])),
            (c, "NameAcquired".into(), strings(&["org.example.Svc"])),
        ]
    );
    let owners = h.driver(c, "ListQueuedOwners", vec![s("org.example.Svc")]);
    assert_eq!(string_list(&owners[0]), vec![name_c, name_a, name_b]);
}

#[test]
fn request_name_rejects_bad_names() {
    let mut h = Harness::new();
    let (a, name_a) = h.client();
    let cases = [
        ("not a name", "Requested bus name \"not a name\" is not valid".to_owned()),
        (":1.99", "Cannot acquire a service starting with ':' such as \":1.99\"".to_owned()),
        (
            BUS_NAME,
            format!("Connection \"{name_a}\" is not allowed to own the service \"org.freedesktop.DBus\"because it is reserved for D-Bus' use only"),
        ),
    ];
    for (name, text) in cases {
        let err = h.driver_error(a, call_bus("RequestName", vec![s(name), Value::Uint32(0)]));
        assert_eq!(err, (errors::INVALID_ARGS.to_owned(), text));
    }
}

#[test]
fn release_name_replies_and_errors() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let (b, _) = h.client();
    h.request_name(a, "org.example.Svc", 0);
    let release = |h: &mut Harness, who, name: &str| h.driver(who, "ReleaseName", vec![s(name)]);
    assert_eq!(
        release(&mut h, b, "org.example.Svc"),
        vec![Value::Uint32(3)]
    );
    assert_eq!(
        release(&mut h, b, "org.example.None"),
        vec![Value::Uint32(2)]
    );
    assert_eq!(
        release(&mut h, a, "org.example.Svc"),
        vec![Value::Uint32(1)]
    );
    let err = h.driver_error(a, call_bus("ReleaseName", vec![s(":1.0")]));
    assert_eq!(
        err.1,
        "Cannot release a service starting with ':' such as \":1.0\""
    );
    let err = h.driver_error(a, call_bus("ReleaseName", vec![s(BUS_NAME)]));
    assert_eq!(
        err.1,
        "Cannot release the org.freedesktop.DBus service because it is owned by the bus"
    );
    let err = h.driver_error(a, call_bus("ReleaseName", vec![s("a..b")]));
    assert_eq!(
        err,
        (
            errors::INVALID_ARGS.into(),
            "Given bus name \"a..b\" is not valid".into()
        )
    );
}

#[test]
fn release_promotes_queue_with_signals_in_order() {
    let mut h = Harness::new();
    let (watcher, _) = h.client();
    let (a, name_a) = h.client();
    let (b, name_b) = h.client();
    h.add_match(watcher, "member='NameOwnerChanged'");
    h.request_name(a, "org.example.Svc", 0);
    h.request_name(b, "org.example.Svc", 0);
    h.take();
    let serial = h.send(a, call_bus("ReleaseName", vec![s("org.example.Svc")]));
    let got = h.take();
    assert_eq!(
        summary(&got),
        vec![
            (a, "NameLost".into(), strings(&["org.example.Svc"])),
            (
                watcher,
                "NameOwnerChanged".into(),
                strings(&["org.example.Svc", &name_a, &name_b])
            ),
            (b, "NameAcquired".into(), strings(&["org.example.Svc"])),
            (a, "return".into(), vec![]),
        ]
    );
    assert_eq!(got[3].1.reply_serial(), Some(serial));
}

#[test]
fn disconnect_releases_names_and_announces_in_order() {
    let mut h = Harness::new();
    let (watcher, _) = h.client();
    let (a, name_a) = h.client();
    let (b, name_b) = h.client();
    h.add_match(watcher, "member='NameOwnerChanged'");
    h.add_match(a, "member='NameOwnerChanged'");
    h.request_name(a, "org.example.One", 0);
    h.request_name(a, "org.example.Two", 0);
    h.request_name(b, "org.example.One", 0);
    h.take();
    h.bus.remove_connection(a, h.now, &mut h.out);
    assert_eq!(
        summary(&h.take()),
        vec![
            (
                watcher,
                "NameOwnerChanged".into(),
                strings(&["org.example.Two", &name_a, ""])
            ),
            (
                watcher,
                "NameOwnerChanged".into(),
                strings(&["org.example.One", &name_a, &name_b])
            ),
            (b, "NameAcquired".into(), strings(&["org.example.One"])),
            (
                watcher,
                "NameOwnerChanged".into(),
                strings(&[&name_a, &name_a, ""])
            ),
        ]
    );
    let names = h.driver(watcher, "ListNames", vec![]);
    assert!(!string_list(&names[0]).contains(&name_a));
    // Removing twice is harmless.
    h.bus.remove_connection(a, h.now, &mut h.out);
    assert!(h.out.is_empty());
}

#[test]
fn a_departing_connection_is_sent_name_lost_before_each_name_owner_changed() {
    let mut h = Harness::new();
    let (m, _) = h.client();
    let (a, name_a) = h.client();
    let (b, name_b) = h.client();
    h.request_name(a, "org.example.One", 0);
    h.request_name(a, "org.example.Two", 0);
    h.request_name(b, "org.example.One", 0);
    h.call(m, become_monitor(&["sender='org.freedesktop.DBus'"]));
    h.take();
    h.bus.remove_connection(a, h.now, &mut h.out);
    let got = h.take();
    let destinations: Vec<Option<&str>> = got.iter().map(|(_, msg)| msg.destination()).collect();
    assert_eq!(
        summary(&got),
        vec![
            (m, "NameLost".into(), strings(&["org.example.Two"])),
            (
                m,
                "NameOwnerChanged".into(),
                strings(&["org.example.Two", &name_a, ""])
            ),
            (m, "NameLost".into(), strings(&["org.example.One"])),
            (
                m,
                "NameOwnerChanged".into(),
                strings(&["org.example.One", &name_a, &name_b])
            ),
            (m, "NameAcquired".into(), strings(&["org.example.One"])),
            (b, "NameAcquired".into(), strings(&["org.example.One"])),
            (m, "NameLost".into(), strings(&[&name_a])),
            (
                m,
                "NameOwnerChanged".into(),
                strings(&[&name_a, &name_a, ""])
            ),
        ]
    );
    assert_eq!(destinations[0], Some(name_a.as_str()));
    assert_eq!(destinations[6], Some(name_a.as_str()));
}

#[test]
fn name_queries() {
    let mut h = Harness::new();
    let (a, name_a) = h.client();
    h.request_name(a, "org.example.Svc", 0);
    let names = string_list(&h.driver(a, "ListNames", vec![])[0]);
    assert_eq!(names[0], BUS_NAME);
    assert!(names.contains(&name_a) && names.contains(&"org.example.Svc".to_owned()));
    assert_eq!(names.len(), 3);
    let activatable = string_list(&h.driver(a, "ListActivatableNames", vec![])[0]);
    assert_eq!(activatable, strings(&[BUS_NAME, "org.example.Activatable"]));
    for (name, has) in [
        ("org.example.Svc", true),
        (BUS_NAME, true),
        (name_a.as_str(), true),
        ("org.example.No", false),
    ] {
        assert_eq!(
            h.driver(a, "NameHasOwner", vec![s(name)]),
            vec![Value::Bool(has)],
            "{name}"
        );
    }
    assert_eq!(
        h.driver(a, "GetNameOwner", vec![s("org.example.Svc")]),
        vec![s(&name_a)]
    );
    assert_eq!(
        h.driver(a, "GetNameOwner", vec![s(BUS_NAME)]),
        vec![s(BUS_NAME)]
    );
    assert_eq!(
        h.driver_error(a, call_bus("GetNameOwner", vec![s("org.example.No")])),
        (
            errors::NAME_HAS_NO_OWNER.into(),
            "Could not get owner of name 'org.example.No': no such name".into()
        )
    );
    assert_eq!(
        string_list(&h.driver(a, "ListQueuedOwners", vec![s(BUS_NAME)])[0]),
        strings(&[BUS_NAME])
    );
    assert_eq!(
        h.driver_error(a, call_bus("ListQueuedOwners", vec![s("org.example.No")])),
        (
            errors::NAME_HAS_NO_OWNER.into(),
            "Could not get owners of name 'org.example.No': no such name".into()
        )
    );
}
