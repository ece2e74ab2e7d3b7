//! AppArmor D-Bus mediation as dbus-daemon's `bus/apparmor.c` does it:
//! each decision is a query of the kernel's policy about the labels the
//! connections' sockets had when they connected (`send` for the sender,
//! `receive` for the receiver, `bind` for RequestName, `eavesdrop` for
//! eavesdropping match rules and monitors), and every audited decision a
//! log line in dbus-daemon's words.
//!
//! The kernel is behind [`Kernel`], so the decisions can be tested with a
//! fake one: no kernel at hand (Debian's) mediates D-Bus.

use std::io::{self, Read, Write};
use std::path::PathBuf;

use quickbus_bus::errors;
use quickbus_bus::mac::{MacRefusal, Mediator, SendCheck, Subject, Target};
use quickbus_wire::MessageType;

use super::query::{self, Answer, BadAnswer, Confinement, MessageFields};

/// Who answers the queries: the kernel's `.access` file, or a fake.
pub trait Kernel: Send {
    /// Write `query` and read the answer back (libapparmor's
    /// `aa_query_label` before it parses).
    fn ask(&self, query: &[u8]) -> io::Result<Vec<u8>>;
}

/// `<securityfs>/apparmor/.access`.
pub struct AccessFile(pub PathBuf);

impl Kernel for AccessFile {
    fn ask(&self, query: &[u8]) -> io::Result<Vec<u8>> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.0)
            .map_err(|e| match e.raw_os_error() {
                // libapparmor: no query file means no query support.
                Some(libc::ENOENT) => io::Error::from_raw_os_error(libc::EPROTONOSUPPORT),
                _ => e,
            })?;
        // One write: the kernel takes the query whole or not at all (an
        // unknown label is ENOENT here).
        let written = file.write(query)?;
        if written != query.len() {
            return Err(io::Error::from_raw_os_error(libc::EPROTO));
        }
        let mut answer = vec![0; query::ANSWER_LEN + 1];
        let n = file.read(&mut answer)?;
        answer.truncate(n);
        Ok(answer)
    }
}

/// Where the audit lines go: the system log as security messages (see
/// docs/mandatory-access-control.md for how this differs from
/// dbus-daemon's audit socket).
pub type AuditLog = Box<dyn Fn(&str) + Send>;

pub fn audit_to_log() -> AuditLog {
    Box::new(|line| tracing::info!(target: crate::logging::SECURITY, "{line}"))
}

pub struct AppArmorMediator {
    kernel: Box<dyn Kernel>,
    /// The configuration's `<type>` (None: dbus-daemon's NULL).
    bus_type: Option<String>,
    /// The bus's own confinement: the peer of messages to the driver.
    own: Confinement,
    audit: AuditLog,
}

/// A query's outcome before complain mode and auditing.
struct Asked {
    allow: bool,
    audit: bool,
    /// The errno when the kernel could not be asked.
    errno: Option<i32>,
}

impl Asked {
    /// An unconfined end: allowed, nothing to log.
    const UNCONFINED: Asked = Asked {
        allow: true,
        audit: false,
        errno: None,
    };
}

fn message_type(t: MessageType) -> &'static str {
    match t {
        MessageType::MethodCall => "method_call",
        MessageType::MethodReturn => "method_return",
        MessageType::Error => "error",
        MessageType::Signal => "signal",
    }
}

/// strerror's text, without Rust's " (os error N)".
fn strerror(errno: i32) -> String {
    nix::errno::Errno::from_raw(errno).desc().to_owned()
}

/// dbus-daemon's `_dbus_error_from_errno` for the errors a query can
/// end in.
fn error_name(errno: i32) -> &'static str {
    match errno {
        libc::EPROTONOSUPPORT | libc::EAFNOSUPPORT => errors::NOT_SUPPORTED,
        libc::ENOMEM | libc::ENOBUFS => errors::NO_MEMORY,
        libc::EACCES | libc::EPERM => errors::ACCESS_DENIED,
        libc::ENOENT => "org.freedesktop.DBus.Error.FileNotFound",
        libc::EINVAL => errors::INVALID_ARGS,
        libc::ENFILE | libc::EMFILE => errors::LIMITS_EXCEEDED,
        _ => errors::FAILED,
    }
}

fn failed(errno: i32) -> MacRefusal {
    MacRefusal::Failed {
        name: error_name(errno),
        text: format!("Failed to query AppArmor policy: {}", strerror(errno)),
    }
}

/// ` key="value"` (dbus-daemon's `_dbus_append_pair_str`).
fn pair(line: &mut String, key: &str, value: &str) {
    line.push_str(&format!(" {key}=\"{value}\""));
}

/// ` key=N` (`_dbus_append_pair_uint`).
fn pair_uint(line: &mut String, key: &str, value: u32) {
    line.push_str(&format!(" {key}={value}"));
}

impl AppArmorMediator {
    pub fn new(
        kernel: Box<dyn Kernel>,
        bus_type: Option<String>,
        own: Confinement,
        audit: AuditLog,
    ) -> AppArmorMediator {
        AppArmorMediator {
            kernel,
            bus_type,
            own,
            audit,
        }
    }

    /// A connection's confinement. Where AppArmor mediates D-Bus every
    /// socket has a label; one without (its SO_PEERSEC failed) counts as
    /// confined with an empty label, so the kernel's answer to a label it
    /// does not know (an error) refuses it, as dbus-daemon refuses such a
    /// connection outright.
    fn confinement(subject: Subject<'_>) -> Confinement {
        Confinement::parse(subject.label.unwrap_or_default())
    }

    fn ask(&self, mask: u32, query: &[u8]) -> Asked {
        let answer = self
            .kernel
            .ask(query)
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO));
        let parsed = answer.and_then(|raw| {
            Answer::parse(&raw).map_err(|bad| match bad {
                BadAnswer::Length => libc::EPROTO,
                BadAnswer::Format => libc::EPROTONOSUPPORT,
            })
        });
        match parsed {
            Ok(answer) => {
                let (allow, audit) = answer.verdict(mask);
                Asked {
                    allow,
                    audit,
                    errno: None,
                }
            }
            // dbus-daemon: refused, and logged with the reason.
            Err(errno) => Asked {
                allow: false,
                audit: true,
                errno: Some(errno),
            },
        }
    }

    fn bus_type_for_log(&self) -> &str {
        self.bus_type.as_deref().unwrap_or("unknown")
    }

    /// `apparmor="ALLOWED|DENIED" operation="dbus_OP" ` then the pairs,
    /// each with its leading space (so two spaces, as dbus-daemon's).
    fn log(&self, allow: bool, op: &str, data: &str) {
        let verdict = if allow { "ALLOWED" } else { "DENIED" };
        (self.audit)(&format!(
            "apparmor=\"{verdict}\" operation=\"dbus_{op}\" {data}"
        ));
    }

    /// bind and eavesdrop share a shape: one label, one query.
    fn single(
        &self,
        who: Subject<'_>,
        mask: u32,
        op: &str,
        query: impl FnOnce(&str) -> Vec<u8>,
        name: Option<&str>,
    ) -> Result<(), MacRefusal> {
        let con = Self::confinement(who);
        if con.is_unconfined() {
            return Ok(());
        }
        let mut asked = self.ask(mask, &query(&con.label));
        if asked.errno.is_none() && con.is_complain() {
            asked.allow = true;
        }
        if asked.audit {
            let mut data = String::new();
            pair(&mut data, "bus", self.bus_type_for_log());
            if let Some(name) = name {
                pair(&mut data, "name", name);
            }
            if let Some(errno) = asked.errno {
                pair(&mut data, "info", &strerror(errno));
            }
            pair(&mut data, "mask", op);
            if let Some(pid) = who.pid {
                pair_uint(&mut data, "pid", pid);
            }
            pair(&mut data, "label", &con.label);
            self.log(asked.allow, op, &data);
        }
        match (asked.errno, asked.allow) {
            (Some(errno), _) => Err(failed(errno)),
            (None, true) => Ok(()),
            (None, false) => Err(MacRefusal::AppArmor),
        }
    }
}

impl Mediator for AppArmorMediator {
    fn may_own(&self, owner: Subject<'_>, name: &str) -> Result<(), MacRefusal> {
        let bus_type = self.bus_type.as_deref();
        self.single(
            owner,
            query::BIND,
            "bind",
            |label| query::service_query(label, bus_type, name),
            Some(name),
        )
    }

    fn may_eavesdrop(&self, who: Subject<'_>) -> Result<(), MacRefusal> {
        let bus_type = self.bus_type.as_deref();
        self.single(
            who,
            query::EAVESDROP,
            "eavesdrop",
            |label| query::eavesdrop_query(label, bus_type),
            None,
        )
    }

    fn may_send(&self, check: &SendCheck<'_>) -> Result<(), MacRefusal> {
        // Permission to send a call grants receiving its reply, and
        // permission to receive a call grants replying to it.
        if check.requested_reply {
            return Ok(());
        }
        let bus_type = self.bus_type.as_deref();
        let msg = check.msg;
        let src = Self::confinement(check.sender);
        let (dst, peer_pid, activation) = match check.target {
            Target::Bus => (Some(self.own.clone()), None, false),
            Target::Peer(peer) => (Some(Self::confinement(peer)), peer.pid, false),
            Target::Activation { assumed_label, .. } => (
                assumed_label.map(|label| Confinement {
                    label: label.to_owned(),
                    mode: None,
                }),
                None,
                true,
            ),
        };
        let dst_label = dst.as_ref().map(|d| d.label.as_str());
        let destination = check.destination();
        let fields = |name, peer_label| MessageFields {
            name,
            peer_label,
            path: msg.path(),
            interface: msg.interface(),
            member: msg.member(),
        };
        let mut src_asked = if src.is_unconfined() {
            Asked::UNCONFINED
        } else {
            let q = query::message_query(&src.label, bus_type, &fields(destination, dst_label));
            self.ask(query::SEND, &q)
        };
        // A failed query stops there, as dbus-daemon's `goto audit`: the
        // other end stays refused and audited.
        let mut dst_asked = if src_asked.errno.is_some() {
            Asked {
                allow: false,
                audit: true,
                errno: None,
            }
        } else if activation || dst.as_ref().is_none_or(|d| d.is_unconfined()) {
            // Activation: only whether the sender may send to the name.
            Asked::UNCONFINED
        } else {
            let q = query::message_query(
                dst_label.unwrap_or_default(),
                bus_type,
                &fields(check.source, Some(&src.label)),
            );
            self.ask(query::RECEIVE, &q)
        };
        let failed_query = src_asked.errno.or(dst_asked.errno);
        if failed_query.is_none() {
            if src.is_complain() {
                src_asked.allow = true;
            }
            if dst.as_ref().is_some_and(|d| d.is_complain()) {
                dst_asked.allow = true;
            }
        }
        // Replies are not audited (the policy language has no replies),
        // unless a query failed.
        let is_reply = matches!(
            msg.msg_type(),
            MessageType::MethodReturn | MessageType::Error
        );
        if failed_query.is_some() || ((src_asked.audit || dst_asked.audit) && !is_reply) {
            let op = message_type(msg.msg_type());
            let mut common = String::new();
            pair(&mut common, "bus", self.bus_type_for_log());
            for (key, value) in [
                ("path", msg.path()),
                ("interface", msg.interface()),
                ("member", msg.member()),
                ("error_name", msg.error_name()),
            ] {
                if let Some(value) = value {
                    pair(&mut common, key, value);
                }
            }
            let (src_info, dst_info) =
                (src_asked.errno.map(strerror), dst_asked.errno.map(strerror));
            if src_asked.audit {
                let mut data = common.clone();
                pair(&mut data, "mask", "send");
                pair(&mut data, "name", destination);
                if let Some(pid) = check.sender.pid {
                    pair_uint(&mut data, "pid", pid);
                }
                pair(&mut data, "label", &src.label);
                if let Some(pid) = peer_pid {
                    pair_uint(&mut data, "peer_pid", pid);
                }
                if let Some(label) = dst_label {
                    pair(&mut data, "peer_label", label);
                }
                if let Some(info) = &src_info {
                    pair(&mut data, "info", info);
                }
                if let Some(info) = &dst_info {
                    pair(&mut data, "peer_info", info);
                }
                self.log(src_asked.allow, op, &data);
            }
            if dst_asked.audit {
                let mut data = common;
                pair(&mut data, "name", check.source);
                pair(&mut data, "mask", "receive");
                if let Some(pid) = peer_pid {
                    pair_uint(&mut data, "pid", pid);
                }
                if let Some(label) = dst_label {
                    pair(&mut data, "label", label);
                }
                if let Some(pid) = check.sender.pid {
                    pair_uint(&mut data, "peer_pid", pid);
                }
                pair(&mut data, "peer_label", &src.label);
                if let Some(info) = &dst_info {
                    pair(&mut data, "info", info);
                }
                if let Some(info) = &src_info {
                    pair(&mut data, "peer_info", info);
                }
                self.log(dst_asked.allow, op, &data);
            }
        }
        if let Some(errno) = failed_query {
            return Err(failed(errno));
        }
        if src_asked.allow && dst_asked.allow {
            Ok(())
        } else {
            Err(MacRefusal::AppArmor)
        }
    }

    fn features(&self) -> Vec<&'static str> {
        vec!["AppArmor"]
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use quickbus_wire::{Message, MessageBuilder};

    use super::*;

    /// A fake kernel: records every query and answers from `policy`
    /// (label, permission) -> (allow, deny, audit, quiet) masks, or with
    /// an errno for labels it does not know.
    #[derive(Clone, Default)]
    struct FakeKernel {
        queries: Arc<Mutex<Vec<Vec<u8>>>>,
        answers: Arc<Mutex<Vec<io::Result<Vec<u8>>>>>,
    }

    fn answer(allow: u32, deny: u32, audit: u32, quiet: u32) -> io::Result<Vec<u8>> {
        Ok(format!(
            "allow 0x{allow:08x}\ndeny 0x{deny:08x}\naudit 0x{audit:08x}\nquiet 0x{quiet:08x}\n"
        )
        .into_bytes())
    }

    impl Kernel for FakeKernel {
        fn ask(&self, query: &[u8]) -> io::Result<Vec<u8>> {
            self.queries.lock().unwrap().push(query.to_vec());
            self.answers.lock().unwrap().remove(0)
        }
    }

    struct Setup {
        kernel: FakeKernel,
        lines: Arc<Mutex<Vec<String>>>,
        mediator: AppArmorMediator,
    }

    impl Setup {
        fn new(own: &str) -> Setup {
            let kernel = FakeKernel::default();
            let lines: Arc<Mutex<Vec<String>>> = Arc::default();
            let sink = Arc::clone(&lines);
            let mediator = AppArmorMediator::new(
                Box::new(kernel.clone()),
                Some("system".into()),
                Confinement::parse(own.as_bytes()),
                Box::new(move |line| sink.lock().unwrap().push(line.to_owned())),
            );
            Setup {
                kernel,
                lines,
                mediator,
            }
        }

        fn answers(&self, answers: Vec<io::Result<Vec<u8>>>) {
            *self.kernel.answers.lock().unwrap() = answers;
        }

        fn queries(&self) -> Vec<Vec<u8>> {
            std::mem::take(&mut *self.kernel.queries.lock().unwrap())
        }

        fn lines(&self) -> Vec<String> {
            std::mem::take(&mut *self.lines.lock().unwrap())
        }
    }

    fn subject(label: &'static str, pid: u32) -> Subject<'static> {
        Subject {
            label: Some(label.as_bytes()),
            pid: Some(pid),
        }
    }

    fn ping(dest: &str) -> Message {
        let raw = MessageBuilder::method_call("/org/example", "Ping")
            .interface("org.example.I")
            .destination(dest)
            .build(1)
            .unwrap();
        Message::parse(raw).unwrap()
    }

    fn reply() -> Message {
        let raw = MessageBuilder::method_return(1)
            .destination(":1.1")
            .build(2)
            .unwrap();
        Message::parse(raw).unwrap()
    }

    const CLIENT: &str = "/usr/bin/client (enforce)";
    const SERVICE: &str = "/usr/bin/service (enforce)";

    fn check<'a>(msg: &'a Message, sender: Subject<'a>, target: Target<'a>) -> SendCheck<'a> {
        SendCheck {
            sender,
            source: ":1.1",
            target,
            msg,
            requested_reply: false,
        }
    }

    #[test]
    fn a_message_asks_send_for_the_sender_then_receive_for_the_receiver() {
        let s = Setup::new("unconfined");
        s.answers(vec![
            answer(query::SEND, 0, 0, 0),
            answer(query::RECEIVE, 0, 0, 0),
        ]);
        let msg = ping("org.example.Service");
        let c = check(
            &msg,
            subject(CLIENT, 10),
            Target::Peer(subject(SERVICE, 20)),
        );
        assert_eq!(s.mediator.may_send(&c), Ok(()));
        assert_eq!(
            s.queries(),
            [
                b"label\0/usr/bin/client\0\x20system\0org.example.Service\0/usr/bin/service\0/org/example\0org.example.I\0Ping".to_vec(),
                b"label\0/usr/bin/service\0\x20system\0:1.1\0/usr/bin/client\0/org/example\0org.example.I\0Ping".to_vec(),
            ]
        );
        assert!(s.lines().is_empty(), "allowed and not audited: no line");
    }

    #[test]
    fn a_receive_refusal_is_denied_and_logged_in_dbus_daemons_words() {
        let s = Setup::new("unconfined");
        s.answers(vec![answer(query::SEND, 0, 0, 0), answer(0, 0, 0, 0)]);
        let msg = ping("org.example.Service");
        let c = check(
            &msg,
            subject(CLIENT, 10),
            Target::Peer(subject(SERVICE, 20)),
        );
        assert_eq!(s.mediator.may_send(&c), Err(MacRefusal::AppArmor));
        assert_eq!(
            s.lines(),
            ["apparmor=\"DENIED\" operation=\"dbus_method_call\"  bus=\"system\" path=\"/org/example\" interface=\"org.example.I\" member=\"Ping\" name=\":1.1\" mask=\"receive\" pid=20 label=\"/usr/bin/service\" peer_pid=10 peer_label=\"/usr/bin/client\""]
        );
    }

    #[test]
    fn a_send_refusal_logs_the_senders_side() {
        let s = Setup::new("unconfined");
        // Refused send: audited; the receive side allowed, not audited.
        s.answers(vec![answer(0, 0, 0, 0), answer(query::RECEIVE, 0, 0, 0)]);
        let msg = ping("org.example.Service");
        let c = check(
            &msg,
            subject(CLIENT, 10),
            Target::Peer(subject(SERVICE, 20)),
        );
        assert_eq!(s.mediator.may_send(&c), Err(MacRefusal::AppArmor));
        assert_eq!(
            s.lines(),
            ["apparmor=\"DENIED\" operation=\"dbus_method_call\"  bus=\"system\" path=\"/org/example\" interface=\"org.example.I\" member=\"Ping\" mask=\"send\" name=\"org.example.Service\" pid=10 label=\"/usr/bin/client\" peer_pid=20 peer_label=\"/usr/bin/service\""]
        );
    }

    #[test]
    fn unconfined_ends_are_not_asked() {
        let s = Setup::new("unconfined");
        s.answers(vec![answer(query::RECEIVE, 0, 0, 0)]);
        let msg = ping("org.example.Service");
        let c = check(
            &msg,
            subject("unconfined", 10),
            Target::Peer(subject(SERVICE, 20)),
        );
        assert_eq!(s.mediator.may_send(&c), Ok(()));
        assert_eq!(s.queries().len(), 1, "only the receiver's query");
        // To the bus, which runs unconfined: only the sender's.
        s.answers(vec![answer(query::SEND, 0, 0, 0)]);
        let hello = ping("org.freedesktop.DBus");
        let c = check(&hello, subject(CLIENT, 10), Target::Bus);
        assert_eq!(s.mediator.may_send(&c), Ok(()));
        let queries = s.queries();
        assert_eq!(queries.len(), 1);
        assert!(queries[0].starts_with(
            b"label\0/usr/bin/client\0\x20system\0org.freedesktop.DBus\0unconfined\0"
        ));
        // Both unconfined: nothing asked at all.
        let c = check(&hello, subject("unconfined", 10), Target::Bus);
        assert_eq!(s.mediator.may_send(&c), Ok(()));
        assert!(s.queries().is_empty());
    }

    #[test]
    fn a_confined_bus_is_asked_to_receive_with_its_own_label() {
        let s = Setup::new("/usr/bin/dbus-daemon (enforce)\n");
        s.answers(vec![
            answer(query::SEND, 0, 0, 0),
            answer(query::RECEIVE, 0, 0, 0),
        ]);
        let hello = ping("org.freedesktop.DBus");
        let c = check(&hello, subject(CLIENT, 10), Target::Bus);
        assert_eq!(s.mediator.may_send(&c), Ok(()));
        let queries = s.queries();
        assert!(queries[1]
            .starts_with(b"label\0/usr/bin/dbus-daemon\0\x20system\0:1.1\0/usr/bin/client\0"));
    }

    #[test]
    fn requested_replies_are_not_asked() {
        let s = Setup::new("unconfined");
        let msg = reply();
        let mut c = check(
            &msg,
            subject(CLIENT, 10),
            Target::Peer(subject(SERVICE, 20)),
        );
        c.requested_reply = true;
        assert_eq!(s.mediator.may_send(&c), Ok(()));
        assert!(s.queries().is_empty());
    }

    #[test]
    fn unrequested_replies_are_asked_but_never_logged() {
        let s = Setup::new("unconfined");
        s.answers(vec![answer(0, 0, 0, 0), answer(0, 0, 0, 0)]);
        let msg = reply();
        let c = check(
            &msg,
            subject(CLIENT, 10),
            Target::Peer(subject(SERVICE, 20)),
        );
        assert_eq!(s.mediator.may_send(&c), Err(MacRefusal::AppArmor));
        assert_eq!(s.queries().len(), 2);
        assert!(s.lines().is_empty());
    }

    #[test]
    fn activation_asks_send_with_the_assumed_label_and_nothing_else() {
        let s = Setup::new("unconfined");
        s.answers(vec![answer(0, 0, 0, 0)]);
        let msg = ping("org.example.Confined");
        let c = check(
            &msg,
            subject(CLIENT, 10),
            Target::Activation {
                name: "org.example.Confined",
                assumed_label: Some("/usr/bin/confined"),
            },
        );
        assert_eq!(s.mediator.may_send(&c), Err(MacRefusal::AppArmor));
        assert_eq!(
            s.queries(),
            [b"label\0/usr/bin/client\0\x20system\0org.example.Confined\0/usr/bin/confined\0/org/example\0org.example.I\0Ping".to_vec()]
        );
        assert_eq!(
            s.lines(),
            ["apparmor=\"DENIED\" operation=\"dbus_method_call\"  bus=\"system\" path=\"/org/example\" interface=\"org.example.I\" member=\"Ping\" mask=\"send\" name=\"org.example.Confined\" pid=10 label=\"/usr/bin/client\" peer_label=\"/usr/bin/confined\""]
        );
        // No AssumedAppArmorLabel=: the peer label is empty.
        s.answers(vec![answer(query::SEND, 0, 0, 0)]);
        let msg = ping("org.example.Other");
        let c = check(
            &msg,
            subject(CLIENT, 10),
            Target::Activation {
                name: "org.example.Other",
                assumed_label: None,
            },
        );
        assert_eq!(s.mediator.may_send(&c), Ok(()));
        assert_eq!(
            s.queries(),
            [b"label\0/usr/bin/client\0\x20system\0org.example.Other\0\0/org/example\0org.example.I\0Ping".to_vec()]
        );
    }

    #[test]
    fn complain_mode_allows_what_the_policy_refuses_and_logs_it_allowed() {
        let s = Setup::new("unconfined");
        s.answers(vec![answer(0, 0, 0, 0)]);
        let who = subject("/usr/bin/client (complain)", 10);
        assert_eq!(s.mediator.may_own(who, "org.example.Name"), Ok(()));
        assert_eq!(
            s.lines(),
            ["apparmor=\"ALLOWED\" operation=\"dbus_bind\"  bus=\"system\" name=\"org.example.Name\" mask=\"bind\" pid=10 label=\"/usr/bin/client\""]
        );
    }

    #[test]
    fn bind_asks_the_name_and_logs_refusals() {
        let s = Setup::new("unconfined");
        s.answers(vec![
            answer(0, 0, 0, 0),
            answer(query::BIND, 0, query::BIND, 0),
        ]);
        assert_eq!(
            s.mediator.may_own(subject(CLIENT, 10), "org.example.Name"),
            Err(MacRefusal::AppArmor)
        );
        assert_eq!(
            s.mediator
                .may_own(subject(CLIENT, 10), "org.example.Audited"),
            Ok(())
        );
        assert_eq!(
            s.queries(),
            [
                b"label\0/usr/bin/client\0\x20system\0org.example.Name".to_vec(),
                b"label\0/usr/bin/client\0\x20system\0org.example.Audited".to_vec()
            ]
        );
        assert_eq!(
            s.lines(),
            [
                "apparmor=\"DENIED\" operation=\"dbus_bind\"  bus=\"system\" name=\"org.example.Name\" mask=\"bind\" pid=10 label=\"/usr/bin/client\"",
                "apparmor=\"ALLOWED\" operation=\"dbus_bind\"  bus=\"system\" name=\"org.example.Audited\" mask=\"bind\" pid=10 label=\"/usr/bin/client\""
            ]
        );
        // Unconfined: allowed without asking.
        assert_eq!(
            s.mediator
                .may_own(subject("unconfined", 11), "org.example.Name"),
            Ok(())
        );
        assert!(s.queries().is_empty());
    }

    #[test]
    fn eavesdrop_asks_with_the_label_alone() {
        let s = Setup::new("unconfined");
        s.answers(vec![answer(0, query::EAVESDROP, 0, query::EAVESDROP)]);
        assert_eq!(
            s.mediator.may_eavesdrop(subject(CLIENT, 10)),
            Err(MacRefusal::AppArmor)
        );
        assert_eq!(
            s.queries(),
            [b"label\0/usr/bin/client\0\x20system".to_vec()]
        );
        assert!(s.lines().is_empty(), "a quiet refusal is not logged");
    }

    #[test]
    fn a_query_the_kernel_cannot_answer_refuses_with_dbus_daemons_error() {
        let s = Setup::new("unconfined");
        s.answers(vec![Err(io::Error::from_raw_os_error(libc::ENOENT))]);
        assert_eq!(
            s.mediator.may_own(subject(CLIENT, 10), "org.example.Name"),
            Err(MacRefusal::Failed {
                name: "org.freedesktop.DBus.Error.FileNotFound",
                text: "Failed to query AppArmor policy: No such file or directory".into()
            })
        );
        assert_eq!(
            s.lines(),
            ["apparmor=\"DENIED\" operation=\"dbus_bind\"  bus=\"system\" name=\"org.example.Name\" info=\"No such file or directory\" mask=\"bind\" pid=10 label=\"/usr/bin/client\""]
        );
        // A short answer is EPROTO; the receive side is then not asked.
        s.answers(vec![Ok(b"allow 0x00000002\n".to_vec())]);
        let msg = ping("org.example.Service");
        let c = check(
            &msg,
            subject(CLIENT, 10),
            Target::Peer(subject(SERVICE, 20)),
        );
        assert_eq!(
            s.mediator.may_send(&c),
            Err(MacRefusal::Failed {
                name: errors::FAILED,
                text: "Failed to query AppArmor policy: Protocol error".into()
            })
        );
        assert_eq!(s.queries().len(), 2);
        assert_eq!(
            s.lines(),
            [
                "apparmor=\"DENIED\" operation=\"dbus_method_call\"  bus=\"system\" path=\"/org/example\" interface=\"org.example.I\" member=\"Ping\" mask=\"send\" name=\"org.example.Service\" pid=10 label=\"/usr/bin/client\" peer_pid=20 peer_label=\"/usr/bin/service\" info=\"Protocol error\"",
                "apparmor=\"DENIED\" operation=\"dbus_method_call\"  bus=\"system\" path=\"/org/example\" interface=\"org.example.I\" member=\"Ping\" name=\":1.1\" mask=\"receive\" pid=20 label=\"/usr/bin/service\" peer_pid=10 peer_label=\"/usr/bin/client\" peer_info=\"Protocol error\""
            ]
        );
    }
}
