//! Bus-level tests: whole conversations through `Bus::receive`, with
//! messages built by quickbus_wire::MessageBuilder and every delivery
//! re-parsed with Message::parse, as a peer would see it.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use quickbus_wire::{flags, Message, MessageBuilder, MessageType, Value};

use crate::*;

mod credentials;
mod eavesdrop;

pub(crate) struct Harness {
    pub bus: Bus,
    pub out: Vec<Action>,
    pub now: Instant,
    next_serial: u32,
}

pub(crate) fn options() -> BusOptions {
    BusOptions {
        guid: "0123456789abcdef0123456789abcdef".into(),
        machine_id: "fedcba9876543210fedcba9876543210".into(),
        limits: Limits::default(),
        activatable_names: vec!["org.example.Activatable".into()],
        bus_type: "session".into(),
        ..BusOptions::default()
    }
}

pub(crate) fn parse_out(msg: &OutMessage) -> Message {
    let mut raw = BytesMut::new();
    raw.extend_from_slice(&msg.frame.header);
    raw.extend_from_slice(&msg.frame.body);
    Message::parse(raw.freeze()).expect("the bus sent an invalid message")
}

pub(crate) fn creds(uid: u32, pid: u32) -> Credentials {
    Credentials {
        uid,
        gid: uid,
        pid: Some(pid),
        groups: vec![uid, 27],
        ..Credentials::default()
    }
}

pub(crate) fn call_bus(member: &str, body: Vec<Value>) -> MessageBuilder {
    MessageBuilder::method_call(BUS_PATH, member)
        .interface(BUS_INTERFACE)
        .destination(BUS_NAME)
        .body(body)
}

pub(crate) fn s(v: &str) -> Value {
    Value::String(v.into())
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with_options(options())
    }

    pub fn with_options(opts: BusOptions) -> Harness {
        let mut bus = Bus::new(opts);
        bus.set_own_credentials(1000, 4242);
        Harness {
            bus,
            out: Vec::new(),
            now: Instant::now(),
            next_serial: 0,
        }
    }

    /// An authenticated connection that has not said Hello.
    pub fn connect(&mut self, unix_fds: bool) -> ConnId {
        self.bus.add_connection(creds(1000, 100), unix_fds)
    }

    /// A connection past Hello, its deliveries drained.
    pub fn client(&mut self) -> (ConnId, String) {
        let id = self.connect(true);
        let reply = self.call(id, call_bus("Hello", vec![]));
        let name = match &reply.body_values().unwrap()[0] {
            Value::String(name) => name.clone(),
            other => panic!("Hello returned {other:?}"),
        };
        self.take();
        (id, name)
    }

    pub fn send_with_fds(
        &mut self,
        from: ConnId,
        builder: MessageBuilder,
        fds: Vec<OwnedFd>,
    ) -> u32 {
        self.next_serial += 1;
        let serial = self.next_serial;
        let raw: Bytes = builder.build(serial).expect("test message builds");
        let msg = Message::parse(raw).expect("test message parses");
        self.bus.receive(from, msg, fds, self.now, &mut self.out);
        serial
    }

    pub fn send(&mut self, from: ConnId, builder: MessageBuilder) -> u32 {
        self.send_with_fds(from, builder, Vec::new())
    }

    /// Every delivery so far, parsed, in order; panics on a disconnect.
    pub fn take(&mut self) -> Vec<(ConnId, Message)> {
        std::mem::take(&mut self.out)
            .into_iter()
            .map(|action| match action {
                Action::Deliver { to, msg } => (to, parse_out(&msg)),
                Action::Disconnect { conn, reason } => {
                    panic!("unexpected disconnect of {conn:?}: {reason}")
                }
                Action::Activate { name, .. } | Action::CancelActivation { name } => {
                    panic!("unexpected activation of {name}")
                }
            })
            .collect()
    }

    /// Send a call and return the reply (or error) addressed to the caller;
    /// other deliveries stay queued in `out`.
    pub fn call(&mut self, from: ConnId, builder: MessageBuilder) -> Message {
        let serial = self.send(from, builder);
        let pos = self
            .out
            .iter()
            .position(|a| match a {
                Action::Deliver { to, msg } => {
                    *to == from && parse_out(msg).reply_serial() == Some(serial)
                }
                _ => false,
            })
            .expect("no reply to the call");
        match self.out.remove(pos) {
            Action::Deliver { msg, .. } => parse_out(&msg),
            _ => unreachable!(),
        }
    }

    /// Call the driver; the reply's body, or panic with the error.
    pub fn driver(&mut self, from: ConnId, member: &str, body: Vec<Value>) -> Vec<Value> {
        let reply = self.call(from, call_bus(member, body));
        assert_eq!(
            reply.msg_type(),
            MessageType::MethodReturn,
            "{member} failed: {:?} {:?}",
            reply.error_name(),
            reply.body_values()
        );
        reply.body_values().unwrap()
    }

    /// Call the driver expecting an error: (name, text).
    pub fn driver_error(&mut self, from: ConnId, builder: MessageBuilder) -> (String, String) {
        let reply = self.call(from, builder);
        assert_eq!(reply.msg_type(), MessageType::Error, "expected an error");
        let text = match reply.body_values().unwrap().first() {
            Some(Value::String(t)) => t.clone(),
            other => panic!("error without text: {other:?}"),
        };
        (reply.error_name().unwrap().to_owned(), text)
    }

    pub fn request_name(&mut self, from: ConnId, name: &str, flags: u32) -> u32 {
        match self.driver(from, "RequestName", vec![s(name), Value::Uint32(flags)])[..] {
            [Value::Uint32(r)] => r,
            ref other => panic!("RequestName returned {other:?}"),
        }
    }

    pub fn add_match(&mut self, from: ConnId, rule: &str) {
        self.driver(from, "AddMatch", vec![s(rule)]);
    }
}

/// (recipient, member or error name, string args) of each delivery: a
/// compact view of what happened, in order.
/// The session policy without its eavesdrop="true" send rule: replies
/// that answer no pending call are refused (as on the system bus).
pub(crate) fn requested_replies_only() -> PolicyConfig {
    use crate::policy::{MessageRule, NameMatch, PolicyRule, RuleKind};
    PolicyConfig {
        default: vec![
            PolicyRule::allow(RuleKind::Send(MessageRule::default())),
            PolicyRule::allow(RuleKind::Receive(MessageRule::default())),
            PolicyRule::allow(RuleKind::Own(NameMatch::Any)),
        ],
        ..PolicyConfig::default()
    }
}

/// Only an AccessDenied error, to `to`.
pub(crate) fn assert_refused(got: &[(ConnId, Message)], to: ConnId) {
    let what: Vec<(ConnId, Option<&str>)> = got.iter().map(|(c, m)| (*c, m.error_name())).collect();
    assert_eq!(what, vec![(to, Some(errors::ACCESS_DENIED))]);
}

pub(crate) fn summary(deliveries: &[(ConnId, Message)]) -> Vec<(ConnId, String, Vec<String>)> {
    deliveries
        .iter()
        .map(|(to, m)| {
            let what = match m.msg_type() {
                MessageType::MethodReturn => "return".to_owned(),
                MessageType::Error => m.error_name().unwrap().to_owned(),
                _ => m.member().unwrap().to_owned(),
            };
            let args = m
                .string_args(4)
                .into_iter()
                .flatten()
                .map(|a| a.value.to_owned())
                .collect();
            (*to, what, args)
        })
        .collect()
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn string_list(v: &Value) -> Vec<String> {
    match v {
        Value::Array { items, .. } => items
            .iter()
            .map(|i| match i {
                Value::String(s) => s.clone(),
                other => panic!("not a string: {other:?}"),
            })
            .collect(),
        other => panic!("not an array: {other:?}"),
    }
}

// ---------------------------------------------------------------- Hello

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
    h.bus.remove_connection(a, &mut h.out);
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

// ---------------------------------------------------------------- names

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
    h.bus.remove_connection(a, &mut h.out);
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
    h.bus.remove_connection(a, &mut h.out);
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
    h.bus.remove_connection(a, &mut h.out);
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

// ---------------------------------------------------------------- driver

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
    assert!(!h.bus.take_reload_request());
    h.driver(a, "ReloadConfig", vec![]);
    assert!(h.bus.take_reload_request());
    assert!(!h.bus.take_reload_request());
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

fn get_property(h: &mut Harness, a: ConnId, iface: &str, prop: &str) -> Message {
    h.call(
        a,
        MessageBuilder::method_call(BUS_PATH, "Get")
            .interface("org.freedesktop.DBus.Properties")
            .destination(BUS_NAME)
            .body(vec![s(iface), s(prop)]),
    )
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

// ---------------------------------------------------------------- routing

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
            Action::Deliver { msg, .. } => &msg.frame.body,
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

// ---------------------------------------------------------------- fds

fn some_fds(n: usize) -> Vec<OwnedFd> {
    (0..n)
        .map(|_| OwnedFd::from(std::fs::File::open("/dev/null").unwrap()))
        .collect()
}

#[test]
fn fds_travel_with_the_message() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let (b, name_b) = h.client();
    h.send_with_fds(
        a,
        MessageBuilder::method_call("/", "TakeFd")
            .destination(name_b)
            .unix_fds(2)
            .body(vec![Value::UnixFd(0), Value::UnixFd(1)]),
        some_fds(2),
    );
    match h.out.as_slice() {
        [Action::Deliver { to, msg }] => {
            assert_eq!(*to, b);
            assert_eq!(msg.fds.len(), 2);
            assert_eq!(parse_out(msg).unix_fds(), 2);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn monitors_get_the_fds_of_a_call_to_the_driver() {
    let mut h = Harness::new();
    let (m, _) = h.client();
    let (a, _) = h.client();
    h.send(m, become_monitor(&[]));
    h.take();
    h.send_with_fds(a, call_bus("GetId", vec![]).unix_fds(1), some_fds(1));
    let fds_seen: Vec<(ConnId, usize)> = std::mem::take(&mut h.out)
        .into_iter()
        .filter_map(|action| match action {
            Action::Deliver { to, msg } => Some((to, msg.fds.len())),
            _ => None,
        })
        .collect();
    // The monitor's copy of the call carries the fd (as dbus-daemon
    // passes it on); the reply to the caller and its copy carry none.
    assert_eq!(fds_seen, vec![(m, 1), (m, 0), (a, 0)]);
}

#[test]
fn monitors_see_that_a_listener_without_fd_support_missed_a_broadcast() {
    let mut h = Harness::new();
    let (m, _) = h.client();
    let (a, _) = h.client();
    let b = h.connect(false);
    h.driver(b, "Hello", vec![]);
    h.add_match(b, "member='WithFd'");
    h.send(m, become_monitor(&[]));
    h.take();
    let signal = MessageBuilder::signal("/", "org.example.T", "WithFd")
        .unix_fds(1)
        .body(vec![Value::UnixFd(0)]);
    h.send_with_fds(a, signal, some_fds(1));
    let name_b = h.bus.unique_name(b).unwrap().to_owned();
    // b gets nothing and a is told nothing, as in dbus-daemon; the
    // monitor sees the signal and the error a would have got.
    assert_eq!(
        summary(&h.take()),
        vec![
            (m, "WithFd".into(), vec![]),
            (
                m,
                errors::NOT_SUPPORTED.into(),
                vec![format!(
                    "broadcast cannot be delivered to {name_b} (uid=1000 pid=100 comm=\"\") because it does not support receiving Unix fds"
                )]
            ),
        ]
    );
}

#[test]
fn fds_to_a_peer_without_fd_support_is_an_error() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let b = h.connect(false);
    h.driver(b, "Hello", vec![]);
    h.take();
    let builder = MessageBuilder::method_call("/", "TakeFd")
        .destination(h.bus.unique_name(b).unwrap().to_owned())
        .unix_fds(1)
        .body(vec![Value::UnixFd(0)]);
    let serial = h.send_with_fds(a, builder, some_fds(1));
    let got = h.take();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, a);
    assert_eq!(got[0].1.error_name(), Some(errors::NOT_SUPPORTED));
    assert_eq!(got[0].1.reply_serial(), Some(serial));
    assert!(h.bus.replies.is_empty());
}

#[test]
fn broadcast_with_fds_skips_peers_without_fd_support() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let (b, _) = h.client();
    let c = h.connect(false);
    h.driver(c, "Hello", vec![]);
    h.add_match(b, "type='signal'");
    h.add_match(c, "type='signal'");
    h.take();
    h.send_with_fds(
        a,
        MessageBuilder::signal("/", "org.example.I", "S")
            .unix_fds(1)
            .body(vec![Value::UnixFd(0)]),
        some_fds(1),
    );
    let to: Vec<ConnId> = h.take().into_iter().map(|(to, _)| to).collect();
    assert_eq!(to, vec![b]);
}

// ---------------------------------------------------------------- limits

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

// ---------------------------------------------------------------- NoReply

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
    h.bus.remove_connection(b, &mut h.out);
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
    h.bus.remove_connection(a, &mut h.out);
    assert!(h.bus.replies.is_empty());
    h.bus.remove_connection(b, &mut h.out);
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

// ---------------------------------------------------------------- monitors

fn become_monitor(rules: &[&str]) -> MessageBuilder {
    MessageBuilder::method_call(BUS_PATH, "BecomeMonitor")
        .interface("org.freedesktop.DBus.Monitoring")
        .destination(BUS_NAME)
        .body(vec![
            Value::Array {
                elem_sig: "s".into(),
                items: rules.iter().map(|r| s(r)).collect(),
            },
            Value::Uint32(0),
        ])
}

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
    h.bus.remove_connection(m, &mut h.out);
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
                s("org.freedesktop.DBus.Debug.Stats")
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

fn peer_without_destination(member: &str) -> MessageBuilder {
    MessageBuilder::method_call("/", member).interface("org.freedesktop.DBus.Peer")
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

// ---------------------------------------------------------------- stats

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
    h.bus.remove_connection(b, &mut h.out);
    h.bus.remove_connection(incomplete, &mut h.out);
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

#[test]
fn activatable_services_changed_on_every_reload() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let (b, _) = h.client();
    h.add_match(a, "member='ActivatableServicesChanged'");
    // The same services as before: dbus-daemon still says they changed.
    let same = vec!["org.example.Activatable".to_owned()];
    h.bus.set_activatable_names(same, &mut h.out);
    assert_eq!(
        summary(&h.take()),
        vec![(a, "ActivatableServicesChanged".into(), vec![])]
    );
    h.bus
        .set_activatable_names(vec!["org.example.New".into()], &mut h.out);
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
fn rules_naming_a_departed_unique_name_go_with_it() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let (b, name_b) = h.client();
    h.add_match(a, &format!("type='signal',sender='{name_b}'"));
    h.add_match(a, "type='signal',member='Kept'");
    h.bus.remove_connection(b, &mut h.out);
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

#[test]
fn hello_beyond_max_completed_connections_is_limits_exceeded() {
    let mut opts = options();
    opts.limits.max_completed_connections = 2;
    let mut h = Harness::with_options(opts);
    let (a, _) = h.client();
    let _ = h.client();
    let late = h.connect(false);
    let (name, text) = h.driver_error(late, call_bus("Hello", vec![]));
    assert_eq!(name, errors::LIMITS_EXCEEDED);
    assert!(
        text.contains("maximum number of active connections"),
        "{text}"
    );
    assert_eq!(h.bus.unique_name(late), None);
    // A departure frees a place.
    h.bus.remove_connection(a, &mut h.out);
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
    let (name, text) = h.driver_error(same_user, call_bus("Hello", vec![]));
    assert_eq!(name, errors::LIMITS_EXCEEDED);
    assert!(text.contains("UID 1000"), "{text}");
    let other_user = h.bus.add_connection(creds(1001, 101), false);
    let reply = h.call(other_user, call_bus("Hello", vec![]));
    assert_eq!(reply.msg_type(), MessageType::MethodReturn);
}
