//! Mandatory access control: the questions the bus asks a Linux security
//! module (SELinux's `dbus` class, as dbus-daemon's `bus/selinux.c` asks
//! them), and the AccessDenied texts dbus-daemon gives when it says no.
//!
//! The answers come from a [`Mediator`] the daemon installs at start. It is
//! not part of the bus's state: it holds handles into the running kernel
//! and libraries (SELinux's access vector cache), so a bus restored in a
//! new process gets a fresh one from the daemon, which creates it on every
//! start. Without one (a machine with no security module to ask), each
//! message pays one `is_none` branch.

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

/// The module that refused, which chooses dbus-daemon's text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MacRefusal {
    SELinux,
}

/// The decisions a security module makes for the bus. `Send` because the
/// bus moves between threads in tests; the daemon calls it from its one
/// loop.
pub trait Mediator: Send {
    /// May `owner` own `name` (SELinux `acquire_svc` against the name's
    /// `<associate>` context, else the bus's own)?
    fn may_own(&self, owner: Subject<'_>, name: &str) -> Result<(), MacRefusal>;

    /// May `sender` send `msg` to `recipient` (None: the bus itself)?
    /// SELinux `send_msg`.
    fn may_send(
        &self,
        sender: Subject<'_>,
        recipient: Option<Subject<'_>>,
        msg: &Message,
    ) -> Result<(), MacRefusal>;
}

impl Bus {
    /// Ask `mediator`, from now on, about every name acquired and every
    /// message a connection sends; None stops asking.
    pub fn set_mediator(&mut self, mediator: Option<Box<dyn Mediator>>) {
        self.mac = mediator;
    }

    fn mac_subject(&self, id: ConnId) -> Option<Subject<'_>> {
        let conn = self.conns.get(&id)?;
        Some(Subject {
            label: conn.creds.security_label.as_deref(),
            pid: conn.creds.pid,
        })
    }

    /// The security module's word on `msg` going as `d` says, checked
    /// before the configuration's policy as in dbus-daemon. Messages from
    /// the bus itself are not mediated, nor is a request to activate a
    /// service (dbus-daemon's "We do not mediate activation attempts yet"):
    /// the message is checked when it reaches the started service.
    pub(crate) fn check_mac(&self, msg: &Message, d: Delivery) -> Result<(), Denial> {
        let (Some(mac), Some(from)) = (&self.mac, d.from) else {
            return Ok(());
        };
        let to_bus = d.to.is_none();
        if to_bus && msg.destination().is_some_and(|dest| dest != BUS_NAME) {
            return Ok(());
        }
        let Some(sender) = self.mac_subject(from) else {
            return Ok(());
        };
        let recipient = d.to.and_then(|to| self.mac_subject(to));
        match mac.may_send(sender, recipient, msg) {
            Ok(()) => Ok(()),
            Err(MacRefusal::SELinux) => {
                let sender = self.party(d.from);
                let recipient = self.party(d.to);
                Err(Denial::new(
                    Refusal::SELinux,
                    0,
                    msg,
                    sender.as_ref(),
                    recipient.as_ref(),
                    false,
                ))
            }
        }
    }

    /// The security module's word on `from` owning `name` (RequestName),
    /// checked before the configuration's `<allow own>`.
    pub(crate) fn check_mac_own(&self, from: ConnId, me: &str, name: &str) -> Result<(), BusError> {
        let (Some(mac), Some(owner)) = (&self.mac, self.mac_subject(from)) else {
            return Ok(());
        };
        match mac.may_own(owner, name) {
            Ok(()) => Ok(()),
            Err(MacRefusal::SELinux) => Err(BusError::new(
                errors::ACCESS_DENIED,
                format!("Connection \"{me}\" is not allowed to own the service \"{name}\" due to SELinux policy"),
            )),
        }
    }
}
