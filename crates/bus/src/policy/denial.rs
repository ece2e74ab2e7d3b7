//! The AccessDenied text of a refused message, worded as dbus-daemon's
//! (`complain_about_message`), so logs and clients read the same. The
//! command line (`comm=`) is the one the daemon read at accept time.
//!
//! Owns: the wording. May touch: nothing else.

use quickbus_wire::{Message, MessageType};

use crate::errors::{self, BusError};
use crate::BUS_NAME;

/// Which check refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    Send,
    Receive,
    /// SELinux `send_msg` (dbus-daemon counts no rules for it).
    SELinux,
    /// AppArmor `send` or `receive` (dbus-daemon's own text, without a
    /// rule count).
    AppArmor,
}

/// One party of a refused message, as the text names it.
pub(crate) struct Party<'a> {
    /// Unique name; None for the bus.
    pub name: Option<&'a str>,
    pub uid: u32,
    pub pid: Option<u32>,
    /// The command line, when the daemon could read it.
    pub comm: Option<&'a str>,
    /// The LSM label (`SO_PEERSEC`), which dbus-daemon adds as `label="…"`.
    pub label: Option<&'a [u8]>,
}

/// A refused message and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Denial {
    /// The error's name: AccessDenied, unless a security module could not
    /// be asked.
    pub name: &'static str,
    pub text: String,
}

fn type_name(t: MessageType) -> &'static str {
    match t {
        MessageType::MethodCall => "method_call",
        MessageType::MethodReturn => "method_return",
        MessageType::Error => "error",
        MessageType::Signal => "signal",
    }
}

/// dbus-daemon's "loginfo" of a party (`inactive` before Hello, its
/// label last when it has one), or `bus` for the bus itself.
pub(crate) fn loginfo(party: Option<&Party<'_>>, bus: &str) -> String {
    match party {
        None => bus.to_owned(),
        Some(p) if p.name.is_none() => "inactive".to_owned(),
        Some(p) => {
            let mut info = crate::loginfo(p.uid, p.pid, p.comm);
            if let Some(label) = p.label {
                info.push_str(&format!(" label=\"{}\"", String::from_utf8_lossy(label)));
            }
            info
        }
    }
}

impl Denial {
    pub fn new(
        refusal: Refusal,
        matched_rules: usize,
        msg: &Message,
        sender: Option<&Party<'_>>,
        recipient: Option<&Party<'_>>,
        requested_reply: bool,
    ) -> Denial {
        let complaint = match refusal {
            Refusal::Send => format!("Rejected send message, {matched_rules} matched rules"),
            Refusal::Receive => format!("Rejected receive message, {matched_rules} matched rules"),
            Refusal::SELinux => format!("An SELinux policy prevents this sender from sending this message to this recipient, {matched_rules} matched rules"),
            Refusal::AppArmor => {
                "An AppArmor policy prevents this sender from sending this message to this recipient".to_owned()
            }
        };
        let text = format!(
            "{complaint}; type=\"{}\", sender=\"{}\" ({}) interface=\"{}\" member=\"{}\" error name=\"{}\" requested_reply=\"{}\" destination=\"{}\" ({})",
            type_name(msg.msg_type()),
            // dbus-daemon prints a NULL name: "(null)" for a connection
            // before Hello, "(unset)" for the bus.
            sender.map_or("(unset)", |s| s.name.unwrap_or("(null)")),
            loginfo(sender, "(bus)"),
            msg.interface().unwrap_or("(unset)"),
            msg.member().unwrap_or("(unset)"),
            msg.error_name().unwrap_or("(unset)"),
            u8::from(requested_reply),
            msg.destination().unwrap_or(BUS_NAME),
            loginfo(recipient, "bus"),
        );
        Denial {
            name: errors::ACCESS_DENIED,
            text,
        }
    }

    /// A refusal because the security module could not be asked.
    pub fn failed(name: &'static str, text: String) -> Denial {
        Denial { name, text }
    }

    pub fn to_error(&self) -> BusError {
        BusError::new(self.name, self.text.clone())
    }
}
