//! Mandatory access control: the questions the bus asks the Linux
//! security modules (SELinux's `dbus` class, as dbus-daemon's
//! `bus/selinux.c` asks them; AppArmor's `dbus` rules, as its
//! `bus/apparmor.c` asks them), and the AccessDenied texts dbus-daemon
//! gives when one says no.
//!
//! The answers come from a [`Mediator`] the daemon installs at start. It is
//! not part of the bus's state: it holds handles into the running kernel
//! and libraries (SELinux's access vector cache, AppArmor's query file),
//! so a bus restored in a new process gets a fresh one from the daemon,
//! which creates it on every start. Without one (a machine with no
//! security module to ask), each message pays one `is_none` branch.
//!
//! Owns: the [`Mediator`] trait and the MAC texts; the bus holds the
//! installed mediator. May touch: peers (labels, credentials, unique
//! names), to ask the mediator.

use quickbus_wire::Message;

use crate::errors::{self, BusError};
use crate::policy::{Delivery, Denial, Refusal};
use crate::{Bus, ConnId, BUS_NAME};

/// A connection as the security module judges it: by the label its socket
/// had when it connected (`SO_PEERSEC`), not by whatever process uses it
/// later.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    pub label: Option<&'a [u8]>,
    pub pid: Option<u32>,
}

/// Where a message goes, as the security module sees it.
#[derive(Clone, Copy, Debug)]
pub enum Target<'a> {
    /// The bus driver: judged by the bus's own label.
    Bus,
    /// A connection (the addressed one, a broadcast's receiver or an
    /// eavesdropper).
    Peer(Subject<'a>),
    /// An activatable name nobody owns yet: the message would start it.
    /// `assumed_label`: its service file's `AssumedAppArmorLabel=`, the
    /// label AppArmor judges the service by before it runs.
    Activation {
        name: &'a str,
        assumed_label: Option<&'a str>,
    },
}

/// One message on its way, with what dbus-daemon hands its modules.
#[derive(Clone, Copy, Debug)]
pub struct SendCheck<'a> {
    pub sender: Subject<'a>,
    /// The sender's unique name, or the bus's name before Hello (the
    /// `source` of dbus-daemon's AppArmor receive query).
    pub source: &'a str,
    pub target: Target<'a>,
    pub msg: &'a Message,
    /// A reply answering a call the bus tracked.
    pub requested_reply: bool,
}

impl SendCheck<'_> {
    /// The name the message is addressed to; the bus's for a message
    /// without one that reaches the bus (dbus-daemon's `dest`).
    pub fn destination(&self) -> &str {
        self.msg.destination().unwrap_or(BUS_NAME)
    }
}

/// Why a security module said no, which chooses dbus-daemon's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MacRefusal {
    SELinux,
    AppArmor,
    /// The module could not be asked (AppArmor's "Failed to query
    /// AppArmor policy: …"): the error name and text to answer with.
    Failed {
        name: &'static str,
        text: String,
    },
}

/// The decisions a security module makes for the bus. `Send` because the
/// bus moves between threads in tests; the daemon calls it from its one
/// loop.
pub trait Mediator: Send {
    /// May `owner` own `name` (SELinux `acquire_svc` against the name's
    /// `<associate>` context, else the bus's own; AppArmor `bind`)?
    fn may_own(&self, owner: Subject<'_>, name: &str) -> Result<(), MacRefusal>;

    /// May the message go (SELinux `send_msg`; AppArmor `send` for the
    /// sender and `receive` for the receiver)?
    fn may_send(&self, check: &SendCheck<'_>) -> Result<(), MacRefusal>;

    /// May `who` eavesdrop (AddMatch with eavesdrop=true, BecomeMonitor;
    /// AppArmor `eavesdrop`)? SELinux has no such question.
    fn may_eavesdrop(&self, who: Subject<'_>) -> Result<(), MacRefusal> {
        let _ = who;
        Ok(())
    }

    /// The names this module adds to the bus's `Features` property
    /// ("SELinux", "AppArmor"), as dbus-daemon lists the enabled ones.
    fn features(&self) -> Vec<&'static str> {
        Vec::new()
    }
}

/// Several modules asked in turn (SELinux before AppArmor, dbus-daemon's
/// order); the first refusal is the answer.
pub struct Stack(pub Vec<Box<dyn Mediator>>);

impl Mediator for Stack {
    fn may_own(&self, owner: Subject<'_>, name: &str) -> Result<(), MacRefusal> {
        self.0.iter().try_for_each(|m| m.may_own(owner, name))
    }

    fn may_send(&self, check: &SendCheck<'_>) -> Result<(), MacRefusal> {
        self.0.iter().try_for_each(|m| m.may_send(check))
    }

    fn may_eavesdrop(&self, who: Subject<'_>) -> Result<(), MacRefusal> {
        self.0.iter().try_for_each(|m| m.may_eavesdrop(who))
    }

    fn features(&self) -> Vec<&'static str> {
        self.0.iter().flat_map(|m| m.features()).collect()
    }
}

impl Bus {
    /// Ask `mediator`, from now on, about every name acquired and every
    /// message a connection sends; None stops asking.
    pub fn set_mediator(&mut self, mediator: Option<Box<dyn Mediator>>) {
        self.mac = mediator;
    }

    /// The enabled modules' names for the `Features` property.
    pub(crate) fn mac_features(&self) -> Vec<&'static str> {
        self.mac.as_ref().map_or_else(Vec::new, |m| m.features())
    }

    fn mac_subject(&self, id: ConnId) -> Option<Subject<'_>> {
        let conn = self.conns.get(&id)?;
        Some(Subject {
            label: conn.creds().security_label.as_deref(),
            pid: conn.creds().pid,
        })
    }

    /// The security module's word on `msg` going as `d` says, checked
    /// before the configuration's policy as in dbus-daemon. Messages from
    /// the bus itself are not mediated. A message that would activate a
    /// service is judged against the name (AppArmor asks with the
    /// service file's `AssumedAppArmorLabel=`; SELinux does not mediate
    /// activation), and again when it reaches the started service.
    pub(crate) fn check_mac(&self, msg: &Message, d: Delivery) -> Result<(), Denial> {
        let (Some(mac), Some(from)) = (&self.mac, d.from) else {
            return Ok(());
        };
        let Some(sender) = self.mac_subject(from) else {
            return Ok(());
        };
        let target = match d.to {
            Some(to) => match self.mac_subject(to) {
                Some(peer) => Target::Peer(peer),
                None => return Ok(()),
            },
            None => match msg.destination() {
                Some(dest) if dest != BUS_NAME => Target::Activation {
                    name: dest,
                    assumed_label: self
                        .opts
                        .assumed_apparmor_labels
                        .get(dest)
                        .map(String::as_str),
                },
                _ => Target::Bus,
            },
        };
        let check = SendCheck {
            sender,
            source: self.unique_name(from).unwrap_or(BUS_NAME),
            target,
            msg,
            requested_reply: d.requested_reply,
        };
        let refusal = match mac.may_send(&check) {
            Ok(()) => return Ok(()),
            Err(refusal) => refusal,
        };
        let sender = self.party(d.from);
        let recipient = self.party(d.to);
        let kind = match refusal {
            MacRefusal::SELinux => Refusal::SELinux,
            MacRefusal::AppArmor => Refusal::AppArmor,
            MacRefusal::Failed { name, text } => return Err(Denial::failed(name, text)),
        };
        Err(Denial::new(
            kind,
            0,
            msg,
            sender.as_ref(),
            recipient.as_ref(),
            d.requested_reply,
        ))
    }

    /// The security module's word on `from` owning `name` (RequestName),
    /// checked before the configuration's `<allow own>`.
    pub(crate) fn check_mac_own(&self, from: ConnId, me: &str, name: &str) -> Result<(), BusError> {
        let (Some(mac), Some(owner)) = (&self.mac, self.mac_subject(from)) else {
            return Ok(());
        };
        let module = match mac.may_own(owner, name) {
            Ok(()) => return Ok(()),
            Err(MacRefusal::SELinux) => "SELinux",
            Err(MacRefusal::AppArmor) => "AppArmor",
            Err(MacRefusal::Failed { name, text }) => return Err(BusError::new(name, text)),
        };
        Err(BusError::new(
            errors::ACCESS_DENIED,
            format!("Connection \"{me}\" is not allowed to own the service \"{name}\" due to {module} policy"),
        ))
    }

    /// The security module's word on `from` eavesdropping (AddMatch with
    /// eavesdrop=true, BecomeMonitor), after the privilege check as in
    /// dbus-daemon.
    pub(crate) fn check_mac_eavesdrop(&self, from: ConnId) -> Result<(), BusError> {
        let (Some(mac), Some(who)) = (&self.mac, self.mac_subject(from)) else {
            return Ok(());
        };
        match mac.may_eavesdrop(who) {
            Ok(()) => Ok(()),
            Err(MacRefusal::Failed { name, text }) => Err(BusError::new(name, text)),
            Err(refusal) => {
                let module = if refusal == MacRefusal::SELinux {
                    "SELinux"
                } else {
                    "AppArmor"
                };
                let me = self.unique_name(from).unwrap_or("(inactive)");
                Err(BusError::new(
                    errors::ACCESS_DENIED,
                    format!(
                        "Connection \"{me}\" is not allowed to eavesdrop due to {module} policy"
                    ),
                ))
            }
        }
    }
}
