//! Activation through whole conversations: queueing, replies, failures,
//! time-outs (with the harness's clock), systemd hand-off.

use std::time::Duration;

use quickbus_wire::{flags, Message, MessageBuilder, MessageType, Value};

use crate::activation::{FoundService, SYSTEMD_ACTIVATOR, SYSTEMD_NAME};
use crate::errors::{self, BusError};
use crate::tests::{call_bus, options, parse_out, s, Harness};
use crate::{Action, BusOptions, ConnId};

const SERVICE: &str = "org.example.Activatable";

/// Activations asked for, and deliveries, in order.
fn drain(h: &mut Harness) -> (Vec<String>, Vec<(ConnId, Message)>) {
    let mut started = Vec::new();
    let mut delivered = Vec::new();
    for action in std::mem::take(&mut h.out) {
        match action {
            Action::Queued { to, msg, .. } => delivered.push((to, parse_out(&msg))),
            Action::Activate { name, .. } => started.push(name),
            Action::CancelActivation { name } => started.push(format!("cancel {name}")),
            Action::Disconnect { conn, reason } => panic!("disconnect {conn:?}: {reason}"),
            Action::ReloadConfig => panic!("unexpected reload"),
            Action::Restart { .. } => panic!("unexpected restart"),
            Action::LookUpService { name } => panic!("unanswered lookup of {name}"),
            Action::OpenPidfd { pid, .. } => panic!("unanswered pidfd of {pid}"),
            action @ (Action::ListenContainer { .. } | Action::StopContainer { .. }) => {
                panic!("unexpected {action:?}")
            }
            action @ (Action::HoldSender { .. }
            | Action::ReleaseSender { .. }
            | Action::Warn { .. }) => panic!("unexpected flow control: {action:?}"),
        }
    }
    (started, delivered)
}

fn call_service(member: &str) -> MessageBuilder {
    MessageBuilder::method_call("/org/example", member)
        .interface("org.example.Iface")
        .destination(SERVICE)
}

fn start_call(name: &str) -> MessageBuilder {
    call_bus("StartServiceByName", vec![s(name), Value::Uint32(0)])
}

fn members(delivered: &[(ConnId, Message)], to: ConnId) -> Vec<String> {
    delivered
        .iter()
        .filter(|(t, _)| *t == to)
        .map(|(_, m)| match m.msg_type() {
            MessageType::Error => m.error_name().unwrap().to_owned(),
            MessageType::MethodReturn => "return".to_owned(),
            _ => m.member().unwrap().to_owned(),
        })
        .collect()
}

fn uint_body(m: &Message) -> u32 {
    match m.body_values().unwrap()[..] {
        [Value::Uint32(v)] => v,
        ref other => panic!("expected a u32, got {other:?}"),
    }
}

#[test]
fn queued_messages_reach_the_new_owner_in_order_and_replies_are_tracked() {
    let mut h = Harness::new();
    let (a, name_a) = h.client();
    let first = h.send(a, call_service("First"));
    h.send(
        a,
        MessageBuilder::signal("/org/example", "org.example.Iface", "Second").destination(SERVICE),
    );
    h.send(a, call_service("Third"));
    let (started, delivered) = drain(&mut h);
    assert_eq!(started, [SERVICE], "one activation for three messages");
    assert!(delivered.is_empty(), "nothing can be delivered yet");
    assert!(h.bus.activation_pending(SERVICE));

    let (b, _) = h.client();
    h.request_name(b, SERVICE, 0);
    let (started, delivered) = drain(&mut h);
    assert!(started.is_empty());
    let to_b = members(&delivered, b);
    let queued: Vec<_> = to_b
        .iter()
        .filter(|m| ["First", "Second", "Third"].contains(&m.as_str()))
        .collect();
    assert_eq!(queued, ["First", "Second", "Third"]);
    let sender = delivered
        .iter()
        .find(|(_, m)| m.member() == Some("First"))
        .and_then(|(_, m)| m.sender().map(str::to_owned));
    assert_eq!(sender.as_deref(), Some(name_a.as_str()));
    assert!(!h.bus.activation_pending(SERVICE));

    // The queued call is a tracked call: its reply reaches the caller.
    h.send(b, MessageBuilder::method_return(first).destination(name_a));
    let (_, delivered) = drain(&mut h);
    assert_eq!(members(&delivered, a), ["return"]);
}

#[test]
fn no_auto_start_or_no_service_file_starts_nothing() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let err = h.driver_error(a, call_service("Call").flags(flags::NO_AUTO_START));
    assert_eq!(err.0, errors::NAME_HAS_NO_OWNER);
    let err = h.driver_error(
        a,
        MessageBuilder::method_call("/", "Call").destination("org.example.NoFile"),
    );
    assert_eq!(err.0, errors::SERVICE_UNKNOWN);
    let (started, _) = drain(&mut h);
    assert!(started.is_empty());
}

#[test]
fn start_service_by_name_answers_once_the_name_is_owned() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let serial = h.send(a, start_call(SERVICE));
    let (started, delivered) = drain(&mut h);
    assert_eq!(started, [SERVICE]);
    assert!(delivered.is_empty(), "the reply waits for the service");
    // A second request joins the first activation.
    let second = h.send(a, start_call(SERVICE));
    assert!(drain(&mut h).0.is_empty());

    let (b, _) = h.client();
    h.request_name(b, SERVICE, 0);
    let (_, delivered) = drain(&mut h);
    let replies: Vec<_> = delivered
        .iter()
        .filter(|(to, m)| *to == a && m.msg_type() == MessageType::MethodReturn)
        .map(|(_, m)| (m.reply_serial().unwrap(), uint_body(m)))
        .collect();
    assert_eq!(replies, [(serial, 1), (second, 1)]);
    assert_eq!(
        h.driver(a, "StartServiceByName", vec![s(SERVICE), Value::Uint32(0)]),
        vec![Value::Uint32(2)]
    );
}

#[test]
fn a_failure_reaches_every_waiter_and_ends_the_activation() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let call = h.send(a, call_service("Call"));
    let start = h.send(a, start_call(SERVICE));
    // Even a message that asked for no reply: it is lost, the sender must
    // learn it.
    let quiet = h.send(a, call_service("Quiet").flags(flags::NO_REPLY_EXPECTED));
    drain(&mut h);
    h.bus.activation_failed(
        SERVICE,
        BusError::new(errors::SPAWN_CHILD_EXITED, "Process exited with status 1"),
        h.now,
        &mut h.out,
    );
    let (_, delivered) = drain(&mut h);
    let errors: Vec<_> = delivered
        .iter()
        .map(|(to, m)| {
            (
                *to,
                m.error_name().unwrap().to_owned(),
                m.reply_serial().unwrap(),
            )
        })
        .collect();
    let exited = errors::SPAWN_CHILD_EXITED.to_owned();
    assert_eq!(
        errors,
        [
            (a, exited.clone(), call),
            (a, exited.clone(), start),
            (a, exited, quiet)
        ]
    );
    assert!(!h.bus.activation_pending(SERVICE));
    // The next message starts afresh.
    h.send(a, call_service("Again"));
    assert_eq!(drain(&mut h).0, [SERVICE]);
}

#[test]
fn service_start_timeout_fails_the_activation() {
    let mut opts = options();
    opts.limits.service_start_timeout = Duration::from_secs(5);
    let mut h = Harness::with_options(opts);
    let (a, _) = h.client();
    let t0 = h.now;
    let call = h.send(a, call_service("Call"));
    drain(&mut h);
    assert_eq!(h.bus.next_deadline(), Some(t0 + Duration::from_secs(5)));
    h.bus
        .handle_timeouts(t0 + Duration::from_secs(4), &mut h.out);
    assert!(drain(&mut h).1.is_empty());
    h.bus
        .handle_timeouts(t0 + Duration::from_secs(5), &mut h.out);
    let (cancelled, delivered) = drain(&mut h);
    assert_eq!(
        cancelled,
        [format!("cancel {SERVICE}")],
        "the program is stopped"
    );
    assert_eq!(delivered.len(), 1);
    let (to, err) = &delivered[0];
    assert_eq!(*to, a);
    assert_eq!(err.error_name(), Some(errors::TIMED_OUT));
    assert_eq!(err.reply_serial(), Some(call));
    assert_eq!(h.bus.next_deadline(), None);
}

#[test]
fn pending_starts_are_bounded() {
    let mut opts = options();
    opts.limits.max_pending_service_starts = 2;
    let mut h = Harness::with_options(opts);
    let (a, _) = h.client();
    h.send(a, call_service("One"));
    h.send(a, call_service("Two"));
    drain(&mut h);
    let err = h.driver_error(a, call_service("Three"));
    assert_eq!(err.0, errors::LIMITS_EXCEEDED);
    assert!(err.1.contains("max_pending_service_starts=2"), "{}", err.1);
    let err = h.driver_error(a, start_call(SERVICE));
    assert_eq!(err.0, errors::LIMITS_EXCEEDED);
}

#[test]
fn a_departed_caller_s_queued_messages_are_dropped() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let (c, _) = h.client();
    h.send(a, call_service("FromA"));
    h.send(c, call_service("FromC"));
    drain(&mut h);
    h.bus.remove_connection(a, h.now, &mut h.out);
    drain(&mut h);
    let (b, _) = h.client();
    h.request_name(b, SERVICE, 0);
    let (_, delivered) = drain(&mut h);
    let to_b = members(&delivered, b);
    assert!(to_b.contains(&"FromC".to_owned()));
    assert!(!to_b.contains(&"FromA".to_owned()));
}

fn systemd_options() -> BusOptions {
    let mut opts = options();
    opts.systemd_activation = true;
    opts.activatable_names = vec!["org.example.One".into(), "org.example.Two".into()];
    opts.systemd_units = [
        ("org.example.One".to_owned(), "one.service".to_owned()),
        ("org.example.Two".to_owned(), "two.service".to_owned()),
    ]
    .into();
    opts
}

fn signal_to(dest: &str) -> MessageBuilder {
    MessageBuilder::signal("/foo", "com.example.bar", "Ping").destination(dest)
}

fn activation_requests(delivered: &[(ConnId, Message)], to: ConnId) -> Vec<(String, String)> {
    delivered
        .iter()
        .filter(|(t, m)| *t == to && m.member() == Some("ActivationRequest"))
        .map(|(_, m)| {
            assert_eq!(m.interface(), Some(SYSTEMD_ACTIVATOR));
            assert_eq!(m.sender(), Some(crate::BUS_NAME));
            let unit = match &m.body_values().unwrap()[..] {
                [Value::String(u)] => u.clone(),
                other => panic!("{other:?}"),
            };
            (m.destination().unwrap().to_owned(), unit)
        })
        .collect()
}

#[test]
fn systemd_is_asked_once_it_connects_and_its_failures_reach_the_waiters() {
    let mut h = Harness::with_options(systemd_options());
    let (a, _) = h.client();
    h.send(a, signal_to("org.example.One"));
    let (started, delivered) = drain(&mut h);
    assert!(started.is_empty(), "systemd starts it, not the daemon");
    assert!(delivered.is_empty());

    let (systemd, _) = h.client();
    h.request_name(systemd, SYSTEMD_NAME, 0);
    let (_, delivered) = drain(&mut h);
    assert_eq!(
        activation_requests(&delivered, systemd),
        [(SYSTEMD_NAME.to_owned(), "one.service".to_owned())]
    );

    // systemd is there now: the request goes at once.
    let call = h.send(a, call_service("Call").destination("org.example.Two"));
    let (_, delivered) = drain(&mut h);
    assert_eq!(activation_requests(&delivered, systemd).len(), 1);

    let failure = |unit: &str| {
        MessageBuilder::signal(
            "/org/freedesktop/systemd1",
            SYSTEMD_ACTIVATOR,
            "ActivationFailure",
        )
        .destination(crate::BUS_NAME)
        .body(vec![s(unit), s("com.example.Nope"), s("Computer says no")])
    };
    // Only systemd's word counts.
    h.send(a, failure("two.service"));
    assert!(drain(&mut h).1.is_empty());
    assert!(h.bus.activation_pending("org.example.Two"));
    h.send(systemd, failure("two.service"));
    let (_, delivered) = drain(&mut h);
    assert_eq!(delivered.len(), 1);
    let (to, err) = &delivered[0];
    assert_eq!(*to, a);
    assert_eq!(err.error_name(), Some("com.example.Nope"));
    assert_eq!(err.reply_serial(), Some(call));
    assert_eq!(err.body_values().unwrap(), vec![s("Computer says no")]);
}

#[test]
fn systemd_hears_update_activation_environment() {
    let mut h = Harness::with_options(systemd_options());
    let (a, _) = h.client();
    let env = Value::Array {
        elem_sig: "{ss}".into(),
        items: vec![Value::DictEntry(Box::new(s("K")), Box::new(s("V")))],
    };
    h.driver(a, "UpdateActivationEnvironment", vec![env.clone()]);
    assert!(drain(&mut h).1.is_empty(), "queued until systemd connects");
    let (systemd, systemd_name) = h.client();
    h.request_name(systemd, SYSTEMD_NAME, 0);
    let (_, delivered) = drain(&mut h);
    let set_env: Vec<_> = delivered
        .iter()
        .filter(|(to, m)| *to == systemd && m.member() == Some("SetEnvironment"))
        .map(|(_, m)| m.clone())
        .collect();
    assert_eq!(set_env.len(), 1);
    assert_eq!(set_env[0].destination(), Some(SYSTEMD_NAME));
    assert_eq!(
        set_env[0].body_values().unwrap(),
        vec![Value::Array {
            elem_sig: "s".into(),
            items: vec![s("K=V")]
        }]
    );
    assert!(set_env[0].flags() & flags::NO_REPLY_EXPECTED != 0);
    // Once systemd is there, straight to its unique name.
    h.driver(a, "UpdateActivationEnvironment", vec![env]);
    let (_, delivered) = drain(&mut h);
    let dest: Vec<_> = delivered
        .iter()
        .filter(|(to, m)| *to == systemd && m.member() == Some("SetEnvironment"))
        .map(|(_, m)| m.destination().unwrap().to_owned())
        .collect();
    assert_eq!(dest, [systemd_name]);
}

#[test]
fn features_name_systemd_activation_only_when_on() {
    let features = |opts: BusOptions| {
        let mut h = Harness::with_options(opts);
        let (a, _) = h.client();
        let get = MessageBuilder::method_call(crate::BUS_PATH, "Get")
            .interface("org.freedesktop.DBus.Properties")
            .destination(crate::BUS_NAME)
            .body(vec![s(crate::BUS_INTERFACE), s("Features")]);
        format!("{:?}", h.call(a, get).body_values().unwrap())
    };
    assert!(features(systemd_options()).contains("SystemdActivation"));
    assert!(!features(options()).contains("SystemdActivation"));
}

#[test]
fn a_service_file_found_on_a_miss_is_started() {
    let mut h = Harness::with_options(BusOptions {
        rescan_service_files: true,
        ..options()
    });
    h.new_service_files
        .insert("org.example.Late".into(), FoundService::default());
    let (a, _) = h.client();
    let err = h.driver_error(
        a,
        MessageBuilder::method_call("/", "Call").destination("org.example.Never"),
    );
    assert_eq!(err.0, errors::SERVICE_UNKNOWN);
    h.send(
        a,
        MessageBuilder::method_call("/", "Call").destination("org.example.Late"),
    );
    assert_eq!(drain(&mut h).0, ["org.example.Late"]);
    let names = h.driver(a, "ListActivatableNames", vec![]);
    assert!(format!("{names:?}").contains("org.example.Late"));
    // Unique names are never looked up.
    h.driver_error(
        a,
        MessageBuilder::method_call("/", "Call").destination(":1.99"),
    );
    assert_eq!(h.looked_up, ["org.example.Never", "org.example.Late"]);
}

#[test]
fn start_service_by_name_finds_a_file_installed_since_the_last_scan() {
    let mut h = Harness::with_options(BusOptions {
        rescan_service_files: true,
        ..options()
    });
    h.new_service_files.insert(
        "org.example.Late".into(),
        FoundService {
            systemd_unit: Some("late.service".into()),
            ..FoundService::default()
        },
    );
    let (a, _) = h.client();
    let start = |name: &str| call_bus("StartServiceByName", vec![s(name), Value::Uint32(0)]);
    let (error, text) = h.driver_error(a, start("org.example.Never"));
    assert_eq!(error, errors::SERVICE_UNKNOWN);
    assert_eq!(
        text,
        "The name org.example.Never was not provided by any .service files"
    );
    h.send(a, start("org.example.Late"));
    // Started; the answer waits for the service.
    let (started, delivered) = drain(&mut h);
    assert_eq!(started, ["org.example.Late"]);
    assert!(delivered.is_empty());
    // Known names and messages that may not start anything are not looked
    // up.
    h.send(a, start(SERVICE));
    h.send(
        a,
        MessageBuilder::method_call("/", "Call")
            .destination("org.example.Other")
            .flags(flags::NO_AUTO_START),
    );
    drain(&mut h);
    assert_eq!(h.looked_up, ["org.example.Never", "org.example.Late"]);
}

#[test]
fn messages_to_a_newly_found_service_keep_their_order() {
    let mut h = Harness::with_options(BusOptions {
        rescan_service_files: true,
        ..options()
    });
    h.new_service_files
        .insert("org.example.Late".into(), FoundService::default());
    let (a, _) = h.client();
    let call =
        |member: &str| MessageBuilder::method_call("/", member).destination("org.example.Late");
    h.send(a, call("First"));
    h.send(a, call("Second"));
    assert_eq!(drain(&mut h).0, ["org.example.Late"]);
    // Found once: the second message joins the activation the first began.
    assert_eq!(h.looked_up, ["org.example.Late"]);
    let (service, _) = h.client();
    h.request_name(service, "org.example.Late", 0);
    let (_, delivered) = drain(&mut h);
    let calls: Vec<&str> = delivered
        .iter()
        .filter(|(to, m)| *to == service && m.msg_type() == MessageType::MethodCall)
        .filter_map(|(_, m)| m.member())
        .collect();
    assert_eq!(calls, ["First", "Second"]);
}
