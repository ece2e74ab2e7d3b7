//! Running one sandbox case on one side: the bus, the filtered endpoint,
//! the filtered app(s) connected through it, the unfiltered services
//! connected to the bus, and a hidden control connection. Each connection
//! records what it received; [`Sandbox::finish`] turns that into a
//! [`Transcript`].
//!
//! Every step returns only once its effects are settled: the connection
//! that acted makes a round trip to the driver (GetId, which every side
//! lets through), then every other connection does. A proxy forwards each
//! direction in order and a bus dispatches each connection's messages in
//! order, so whatever the step caused has arrived (or never will) when the
//! round trips are back: the same steps give the same streams on every
//! side, and a message that one side drops is simply absent.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::Instant;

use bytes::Bytes;
use quickbus_client::sasl::Mode;
use quickbus_client::{Message, MessageBuilder, MessageType, Value};

use super::container::{self, Instance};
use super::render;
use super::side::{self, Programs, Proxy, Side};
use crate::answering::{Answer, Unanswered};
use crate::client::{Incoming, RawClient};
use crate::daemon::Daemon;
use crate::normalize::{Names, DRIVER};
pub use crate::script::{bus_call, s};
use crate::script::{first_string, owner_change_args, Transcript};
use crate::TIMEOUT;

enum Event {
    Frame(Message, usize),
    Closed,
    Note(String),
}

struct Conn {
    raw: RawClient,
    unique: Option<String>,
    next_serial: u32,
    closed: bool,
    events: Vec<Event>,
    /// Method calls received and not yet answered.
    unanswered: Unanswered,
    /// Serials of the harness's settling round trips.
    hidden: HashSet<u32>,
    /// Serials of calls whose reply bodies are each bus's own.
    elided: HashSet<u32>,
}

impl Conn {
    fn new(raw: RawClient) -> Conn {
        Conn {
            raw,
            unique: None,
            next_serial: 0,
            closed: false,
            events: Vec::new(),
            unanswered: Unanswered::default(),
            hidden: HashSet::new(),
            elided: HashSet::new(),
        }
    }

    fn serial(&mut self) -> u32 {
        self.next_serial += 1;
        self.next_serial
    }

    /// Reads and records until `done` says so (true), the connection
    /// closes or the deadline passes (false).
    fn read_until(&mut self, deadline: Instant, mut done: impl FnMut(&Message) -> bool) -> bool {
        if self.closed {
            return false;
        }
        loop {
            match self.raw.receive(deadline) {
                Incoming::Frame(frame, fds) => {
                    let Ok(m) = Message::parse(Bytes::from(frame)) else {
                        self.events
                            .push(Event::Note("an unparseable message".into()));
                        continue;
                    };
                    self.unanswered.record(&m);
                    let finished = done(&m);
                    self.events.push(Event::Frame(m, fds.len()));
                    if finished {
                        return true;
                    }
                }
                Incoming::Closed => {
                    self.closed = true;
                    self.events.push(Event::Closed);
                    return false;
                }
                Incoming::Timeout => return false,
            }
        }
    }

    /// Sends `builder` with the next serial; None when the connection is
    /// closed.
    fn send(&mut self, builder: &MessageBuilder) -> Option<u32> {
        if self.closed {
            return None;
        }
        let serial = self.serial();
        let bytes = builder
            .build(serial)
            .unwrap_or_else(|e| panic!("case bug: message does not build: {e}"));
        if !self.raw.send(&bytes, &[]) {
            self.read_until(Instant::now() + TIMEOUT, |_| false);
            self.closed = true;
            return None;
        }
        Some(serial)
    }

    /// Waits for the reply to `serial`.
    fn await_reply(&mut self, serial: u32) -> Option<Message> {
        let mut found = None;
        let ok = self.read_until(Instant::now() + TIMEOUT, |m| {
            let is_reply = matches!(m.msg_type(), MessageType::MethodReturn | MessageType::Error)
                && m.reply_serial() == Some(serial);
            if is_reply {
                found = Some(m.clone());
            }
            is_reply
        });
        if !ok && !self.closed {
            self.events
                .push(Event::Note(format!("no reply to call {serial} in time")));
        }
        found
    }

    /// A GetId round trip whose frames the transcript leaves out.
    fn settle(&mut self) {
        if self.closed || self.unique.is_none() {
            return;
        }
        let Some(serial) = self.send(&bus_call("GetId")) else {
            return;
        };
        self.hidden.insert(serial);
        self.await_reply(serial);
    }
}

/// How a connection reaches the bus.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    /// Through the filtered endpoint (the app).
    Filtered,
    /// Straight to the bus (a service).
    Direct,
}

pub struct Sandbox {
    side: Side,
    rules: Vec<String>,
    control: Conn,
    conns: BTreeMap<String, Conn>,
    /// Labels in the order they connected.
    order: Vec<String>,
    /// NameOwnerChanged (name, old, new) the control connection saw, and
    /// whether a step already waited for each.
    owner_changes: Vec<([String; 3], bool)>,
    endpoint: Option<PathBuf>,
    instance: Option<Instance>,
    // Dropped in this order: the proxy before the bus it talks to.
    proxy: Option<Proxy>,
    daemon: Daemon,
}

impl Sandbox {
    /// Starts `side`'s bus (with the `.service` files of `services`) and the
    /// control connection. The filtered endpoint comes with the first app.
    pub fn start(
        side: Side,
        programs: &Programs,
        rules: &[String],
        services: &[(String, String)],
    ) -> Sandbox {
        let daemon = side::start_daemon(side, programs, services);
        let mut control = Conn::new(RawClient::connect(&daemon.socket_path(), true));
        let serial = control.send(&bus_call("Hello")).expect("control Hello");
        let reply = control.await_reply(serial).expect("control Hello reply");
        control.unique = first_string(&reply);
        let rule = "type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged'";
        let serial = control
            .send(&bus_call("AddMatch").body(vec![s(rule)]))
            .expect("control AddMatch");
        control.await_reply(serial);
        let proxy = side::start_proxy(side, programs, &daemon, rules);
        Sandbox {
            side,
            rules: rules.to_vec(),
            control,
            conns: BTreeMap::new(),
            order: Vec::new(),
            owner_changes: Vec::new(),
            endpoint: proxy.as_ref().map(|p| p.socket().to_owned()),
            instance: None,
            proxy,
            daemon,
        }
    }

    /// The socket filtered apps connect to; side B makes its container
    /// server on first use.
    fn endpoint(&mut self) -> PathBuf {
        if let Some(path) = &self.endpoint {
            return path.clone();
        }
        quickbus_e2e::containers1::ensure_socket_dir();
        let call = container::add_server(&self.rules);
        let serial = self.control.send(&call).expect("control AddServer");
        let reply = self.control.await_reply(serial);
        let instance = container::instance(reply.as_ref()).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; daemon log: {}",
                self.side.name(),
                self.daemon.log()
            )
        });
        self.endpoint = Some(instance.socket.clone());
        self.instance = Some(instance);
        self.endpoint.clone().expect("just set")
    }

    fn conn(&mut self, label: &str) -> &mut Conn {
        self.conns
            .get_mut(label)
            .unwrap_or_else(|| panic!("case bug: no connection {label:?}"))
    }

    fn connect(&mut self, label: &str, route: Route) {
        let socket = match route {
            Route::Filtered => self.endpoint(),
            Route::Direct => self.daemon.socket_path(),
        };
        let mode = match route {
            Route::Filtered => Mode::StepByStep,
            Route::Direct => Mode::Pipelined,
        };
        let mut conn = Conn::new(RawClient::connect_in(&socket, true, mode));
        let serial = conn.send(&bus_call("Hello")).expect("Hello");
        let reply = conn.await_reply(serial);
        if let Some(reply) = reply.filter(|r| r.msg_type() == MessageType::MethodReturn) {
            conn.unique = first_string(&reply);
        }
        assert!(
            self.conns.insert(label.to_owned(), conn).is_none(),
            "case bug: connection {label:?} twice"
        );
        self.order.push(label.to_owned());
        self.settle_after(label);
    }

    /// Connects `label` through the filtered endpoint and says Hello.
    pub fn app(&mut self, label: &str) {
        self.connect(label, Route::Filtered);
    }

    /// Connects `label` straight to the bus and says Hello.
    pub fn service(&mut self, label: &str) {
        self.connect(label, Route::Direct);
    }

    /// `label`'s unique name.
    pub fn unique_name(&mut self, label: &str) -> String {
        self.conn(label)
            .unique
            .clone()
            .unwrap_or_else(|| ":".into())
    }

    /// Settles `actor`, then every other connection (see the module
    /// documentation).
    fn settle_after(&mut self, actor: &str) {
        self.conn(actor).settle();
        for label in self.order.clone() {
            if label != actor {
                self.conn(&label).settle();
            }
        }
    }

    /// Sends a call from `label` and waits for its reply, then settles.
    /// Only for calls nobody scripted has to answer (the driver's).
    pub fn call(&mut self, label: &str, builder: MessageBuilder) -> Option<Message> {
        let reply = match self.conn(label).send(&builder) {
            Some(serial) => self.conn(label).await_reply(serial),
            None => None,
        };
        self.settle_after(label);
        reply
    }

    /// [`Sandbox::call`] for a call whose reply body is each bus's own
    /// (the driver's introspection): the transcript shows the reply's kind
    /// and sender only.
    pub fn call_eliding_reply(&mut self, label: &str, builder: MessageBuilder) {
        let conn = self.conn(label);
        if let Some(serial) = conn.send(&builder) {
            conn.elided.insert(serial);
            conn.await_reply(serial);
        }
        self.settle_after(label);
    }

    /// A call of org.freedesktop.DBus.`member` from `label`.
    pub fn bus(&mut self, label: &str, member: &str, args: Vec<Value>) -> Option<Message> {
        self.call(label, bus_call(member).body(args))
    }

    /// Sends a message from `label` without waiting for a reply (a call a
    /// scripted service answers, a signal, a reply), then settles; returns
    /// the serial it used (None when the connection was closed).
    pub fn send(&mut self, label: &str, builder: MessageBuilder) -> Option<u32> {
        let serial = self.conn(label).send(&builder);
        self.settle_after(label);
        serial
    }

    /// Answers the oldest call `label` received and has not answered with
    /// a return of `body` (or notes that none came), then settles.
    pub fn answer(&mut self, label: &str, body: Vec<Value>) {
        self.answer_with(label, Answer::Return(body));
    }

    /// Like [`Sandbox::answer`] with an error `name`.
    pub fn answer_error(&mut self, label: &str, name: &str) {
        self.answer_with(label, Answer::Error(name));
    }

    fn answer_with(&mut self, label: &str, answer: Answer<'_>) {
        let conn = self.conn(label);
        let Some(reply) = conn.unanswered.answer_oldest(answer) else {
            conn.events
                .push(Event::Note("no call arrived to answer".into()));
            return;
        };
        self.send(label, reply);
    }

    /// Closes `label`'s connection and waits until the bus announced its
    /// end, then settles everyone else.
    pub fn disconnect(&mut self, label: &str) {
        let conn = self.conn(label);
        let unique = conn.unique.clone();
        conn.raw.shutdown();
        conn.closed = true;
        if let Some(unique) = unique {
            self.wait_owner_change(|args| args[0] == unique && args[2].is_empty());
        }
        self.settle_after(label);
    }

    fn wait_owner_change(&mut self, wanted: impl Fn(&[String; 3]) -> bool) {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(entry) = self
                .owner_changes
                .iter_mut()
                .find(|(args, used)| !used && wanted(args))
            {
                entry.1 = true;
                return;
            }
            let mut seen = None;
            let got = self.control.read_until(deadline, |m| {
                if m.member() == Some("NameOwnerChanged") {
                    seen = owner_change_args(m);
                }
                true
            });
            if !got {
                self.control.events.push(Event::Note(
                    "an awaited NameOwnerChanged did not come".into(),
                ));
                return;
            }
            if let Some(args) = seen {
                self.owner_changes.push((args, false));
            }
        }
    }

    /// Ends the case: settles every connection, stops the container
    /// instance (side B) and returns the transcripts.
    pub fn finish(mut self) -> Transcript {
        if let Some(first) = self.order.first().cloned() {
            self.settle_after(&first);
        }
        let mut transcript = self.transcript();
        if let Some(instance) = self.instance.take() {
            let serial = self.control.send(&container::stop_instance(&instance.path));
            let reply = serial.and_then(|serial| self.control.await_reply(serial));
            if reply.as_ref().map(Message::msg_type) != Some(MessageType::MethodReturn) {
                transcript.insert(
                    "harness".into(),
                    vec![format!("StopInstance failed: {reply:?}")],
                );
            }
        }
        if self
            .control
            .events
            .iter()
            .any(|e| matches!(e, Event::Note(_)))
        {
            transcript.insert(
                "harness".into(),
                vec!["an awaited NameOwnerChanged did not come".into()],
            );
        }
        transcript
    }

    fn transcript(&mut self) -> Transcript {
        let mut names = Names::default();
        names.pid(std::process::id(), "<pid>");
        names.pid(self.daemon.pid(), "<daemon-pid>");
        if let Some(proxy) = &self.proxy {
            names.pid(proxy.pid(), "<proxy-pid>");
        }
        names.address(self.daemon.address());
        names.label(&self.control.unique.clone().unwrap_or_default(), "control");
        for label in &self.order {
            if let Some(unique) = &self.conns[label].unique {
                names.label(unique, label);
            }
        }
        let mut transcript = Transcript::new();
        for label in &self.order {
            let conn = &self.conns[label];
            let mut lines = Vec::new();
            for event in &conn.events {
                match event {
                    Event::Frame(m, fds) => {
                        let from_bus = matches!(m.sender(), Some(DRIVER) | None);
                        let hidden_reply = from_bus
                            && m.reply_serial()
                                .is_some_and(|serial| conn.hidden.contains(&serial));
                        let elide = m
                            .reply_serial()
                            .is_some_and(|serial| conn.elided.contains(&serial));
                        if !hidden_reply {
                            lines.push(render::line(m, *fds, elide, &mut names));
                        }
                    }
                    Event::Closed => lines.push("closed".into()),
                    Event::Note(text) => lines.push(format!("-- {text} --")),
                }
            }
            transcript.insert(label.clone(), lines);
        }
        transcript
    }
}
