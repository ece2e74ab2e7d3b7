//! Bus-level tests: whole conversations through `Bus::receive`, with
//! messages built by quickbus_wire::MessageBuilder and every delivery
//! re-parsed with Message::parse, as a peer would see it.

use std::os::fd::OwnedFd;

use crate::fds::PassedFd;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use quickbus_wire::{flags, Message, MessageBuilder, MessageType, Value};

use crate::*;

mod activation;
mod app_filter;
mod broadcast_policy;
mod containers;
mod credentials;
mod driver;
mod eavesdrop;
mod fds;
mod handover;
mod hello;
mod introspection;
mod limits;
mod mac;
mod monitors;
mod names;
mod no_reply;
mod routing;
mod stats;
mod traffic;

pub(crate) struct Harness {
    pub bus: Bus,
    pub out: Vec<Action>,
    pub now: Instant,
    next_serial: u32,
    /// What the stand-in daemon finds when the bus asks it to read the
    /// service directories again (name -> its service file), and the
    /// names it was asked about, in order.
    pub new_service_files: std::collections::HashMap<String, crate::activation::FoundService>,
    pub looked_up: Vec<String>,
    /// The stand-in daemon's pidfds (any fd will do), by pid, and the
    /// (pid, start time) pairs it was asked to open.
    pub pidfds: std::collections::HashMap<u32, OwnedFd>,
    pub pidfd_requests: Vec<(u32, u64)>,
    /// The stand-in daemon's answer to the next ListenContainer (None: a
    /// socket in /run/test), and the instances it listened for and was
    /// told to stop (path, close_connections), in order.
    pub listen_error: Option<crate::errors::BusError>,
    pub listening: Vec<(String, u32)>,
    pub stopped: Vec<(String, bool)>,
}

pub(crate) fn options() -> BusOptions {
    BusOptions {
        bus_id: "0123456789abcdef0123456789abcdef".into(),
        machine_id: "fedcba9876543210fedcba9876543210".into(),
        limits: Limits::default(),
        activatable_names: vec!["org.example.Activatable".into()],
        bus_type: "session".into(),
        own_uid: Some(1000),
        own_pid: 4242,
        ..BusOptions::default()
    }
}

pub(crate) fn parse_out(msg: &crate::outbox::OutItem) -> Message {
    let mut raw = BytesMut::new();
    raw.extend_from_slice(&msg.header);
    raw.extend_from_slice(&msg.body);
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
        Harness {
            bus: Bus::new(opts),
            out: Vec::new(),
            now: Instant::now(),
            next_serial: 0,
            new_service_files: Default::default(),
            looked_up: Vec::new(),
            pidfds: Default::default(),
            pidfd_requests: Vec::new(),
            listen_error: None,
            listening: Vec::new(),
            stopped: Vec::new(),
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
        fds: Vec<PassedFd>,
    ) -> u32 {
        self.next_serial += 1;
        let serial = self.next_serial;
        let raw: Bytes = builder.build(serial).expect("test message builds");
        let msg = Message::parse(raw).expect("test message parses");
        self.bus.receive(from, msg, fds, self.now, &mut self.out);
        self.answer_requests();
        serial
    }

    /// Answer what the bus asks the daemon for at once, as the daemon
    /// does: service lookups, pidfds and container sockets.
    fn answer_requests(&mut self) {
        self.answer_containers();
        while let Some(pos) = self
            .out
            .iter()
            .position(|a| matches!(a, Action::LookUpService { .. } | Action::OpenPidfd { .. }))
        {
            let name = match self.out.remove(pos) {
                Action::LookUpService { name } => name,
                Action::OpenPidfd { pid, started } => {
                    self.pidfd_requests.push((pid, started));
                    let fd = self.pidfds.get(&pid).map(|fd| fd.try_clone().unwrap());
                    self.bus.pidfd_opened(fd, self.now, &mut self.out);
                    continue;
                }
                _ => unreachable!(),
            };
            let found = self.new_service_files.get(&name).cloned();
            self.looked_up.push(name.clone());
            self.bus
                .service_looked_up(&name, found, self.now, &mut self.out);
        }
    }

    /// Listen for AddServer (a made-up socket, or `listen_error`), note
    /// the stops.
    pub fn answer_containers(&mut self) {
        while let Some(pos) = self.out.iter().position(|a| {
            matches!(
                a,
                Action::ListenContainer { .. } | Action::StopContainer { .. }
            )
        }) {
            match self.out.remove(pos) {
                Action::ListenContainer { path, uid } => {
                    let n = self.listening.len();
                    self.listening.push((path, uid));
                    let answer = match self.listen_error.take() {
                        Some(e) => Err(e),
                        None => Ok(crate::ContainerSocket {
                            path: format!("/run/test/dbus-{n}"),
                            address: format!("unix:path=/run/test/dbus-{n},guid=00"),
                        }),
                    };
                    self.bus
                        .container_listening(answer, self.now, &mut self.out);
                }
                Action::StopContainer {
                    path,
                    close_connections,
                } => self.stopped.push((path, close_connections)),
                _ => unreachable!(),
            }
        }
    }

    pub fn send(&mut self, from: ConnId, builder: MessageBuilder) -> u32 {
        self.send_with_fds(from, builder, Vec::new())
    }

    /// Every delivery so far, parsed, in order; panics on a disconnect.
    pub fn take(&mut self) -> Vec<(ConnId, Message)> {
        std::mem::take(&mut self.out)
            .into_iter()
            .map(|action| match action {
                Action::Queued { to, msg, .. } => (to, parse_out(&msg)),
                Action::Disconnect { conn, reason } => {
                    panic!("unexpected disconnect of {conn:?}: {reason}")
                }
                Action::Activate { name, .. } | Action::CancelActivation { name } => {
                    panic!("unexpected activation of {name}")
                }
                Action::ReloadConfig => panic!("unexpected reload"),
                Action::Restart { .. } => panic!("unexpected restart"),
                Action::LookUpService { name } => panic!("unanswered lookup of {name}"),
                Action::OpenPidfd { pid, .. } => panic!("unanswered pidfd of {pid}"),
                action @ (Action::ListenContainer { .. } | Action::StopContainer { .. }) => {
                    panic!("unanswered {action:?}")
                }
                action @ (Action::HoldSender { .. }
                | Action::ReleaseSender { .. }
                | Action::Warn { .. }) => panic!("unexpected flow control: {action:?}"),
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
                Action::Queued { to, msg, .. } => {
                    *to == from && parse_out(msg).reply_serial() == Some(serial)
                }
                _ => false,
            })
            .expect("no reply to the call");
        match self.out.remove(pos) {
            Action::Queued { msg, .. } => parse_out(&msg),
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

/// Everyone may connect, own, send and receive (replies only when
/// requested), then `extra`.
pub(crate) fn open_policy(extra: Vec<crate::policy::PolicyRule>) -> PolicyConfig {
    use crate::policy::{MessageRule, NameMatch, PolicyRule, RuleKind};
    let mut default = vec![
        PolicyRule::allow(RuleKind::User(None)),
        PolicyRule::allow(RuleKind::Send(MessageRule::default())),
        PolicyRule::allow(RuleKind::Receive(MessageRule::default())),
        PolicyRule::allow(RuleKind::Own(NameMatch::Any)),
    ];
    default.extend(extra);
    PolicyConfig {
        default,
        ..PolicyConfig::default()
    }
}

/// A send rule: allow or deny `spec`.
pub(crate) fn send_rule(
    allow: bool,
    spec: crate::policy::MessageRule,
) -> crate::policy::PolicyRule {
    crate::policy::PolicyRule {
        allow,
        kind: crate::policy::RuleKind::Send(spec),
    }
}

/// A receive rule: allow or deny `spec`.
pub(crate) fn receive_rule(
    allow: bool,
    spec: crate::policy::MessageRule,
) -> crate::policy::PolicyRule {
    crate::policy::PolicyRule {
        allow,
        kind: crate::policy::RuleKind::Receive(spec),
    }
}

/// Only an AccessDenied error, to `to`.
pub(crate) fn assert_refused(got: &[(ConnId, Message)], to: ConnId) {
    let what: Vec<(ConnId, Option<&str>)> = got.iter().map(|(c, m)| (*c, m.error_name())).collect();
    assert_eq!(what, vec![(to, Some(errors::ACCESS_DENIED))]);
}

/// (recipient, member or error name, string args) of each delivery: a
/// compact view of what happened, in order.
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

/// A BecomeMonitor call with `rules` (none: it sees everything).
pub(crate) fn become_monitor(rules: &[&str]) -> MessageBuilder {
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

fn peer_without_destination(member: &str) -> MessageBuilder {
    MessageBuilder::method_call("/", member).interface("org.freedesktop.DBus.Peer")
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

pub(crate) fn some_fds(n: usize) -> Vec<PassedFd> {
    (0..n)
        .map(|_| PassedFd::from(OwnedFd::from(std::fs::File::open("/dev/null").unwrap())))
        .collect()
}
