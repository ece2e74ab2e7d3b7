//! The driver's other methods: credentials, ids, activation, properties, introspection.

use super::*;

#[test]
fn anonymous_connections_have_no_uid_pid_or_groups() {
    let mut h = Harness::new();
    let id = h.bus.add_connection(
        Credentials {
            anonymous: true,
            ..creds(1001, 77)
        },
        false,
    );
    let name = match &h.driver(id, "Hello", vec![])[0] {
        Value::String(n) => n.clone(),
        _ => unreachable!(),
    };
    h.take();
    let (error, _) = h.driver_error(id, call_bus("GetConnectionUnixUser", vec![s(&name)]));
    assert_eq!(error, errors::FAILED);
    let (error, _) = h.driver_error(id, call_bus("GetConnectionUnixProcessID", vec![s(&name)]));
    assert_eq!(error, errors::UNIX_PROCESS_ID_UNKNOWN);
    let creds = h.driver(id, "GetConnectionCredentials", vec![s(&name)]);
    assert_eq!(
        creds,
        vec![Value::Array {
            elem_sig: "{sv}".into(),
            items: vec![]
        }]
    );
}

#[test]
fn connection_credentials() {
    let mut h = Harness::new();
    let id = h.bus.add_connection(
        Credentials {
            uid: 1001,
            gid: 1001,
            pid: Some(77),
            groups: vec![1001, 10],
            security_label: Some(b"unconfined".to_vec()),
            ..Credentials::default()
        },
        false,
    );
    let name = match &h.driver(id, "Hello", vec![])[0] {
        Value::String(n) => n.clone(),
        _ => unreachable!(),
    };
    h.take();
    assert_eq!(
        h.driver(id, "GetConnectionUnixUser", vec![s(&name)]),
        vec![Value::Uint32(1001)]
    );
    assert_eq!(
        h.driver(id, "GetConnectionUnixProcessID", vec![s(&name)]),
        vec![Value::Uint32(77)]
    );
    assert_eq!(
        h.driver(id, "GetConnectionUnixUser", vec![s(BUS_NAME)]),
        vec![Value::Uint32(1000)]
    );
    assert_eq!(
        h.driver(id, "GetConnectionUnixProcessID", vec![s(BUS_NAME)]),
        vec![Value::Uint32(4242)]
    );
    let creds = h.driver(id, "GetConnectionCredentials", vec![s(&name)]);
    let Value::Array { elem_sig, items } = &creds[0] else {
        panic!()
    };
    assert_eq!(elem_sig, "{sv}");
    let entry = |key: &str| {
        items.iter().find_map(|i| match i {
            Value::DictEntry(k, v) if **k == s(key) => Some((**v).clone()),
            _ => None,
        })
    };
    assert_eq!(
        entry("UnixUserID"),
        Some(Value::Variant(Box::new(Value::Uint32(1001))))
    );
    assert_eq!(
        entry("ProcessID"),
        Some(Value::Variant(Box::new(Value::Uint32(77))))
    );
    assert_eq!(
        entry("UnixGroupIDs"),
        Some(Value::Variant(Box::new(Value::Array {
            elem_sig: "u".into(),
            items: vec![Value::Uint32(10), Value::Uint32(1001)]
        })))
    );
    let label: Vec<Value> = b"unconfined\0".iter().map(|&b| Value::Byte(b)).collect();
    assert_eq!(
        entry("LinuxSecurityLabel"),
        Some(Value::Variant(Box::new(Value::Array {
            elem_sig: "y".into(),
            items: label
        })))
    );
    assert_eq!(
        h.driver_error(id, call_bus("GetConnectionUnixUser", vec![s(":1.99")])),
        (
            errors::NAME_HAS_NO_OWNER.into(),
            "Could not get UID of name ':1.99': no such name".into()
        )
    );
    assert_eq!(
        h.driver_error(
            id,
            call_bus("GetConnectionUnixProcessID", vec![s("org.x.Y")])
        )
        .1,
        "Could not get PID of name 'org.x.Y': no such name"
    );
    assert_eq!(
        h.driver_error(id, call_bus("GetAdtAuditSessionData", vec![s(&name)])),
        (
            errors::ADT_AUDIT_DATA_UNKNOWN.into(),
            format!("Could not determine audit session data for '{name}'")
        )
    );
    assert_eq!(
        h.driver_error(
            id,
            call_bus("GetConnectionSELinuxSecurityContext", vec![s(&name)])
        ),
        (
            errors::SELINUX_SECURITY_CONTEXT_UNKNOWN.into(),
            format!("Could not determine security context for '{name}'")
        )
    );
}

#[test]
fn pid_unknown_is_an_error() {
    let mut h = Harness::new();
    let id = h.bus.add_connection(
        Credentials {
            uid: 5,
            pid: None,
            ..Credentials::default()
        },
        false,
    );
    h.driver(id, "Hello", vec![]);
    let err = h.driver_error(id, call_bus("GetConnectionUnixProcessID", vec![s(":1.0")]));
    assert_eq!(
        err,
        (
            errors::UNIX_PROCESS_ID_UNKNOWN.into(),
            "Could not determine PID for ':1.0'".into()
        )
    );
}

#[test]
fn ids_ping_and_reload() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    assert_eq!(
        h.driver(a, "GetId", vec![]),
        vec![s("0123456789abcdef0123456789abcdef")]
    );
    let peer = |m: &str| {
        MessageBuilder::method_call("/any/path", m)
            .interface("org.freedesktop.DBus.Peer")
            .destination(BUS_NAME)
    };
    let reply = h.call(a, peer("GetMachineId"));
    assert_eq!(
        reply.body_values().unwrap(),
        vec![s("fedcba9876543210fedcba9876543210")]
    );
    let reply = h.call(a, peer("Ping"));
    assert_eq!(reply.msg_type(), MessageType::MethodReturn);
    assert_eq!(reply.signature(), "");
    assert!(h.out.is_empty());
    h.driver(a, "ReloadConfig", vec![]);
    // The reply was taken by driver(); the reload is asked for after it,
    // once.
    assert!(matches!(&h.out[..], [Action::ReloadConfig]));
}

#[test]
fn start_service_by_name() {
    let mut h = Harness::new();
    let (a, name_a) = h.client();
    let start = |name: &str| call_bus("StartServiceByName", vec![s(name), Value::Uint32(0)]);
    // Running, but without a .service file: unknown, as in dbus-daemon.
    let err = h.driver_error(a, start(&name_a));
    assert_eq!(
        err,
        (
            errors::SERVICE_UNKNOWN.into(),
            format!("The name {name_a} was not provided by any .service files")
        )
    );
    let err = h.driver_error(a, start("org.example.Gone"));
    assert_eq!(err.0, errors::SERVICE_UNKNOWN);
    // Activatable and running.
    h.request_name(a, "org.example.Activatable", 0);
    assert_eq!(
        h.driver(
            a,
            "StartServiceByName",
            vec![s("org.example.Activatable"), Value::Uint32(0)]
        ),
        vec![Value::Uint32(2)]
    );
    // Activatable, not running: see activation::tests.
}

#[test]
fn update_activation_environment_is_stored_and_privileged() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let env = Value::Array {
        elem_sig: "{ss}".into(),
        items: vec![Value::DictEntry(Box::new(s("DISPLAY")), Box::new(s(":0")))],
    };
    h.driver(a, "UpdateActivationEnvironment", vec![env.clone()]);
    assert_eq!(
        h.bus
            .activation_environment()
            .get("DISPLAY")
            .map(String::as_str),
        Some(":0")
    );
    // Another user may not.
    let other = h.bus.add_connection(creds(2000, 5), false);
    h.driver(other, "Hello", vec![]);
    let (name, text) = h.driver_error(
        other,
        call_bus("UpdateActivationEnvironment", vec![env.clone()]),
    );
    assert_eq!(name, errors::ACCESS_DENIED);
    assert!(
        text.starts_with("rejected attempt to call UpdateActivationEnvironment by connection :1.1"),
        "{text}"
    );
    // Only on the canonical path.
    let err = h.driver_error(
        a,
        MessageBuilder::method_call("/", "UpdateActivationEnvironment")
            .interface(BUS_INTERFACE)
            .destination(BUS_NAME)
            .body(vec![env]),
    );
    assert_eq!(err.0, errors::ACCESS_DENIED);
    assert_eq!(err.1, "Method 'UpdateActivationEnvironment' is only available at the canonical object path '/org/freedesktop/DBus'");
}

fn env_of(pairs: &[(&str, &str)]) -> Value {
    Value::Array {
        elem_sig: "{ss}".into(),
        items: pairs
            .iter()
            .map(|(k, v)| Value::DictEntry(Box::new(s(k)), Box::new(s(v))))
            .collect(),
    }
}

#[test]
fn the_activation_environment_is_bounded_in_variables_and_bytes() {
    let mut opts = options();
    opts.limits.max_activation_environment_variables = 3;
    opts.limits.max_activation_environment_bytes = 20;
    let mut h = Harness::with_options(opts);
    let (a, _) = h.client();
    h.driver(
        a,
        "UpdateActivationEnvironment",
        vec![env_of(&[("A", "1"), ("B", "2")])],
    );
    // Replacing a variable does not count it twice.
    h.driver(
        a,
        "UpdateActivationEnvironment",
        vec![env_of(&[("A", "3")])],
    );
    // A fourth variable is one too many: refused whole, nothing changed.
    let (name, text) = h.driver_error(
        a,
        call_bus(
            "UpdateActivationEnvironment",
            vec![env_of(&[("C", "4"), ("D", "5")])],
        ),
    );
    assert_eq!(name, errors::LIMITS_EXCEEDED);
    assert!(
        text.contains("max_activation_environment_variables=3"),
        "{text}"
    );
    let env = h.bus.activation_environment();
    assert_eq!(env.len(), 2);
    assert_eq!(env.get("A").map(String::as_str), Some("3"));
    // Names and values count in bytes: 2 + 2 + 17 > 20.
    let (name, text) = h.driver_error(
        a,
        call_bus(
            "UpdateActivationEnvironment",
            vec![env_of(&[("C", "0123456789abcdef")])],
        ),
    );
    assert_eq!(name, errors::LIMITS_EXCEEDED);
    assert!(
        text.contains("max_activation_environment_bytes=20"),
        "{text}"
    );
    assert!(!h.bus.activation_environment().contains_key("C"));
    // Within both: fine.
    h.driver(
        a,
        "UpdateActivationEnvironment",
        vec![env_of(&[("C", "x")])],
    );
    assert_eq!(h.bus.activation_environment().len(), 3);
}

#[test]
fn system_bus_refuses_activation_environment() {
    let mut opts = options();
    opts.bus_type = "system".into();
    let mut h = Harness::with_options(opts);
    let (a, _) = h.client();
    let env = Value::Array {
        elem_sig: "{ss}".into(),
        items: vec![],
    };
    let err = h.driver_error(a, call_bus("UpdateActivationEnvironment", vec![env]));
    assert_eq!(
        err,
        (
            errors::ACCESS_DENIED.into(),
            "Cannot change activation environment on a system bus.".into()
        )
    );
}

#[test]
fn unknown_methods_interfaces_and_wrong_args() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    assert_eq!(
        h.driver_error(a, call_bus("Frobnicate", vec![])),
        (
            errors::UNKNOWN_METHOD.into(),
            "org.freedesktop.DBus does not understand message Frobnicate".into()
        )
    );
    let unknown_iface = MessageBuilder::method_call(BUS_PATH, "Ping")
        .interface("org.example.Nope")
        .destination(BUS_NAME);
    assert_eq!(
        h.driver_error(a, unknown_iface),
        (
            errors::UNKNOWN_INTERFACE.into(),
            "org.freedesktop.DBus does not understand message Ping".into()
        )
    );
    assert_eq!(
        h.driver_error(a, call_bus("RequestName", vec![s("org.example.X")])),
        (
            errors::INVALID_ARGS.into(),
            "Call to RequestName has wrong args (s, expected su)\n".into()
        )
    );
    // No interface: any interface's method will do.
    let reply = h.call(
        a,
        MessageBuilder::method_call("/", "Ping").destination(BUS_NAME),
    );
    assert_eq!(reply.msg_type(), MessageType::MethodReturn);
    // Older methods answer on any path.
    let reply = h.call(
        a,
        MessageBuilder::method_call("/some/where", "GetId")
            .interface(BUS_INTERFACE)
            .destination(BUS_NAME),
    );
    assert_eq!(reply.msg_type(), MessageType::MethodReturn);
    // Properties only on the canonical path.
    let get = MessageBuilder::method_call("/", "Get")
        .interface("org.freedesktop.DBus.Properties")
        .destination(BUS_NAME)
        .body(vec![s(BUS_INTERFACE), s("Features")]);
    assert_eq!(h.driver_error(a, get).0, errors::UNKNOWN_INTERFACE);
}

#[test]
fn no_reply_expected_gets_no_reply_even_on_error() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    h.send(a, call_bus("GetId", vec![]).flags(flags::NO_REPLY_EXPECTED));
    h.send(
        a,
        call_bus("Frobnicate", vec![]).flags(flags::NO_REPLY_EXPECTED),
    );
    h.send(
        a,
        call_bus(
            "RequestName",
            vec![s("org.example.Quiet"), Value::Uint32(0)],
        )
        .flags(flags::NO_REPLY_EXPECTED),
    );
    // The name was still taken; only NameAcquired arrives.
    assert_eq!(
        summary(&h.take()),
        vec![(a, "NameAcquired".into(), strings(&["org.example.Quiet"]))]
    );
}

#[test]
fn signals_and_replies_to_the_driver_are_ignored() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    h.send(
        a,
        MessageBuilder::signal("/", "org.example.I", "S").destination(BUS_NAME),
    );
    h.send(a, MessageBuilder::method_return(1).destination(BUS_NAME));
    assert!(h.take().is_empty());
}

#[test]
fn properties() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let reply = get_property(&mut h, a, BUS_INTERFACE, "Features");
    assert_eq!(
        reply.body_values().unwrap(),
        vec![Value::Variant(Box::new(Value::Array {
            elem_sig: "s".into(),
            items: vec![s("ActivatableServicesChanged"), s("HeaderFiltering")]
        }))]
    );
    let reply = get_property(&mut h, a, BUS_INTERFACE, "Interfaces");
    assert_eq!(reply.signature(), "v");
    let reply = get_property(&mut h, a, BUS_INTERFACE, "Nope");
    assert_eq!(reply.error_name(), Some(errors::UNKNOWN_PROPERTY));
    assert_eq!(
        reply.body_values().unwrap(),
        vec![s("Property \"org.freedesktop.DBus.Nope\" not found")]
    );
    let reply = get_property(&mut h, a, "org.example.Nope", "X");
    assert_eq!(reply.error_name(), Some(errors::UNKNOWN_INTERFACE));
    assert_eq!(
        reply.body_values().unwrap(),
        vec![s("Interface \"org.example.Nope\" not found")]
    );
    let all = h.call(
        a,
        MessageBuilder::method_call(BUS_PATH, "GetAll")
            .interface("org.freedesktop.DBus.Properties")
            .destination(BUS_NAME)
            .body(vec![s(BUS_INTERFACE)]),
    );
    let Value::Array { items, .. } = &all.body_values().unwrap()[0] else {
        panic!()
    };
    assert_eq!(items.len(), 2);
    let set = h.call(
        a,
        MessageBuilder::method_call(BUS_PATH, "Set")
            .interface("org.freedesktop.DBus.Properties")
            .destination(BUS_NAME)
            .body(vec![
                s(BUS_INTERFACE),
                s("Features"),
                Value::Variant(Box::new(Value::Uint32(1))),
            ]),
    );
    assert_eq!(set.error_name(), Some(errors::PROPERTY_READ_ONLY));
    assert_eq!(
        set.body_values().unwrap(),
        vec![s("Property 'org.freedesktop.DBus.Features' cannot be set")]
    );
}

#[test]
fn introspect_answers_on_any_path() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let reply = h.call(
        a,
        MessageBuilder::method_call("/", "Introspect")
            .interface("org.freedesktop.DBus.Introspectable")
            .destination(BUS_NAME),
    );
    let Value::String(xml) = &reply.body_values().unwrap()[0] else {
        panic!()
    };
    assert!(xml.contains("<node name=\"org/freedesktop/DBus\"/>"));
}

#[test]
fn activatable_services_changed_on_every_reload() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let (b, _) = h.client();
    h.add_match(a, "member='ActivatableServicesChanged'");
    // The same services as before: dbus-daemon still says they changed.
    let same = vec!["org.example.Activatable".to_owned()];
    h.bus.set_activatable_names(same, h.now, &mut h.out);
    assert_eq!(
        summary(&h.take()),
        vec![(a, "ActivatableServicesChanged".into(), vec![])]
    );
    h.bus
        .set_activatable_names(vec!["org.example.New".into()], h.now, &mut h.out);
    let got = h.take();
    assert_eq!(
        summary(&got),
        vec![(a, "ActivatableServicesChanged".into(), vec![])]
    );
    assert_eq!(got[0].1.sender(), Some(BUS_NAME));
    let names = h.driver(b, "ListActivatableNames", vec![]);
    assert_eq!(
        string_list(&names[0]),
        strings(&[BUS_NAME, "org.example.New"])
    );
}

fn restart_call() -> MessageBuilder {
    MessageBuilder::method_call(BUS_PATH, "Restart")
        .interface(crate::DAEMON_INTERFACE)
        .destination(BUS_NAME)
}

#[test]
fn restart_is_asked_of_the_daemon_and_answered_when_it_serves_again() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let serial = h.send(a, restart_call());
    let requester = crate::RestartRequester { conn: a, serial };
    assert!(
        matches!(&h.out[..], [Action::Restart { requester: Some(r) }] if *r == requester),
        "{:?}",
        h.out
    );
    h.out.clear();
    h.bus.restart_answered(requester, Ok(()), h.now, &mut h.out);
    let replies = h.take();
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].0, a);
    assert_eq!(replies[0].1.msg_type(), MessageType::MethodReturn);
    assert_eq!(replies[0].1.reply_serial(), Some(serial));
    // A refusal is an error with the daemon's reason.
    let serial = h.send(a, restart_call());
    h.out.clear();
    let refusal = crate::errors::BusError::new(errors::FAILED, "no such binary");
    h.bus.restart_answered(
        crate::RestartRequester { conn: a, serial },
        Err(refusal),
        h.now,
        &mut h.out,
    );
    let replies = h.take();
    assert_eq!(replies[0].1.error_name(), Some(errors::FAILED));
    assert_eq!(replies[0].1.reply_serial(), Some(serial));
}

#[test]
fn restart_is_for_the_bus_user_and_root_only() {
    let mut h = Harness::new();
    let _ = h.client();
    let other = h.bus.add_connection(creds(2000, 5), false);
    h.driver(other, "Hello", vec![]);
    let (name, text) = h.driver_error(other, restart_call());
    assert_eq!(name, errors::ACCESS_DENIED);
    assert!(text.contains("Restart"), "{text}");
    assert!(!h.out.iter().any(|a| matches!(a, Action::Restart { .. })));
    // Only at the canonical path, like the other privileged methods.
    let (_, text) = h.driver_error(
        other,
        MessageBuilder::method_call("/", "Restart")
            .interface(crate::DAEMON_INTERFACE)
            .destination(BUS_NAME),
    );
    assert!(text.contains("Restart"), "{text}");
}
