//! SELinux mediation as dbus-daemon's `bus/selinux.c`: the `dbus` class's
//! `acquire_svc` (a connection owning a name, against the name's
//! `<associate>` context or the bus's own) and `send_msg` (a connection
//! sending to another, or to the bus), asked of libselinux's AVC with the
//! labels the connections' sockets had when they connected.
//!
//! A [`SelinuxMediator`] is made at start and on every reload (the
//! `<associate>` list may change); the AVC under it is opened once.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CStr;

use quickbus_bus::mac::{MacRefusal, Mediator, SendCheck, Subject, Target};
use quickbus_wire::MessageType;
use tracing::warn;

use super::libselinux::{AuditData, Avc, Sid};

const CLASS: &CStr = c"dbus";
const ACQUIRE_SVC: &CStr = c"acquire_svc";
const SEND_MSG: &CStr = c"send_msg";

pub struct SelinuxMediator {
    avc: &'static Avc,
    /// The bus's own context: the target of messages to the bus and of
    /// names without an `<associate>`.
    bus: Sid,
    /// `<associate own=NAME context=CONTEXT>`.
    names: HashMap<String, Sid>,
    /// Connection labels seen so far (libselinux's table would find them
    /// too, but this skips a copy per message).
    labels: RefCell<HashMap<Vec<u8>, Option<Sid>>>,
}

impl SelinuxMediator {
    /// The mediator for this configuration's associations; `own_label` is
    /// the bus process's context. Associations whose context the policy
    /// does not know are skipped with a warning, as dbus-daemon does.
    pub fn new(
        avc: &'static Avc,
        own_label: &[u8],
        associations: &[(String, String)],
    ) -> Result<SelinuxMediator, String> {
        let bus = avc.sid(own_label).ok_or_else(|| {
            format!(
                "Error getting SID from context \"{}\"",
                String::from_utf8_lossy(own_label)
            )
        })?;
        let mut names = HashMap::new();
        for (name, context) in associations {
            match avc.sid(context.as_bytes()) {
                Some(sid) => {
                    names.insert(name.clone(), sid);
                }
                None => warn!("Error getting SID from context \"{context}\""),
            }
        }
        Ok(SelinuxMediator {
            avc,
            bus,
            names,
            labels: RefCell::new(HashMap::new()),
        })
    }

    /// A connection's SID; None when it has no label the policy knows
    /// (dbus-daemon refuses such a connection outright; here everything
    /// it tries is refused).
    fn sid_of(&self, subject: Subject<'_>) -> Option<Sid> {
        let label = subject.label?;
        if let Some(sid) = self.labels.borrow().get(label) {
            return *sid;
        }
        let sid = self.avc.sid(label);
        self.labels.borrow_mut().insert(label.to_vec(), sid);
        sid
    }
}

fn msgtype(t: MessageType) -> &'static str {
    match t {
        MessageType::MethodCall => "method_call",
        MessageType::MethodReturn => "method_return",
        MessageType::Error => "error",
        MessageType::Signal => "signal",
    }
}

impl Mediator for SelinuxMediator {
    fn may_own(&self, owner: Subject<'_>, name: &str) -> Result<(), MacRefusal> {
        let source = self.sid_of(owner).ok_or(MacRefusal::SELinux)?;
        let target = self.names.get(name).copied().unwrap_or(self.bus);
        let audit = AuditData::Acquire {
            name,
            spid: owner.pid,
        };
        if self.avc.check(source, target, CLASS, ACQUIRE_SVC, &audit) {
            Ok(())
        } else {
            Err(MacRefusal::SELinux)
        }
    }

    fn may_send(&self, check: &SendCheck<'_>) -> Result<(), MacRefusal> {
        let (sender, msg) = (check.sender, check.msg);
        // dbus-daemon's "We do not mediate activation attempts yet": the
        // message is checked when it reaches the started service.
        let recipient = match check.target {
            Target::Activation { .. } => return Ok(()),
            Target::Bus => None,
            Target::Peer(peer) => Some(peer),
        };
        let source = self.sid_of(sender).ok_or(MacRefusal::SELinux)?;
        let target = match recipient {
            Some(r) => self.sid_of(r).ok_or(MacRefusal::SELinux)?,
            None => self.bus,
        };
        let audit = AuditData::Send {
            msgtype: msgtype(msg.msg_type()),
            interface: msg.interface(),
            member: msg.member(),
            error_name: msg.error_name(),
            dest: check.destination(),
            spid: sender.pid,
            tpid: recipient.and_then(|r| r.pid),
        };
        if self.avc.check(source, target, CLASS, SEND_MSG, &audit) {
            Ok(())
        } else {
            Err(MacRefusal::SELinux)
        }
    }

    fn features(&self) -> Vec<&'static str> {
        vec!["SELinux"]
    }
}
