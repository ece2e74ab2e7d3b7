//! Running one scenario against one daemon: the scenario's clients, a
//! monitor of everything, and a hidden control connection, each recording
//! what it received. The scenario's steps are the methods of [`Script`];
//! each one returns only once its effect on the bus is settled (a reply
//! arrived, a round trip behind it came back, a disconnect was announced),
//! so the same steps give the same streams on any daemon that processes
//! each connection's messages in order.
//!
//! The harness's own traffic is hidden from the transcripts: the control
//! connection's (it connects first, watches NameOwnerChanged and sends the
//! end marker) and the `Peer.Ping` round trips that settle a step.

use std::collections::{BTreeMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::Instant;

use bytes::Bytes;
use quickbus_client::{Message, MessageBuilder, MessageType, Value};

use crate::answering::{Answer, Unanswered};
use crate::client::{Incoming, RawClient};
use crate::daemon::Daemon;
use crate::normalize::{self, Names, DRIVER};
use crate::TIMEOUT;

const DRIVER_PATH: &str = "/org/freedesktop/DBus";
const END_INTERFACE: &str = "org.quickbus.Harness";
const END_MEMBER: &str = "End";
/// The rule added to every scenario monitor's rules, so it sees the end
/// marker (which the transcripts leave out).
pub const END_RULE: &str = "type='signal',interface='org.quickbus.Harness'";

/// What one connection received, in order.
enum Event {
    Frame(Vec<u8>, usize),
    Closed,
    Note(String),
}

struct Conn {
    raw: RawClient,
    unique: Option<String>,
    next_serial: u32,
    closed: bool,
    monitor: bool,
    events: Vec<Event>,
    /// Method calls received and not yet answered.
    unanswered: Unanswered,
    /// fds received and kept open until the end of the scenario.
    fds: Vec<OwnedFd>,
}

impl Conn {
    fn serial(&mut self) -> u32 {
        self.next_serial += 1;
        self.next_serial
    }
}

/// The transcripts of one run: stream name (`monitor`, `client a`, ...) to
/// its normalised lines.
pub type Transcript = BTreeMap<String, Vec<String>>;

pub struct Script {
    daemon: Daemon,
    control: Conn,
    clients: BTreeMap<String, Conn>,
    /// Client labels in the order they connected (the main monitor first).
    order: Vec<String>,
    /// (sender unique name, serial) of the harness's hidden calls.
    hidden: HashSet<(String, u32)>,
    /// NameOwnerChanged signals the control connection saw, and whether a
    /// step already waited for each.
    owner_changes: Vec<([String; 3], bool)>,
    /// SASL conversations ([`Script::sasl`]), by label.
    sasl: BTreeMap<String, Vec<String>>,
}

const MONITOR: &str = "monitor";

impl Script {
    /// Starts `program` with `extra_config` and the `.service` files of
    /// `services`, connects the control connection and the main monitor.
    pub fn start(program: &Path, extra_config: &str, services: &[(String, String)]) -> Script {
        let daemon = Daemon::start(program, extra_config, services);
        let mut control = Conn {
            raw: RawClient::connect(&daemon.socket_path(), true),
            unique: None,
            next_serial: 0,
            closed: false,
            monitor: false,
            events: Vec::new(),
            unanswered: Unanswered::default(),
            fds: Vec::new(),
        };
        let hello = bus_call("Hello");
        let reply = Self::conn_call(&mut control, hello).expect("control Hello");
        control.unique = first_string(&reply);
        let rule = "type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged'";
        Self::conn_call(&mut control, bus_call("AddMatch").body(vec![s(rule)]))
            .expect("control AddMatch");
        let mut script = Script {
            daemon,
            control,
            clients: BTreeMap::new(),
            order: Vec::new(),
            hidden: HashSet::new(),
            owner_changes: Vec::new(),
            sasl: BTreeMap::new(),
        };
        script.client(MONITOR);
        script.become_monitor(MONITOR, &[]);
        script
    }

    /// A call on the control connection, waiting for its reply.
    fn conn_call(conn: &mut Conn, builder: MessageBuilder) -> Option<Message> {
        let serial = conn.serial();
        let bytes = builder.build(serial).expect("a valid control message");
        conn.raw.send(&bytes, &[]);
        let deadline = Instant::now() + TIMEOUT;
        loop {
            match conn.raw.receive(deadline) {
                Incoming::Frame(frame, _) => {
                    let m = Message::parse(Bytes::from(frame)).ok()?;
                    if m.reply_serial() == Some(serial) {
                        return Some(m);
                    }
                }
                _ => return None,
            }
        }
    }

    fn conn(&mut self, label: &str) -> &mut Conn {
        self.clients
            .get_mut(label)
            .unwrap_or_else(|| panic!("scenario bug: no client {label:?}"))
    }

    /// Connects and authenticates `label` (with fd passing), no Hello.
    pub fn connect(&mut self, label: &str) {
        self.connect_with(label, true);
    }

    /// [`Script::connect`], negotiating fd passing or not.
    pub fn connect_with(&mut self, label: &str, unix_fds: bool) {
        let raw = RawClient::connect(&self.daemon.socket_path(), unix_fds);
        let conn = Conn {
            raw,
            unique: None,
            next_serial: 0,
            closed: false,
            monitor: false,
            events: Vec::new(),
            unanswered: Unanswered::default(),
            fds: Vec::new(),
        };
        assert!(
            self.clients.insert(label.to_owned(), conn).is_none(),
            "scenario bug: client {label:?} twice"
        );
        self.order.push(label.to_owned());
    }

    /// A SASL conversation on a fresh connection named `label`: the nul
    /// byte, then `lines` one at a time, each with the bus's answer
    /// recorded ([`crate::sasl`]).
    pub fn sasl(&mut self, label: &str, lines: &[Vec<u8>]) {
        let transcript = crate::sasl::converse(&self.daemon.socket_path(), lines);
        assert!(
            self.sasl.insert(label.to_owned(), transcript).is_none(),
            "scenario bug: SASL conversation {label:?} twice"
        );
    }

    /// `label`'s unique name (":" when it has none, which no bus accepts).
    pub fn unique_name(&mut self, label: &str) -> String {
        self.conn(label)
            .unique
            .clone()
            .unwrap_or_else(|| ":".into())
    }

    /// Sends Hello from `label` and waits for the answer; a name in it
    /// becomes the client's unique name.
    pub fn hello(&mut self, label: &str) -> Option<Message> {
        let reply = self.call(label, bus_call("Hello"));
        if let Some(name) = reply.as_ref().and_then(first_string) {
            if reply.as_ref().map(Message::msg_type) == Some(MessageType::MethodReturn) {
                self.conn(label).unique = Some(name);
            }
        }
        reply
    }

    /// Connects `label` and says Hello.
    pub fn client(&mut self, label: &str) {
        self.connect(label);
        self.hello(label);
    }

    /// Sends a message built by `builder` and waits for its reply (None
    /// when the connection closed first).
    pub fn call(&mut self, label: &str, builder: MessageBuilder) -> Option<Message> {
        self.call_with_fds(label, builder, &[])
    }

    /// [`Script::call`] with fds attached (the builder gets UNIX_FDS).
    pub fn call_with_fds(
        &mut self,
        label: &str,
        builder: MessageBuilder,
        fds: &[&OwnedFd],
    ) -> Option<Message> {
        let (serial, bytes) = self.build(label, builder, fds.len());
        let borrowed: Vec<_> = fds.iter().map(|fd| fd.as_fd()).collect();
        if !self.conn(label).raw.send(&bytes, &borrowed) {
            self.mark_closed(label);
            return None;
        }
        self.await_reply(label, serial)
    }

    /// A call to the bus driver: `member` of `interface` at its path.
    pub fn driver(
        &mut self,
        label: &str,
        interface: &str,
        member: &str,
        args: Vec<Value>,
    ) -> Option<Message> {
        let call = MessageBuilder::method_call(DRIVER_PATH, member)
            .interface(interface)
            .destination(DRIVER)
            .body(args);
        self.call(label, call)
    }

    /// A call of org.freedesktop.DBus.`member`.
    pub fn bus(&mut self, label: &str, member: &str, args: Vec<Value>) -> Option<Message> {
        self.driver(label, DRIVER, member, args)
    }

    /// Sends a message that expects no reply (or whose reply the scenario
    /// reads later), then settles it with a round trip.
    pub fn send(&mut self, label: &str, builder: MessageBuilder) {
        self.send_with_fds(label, builder, &[]);
    }

    pub fn send_with_fds(&mut self, label: &str, builder: MessageBuilder, fds: &[&OwnedFd]) {
        let (_, bytes) = self.build(label, builder, fds.len());
        self.send_raw(label, bytes.to_vec(), fds);
    }

    /// `builder` built with `label`'s next serial, declaring `fds` fds.
    fn build(&mut self, label: &str, builder: MessageBuilder, fds: usize) -> (u32, Bytes) {
        let serial = self.conn(label).serial();
        let builder = if fds == 0 {
            builder
        } else {
            builder.unix_fds(fds as u32)
        };
        let bytes = builder
            .build(serial)
            .unwrap_or_else(|e| panic!("scenario bug: message does not build: {e}"));
        (serial, bytes)
    }

    /// The next serial `label` will use (for hand-built messages).
    pub fn next_serial(&mut self, label: &str) -> u32 {
        self.conn(label).serial()
    }

    /// Sends bytes as they are, with `fds`, then settles them with a
    /// round trip (when the connection is registered and still open).
    pub fn send_raw(&mut self, label: &str, bytes: Vec<u8>, fds: &[&OwnedFd]) {
        let borrowed: Vec<_> = fds.iter().map(|fd| fd.as_fd()).collect();
        if !self.conn(label).raw.send(&bytes, &borrowed) {
            self.mark_closed(label);
            return;
        }
        self.settle(label);
    }

    /// Sends bytes from a connection the bus is expected to close (a
    /// monitor that sends, an unregistered client sending to a peer) and
    /// reads it to its end; a connection still open after [`TIMEOUT`] is
    /// noted as such.
    pub fn send_expecting_close(&mut self, label: &str, bytes: Vec<u8>) {
        if !self.conn(label).raw.send(&bytes, &[]) {
            self.mark_closed(label);
            return;
        }
        let deadline = Instant::now() + TIMEOUT;
        self.read_until(label, deadline, |_| false);
        if !self.conn(label).closed {
            self.note(label, "still connected");
        }
    }

    /// A round trip from `label` to the driver: everything it sent before
    /// has been dispatched when this returns. Unregistered clients and
    /// monitors cannot make one (it would change what is tested), so for
    /// them it does nothing: a later call of the scenario settles them, and
    /// [`Script::finish`] half-closes an unregistered client and reads it
    /// to its end.
    pub fn settle(&mut self, label: &str) {
        let conn = self.conn(label);
        if conn.closed || conn.monitor || conn.unique.is_none() {
            return;
        }
        let serial = conn.serial();
        let unique = conn.unique.clone().expect("registered");
        self.hidden.insert((unique, serial));
        let ping = MessageBuilder::method_call(DRIVER_PATH, "Ping")
            .interface("org.freedesktop.DBus.Peer")
            .destination(DRIVER)
            .build(serial)
            .expect("ping builds");
        if !self.conn(label).raw.send(&ping, &[]) {
            self.mark_closed(label);
            return;
        }
        self.await_reply(label, serial);
    }

    fn await_reply(&mut self, label: &str, serial: u32) -> Option<Message> {
        let deadline = Instant::now() + TIMEOUT;
        let mut found = None;
        let ok = self.read_until(label, deadline, |m| {
            let is_reply = matches!(m.msg_type(), MessageType::MethodReturn | MessageType::Error)
                && m.reply_serial() == Some(serial);
            if is_reply {
                found = Some(m.clone());
            }
            is_reply
        });
        if !ok && !self.conn(label).closed {
            self.note(label, &format!("no reply to serial {serial} in time"));
        }
        found
    }

    /// Reads `label`'s messages, recording each, until `done` says so
    /// (true), the connection closes or the deadline passes (false).
    fn read_until(
        &mut self,
        label: &str,
        deadline: Instant,
        mut done: impl FnMut(&Message) -> bool,
    ) -> bool {
        let conn = self.conn(label);
        if conn.closed {
            return false;
        }
        loop {
            match conn.raw.receive(deadline) {
                Incoming::Frame(frame, fds) => {
                    conn.events.push(Event::Frame(frame.clone(), fds.len()));
                    conn.fds.extend(fds);
                    if let Ok(m) = Message::parse(Bytes::from(frame)) {
                        if !conn.monitor {
                            conn.unanswered.record(&m);
                        }
                        if done(&m) {
                            return true;
                        }
                    }
                }
                Incoming::Closed => {
                    conn.closed = true;
                    conn.events.push(Event::Closed);
                    return false;
                }
                Incoming::Timeout => return false,
            }
        }
    }

    fn mark_closed(&mut self, label: &str) {
        // The write failed: read what the bus sent before it closed.
        let deadline = Instant::now() + TIMEOUT;
        self.read_until(label, deadline, |_| false);
        let conn = self.conn(label);
        if !conn.closed {
            conn.closed = true;
            conn.events.push(Event::Closed);
        }
    }

    fn note(&mut self, label: &str, text: &str) {
        self.conn(label).events.push(Event::Note(text.to_owned()));
    }

    /// Waits for a method call to arrive at `label` (unless one is already
    /// waiting) and answers the oldest with a method return of `body`.
    pub fn reply(&mut self, label: &str, body: Vec<Value>) {
        self.answer(label, Answer::Return(body));
    }

    /// Like [`Script::reply`] with an error `name`.
    pub fn reply_error(&mut self, label: &str, name: &str) {
        self.answer(label, Answer::Error(name));
    }

    fn answer(&mut self, label: &str, answer: Answer<'_>) {
        if self.conn(label).unanswered.is_empty() {
            let deadline = Instant::now() + TIMEOUT;
            self.read_until(label, deadline, |m| m.msg_type() == MessageType::MethodCall);
        }
        match self.conn(label).unanswered.answer_oldest(answer) {
            Some(reply) => self.send(label, reply),
            None => self.note(label, "no method call arrived to answer"),
        }
    }

    /// Reads what `label` has been sent up to now (a round trip settles it).
    pub fn drain(&mut self, label: &str) {
        self.settle(label);
    }

    /// Makes `label` a monitor of `rules` (plus the end-marker rule).
    pub fn become_monitor(&mut self, label: &str, rules: &[&str]) -> Option<Message> {
        let mut all: Vec<Value> = rules.iter().map(|r| s(r)).collect();
        if !rules.is_empty() {
            all.push(s(END_RULE));
        }
        let call = MessageBuilder::method_call(DRIVER_PATH, "BecomeMonitor")
            .interface("org.freedesktop.DBus.Monitoring")
            .destination(DRIVER)
            .body(vec![
                Value::Array {
                    elem_sig: "s".into(),
                    items: all,
                },
                Value::Uint32(0),
            ]);
        let reply = self.call(label, call);
        if reply.as_ref().map(Message::msg_type) == Some(MessageType::MethodReturn) {
            self.conn(label).monitor = true;
        }
        reply
    }

    /// Closes `label`'s connection and, if it had a unique name, waits
    /// until the bus announced its end.
    pub fn disconnect(&mut self, label: &str) {
        let conn = self.conn(label);
        let unique = conn.unique.clone();
        let was_monitor = conn.monitor;
        conn.raw.shutdown();
        conn.closed = true;
        if let (Some(unique), false) = (unique, was_monitor) {
            self.wait_owner_change(|args| args[0] == unique && args[2].is_empty());
        }
    }

    /// Waits until `name` has an owner (e.g. an activated service took it).
    pub fn wait_owned(&mut self, name: &str) {
        self.wait_owner_change(|args| args[0] == name && !args[2].is_empty());
    }

    /// Waits until `name` has no owner anymore.
    pub fn wait_unowned(&mut self, name: &str) {
        self.wait_owner_change(|args| args[0] == name && args[2].is_empty());
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
            match self.control.raw.receive(deadline) {
                Incoming::Frame(frame, _) => {
                    let Ok(m) = Message::parse(Bytes::from(frame)) else {
                        continue;
                    };
                    if m.member() != Some("NameOwnerChanged") {
                        continue;
                    }
                    if let Some(args) = owner_change_args(&m) {
                        self.owner_changes.push((args, false));
                    }
                }
                _ => {
                    let monitor = self.conn(MONITOR);
                    monitor.events.push(Event::Note(
                        "harness: an awaited NameOwnerChanged did not come".into(),
                    ));
                    return;
                }
            }
        }
    }

    /// Ends the scenario: settles every registered client, sends the end
    /// marker and reads every monitor up to it; returns the transcripts.
    pub fn finish(mut self) -> Transcript {
        let labels = self.order.clone();
        for label in &labels {
            let conn = self.conn(label);
            if conn.unique.is_none() && !conn.closed && !conn.monitor {
                // The bus may only answer or close an unregistered client:
                // our end of input makes it close the connection after
                // whatever it has to say.
                conn.raw.shutdown_write();
                let deadline = Instant::now() + TIMEOUT;
                self.read_until(label, deadline, |_| false);
            } else {
                self.settle(label);
            }
        }
        let end = MessageBuilder::signal("/org/quickbus/Harness", END_INTERFACE, END_MEMBER);
        let serial = self.control.serial();
        let bytes = end.build(serial).expect("end marker builds");
        self.control.raw.send(&bytes, &[]);
        let deadline = Instant::now() + TIMEOUT;
        for label in &labels {
            if self.conn(label).monitor {
                let ok = self.read_until(label, deadline, |m| {
                    m.interface() == Some(END_INTERFACE) && m.member() == Some(END_MEMBER)
                });
                if !ok && !self.conn(label).closed {
                    self.note(label, "harness: the end marker did not arrive");
                }
            }
        }
        self.transcript()
    }

    fn transcript(&mut self) -> Transcript {
        let mut names = Names::default();
        names.pid(std::process::id(), "<pid>");
        names.pid(self.daemon.pid(), "<daemon-pid>");
        names.address(self.daemon.address());
        let control = self.control.unique.clone().unwrap_or_default();
        names.label(&control, "control");
        for label in &self.order {
            if let Some(unique) = &self.clients[label].unique {
                names.label(unique, label);
            }
        }
        let mut transcript = Transcript::new();
        for label in &self.order {
            let conn = &self.clients[label];
            let mut lines = Vec::new();
            for event in &conn.events {
                match event {
                    Event::Frame(frame, fds) => {
                        if self.is_hidden(frame, &control) {
                            continue;
                        }
                        lines.push(normalize::render(frame, *fds, &mut names));
                    }
                    Event::Closed => lines.push(crate::sasl::CLOSED.into()),
                    Event::Note(text) => lines.push(format!("-- {text} --")),
                }
            }
            let stream = if label == MONITOR {
                MONITOR.to_owned()
            } else {
                format!("client {label}")
            };
            transcript.insert(stream, lines);
        }
        for (label, lines) in &self.sasl {
            transcript.insert(format!("sasl {label}"), lines.clone());
        }
        transcript
    }

    /// Whether a frame is the harness's own traffic: the control
    /// connection's, a settling round trip, or the end marker.
    fn is_hidden(&self, frame: &[u8], control: &str) -> bool {
        let Ok(m) = Message::parse(Bytes::copy_from_slice(frame)) else {
            return false;
        };
        if m.sender() == Some(control) || m.destination() == Some(control) {
            return true;
        }
        if m.interface() == Some(END_INTERFACE) {
            return true;
        }
        if let Some(sender) = m.sender() {
            if self.hidden.contains(&(sender.to_owned(), m.serial())) {
                return true;
            }
        }
        match (m.destination(), m.reply_serial()) {
            (Some(dest), Some(serial)) => self.hidden.contains(&(dest.to_owned(), serial)),
            _ => false,
        }
    }
}

/// A call of org.freedesktop.DBus.`member`.
pub fn bus_call(member: &str) -> MessageBuilder {
    MessageBuilder::method_call(DRIVER_PATH, member)
        .interface(DRIVER)
        .destination(DRIVER)
}

/// A string value.
pub fn s(text: &str) -> Value {
    Value::String(text.to_owned())
}

/// A u32 value.
pub fn u(n: u32) -> Value {
    Value::Uint32(n)
}

/// The (name, old owner, new owner) of a NameOwnerChanged signal.
pub fn owner_change_args(m: &Message) -> Option<[String; 3]> {
    let strings: Vec<String> = m
        .body_values()
        .ok()?
        .into_iter()
        .filter_map(|v| match v {
            Value::String(s) => Some(s),
            _ => None,
        })
        .collect();
    <[String; 3]>::try_from(strings).ok()
}

/// The first value of `m`'s body when it is a string.
pub fn first_string(m: &Message) -> Option<String> {
    match m.body_values().ok()?.into_iter().next() {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}
