//! Starting services on demand ("activation"), as dbus-daemon does it.
//!
//! A message to an activatable name nobody owns (without NO_AUTO_START),
//! or a StartServiceByName call, opens a *pending activation* for the name.
//! Everything waiting for the name queues there, in arrival order, until
//! one of three things happens:
//!
//! - the name gets an owner: queued messages are routed to it in order and
//!   StartServiceByName callers get `DBUS_START_REPLY_SUCCESS`;
//! - the daemon reports a failure ([`crate::Bus::activation_failed`]), systemd
//!   sends `ActivationFailure` for the unit, or `service_start_timeout`
//!   passes: every waiter gets the error.
//!
//! The bus itself starts nothing: it asks the daemon with
//! [`crate::Action::Activate`], or, in systemd mode, sends systemd the
//! `ActivationRequest` signal (activating `org.freedesktop.systemd1` first
//! when systemd has not connected yet, which only waits for it).
//!
//! Owns: the pending activations and their waiters and deadlines, the
//! message parked for a service lookup, and the activation environment.
//! May touch: nothing else; `bus::activating` starts, joins, completes
//! and fails activations as the bus routes.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use quickbus_wire::Message;

use crate::errors::{self, BusError};
use crate::{ConnId, OutMessage};

/// systemd's bus name: in systemd mode it is "activated" by waiting.
pub const SYSTEMD_NAME: &str = "org.freedesktop.systemd1";
/// The interface of systemd's activation signals.
pub const SYSTEMD_ACTIVATOR: &str = "org.freedesktop.systemd1.Activator";
/// `DBUS_START_REPLY_SUCCESS`.
pub const START_REPLY_SUCCESS: u32 = 1;
/// `DBUS_START_REPLY_ALREADY_RUNNING`.
pub const START_REPLY_ALREADY_RUNNING: u32 = 2;

/// Whether a name no known `.service` file provides may send the daemon
/// to the service directories (dbus-daemon reads them again on such a
/// miss, so a file installed after start-up works without a reload).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rescan {
    Allowed,
    /// The daemon just looked: what it found is all there is.
    Done,
}

/// A message held while the daemon reads the service directories
/// ([`crate::Action::LookUpService`]). At most one: the daemon answers before it
/// hands the bus anything else.
#[derive(Debug)]
pub(crate) enum Parked {
    /// A message to `dest`, which nobody owns; monitors have not seen it.
    Unicast {
        from: ConnId,
        msg: Message,
        fds: Vec<crate::fds::PassedFd>,
        dest: String,
    },
    /// A StartServiceByName call (monitors saw it, the policy allowed it).
    DriverCall { from: ConnId, msg: Message },
}

impl Parked {
    /// The connection that sent it.
    pub(crate) fn sender(&self) -> ConnId {
        match self {
            Parked::Unicast { from, .. } | Parked::DriverCall { from, .. } => *from,
        }
    }
}

/// A `.service` file the daemon found on a rescan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FoundService {
    /// Its `SystemdService=`.
    pub systemd_unit: Option<String>,
    /// Its `AssumedAppArmorLabel=`.
    pub assumed_apparmor_label: Option<String>,
}

/// Something waiting for a name to be owned.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) enum Waiter {
    /// A peer's message that triggered (or joined) the activation; routed
    /// to the new owner as if it had just arrived.
    Message {
        from: ConnId,
        /// Written before `stamped`, whose body lies in it: the handover
        /// then holds the bytes once.
        #[serde(with = "crate::handover::shared_message")]
        msg: Message,
        stamped: OutMessage,
    },
    /// A message the bus itself sends to the name (systemd's
    /// ActivationRequest or SetEnvironment), already built.
    FromBus(OutMessage),
    /// A StartServiceByName call awaiting its reply.
    Start {
        from: ConnId,
        #[serde(with = "crate::handover::shared_message")]
        call: Message,
    },
}

impl Waiter {
    /// The peer to tell when the activation fails, and the message its
    /// error answers.
    pub(crate) fn caller(&self) -> Option<(ConnId, &Message)> {
        match self {
            Waiter::Message { from, msg, .. } => Some((*from, msg)),
            Waiter::Start { from, call } => Some((*from, call)),
            Waiter::FromBus(_) => None,
        }
    }
}

/// One name being activated.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
/// A name of its own for the handover's layout test, which tells
/// serialized types by name (postcard writes none).
#[serde(rename = "PendingActivation")]
pub(crate) struct Pending {
    #[serde(with = "crate::handover::instant")]
    deadline: Instant,
    /// The systemd unit asked to start the service, if systemd does.
    systemd_unit: Option<String>,
    /// The daemon was asked to start a program for it.
    pub(crate) spawned: bool,
    pub(crate) waiters: Vec<Waiter>,
}

/// The pending activations, by name, with their deadlines.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Activations {
    pending: HashMap<String, Pending>,
    #[serde(with = "crate::handover::timed_set")]
    deadlines: BTreeSet<(Instant, String)>,
    /// Waiters over all names (`max_pending_service_starts`).
    waiting: usize,
    /// The message waiting for a rescan of the service directories.
    /// Not handed over: the daemon answers the rescan before anything
    /// else, so between two events (where a restart happens) it is None.
    #[serde(with = "crate::handover::within_an_event")]
    parked: Option<Parked>,
    /// What UpdateActivationEnvironment set, for the services started.
    env: HashMap<String, String>,
}

impl Activations {
    pub fn is_pending(&self, name: &str) -> bool {
        self.pending.contains_key(name)
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// After a restart in place: the waiters over all names and the
    /// deadlines found again from the pending activations, beside which
    /// they crossed (a count below the waiters made an activation's end
    /// count below zero, and wrapped, refused every activation after; a
    /// pending activation without its deadline never timed out).
    pub(crate) fn recount(&mut self) {
        self.waiting = self.pending.values().map(|p| p.waiters.len()).sum();
        self.deadlines = self
            .pending
            .iter()
            .map(|(name, p)| (p.deadline, name.clone()))
            .collect();
    }

    /// End the activation of `name`: its waiters leave with it.
    pub(crate) fn take(&mut self, name: &str) -> Option<Pending> {
        let pending = self.pending.remove(name)?;
        self.deadlines.remove(&(pending.deadline, name.to_owned()));
        self.waiting -= pending.waiters.len();
        Some(pending)
    }

    pub fn environment(&self) -> &HashMap<String, String> {
        &self.env
    }

    /// Set `pairs` in the activation environment. It must stay within
    /// `max_activation_environment_variables` and `_bytes`; if not, none
    /// of them is set.
    pub fn set_environment(
        &mut self,
        pairs: &[(String, String)],
        limits: &crate::Limits,
    ) -> Result<(), BusError> {
        let mut env: HashMap<&str, &str> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        for (k, v) in pairs {
            env.insert(k, v);
        }
        let count = env.len();
        let bytes: usize = env.iter().map(|(k, v)| k.len() + v.len()).sum();
        if count > limits.max_activation_environment_variables
            || bytes > limits.max_activation_environment_bytes
        {
            return Err(BusError::new(
                errors::LIMITS_EXCEEDED,
                format!(
                    "The activation environment would hold {count} variables of {bytes} bytes \
                     (max_activation_environment_variables={}, \
                     max_activation_environment_bytes={}); nothing was changed",
                    limits.max_activation_environment_variables,
                    limits.max_activation_environment_bytes
                ),
            ));
        }
        for (k, v) in pairs {
            self.env.insert(k.clone(), v.clone());
        }
        Ok(())
    }

    /// Open a pending activation of `name` for its first `waiter`.
    pub(crate) fn open(
        &mut self,
        name: &str,
        deadline: Instant,
        systemd_unit: Option<String>,
        spawned: bool,
        waiter: Waiter,
    ) {
        self.pending.insert(
            name.to_owned(),
            Pending {
                deadline,
                systemd_unit,
                spawned,
                waiters: vec![waiter],
            },
        );
        self.waiting += 1;
        self.deadlines.insert((deadline, name.to_owned()));
    }

    /// Whether no activation is pending.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Waiters over all names (`max_pending_service_starts` bounds it).
    #[inline]
    pub(crate) fn waiting(&self) -> usize {
        self.waiting
    }

    /// The name whose deadline comes first, if it is `now` or earlier.
    pub(crate) fn first_expired(&self, now: Instant) -> Option<String> {
        let (at, name) = self.deadlines.first()?;
        (*at <= now).then(|| name.clone())
    }

    /// The names pending on systemd's `unit`.
    pub(crate) fn names_for_unit(&self, unit: &str) -> Vec<String> {
        self.pending
            .iter()
            .filter(|(_, p)| p.systemd_unit.as_deref() == Some(unit))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Hold `parked` until the daemon's lookup answers; returns a message
    /// parked before (the daemon broke its contract).
    pub(crate) fn park(&mut self, parked: Parked) -> Option<Parked> {
        self.parked.replace(parked)
    }

    /// The message waiting for the lookup that just answered.
    pub(crate) fn unpark(&mut self) -> Option<Parked> {
        self.parked.take()
    }

    pub(crate) fn push(&mut self, name: &str, waiter: Waiter) {
        if let Some(pending) = self.pending.get_mut(name) {
            pending.waiters.push(waiter);
            self.waiting += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::Harness;
    use quickbus_wire::MessageBuilder;

    /// A state whose count of waiters fell below its activations' (the
    /// name's owner arriving made it count below zero), and whose
    /// deadlines lost one (the activation never timed out).
    #[test]
    fn handed_over_waiters_and_deadlines_are_found_again() {
        let mut h = Harness::new();
        let (c, _) = h.client();
        h.send(
            c,
            MessageBuilder::method_call("/", "Start").destination("org.example.Activatable"),
        );
        h.out.clear(); // the service's start, asked of the daemon
        let activations = &mut h.bus.activations;
        assert_eq!(activations.waiting(), 1);
        activations.waiting = 0;
        activations.deadlines.clear();
        assert!(h.bus.check_handed_over().is_ok());
        let activations = &h.bus.activations;
        assert_eq!(activations.waiting(), 1);
        assert!(activations.next_deadline().is_some());
        let (service, _) = h.client();
        h.request_name(service, "org.example.Activatable", 0);
        assert_eq!(h.bus.activations.waiting(), 0);
    }
}
