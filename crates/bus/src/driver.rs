//! The `org.freedesktop.DBus` object: the bus driver's methods, with
//! dbus-daemon's replies, errors and error texts.

use std::collections::HashMap;

use quickbus_wire::{names, Message, Value};

use crate::bus::Bus;
use crate::errors::{self, BusError};
use crate::introspect::{self, InterfaceSpec, MethodSpec, INTERFACES};
use crate::policy::loginfo;
use crate::registry::NameEvent;
use crate::subscriptions::{parse_monitor_rule, parse_rule};
use crate::{Action, ConnId, ProcessFd, BUS_NAME, BUS_PATH};

pub(crate) type DriverResult = Result<Vec<Value>, BusError>;

fn string_array(items: impl IntoIterator<Item = String>) -> Value {
    Value::Array {
        elem_sig: "s".into(),
        items: items.into_iter().map(Value::String).collect(),
    }
}

fn byte_array(bytes: &[u8]) -> Value {
    Value::Array {
        elem_sig: "y".into(),
        items: bytes.iter().map(|&b| Value::Byte(b)).collect(),
    }
}

pub(crate) fn dict_sv(entries: Vec<(&str, Value)>) -> Value {
    Value::Array {
        elem_sig: "{sv}".into(),
        items: entries
            .into_iter()
            .map(|(k, v)| {
                Value::DictEntry(
                    Box::new(Value::String(k.into())),
                    Box::new(Value::Variant(Box::new(v))),
                )
            })
            .collect(),
    }
}

/// The call's arguments, already checked against the method's signature.
struct Args(Vec<Value>);

impl Args {
    fn str(&self, i: usize) -> &str {
        match self.0.get(i) {
            Some(Value::String(s)) => s,
            _ => "",
        }
    }

    fn u32(&self, i: usize) -> u32 {
        match self.0.get(i) {
            Some(Value::Uint32(v)) => *v,
            _ => 0,
        }
    }
}

/// Whom a `GetConnection*` call asks about.
enum Subject {
    /// org.freedesktop.DBus itself.
    Bus,
    Peer(ConnId),
}

/// Which handler a call goes to, after dbus-daemon's lookup rules.
fn find_method<'a>(
    interface: Option<&str>,
    member: &str,
    canonical_path: bool,
) -> Result<(&'a InterfaceSpec, &'a MethodSpec), BusError> {
    let mut found_interface = false;
    for iface in INTERFACES {
        if !(canonical_path || iface.any_path) {
            continue;
        }
        if interface.is_some_and(|i| i != iface.name) {
            continue;
        }
        found_interface = true;
        if let Some(method) = iface.methods.iter().find(|m| m.name == member) {
            return Ok((iface, method));
        }
    }
    let name = if found_interface {
        errors::UNKNOWN_METHOD
    } else {
        errors::UNKNOWN_INTERFACE
    };
    Err(BusError::new(
        name,
        format!("{BUS_NAME} does not understand message {member}"),
    ))
}

impl Bus {
    /// A method call addressed to org.freedesktop.DBus. Whether it
    /// succeeded (then, as in dbus-daemon, eavesdroppers may see it).
    pub(crate) fn driver_call(
        &mut self,
        from: ConnId,
        msg: &Message,
        out: &mut Vec<Action>,
    ) -> bool {
        let mut events = Vec::new();
        let result = self.dispatch(from, msg, &mut events);
        let succeeded = result.is_ok();
        match result {
            Ok(body) => {
                self.note_peaks(from);
                if msg.member() == Some("Hello") {
                    // The welcome comes before NameAcquired, as in
                    // dbus-daemon; monitors see the call first.
                    self.capture_driver_call(from, msg, out);
                    self.reply(from, msg, body, out);
                    self.emit(&events, None, out);
                } else {
                    // The signals a call caused come before its reply.
                    self.emit(&events, None, out);
                    if !std::mem::take(&mut self.reply_deferred) {
                        self.reply(from, msg, body, out);
                    }
                }
                // A name just taken may be one a service was started for.
                self.names_owned(&events, out);
            }
            Err(err) => {
                self.becoming_monitor = None;
                self.reply_fds.clear();
                self.error_reply(from, msg, err, out)
            }
        }
        self.reply_deferred = false;
        out.append(&mut self.deferred_actions);
        if let Some((id, rules)) = self.becoming_monitor.take() {
            self.become_monitor(id, rules, out);
        }
        succeeded
    }

    fn dispatch(
        &mut self,
        from: ConnId,
        msg: &Message,
        events: &mut Vec<NameEvent>,
    ) -> DriverResult {
        let member = msg.member().unwrap_or("");
        let canonical_path = msg.path() == Some(BUS_PATH);
        let (iface, method) = find_method(msg.interface(), member, canonical_path)?;
        if method.privileged {
            self.check_privileged(from, member)?;
        }
        if !(canonical_path || method.any_path) {
            return Err(BusError::new(
                errors::ACCESS_DENIED,
                format!(
                    "Method '{member}' is only available at the canonical object path '{BUS_PATH}'"
                ),
            ));
        }
        if msg.signature() != method.in_sig {
            return Err(BusError::new(
                errors::INVALID_ARGS,
                format!(
                    "Call to {member} has wrong args ({}, expected {})\n",
                    msg.signature(),
                    method.in_sig
                ),
            ));
        }
        let args = Args(
            msg.body_values()
                .map_err(|e| BusError::new(errors::INVALID_ARGS, e.to_string()))?,
        );
        match (iface.name, member) {
            (_, "Hello") => self.hello(from, events),
            (_, "RequestName") => self.request_name(from, args.str(0), args.u32(1), events),
            (_, "ReleaseName") => self.release_name(from, args.str(0), events),
            (_, "StartServiceByName") => {
                match self.start_service_by_name(from, msg, args.str(0))? {
                    Some(reply) => Ok(vec![Value::Uint32(reply)]),
                    None => {
                        self.reply_deferred = true;
                        Ok(vec![])
                    }
                }
            }
            (_, "UpdateActivationEnvironment") => self.update_activation_environment(args),
            (_, "NameHasOwner") => {
                let name = args.str(0);
                Ok(vec![Value::Bool(
                    name == BUS_NAME || self.registry.has_owner(name),
                )])
            }
            (_, "ListNames") => {
                let names = std::iter::once(BUS_NAME.to_owned())
                    .chain(self.registry.names().map(str::to_owned));
                Ok(vec![string_array(names)])
            }
            (_, "ListActivatableNames") => {
                let names = std::iter::once(BUS_NAME.to_owned())
                    .chain(self.opts.activatable_names.iter().cloned());
                Ok(vec![string_array(names)])
            }
            (_, "AddMatch") => self.add_match(from, args.str(0)),
            (_, "BecomeMonitor") => self.become_monitor_call(from, args),
            (_, "RemoveMatch") => self.remove_match(from, args.str(0)),
            (_, "GetNameOwner") => self.get_name_owner(args.str(0)),
            (_, "ListQueuedOwners") => self.list_queued_owners(args.str(0)),
            (_, "GetConnectionUnixUser") => self.get_unix_user(args.str(0)),
            (_, "GetConnectionUnixProcessID") => self.get_unix_pid(args.str(0)),
            (_, "GetConnectionCredentials") => self.get_credentials(from, args.str(0)),
            (_, "GetAdtAuditSessionData") => {
                let name = args.str(0);
                self.subject(name, "audit session data")?;
                Err(BusError::new(
                    errors::ADT_AUDIT_DATA_UNKNOWN,
                    format!("Could not determine audit session data for '{name}'"),
                ))
            }
            (_, "GetConnectionSELinuxSecurityContext") => {
                self.get_selinux_security_context(args.str(0))
            }
            (_, "ReloadConfig") => {
                self.reload_requested = true;
                Ok(vec![])
            }
            (_, "GetId") => Ok(vec![Value::String(self.opts.guid.clone())]),
            (_, "Introspect") => Ok(vec![Value::String(introspect::introspect(
                msg.path().unwrap_or("/"),
            ))]),
            (_, "Ping") => Ok(vec![]),
            (_, "GetMachineId") => Ok(vec![Value::String(self.opts.machine_id.clone())]),
            (_, "GetStats") => self.get_stats(),
            (_, "GetConnectionStats") => self.get_connection_stats(args.str(0)),
            (_, "GetAllMatchRules") => self.get_all_match_rules(),
            (_, "Get") => self.property_get(args.str(0), args.str(1)),
            (_, "GetAll") => self.property_get_all(args.str(0)),
            (_, "Set") => {
                let (iface, prop) = (args.str(0), args.str(1));
                self.property_value(iface, prop)?;
                Err(BusError::new(
                    errors::PROPERTY_READ_ONLY,
                    format!("Property '{iface}.{prop}' cannot be set"),
                ))
            }
            _ => Err(BusError::new(
                errors::UNKNOWN_METHOD,
                format!("{BUS_NAME} does not understand message {member}"),
            )),
        }
    }

    /// dbus-daemon's second line of defence for dangerous methods: only
    /// root or the bus's own user may call them. A refusal is logged, as
    /// dbus-daemon logs it (`bus_driver_check_caller_is_privileged`).
    fn check_privileged(&self, from: ConnId, member: &str) -> Result<(), BusError> {
        let Some(conn) = self.conns.get(&from) else {
            return Err(BusError::new(errors::ACCESS_DENIED, "unknown connection"));
        };
        let uid = conn.creds.uid;
        if uid == 0 || Some(uid) == self.own_uid {
            return Ok(());
        }
        let name = conn.unique.as_deref().unwrap_or("(inactive)");
        let who = loginfo(self.party(Some(from)).as_ref(), "bus");
        let text = format!(
            "rejected attempt to call {member} by connection {name} ({who}) with uid {uid}"
        );
        tracing::info!("{text}");
        Err(BusError::new(errors::ACCESS_DENIED, text))
    }

    /// Give the connection its unique name; the events register and
    /// announce it (sent after the reply).
    fn hello(&mut self, from: ConnId, events: &mut Vec<NameEvent>) -> DriverResult {
        let Some(conn) = self.conns.get_mut(&from) else {
            return Err(BusError::new(errors::FAILED, "unknown connection"));
        };
        if conn.unique.is_some() {
            return Err(BusError::new(
                errors::FAILED,
                "Already handled an Hello message",
            ));
        }
        // dbus-daemon counts a connection against these limits once it
        // completes Hello, and refuses the Hello that would exceed them.
        let uid = conn.creds.uid;
        if self.active >= self.opts.limits.max_completed_connections {
            return Err(BusError::new(
                errors::LIMITS_EXCEEDED,
                "The maximum number of active connections has been reached",
            ));
        }
        let of_user = self.active_per_uid.get(&uid).copied().unwrap_or(0);
        if of_user >= self.opts.limits.max_connections_per_user {
            return Err(BusError::new(
                errors::LIMITS_EXCEEDED,
                format!("The maximum number of active connections for UID {uid} has been reached"),
            ));
        }
        let unique = format!(":1.{}", self.next_unique);
        self.next_unique += 1;
        conn.unique = Some(unique.clone());
        self.active += 1;
        *self.active_per_uid.entry(uid).or_insert(0) += 1;
        self.registry.add_unique(from, &unique, events);
        Ok(vec![Value::String(unique)])
    }

    fn request_name(
        &mut self,
        from: ConnId,
        name: &str,
        flags: u32,
        events: &mut Vec<NameEvent>,
    ) -> DriverResult {
        if !names::is_valid_bus_name(name) {
            return Err(BusError::new(
                errors::INVALID_ARGS,
                format!("Requested bus name \"{name}\" is not valid"),
            ));
        }
        if name.starts_with(':') {
            return Err(BusError::new(
                errors::INVALID_ARGS,
                format!("Cannot acquire a service starting with ':' such as \"{name}\""),
            ));
        }
        let me = self.unique_name(from).unwrap_or("(inactive)").to_owned();
        if name == BUS_NAME {
            return Err(BusError::new(
                errors::INVALID_ARGS,
                format!("Connection \"{me}\" is not allowed to own the service \"{BUS_NAME}\"because it is reserved for D-Bus' use only"),
            ));
        }
        self.check_mac_own(from, &me, name)?;
        if !self.can_own(from, name) {
            return Err(BusError::new(
                errors::ACCESS_DENIED,
                format!("Connection \"{me}\" is not allowed to own the service \"{name}\" due to security policies in the configuration file"),
            ));
        }
        let limit = self.opts.limits.max_names_per_connection;
        if self.registry.count(from) >= limit {
            return Err(BusError::new(
                errors::LIMITS_EXCEEDED,
                format!("Connection \"{me}\" is not allowed to own more services (increase limits in configuration file if required; max_names_per_connection={limit})"),
            ));
        }
        let reply = self.registry.request(from, name, flags, events);
        Ok(vec![Value::Uint32(reply as u32)])
    }

    fn release_name(
        &mut self,
        from: ConnId,
        name: &str,
        events: &mut Vec<NameEvent>,
    ) -> DriverResult {
        if !names::is_valid_bus_name(name) {
            return Err(BusError::new(
                errors::INVALID_ARGS,
                format!("Given bus name \"{name}\" is not valid"),
            ));
        }
        if name.starts_with(':') {
            return Err(BusError::new(
                errors::INVALID_ARGS,
                format!("Cannot release a service starting with ':' such as \"{name}\""),
            ));
        }
        if name == BUS_NAME {
            return Err(BusError::new(
                errors::INVALID_ARGS,
                format!("Cannot release the {BUS_NAME} service because it is owned by the bus"),
            ));
        }
        let reply = self.registry.release(from, name, events);
        Ok(vec![Value::Uint32(reply as u32)])
    }

    fn update_activation_environment(&mut self, args: Args) -> DriverResult {
        if self.opts.bus_type == "system" {
            return Err(BusError::new(
                errors::ACCESS_DENIED,
                "Cannot change activation environment on a system bus.",
            ));
        }
        let Some(Value::Array { items, .. }) = args.0.into_iter().next() else {
            return Ok(vec![]);
        };
        let mut pairs = Vec::with_capacity(items.len());
        for item in items {
            if let Value::DictEntry(k, v) = item {
                if let (Value::String(k), Value::String(v)) = (*k, *v) {
                    pairs.push((k, v));
                }
            }
        }
        self.check_activation_environment(&pairs)?;
        for (k, v) in &pairs {
            self.activation_env.insert(k.clone(), v.clone());
        }
        let mut out = Vec::new();
        self.forward_environment(&pairs, &mut out);
        self.deferred_actions.extend(out);
        Ok(vec![])
    }

    /// The environment after `pairs` are set must stay within
    /// `max_activation_environment_variables` and `_bytes`; if not, none
    /// of them is set.
    fn check_activation_environment(&self, pairs: &[(String, String)]) -> Result<(), BusError> {
        let limits = &self.opts.limits;
        let mut env: HashMap<&str, &str> = self
            .activation_env
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
        Ok(())
    }

    fn add_match(&mut self, from: ConnId, rule: &str) -> DriverResult {
        let limit = self.opts.limits.max_match_rules_per_connection;
        if self.subs.count(from) >= limit {
            let me = self.unique_name(from).unwrap_or("(inactive)");
            return Err(BusError::new(
                errors::LIMITS_EXCEEDED,
                format!("Connection \"{me}\" is not allowed to add more match rules (increase limits in configuration file if required; max_match_rules_per_connection={limit})"),
            ));
        }
        let rule = parse_rule(rule)?;
        // Eavesdropping on other peers' unicast messages is privileged, as
        // in dbus-daemon since 1.11.14, whatever the policy says: the
        // policy (eavesdrop="true" rules) then decides, message by message,
        // what a privileged eavesdropper gets (see policy::enforce).
        if rule.is_eavesdrop() {
            self.check_privileged(from, "AddMatch")?;
        }
        self.subs.add(from, rule);
        Ok(vec![])
    }

    fn remove_match(&mut self, from: ConnId, rule: &str) -> DriverResult {
        let rule = parse_rule(rule)?;
        self.subs.remove(from, &rule)?;
        Ok(vec![])
    }

    /// BecomeMonitor(as rules, u flags). The change happens after the
    /// reply (see `driver_call`).
    fn become_monitor_call(&mut self, from: ConnId, args: Args) -> DriverResult {
        if args.u32(1) != 0 {
            return Err(BusError::new(
                errors::INVALID_ARGS,
                "BecomeMonitor does not support any flags yet",
            ));
        }
        let mut texts = match args.0.first() {
            Some(Value::Array { items, .. }) => items
                .iter()
                .filter_map(|v| match v {
                    Value::String(t) => Some(t.as_str()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        // No rules means "everything".
        if texts.is_empty() {
            texts.push("");
        }
        let rules = texts
            .into_iter()
            .map(parse_monitor_rule)
            .collect::<Result<Vec<_>, _>>()?;
        self.becoming_monitor = Some((from, rules));
        Ok(vec![])
    }

    fn get_name_owner(&self, name: &str) -> DriverResult {
        if let Some(owner) = self.registry.owner(name) {
            let unique = self.unique_name(owner).unwrap_or_default();
            return Ok(vec![Value::String(unique.to_owned())]);
        }
        if name == BUS_NAME {
            return Ok(vec![Value::String(BUS_NAME.into())]);
        }
        Err(BusError::new(
            errors::NAME_HAS_NO_OWNER,
            format!("Could not get owner of name '{name}': no such name"),
        ))
    }

    fn list_queued_owners(&self, name: &str) -> DriverResult {
        if let Some(owners) = self.registry.queued_owners(name) {
            let names = owners
                .into_iter()
                .filter_map(|id| self.unique_name(id).map(str::to_owned));
            return Ok(vec![string_array(names)]);
        }
        if name == BUS_NAME {
            return Ok(vec![string_array([BUS_NAME.to_owned()])]);
        }
        Err(BusError::new(
            errors::NAME_HAS_NO_OWNER,
            format!("Could not get owners of name '{name}': no such name"),
        ))
    }

    /// dbus-daemon's `bus_driver_get_conn_helper`.
    fn subject(&self, name: &str, what: &str) -> Result<Subject, BusError> {
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

    fn uid_of(&self, subject: &Subject) -> Option<u32> {
        match subject {
            Subject::Bus => self.own_uid,
            Subject::Peer(id) => self
                .conns
                .get(id)
                .filter(|c| !c.creds.anonymous)
                .map(|c| c.creds.uid),
        }
    }

    fn pid_of(&self, subject: &Subject) -> Option<u32> {
        match subject {
            Subject::Bus => Some(self.own_pid),
            Subject::Peer(id) => self
                .conns
                .get(id)
                .filter(|c| !c.creds.anonymous)
                .and_then(|c| c.creds.pid),
        }
    }

    fn get_unix_user(&self, name: &str) -> DriverResult {
        let subject = self.subject(name, "UID")?;
        match self.uid_of(&subject) {
            Some(uid) => Ok(vec![Value::Uint32(uid)]),
            None => Err(BusError::new(
                errors::FAILED,
                format!("Could not determine UID for '{name}'"),
            )),
        }
    }

    fn get_unix_pid(&self, name: &str) -> DriverResult {
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
    /// that negotiated fd passing, the fd itself a dup riding on the reply.
    fn get_credentials(&mut self, from: ConnId, name: &str) -> DriverResult {
        let subject = self.subject(name, "credentials")?;
        let caller_takes_fds = self.conns.get(&from).is_some_and(|c| c.unix_fds);
        if caller_takes_fds {
            if let Some(fd) = self.process_fd_of(&subject) {
                match fd.open() {
                    Ok(pidfd) => self.reply_fds.push(pidfd),
                    Err(e) => tracing::debug!("ProcessFD of {name} left out: {e}"),
                }
            }
        }
        let mut entries = self.credential_entries(&subject);
        if !self.reply_fds.is_empty() {
            entries.push(("ProcessFD", Value::UnixFd(0)));
        }
        Ok(vec![dict_sv(entries)])
    }

    /// The pidfd of a subject, unless it is anonymous (as its pid).
    fn process_fd_of(&self, subject: &Subject) -> Option<ProcessFd> {
        match subject {
            Subject::Bus => self.own_process_fd.clone(),
            Subject::Peer(id) => self
                .conns
                .get(id)
                .filter(|c| !c.creds.anonymous)
                .and_then(|c| c.creds.process_fd.clone()),
        }
    }

    /// The label, without a NUL, only where SELinux is enabled: the call is
    /// SELinux's, unlike `LinuxSecurityLabel` (dbus-broker's rule).
    fn get_selinux_security_context(&self, name: &str) -> DriverResult {
        let subject = self.subject(name, "security context")?;
        let label = match subject {
            Subject::Bus => self.own_security_label.as_ref(),
            Subject::Peer(id) => self
                .conns
                .get(&id)
                .and_then(|c| c.creds.security_label.as_ref()),
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
    fn credential_entries(&self, subject: &Subject) -> Vec<(&'static str, Value)> {
        let mut entries = Vec::new();
        if let Some(pid) = self.pid_of(subject) {
            entries.push(("ProcessID", Value::Uint32(pid)));
        }
        if let Some(uid) = self.uid_of(subject) {
            entries.push(("UnixUserID", Value::Uint32(uid)));
        }
        if let Subject::Peer(id) = subject {
            if let Some(conn) = self.conns.get(id) {
                if !conn.creds.groups.is_empty() && !conn.creds.anonymous {
                    let mut groups = conn.creds.groups.clone();
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
                if let Some(label) = &conn.creds.security_label {
                    // GVariant bytestring convention: the NUL is included.
                    let mut bytes = label.clone();
                    bytes.push(0);
                    entries.push(("LinuxSecurityLabel", byte_array(&bytes)));
                }
            }
        }
        entries
    }

    /// The interface a Properties call names: any of ours (Properties is
    /// only served on the canonical path, where all are present).
    fn property_interface(iface: &str) -> Result<&'static InterfaceSpec, BusError> {
        INTERFACES.iter().find(|i| i.name == iface).ok_or_else(|| {
            BusError::new(
                errors::UNKNOWN_INTERFACE,
                format!("Interface \"{iface}\" not found"),
            )
        })
    }

    fn property_value(&self, iface: &str, prop: &str) -> Result<Value, BusError> {
        let spec = Self::property_interface(iface)?;
        if !spec.properties.iter().any(|p| p.name == prop) {
            return Err(BusError::new(
                errors::UNKNOWN_PROPERTY,
                format!("Property \"{iface}.{prop}\" not found"),
            ));
        }
        Ok(match prop {
            // ActivatableServicesChanged: see Bus::set_activatable_names;
            // HeaderFiltering: Message::stamp drops unknown header fields.
            "Features" => {
                let mut features = vec![
                    "ActivatableServicesChanged".to_owned(),
                    "HeaderFiltering".to_owned(),
                ];
                if self.opts.systemd_activation {
                    features.push("SystemdActivation".to_owned());
                }
                string_array(features)
            }
            _ => string_array(
                introspect::INTERESTING_INTERFACES
                    .iter()
                    .map(|s| s.to_string()),
            ),
        })
    }

    fn property_get(&self, iface: &str, prop: &str) -> DriverResult {
        let value = self.property_value(iface, prop)?;
        Ok(vec![Value::Variant(Box::new(value))])
    }

    fn property_get_all(&self, iface: &str) -> DriverResult {
        let spec = Self::property_interface(iface)?;
        let mut entries = Vec::new();
        for prop in spec.properties {
            entries.push((prop.name, self.property_value(iface, prop.name)?));
        }
        Ok(vec![dict_sv(entries)])
    }
}
