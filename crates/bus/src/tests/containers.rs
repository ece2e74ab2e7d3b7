//! org.freedesktop.DBus.Containers1 through `Bus::receive`, with the
//! harness standing in for the daemon's sockets (`answer_containers`):
//! dbus-daemon's replies, errors and texts, the instance's life, and the
//! header field for RequestHeader.

use quickbus_wire::{Message, MessageBuilder, MessageType, Value};

use super::{call_bus, creds, parse_out, s, Harness};
use crate::errors;
use crate::*;

const CONTAINERS1: &str = "org.freedesktop.DBus.Containers1";

pub(super) fn containers(member: &str, body: Vec<Value>) -> MessageBuilder {
    MessageBuilder::method_call(BUS_PATH, member)
        .interface(CONTAINERS1)
        .destination(BUS_NAME)
        .body(body)
}

pub(super) fn empty_asv() -> Value {
    Value::Array {
        elem_sig: "{sv}".into(),
        items: vec![],
    }
}

fn asv(entries: Vec<(&str, Value)>) -> Value {
    crate::driver::dict_sv(entries)
}

pub(super) fn add_server_call(
    kind: &str,
    name: &str,
    metadata: Value,
    named: Value,
) -> MessageBuilder {
    containers("AddServer", vec![s(kind), s(name), metadata, named])
}

/// A successful call's body.
pub(super) fn ok(h: &mut Harness, from: ConnId, call: MessageBuilder) -> Vec<Value> {
    let reply = h.call(from, call);
    assert_eq!(reply.msg_type(), MessageType::MethodReturn, "{reply:?}");
    reply.body_values().unwrap()
}

pub(super) fn path(v: &str) -> Value {
    Value::ObjectPath(v.into())
}

/// AddServer's reply: (instance path, socket path, address).
pub(super) fn add_server(h: &mut Harness, from: ConnId) -> (String, String, String) {
    let reply = h.call(
        from,
        add_server_call("com.example.NotFlatpak", "app", empty_asv(), empty_asv()),
    );
    assert_eq!(reply.msg_type(), MessageType::MethodReturn, "{reply:?}");
    assert_eq!(reply.signature(), "oays");
    match &reply.body_values().unwrap()[..] {
        [Value::ObjectPath(p), Value::Array { items, .. }, Value::String(a)] => {
            let bytes: Vec<u8> = items
                .iter()
                .map(|b| match b {
                    Value::Byte(b) => *b,
                    other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(bytes.last(), Some(&0), "the socket path ends in NUL");
            let socket = String::from_utf8(bytes[..bytes.len() - 1].to_vec()).unwrap();
            (p.clone(), socket, a.clone())
        }
        other => panic!("AddServer returned {other:?}"),
    }
}

/// A connection that came through instance `path`'s socket, past Hello.
pub(super) fn contained(h: &mut Harness, path: &str, uid: u32) -> (ConnId, String) {
    let id = h.bus.next_connection_id();
    assert!(h
        .bus
        .add_contained_connection(id, creds(uid, 300), true, path));
    let name = match &h.driver(id, "Hello", vec![])[0] {
        Value::String(n) => n.clone(),
        other => panic!("{other:?}"),
    };
    h.take();
    (id, name)
}

fn instance_removed(h: &mut Harness, to: ConnId) -> Vec<String> {
    h.take()
        .into_iter()
        .filter(|(t, m)| *t == to && m.member() == Some("InstanceRemoved"))
        .map(|(_, m)| match &m.body_values().unwrap()[..] {
            [Value::ObjectPath(p)] => p.clone(),
            other => panic!("{other:?}"),
        })
        .collect()
}

/// A bus with an InstanceRemoved watcher, a manager and its instance.
fn watched_instance() -> (Harness, ConnId, ConnId, String) {
    let mut h = Harness::new();
    let w = watcher(&mut h);
    let (manager, _) = h.client();
    let (instance, _, _) = add_server(&mut h, manager);
    (h, w, manager, instance)
}

fn watcher(h: &mut Harness) -> ConnId {
    let (id, _) = h.client();
    h.add_match(
        id,
        "type='signal',interface='org.freedesktop.DBus.Containers1',member='InstanceRemoved'",
    );
    id
}

#[test]
fn add_server_asks_the_daemon_and_replies_with_its_socket() {
    let mut h = Harness::new();
    let (manager, _) = h.client();
    let (instance, socket, address) = add_server(&mut h, manager);
    assert_eq!(instance, "/org/freedesktop/DBus/Containers1/c0");
    assert_eq!(socket, "/run/test/dbus-0");
    assert_eq!(address, "unix:path=/run/test/dbus-0,guid=00");
    assert_eq!(h.listening, vec![(instance, 1000)]);
    let (second, _, _) = add_server(&mut h, manager);
    assert_eq!(second, "/org/freedesktop/DBus/Containers1/c1");
}

#[test]
fn a_socket_the_daemon_could_not_make_is_the_callers_error_and_no_instance() {
    let mut h = Harness::new();
    let (manager, _) = h.client();
    h.listen_error = Some(errors::BusError::new(errors::FILE_NOT_FOUND, "no dir"));
    let (name, text) = h.driver_error(
        manager,
        add_server_call("com.example.X", "app", empty_asv(), empty_asv()),
    );
    assert_eq!(
        (name.as_str(), text.as_str()),
        (errors::FILE_NOT_FOUND, "no dir")
    );
    let (name, _) = h.driver_error(
        manager,
        containers(
            "GetInstanceInfo",
            vec![path("/org/freedesktop/DBus/Containers1/c0")],
        ),
    );
    assert_eq!(name, errors::NOT_CONTAINER);
}

#[test]
fn add_server_checks_its_arguments_as_dbus_daemon() {
    let mut h = Harness::new();
    let (manager, _) = h.client();
    let (name, text) = h.driver_error(
        manager,
        add_server_call("not a type", "app", empty_asv(), empty_asv()),
    );
    assert_eq!(name, errors::INVALID_ARGS);
    assert_eq!(
        text,
        "The container type identifier must have the syntax of an interface name"
    );
    let named = asv(vec![("ThisArgumentIsntImplemented", Value::Bool(false))]);
    let (name, text) = h.driver_error(
        manager,
        add_server_call("com.example.X", "app", empty_asv(), named),
    );
    assert_eq!(name, errors::INVALID_ARGS);
    assert_eq!(
        text,
        "Named parameter ThisArgumentIsntImplemented is not understood"
    );
    assert!(h.listening.is_empty());
}

fn strings(items: &[&str]) -> Value {
    Value::Array {
        elem_sig: "s".into(),
        items: items.iter().map(|i| s(i)).collect(),
    }
}

/// AddServer with `org.quickbus.Filter` = `options`: the instance path.
fn add_filtered_server(h: &mut Harness, from: ConnId, options: &[&str]) -> String {
    let named = asv(vec![("org.quickbus.Filter", strings(options))]);
    let reply = h.call(
        from,
        add_server_call("com.example.NotFlatpak", "app", empty_asv(), named),
    );
    assert_eq!(reply.msg_type(), MessageType::MethodReturn, "{reply:?}");
    match &reply.body_values().unwrap()[0] {
        Value::ObjectPath(p) => p.clone(),
        other => panic!("AddServer returned {other:?}"),
    }
}

fn list_names(h: &mut Harness, from: ConnId) -> Vec<String> {
    match &h.driver(from, "ListNames", vec![])[0] {
        Value::Array { items, .. } => items
            .iter()
            .map(|n| match n {
                Value::String(n) => n.clone(),
                other => panic!("{other:?}"),
            })
            .collect(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_filter_argument_is_listed_and_checked() {
    let mut h = Harness::new();
    let (manager, _) = h.client();
    let get = MessageBuilder::method_call(BUS_PATH, "Get")
        .interface("org.freedesktop.DBus.Properties")
        .destination(BUS_NAME)
        .body(vec![s(CONTAINERS1), s("SupportedArguments")]);
    let supported = ok(&mut h, manager, get);
    let Value::Variant(inner) = &supported[0] else {
        panic!("{supported:?}")
    };
    assert_eq!(**inner, strings(&["org.quickbus.Filter"]));
    for (value, words) in [
        (strings(&["--talk"]), "--talk"),
        (strings(&["--log"]), "--log"),
        (Value::Bool(true), "array of strings"),
        (
            Value::Array {
                elem_sig: "u".into(),
                items: vec![Value::Uint32(1)],
            },
            "array of strings",
        ),
    ] {
        let named = asv(vec![("org.quickbus.Filter", value)]);
        let (name, text) = h.driver_error(
            manager,
            add_server_call("com.example.X", "app", empty_asv(), named),
        );
        assert_eq!(name, errors::INVALID_ARGS);
        assert!(text.contains(words), "{text:?} should name {words:?}");
    }
    assert!(
        h.bus.container_instance_of(manager).is_none(),
        "no instance was made"
    );
}

#[test]
fn a_filtered_instances_connections_see_only_what_the_filter_gives() {
    let mut h = Harness::new();
    let (manager, _) = h.client();
    let (service, _) = h.client();
    assert_eq!(h.request_name(service, "org.example.Talk", 0), 1);
    assert_eq!(h.request_name(service, "org.example.Hidden", 0), 1);
    let filtered = add_filtered_server(&mut h, manager, &["--talk=org.example.Talk"]);
    let (plain_instance, _, _) = add_server(&mut h, manager);
    let (app, _) = contained(&mut h, &filtered, 1000);
    let (unfiltered_app, _) = contained(&mut h, &plain_instance, 1000);

    let seen = list_names(&mut h, app);
    assert!(seen.iter().any(|n| n == "org.example.Talk"), "{seen:?}");
    assert!(!seen.iter().any(|n| n == "org.example.Hidden"), "{seen:?}");
    let seen = list_names(&mut h, unfiltered_app);
    assert!(seen.iter().any(|n| n == "org.example.Hidden"), "{seen:?}");
}

#[test]
fn the_limits_refuse_with_dbus_daemons_texts() {
    let mut opts = super::options();
    opts.limits.max_containers = 2;
    opts.limits.max_containers_per_user = 1;
    opts.limits.max_container_metadata_bytes = 64;
    let mut h = Harness::with_options(opts);
    let (manager, me) = h.client();
    let big = asv(vec![("waste", Value::String("x".repeat(64)))]);
    let (name, text) = h.driver_error(
        manager,
        add_server_call("com.example.X", "app", big, empty_asv()),
    );
    assert_eq!(name, errors::LIMITS_EXCEEDED);
    assert!(
        text.starts_with(&format!(
            "Connection \"{me}\" (uid=1000 pid=100 comm=\"\") is not allowed to set "
        )) && text.ends_with(" bytes of container metadata (max_container_metadata_bytes=64)"),
        "{text}"
    );
    add_server(&mut h, manager);
    let (name, text) = h.driver_error(
        manager,
        add_server_call("com.example.X", "app", empty_asv(), empty_asv()),
    );
    assert_eq!(name, errors::LIMITS_EXCEEDED);
    assert_eq!(text, format!("Connection \"{me}\" (uid=1000 pid=100 comm=\"\") is not allowed to create more container servers for uid 1000 (max_containers_per_user=1)"));
    let other = h.bus.add_connection(creds(2000, 200), true);
    h.driver(other, "Hello", vec![]);
    h.take();
    add_server(&mut h, other);
    let (name, text) = h.driver_error(
        manager,
        add_server_call("com.example.X", "app", empty_asv(), empty_asv()),
    );
    assert_eq!(name, errors::LIMITS_EXCEEDED);
    assert!(
        text.ends_with("is not allowed to create more container servers (max_containers=2)"),
        "{text}"
    );
}

#[test]
fn a_contained_connection_is_named_in_credentials_and_instance_calls() {
    let mut h = Harness::new();
    let (manager, _) = h.client();
    let metadata = asv(vec![("Species", s("Martes martes"))]);
    let reply = h.call(
        manager,
        add_server_call("org.example.Springwatch", "", metadata.clone(), empty_asv()),
    );
    let Value::ObjectPath(instance) = &reply.body_values().unwrap()[0] else {
        panic!()
    };
    let instance = instance.clone();
    let (_, app) = contained(&mut h, &instance, 1000);
    let body = h.driver(manager, "GetConnectionCredentials", vec![s(&app)]);
    let Value::Array { items, .. } = &body[0] else {
        panic!()
    };
    let key = Value::DictEntry(
        Box::new(s("org.freedesktop.DBus.Containers1.Instance")),
        Box::new(Value::Variant(Box::new(path(&instance)))),
    );
    assert!(items.contains(&key), "{items:?}");
    let got = h.call(manager, containers("GetConnectionInstance", vec![s(&app)]));
    assert_eq!(got.signature(), "oa{sv}ssa{sv}");
    let values = got.body_values().unwrap();
    assert_eq!(values[0], path(&instance));
    assert_eq!(
        values[2..],
        [s("org.example.Springwatch"), s(""), metadata.clone()]
    );
    let creator = match &values[1] {
        Value::Array { items, .. } => items.clone(),
        other => panic!("{other:?}"),
    };
    let uid = Value::DictEntry(
        Box::new(s("UnixUserID")),
        Box::new(Value::Variant(Box::new(Value::Uint32(1000)))),
    );
    assert!(creator.contains(&uid), "{creator:?}");
    let info = h.call(
        manager,
        containers("GetInstanceInfo", vec![path(&instance)]),
    );
    assert_eq!(info.signature(), "a{sv}ssa{sv}");
    assert_eq!(info.body_values().unwrap()[1..], values[2..]);
}

#[test]
fn instance_queries_refuse_what_is_not_a_container() {
    let mut h = Harness::new();
    let (manager, me) = h.client();
    let cases = [
        (
            containers("GetConnectionInstance", vec![s(&me)]),
            errors::NOT_CONTAINER,
            format!("Connection '{me}' is not in a container"),
        ),
        (
            containers("GetConnectionInstance", vec![s(BUS_NAME)]),
            errors::NOT_CONTAINER,
            "The message bus is not in a container".to_owned(),
        ),
        (
            containers("GetConnectionInstance", vec![s("com.example.Nope")]),
            errors::NAME_HAS_NO_OWNER,
            "Could not get container instance of name 'com.example.Nope': no such name".to_owned(),
        ),
        (
            containers("GetInstanceInfo", vec![path("/nope")]),
            errors::NOT_CONTAINER,
            "There is no container with path '/nope'".to_owned(),
        ),
        (
            containers("StopInstance", vec![path("/nope")]),
            errors::NOT_CONTAINER,
            "There is no container with path '/nope'".to_owned(),
        ),
        (
            containers("StopListening", vec![path("/nope")]),
            errors::NOT_CONTAINER,
            "There is no container with path '/nope'".to_owned(),
        ),
    ];
    for (call, name, text) in cases {
        assert_eq!(h.driver_error(manager, call), (name.to_owned(), text));
    }
}

#[test]
fn another_uid_cannot_stop_an_instance() {
    let mut h = Harness::new();
    let (manager, _) = h.client();
    let (instance, _, _) = add_server(&mut h, manager);
    let attacker = h.bus.add_connection(creds(2000, 200), true);
    h.driver(attacker, "Hello", vec![]);
    h.take();
    for member in ["StopInstance", "StopListening"] {
        let (name, text) = h.driver_error(attacker, containers(member, vec![path(&instance)]));
        assert_eq!(name, errors::ACCESS_DENIED);
        assert_eq!(
            text,
            "User 2000 cannot stop a container server started by user 1000"
        );
    }
    assert!(h.stopped.is_empty());
}

#[test]
fn a_contained_connection_cannot_nest_or_use_privileged_methods() {
    let mut h = Harness::new();
    let (manager, _) = h.client();
    let (instance, _, _) = add_server(&mut h, manager);
    let (app, name) = contained(&mut h, &instance, 1000);
    let (err, text) = h.driver_error(
        app,
        add_server_call("com.example.X", "inner", empty_asv(), empty_asv()),
    );
    assert_eq!(err, errors::ACCESS_DENIED);
    assert_eq!(
        text,
        format!("rejected attempt to call AddServer by connection {name} (uid=1000 pid=300 comm=\"\") in container")
    );
    // Its uid is the bus's own, but a container is never privileged.
    let (err, text) = h.driver_error(
        app,
        call_bus(
            "UpdateActivationEnvironment",
            vec![Value::Array {
                elem_sig: "{ss}".into(),
                items: vec![],
            }],
        ),
    );
    assert_eq!(err, errors::ACCESS_DENIED);
    assert!(text.ends_with("in container"), "{text}");
    // Nor eavesdrop, which is privileged too.
    let (err, text) = h.driver_error(app, call_bus("AddMatch", vec![s("eavesdrop=true")]));
    assert_eq!(err, errors::ACCESS_DENIED);
    assert!(
        text.starts_with("rejected attempt to call AddMatch by connection"),
        "{text}"
    );
    assert!(text.ends_with("in container"), "{text}");
    let stats = MessageBuilder::method_call(BUS_PATH, "GetStats")
        .interface("org.freedesktop.DBus.Debug.Stats")
        .destination(BUS_NAME);
    assert_eq!(h.driver_error(app, stats).0, errors::ACCESS_DENIED);
    // Reading is allowed.
    h.driver(app, "GetConnectionCredentials", vec![s(&name)]);
}

#[test]
fn stop_listening_keeps_the_instance_until_its_last_connection_leaves() {
    let (mut h, w, manager, instance) = watched_instance();
    let (app, _) = contained(&mut h, &instance, 1000);
    ok(
        &mut h,
        manager,
        containers("StopListening", vec![path(&instance)]),
    );
    h.answer_containers();
    assert_eq!(h.stopped, vec![(instance.clone(), false)]);
    assert!(instance_removed(&mut h, w).is_empty());
    ok(
        &mut h,
        manager,
        containers("GetInstanceInfo", vec![path(&instance)]),
    );
    h.bus.remove_connection(app, h.now, &mut h.out);
    assert_eq!(instance_removed(&mut h, w), vec![instance.clone()]);
    let (err, _) = h.driver_error(
        manager,
        containers("GetInstanceInfo", vec![path(&instance)]),
    );
    assert_eq!(err, errors::NOT_CONTAINER);
}

#[test]
fn stop_listening_without_connections_removes_it_at_once() {
    let (mut h, w, manager, instance) = watched_instance();
    ok(
        &mut h,
        manager,
        containers("StopListening", vec![path(&instance)]),
    );
    assert_eq!(instance_removed(&mut h, w), vec![instance]);
}

#[test]
fn stop_instance_asks_the_daemon_to_close_its_connections() {
    let (mut h, w, manager, instance) = watched_instance();
    let (app, _) = contained(&mut h, &instance, 1000);
    ok(
        &mut h,
        manager,
        containers("StopInstance", vec![path(&instance)]),
    );
    h.answer_containers();
    assert_eq!(h.stopped, vec![(instance.clone(), true)]);
    // The daemon closes it.
    h.bus.remove_connection(app, h.now, &mut h.out);
    assert_eq!(instance_removed(&mut h, w), vec![instance]);
}

#[test]
fn the_creator_leaving_stops_listening_and_its_apps_keep_working() {
    let (mut h, w, manager, instance) = watched_instance();
    let (unused, _, _) = add_server(&mut h, manager);
    let (app, _) = contained(&mut h, &instance, 1000);
    h.bus.remove_connection(manager, h.now, &mut h.out);
    h.answer_containers();
    let mut stopped = h.stopped.clone();
    stopped.sort();
    assert_eq!(
        stopped,
        vec![(instance.clone(), false), (unused.clone(), false)]
    );
    assert_eq!(instance_removed(&mut h, w), vec![unused]);
    // The creator's credentials outlive it.
    let info = h.driver(app, "GetId", vec![]);
    assert_eq!(info.len(), 1);
    let got = h.call(w, containers("GetInstanceInfo", vec![path(&instance)]));
    assert_eq!(got.msg_type(), MessageType::MethodReturn);
    h.bus.remove_connection(app, h.now, &mut h.out);
    assert_eq!(instance_removed(&mut h, w), vec![instance]);
}

/// A handed-over state where a contained connection is counted by a
/// second instance too is refused before it serves
/// (`Containers::check_connections` has the other cases).
#[test]
fn a_handed_over_connection_in_two_instances_is_refused() {
    let mut h = Harness::new();
    let (manager, _) = h.client();
    let (first, _, _) = add_server(&mut h, manager);
    let (second, _, _) = add_server(&mut h, manager);
    let (app, _) = contained(&mut h, &first, 1000);
    assert_eq!(h.bus.check_handed_over(), Ok(vec![]));
    let instance = h.bus.containers.get_mut(&second).unwrap();
    instance.connections.insert(app);
    assert_eq!(
        h.bus.check_handed_over(),
        Err(format!(
            "the container instance {second} counts connection {}, which came through {first}",
            app.0
        ))
    );
}

#[test]
fn a_connection_cannot_join_an_instance_that_is_gone() {
    let mut h = Harness::new();
    let (manager, _) = h.client();
    let (instance, _, _) = add_server(&mut h, manager);
    ok(
        &mut h,
        manager,
        containers("StopListening", vec![path(&instance)]),
    );
    h.answer_containers();
    let id = h.bus.next_connection_id();
    assert!(!h
        .bus
        .add_contained_connection(id, creds(1000, 1), true, &instance));
    assert!(h.bus.credentials(id).is_none());
}

/// The header field 10 of a delivery, if any.
fn container_field(msg: &Message) -> Option<String> {
    let raw = msg.raw();
    let fields_len = u32::from_le_bytes(raw[12..16].try_into().unwrap()) as usize;
    let mut at = 16;
    while at < 16 + fields_len {
        let code = raw[at];
        let sig_len = raw[at + 1] as usize;
        let sig = raw[at + 2];
        let mut pos = at + 2 + sig_len + 1;
        let value = match sig {
            b'u' => {
                pos = pos.next_multiple_of(4) + 4;
                None
            }
            b's' | b'o' => {
                let start = pos.next_multiple_of(4);
                let len = u32::from_le_bytes(raw[start..start + 4].try_into().unwrap()) as usize;
                pos = start + 4 + len + 1;
                Some(String::from_utf8(raw[start + 4..start + 4 + len].to_vec()).unwrap())
            }
            b'g' => {
                let len = raw[pos] as usize;
                pos += 1 + len + 1;
                None
            }
            other => panic!("field type {other}"),
        };
        if code == 10 {
            return value;
        }
        at = pos.next_multiple_of(8);
    }
    None
}

/// `conn` asks for the container-instance header field, and gets it.
pub(super) fn request_header(h: &mut Harness, conn: ConnId) {
    h.driver(conn, "GetId", vec![]);
    let reply = h.call(conn, containers("RequestHeader", vec![]));
    assert_eq!(reply.msg_type(), MessageType::MethodReturn);
}

#[test]
fn request_header_stamps_the_senders_instance_on_what_the_caller_receives() {
    let mut h = Harness::new();
    let (manager, _) = h.client();
    let (instance, _, _) = add_server(&mut h, manager);
    let (app, _) = contained(&mut h, &instance, 1000);
    let (observer, _) = h.client();
    h.add_match(observer, "interface='com.example.Shouting'");
    let shout = || MessageBuilder::signal("/", "com.example.Shouting", "Shouted");
    let heard = |h: &mut Harness| {
        let got = h.take();
        let (_, m) = got
            .iter()
            .find(|(to, m)| *to == observer && m.member() == Some("Shouted"))
            .expect("the observer heard the shout");
        container_field(m)
    };
    h.send(app, shout());
    assert_eq!(heard(&mut h), None);
    request_header(&mut h, observer);
    h.send(app, shout());
    assert_eq!(heard(&mut h), Some(instance));
    h.send(manager, shout());
    assert_eq!(heard(&mut h), Some("/".to_owned()));
    // Replies from the bus carry it too, as "/".
    let id = h.call(observer, call_bus("GetId", vec![]));
    assert_eq!(container_field(&id), Some("/".to_owned()));
    let _ = parse_out;
}

#[test]
fn among_a_broadcasts_receivers_only_those_that_asked_for_the_header_get_it() {
    // A broadcast is queued for all its receivers in one step: the
    // receiver that asked still gets a copy of its own, with the field,
    // the others the shared one, without, each in the receivers' order.
    let mut h = Harness::new();
    let (manager, _) = h.client();
    let (instance, _, _) = add_server(&mut h, manager);
    let (app, _) = contained(&mut h, &instance, 1000);
    let observers: Vec<ConnId> = (0..3).map(|_| h.client().0).collect();
    for &o in &observers {
        h.add_match(o, "interface='com.example.Shouting'");
    }
    let asked = observers[1];
    request_header(&mut h, asked);
    h.send(
        app,
        MessageBuilder::signal("/", "com.example.Shouting", "Shouted"),
    );
    let heard: Vec<(ConnId, Option<String>)> = h
        .take()
        .into_iter()
        .filter(|(_, m)| m.member() == Some("Shouted"))
        .map(|(to, m)| (to, container_field(&m)))
        .collect();
    let expected: Vec<(ConnId, Option<String>)> = observers
        .iter()
        .map(|&o| (o, (o == asked).then(|| instance.clone())))
        .collect();
    assert_eq!(heard, expected);
}

#[test]
fn a_filter_counts_against_the_metadata_limit_and_is_compiled_after_the_limits() {
    let mut opts = super::options();
    opts.limits.max_container_metadata_bytes = 256;
    opts.limits.max_containers_per_user = 1;
    let mut h = Harness::with_options(opts);
    let (manager, _) = h.client();
    let many: Vec<String> = (0..20)
        .map(|i| format!("--talk=org.example.N{i}"))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let named = |options: &[&str]| asv(vec![("org.quickbus.Filter", strings(options))]);
    let (name, text) = h.driver_error(
        manager,
        add_server_call("com.example.X", "app", empty_asv(), named(&many)),
    );
    assert_eq!(name, errors::LIMITS_EXCEEDED);
    assert!(
        text.contains("org.quickbus.Filter options (max_container_metadata_bytes=256)"),
        "{text}"
    );
    // Within the limit it is made; the next one is over the user's limit,
    // which is checked before a malformed option is even read.
    add_filtered_server(&mut h, manager, &many[..3]);
    let (name, text) = h.driver_error(
        manager,
        add_server_call("com.example.X", "app", empty_asv(), named(&["--log"])),
    );
    assert_eq!(name, errors::LIMITS_EXCEEDED);
    assert!(text.contains("max_containers_per_user=1"), "{text}");
}

#[test]
fn instance_removed_comes_before_the_stop_reply_as_in_dbus_daemon() {
    for member in ["StopListening", "StopInstance"] {
        let (mut h, _watch, manager, instance) = watched_instance();
        h.add_match(
            manager,
            "type='signal',interface='org.freedesktop.DBus.Containers1',member='InstanceRemoved'",
        );
        h.take();
        h.send(manager, containers(member, vec![path(&instance)]));
        let to_manager: Vec<MessageType> = h
            .take()
            .into_iter()
            .filter(|(to, _)| *to == manager)
            .map(|(_, m)| m.msg_type())
            .collect();
        assert_eq!(
            to_manager,
            [MessageType::Signal, MessageType::MethodReturn],
            "{member}"
        );
    }
}

#[test]
fn after_a_restart_an_instances_connections_share_its_one_filter_again() {
    let mut h = Harness::new();
    let (manager, _) = h.client();
    let instance = add_filtered_server(&mut h, manager, &["--talk=org.example.Talk"]);
    let (first, _) = contained(&mut h, &instance, 1000);
    let (second, _) = contained(&mut h, &instance, 1000);
    let h = super::handover::restarted(&h);
    let shared = h
        .bus
        .containers
        .get(&instance)
        .unwrap()
        .filter
        .clone()
        .unwrap();
    for conn in [first, second] {
        let view = h.bus.app_views.get(conn).expect("still filtered");
        assert!(
            std::ptr::eq(view.filter(), &*shared),
            "{conn:?} has a copy of its own"
        );
    }
}
