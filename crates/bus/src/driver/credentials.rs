//! Who a connection is, as the driver tells it: GetConnectionUnixUser,
//! GetConnectionUnixProcessID, GetConnectionCredentials (with the pidfd the
//! daemon opens for `ProcessFD`) and GetConnectionSELinuxSecurityContext.
//!
//! Owns: the GetConnectionCredentials reply waiting for the daemon's
//! pidfd. May touch: peers (credentials), the registry (who owns a name),
//! the options (the bus's own identity), and the driver's outcome.

use std::os::fd::OwnedFd;

use crate::fds::PassedFd;
use std::time::Instant;

use quickbus_wire::{Message, Value};

use super::{byte_array, dict_sv, Call, DriverResult, Reply};
use crate::bus::Bus;
use crate::bus::Routing;
use crate::errors::{self, BusError};
use crate::{Action, ConnId, Credentials, BUS_NAME};

/// Whom a `GetConnection*` call asks about.
pub(super) enum Subject {
    /// org.freedesktop.DBus itself.
    Bus,
    Peer(ConnId),
}

/// A reply waiting for the daemon to open a pidfd ([`Reply::WithPidfd`]).
/// At most one: the daemon answers before it hands the bus anything else.
#[derive(Debug)]
pub(crate) struct AwaitingPidfd {
    caller: ConnId,
    call: Message,
    body: Vec<Value>,
}

impl Bus {
    /// Hold the reply `body` to `call` and ask the daemon for a pidfd of
    /// `process` (pid, start time).
    pub(super) fn await_pidfd(
        &mut self,
        caller: ConnId,
        call: &Message,
        body: Vec<Value>,
        (pid, started): (u32, u64),
        out: &mut Vec<Action>,
    ) {
        let awaiting = AwaitingPidfd {
            caller,
            call: call.clone(),
            body,
        };
        if let Some(earlier) = self.awaiting_pidfd.replace(awaiting) {
            tracing::error!("a reply waiting for a pidfd was dropped: {earlier:?}");
        }
        out.push(Action::OpenPidfd { pid, started });
    }

    /// dbus-daemon's `bus_driver_get_conn_helper`.
    pub(super) fn subject(&self, name: &str, what: &str) -> Result<Subject, BusError> {
        if name == BUS_NAME {
            return Ok(Subject::Bus);
        }
        match self.registry.owner(name) {
            Some(id) => Ok(Subject::Peer(id)),
            None => Err(BusError::new(
                errors::NAME_HAS_NO_OWNER,
                format!("Could not get {what} of name '{name}': no such name"),
            )),
        }
    }

    pub(super) fn uid_of(&self, subject: &Subject) -> Option<u32> {
        match subject {
            Subject::Bus => self.opts.own_uid,
            Subject::Peer(id) => self
                .conns
                .get(id)
                .filter(|c| !c.creds().anonymous)
                .map(|c| c.creds().uid),
        }
    }

    pub(super) fn pid_of(&self, subject: &Subject) -> Option<u32> {
        match subject {
            Subject::Bus => Some(self.opts.own_pid),
            Subject::Peer(id) => self
                .conns
                .get(id)
                .filter(|c| !c.creds().anonymous)
                .and_then(|c| c.creds().pid),
        }
    }

    pub(super) fn get_unix_user(&self, name: &str) -> DriverResult {
        let subject = self.subject(name, "UID")?;
        match self.uid_of(&subject) {
            Some(uid) => Ok(vec![Value::Uint32(uid)]),
            None => Err(BusError::new(
                errors::FAILED,
                format!("Could not determine UID for '{name}'"),
            )),
        }
    }

    pub(super) fn get_unix_pid(&self, name: &str) -> DriverResult {
        let subject = self.subject(name, "PID")?;
        match self.pid_of(&subject) {
            Some(pid) => Ok(vec![Value::Uint32(pid)]),
            None => Err(BusError::new(
                errors::UNIX_PROCESS_ID_UNKNOWN,
                format!("Could not determine PID for '{name}'"),
            )),
        }
    }

    /// dbus-broker's and dbus-daemon's reply: `ProcessFD` only to a caller
    /// that negotiated fd passing (and wants a reply), the pidfd riding on
    /// the reply; the daemon opens it.
    pub(super) fn get_credentials(&self, call: &Call<'_>, name: &str) -> Result<Reply, BusError> {
        let subject = self.subject(name, "credentials")?;
        let caller_takes_fds = self.conns.get(&call.from).is_some_and(|c| c.unix_fds());
        let wants_reply = call.msg.flags() & quickbus_wire::flags::NO_REPLY_EXPECTED == 0;
        let body = vec![dict_sv(self.credential_entries(&subject))];
        match self.process_of(&subject) {
            Some((pid, started)) if caller_takes_fds && wants_reply => {
                Ok(Reply::WithPidfd { body, pid, started })
            }
            _ => Ok(Reply::Now {
                body,
                fds: Vec::new(),
            }),
        }
    }

    /// The process a subject's pidfd would pin, unless it is anonymous (as
    /// its pid): (pid, start time).
    pub(super) fn process_of(&self, subject: &Subject) -> Option<(u32, u64)> {
        match subject {
            Subject::Bus => Some((self.opts.own_pid, self.opts.own_process_started?)),
            Subject::Peer(id) => self
                .conns
                .get(id)
                .filter(|c| !c.creds().anonymous)
                .and_then(|c| Some((c.creds().pid?, c.creds().process_started?))),
        }
    }

    /// The daemon's answer to [`Action::OpenPidfd`]: the waiting
    /// GetConnectionCredentials reply goes out, with `ProcessFD` when
    /// there is a pidfd, and then (as for every successful call)
    /// eavesdroppers see the call.
    pub fn pidfd_opened(&mut self, pidfd: Option<OwnedFd>, now: Instant, out: &mut Vec<Action>) {
        let routing = Routing::by_bus(now);
        let Some(AwaitingPidfd {
            caller,
            call,
            mut body,
        }) = self.awaiting_pidfd.take()
        else {
            return;
        };
        if !self.conns.contains_key(&caller) {
            return;
        }
        let mut fds = Vec::new();
        if let (Some(pidfd), Some(Value::Array { items, .. })) = (pidfd, body.first_mut()) {
            items.push(Value::DictEntry(
                Box::new(Value::String("ProcessFD".into())),
                Box::new(Value::Variant(Box::new(Value::UnixFd(0)))),
            ));
            fds.push(PassedFd::from(pidfd));
        }
        self.reply(caller, &call, body, fds, routing, out);
        self.pass_to_eavesdroppers(caller, &call, routing, out);
    }

    /// The label, without a NUL, only where SELinux is enabled: the call is
    /// SELinux's, unlike `LinuxSecurityLabel` (dbus-broker's rule).
    pub(super) fn get_selinux_security_context(&self, name: &str) -> DriverResult {
        let subject = self.subject(name, "security context")?;
        let label = match subject {
            Subject::Bus => self.own_security_label.as_ref(),
            Subject::Peer(id) => self
                .conns
                .get(&id)
                .and_then(|c| c.creds().security_label.as_ref()),
        };
        match label {
            Some(label) if self.selinux_enabled => Ok(vec![byte_array(label)]),
            _ => Err(BusError::new(
                errors::SELINUX_SECURITY_CONTEXT_UNKNOWN,
                format!("Could not determine security context for '{name}'"),
            )),
        }
    }

    /// GetConnectionCredentials' entries besides ProcessFD.
    pub(super) fn credential_entries(&self, subject: &Subject) -> Vec<(&'static str, Value)> {
        match subject {
            Subject::Bus => {
                let mut entries = Vec::new();
                if let Some(pid) = self.pid_of(subject) {
                    entries.push(("ProcessID", Value::Uint32(pid)));
                }
                if let Some(uid) = self.uid_of(subject) {
                    entries.push(("UnixUserID", Value::Uint32(uid)));
                }
                entries
            }
            Subject::Peer(id) => {
                let Some(conn) = self.conns.get(id) else {
                    return Vec::new();
                };
                let mut entries = entries_of(conn.creds());
                // From the connection, not its credentials, as in
                // dbus-daemon: the instance it came through.
                if let Some(path) = self.containers.instance_of(*id) {
                    entries.push((
                        super::containers::INSTANCE_KEY,
                        Value::ObjectPath(path.to_owned()),
                    ));
                }
                entries
            }
        }
    }
}

/// What `creds` say of a peer, as GetConnectionCredentials lists it (an
/// anonymous peer has no uid, pid or groups).
pub(super) fn entries_of(creds: &Credentials) -> Vec<(&'static str, Value)> {
    let mut entries = Vec::new();
    if !creds.anonymous {
        if let Some(pid) = creds.pid {
            entries.push(("ProcessID", Value::Uint32(pid)));
        }
        entries.push(("UnixUserID", Value::Uint32(creds.uid)));
    }
    if !creds.groups.is_empty() && !creds.anonymous {
        let mut groups = creds.groups.clone();
        groups.sort_unstable();
        groups.dedup();
        entries.push((
            "UnixGroupIDs",
            Value::Array {
                elem_sig: "u".into(),
                items: groups.into_iter().map(Value::Uint32).collect(),
            },
        ));
    }
    if let Some(label) = &creds.security_label {
        // GVariant bytestring convention: the NUL is included.
        let mut bytes = label.clone();
        bytes.push(0);
        entries.push(("LinuxSecurityLabel", byte_array(&bytes)));
    }
    entries
}
