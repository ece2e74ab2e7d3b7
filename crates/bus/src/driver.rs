//! The `org.freedesktop.DBus` object: the bus driver's methods, with
//! dbus-daemon's replies, errors and error texts.
//!
//! One table, `METHODS`, says for every method its interface, member,
//! signatures, where it is served and who may call it, and which handler
//! answers it; dispatch and introspection both read it. A handler gets
//! its arguments decoded by type (`args`) and returns an `Outcome`:
//! the reply (now, later, or once the daemon opened a pidfd), the name
//! changes it made, and what follows the reply. `Bus::driver_call`
//! carries the outcome out in dbus-daemon's order.
//!
//! The layer above the nouns: handlers take the bus and use the nouns
//! through their methods. Owns: the method table and the outcome types.
//! May touch: every noun, the policy and MAC checks, and the router's
//! `outgoing` and `announce` to carry an outcome out.

use crate::fds::PassedFd;

use quickbus_wire::{names, Message, Value};

use crate::activation::{Parked, Rescan};
use crate::bus::Bus;
use crate::bus::Routing;
use crate::errors::{self, BusError};
use crate::introspect::{self, InterfaceSpec, MethodSpec, INTERFACES};
use crate::match_rule::MatchRule;
use crate::policy::loginfo;
use crate::registry::NameEvent;
use crate::subscriptions::{parse_monitor_rule, parse_rule};
use crate::{Action, ConnId, BUS_NAME, BUS_PATH};

mod args;
pub mod containers;
mod credentials;

pub(crate) use args::Args;
pub(crate) use containers::AwaitingListener;
pub(crate) use credentials::AwaitingPidfd;

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

/// A driver method: its place in the interface (for dispatch and
/// introspection alike) and the function that answers it.
pub(crate) struct Method {
    pub spec: MethodSpec,
    pub handler: Handler,
}

/// Answers one call. Arguments come decoded by the method's signature;
/// what the call changes comes back in the [`Outcome`] (or nothing, with
/// the error the caller gets).
pub(crate) type Handler = fn(&mut Bus, &Call<'_>, Args) -> Result<Outcome, BusError>;

/// The call being answered.
pub(crate) struct Call<'a> {
    pub from: ConnId,
    pub msg: &'a Message,
    /// The event's time (for timers the call starts) and sender (the
    /// caller, whom flow control may hold back for what the call sends).
    pub routing: Routing,
}

/// What a driver method decided.
pub(crate) enum Reply {
    /// The method return, with the fds riding on it (dropped if the
    /// caller asked for no reply).
    Now {
        body: Vec<Value>,
        fds: Vec<PassedFd>,
    },
    /// The answer comes later, from whatever the call waits for
    /// (StartServiceByName: the activation).
    Later,
    /// `body` (an `a{sv}`) gets `ProcessFD` and the pidfd of process
    /// `pid` started at `started`, if the daemon can open one
    /// ([`Action::OpenPidfd`]); the call's eavesdroppers wait for it too.
    /// For calls without name events or effects (GetConnectionCredentials).
    WithPidfd {
        body: Vec<Value>,
        pid: u32,
        started: u64,
    },
}

/// What a call changes besides its reply, done after the reply is out.
pub(crate) enum Effect {
    /// An action the call caused (a start, a message to systemd, a reload).
    Act(Action),
    /// The caller turns into a monitor with these rules.
    BecomeMonitor(Vec<MatchRule>),
    /// Container instance `path` stops listening (StopListening), and
    /// its connections are closed too (StopInstance).
    StopContainer {
        path: String,
        close_connections: bool,
    },
}

/// A successful call's reply, the name changes it made (announced in
/// order, before the reply except for Hello's), and its effects.
pub(crate) struct Outcome {
    pub reply: Reply,
    pub events: Vec<NameEvent>,
    pub effects: Vec<Effect>,
}

impl Outcome {
    /// Answer at once with `body`.
    pub fn now(body: Vec<Value>) -> Outcome {
        Outcome {
            reply: Reply::Now {
                body,
                fds: Vec::new(),
            },
            events: Vec::new(),
            effects: Vec::new(),
        }
    }

    /// Answer at once with an empty method return.
    pub fn empty() -> Outcome {
        Outcome::now(Vec::new())
    }

    fn with_events(mut self, events: Vec<NameEvent>) -> Outcome {
        self.events = events;
        self
    }

    fn with_actions(mut self, actions: Vec<Action>) -> Outcome {
        self.effects.extend(actions.into_iter().map(Effect::Act));
        self
    }
}

const fn method(
    interface: &'static str,
    name: &'static str,
    in_sig: &'static str,
    out_sig: &'static str,
    handler: Handler,
) -> Method {
    Method {
        spec: MethodSpec {
            interface,
            name,
            in_sig,
            out_sig,
            any_path: true,
            privileged: false,
            no_containers: false,
        },
        handler,
    }
}

/// Not for connections that came through a container's socket.
const fn uncontained(mut m: Method) -> Method {
    m.spec.no_containers = true;
    m
}

/// Only on /org/freedesktop/DBus.
const fn canonical(mut m: Method) -> Method {
    m.spec.any_path = false;
    m
}

/// Only for callers with the bus's uid or root (never a contained one:
/// `check_privileged` refuses those first).
const fn privileged(mut m: Method) -> Method {
    m.spec.privileged = true;
    m
}

const DBUS: &str = crate::BUS_INTERFACE;
const PROPERTIES: &str = "org.freedesktop.DBus.Properties";
const INTROSPECTABLE: &str = "org.freedesktop.DBus.Introspectable";
const MONITORING: &str = "org.freedesktop.DBus.Monitoring";
const STATS: &str = "org.freedesktop.DBus.Debug.Stats";
const PEER: &str = "org.freedesktop.DBus.Peer";
const DAEMON: &str = crate::DAEMON_INTERFACE;
const CONTAINERS: &str = containers::CONTAINERS1;

/// Every driver method, grouped by interface in [`INTERFACES`]' order:
/// dispatch finds calls here, and introspection lists these, in this
/// order (dbus-daemon's).
pub(crate) const METHODS: &[Method] = &[
    method(DBUS, "Hello", "", "s", hello),
    method(DBUS, "RequestName", "su", "u", request_name),
    method(DBUS, "ReleaseName", "s", "u", release_name),
    method(DBUS, "StartServiceByName", "su", "u", start_service_by_name),
    canonical(privileged(method(
        DBUS,
        "UpdateActivationEnvironment",
        "a{ss}",
        "",
        update_activation_environment,
    ))),
    method(DBUS, "NameHasOwner", "s", "b", name_has_owner),
    method(DBUS, "ListNames", "", "as", list_names),
    method(
        DBUS,
        "ListActivatableNames",
        "",
        "as",
        list_activatable_names,
    ),
    method(DBUS, "AddMatch", "s", "", add_match),
    method(DBUS, "RemoveMatch", "s", "", remove_match),
    method(DBUS, "GetNameOwner", "s", "s", get_name_owner),
    method(DBUS, "ListQueuedOwners", "s", "as", list_queued_owners),
    method(DBUS, "GetConnectionUnixUser", "s", "u", get_unix_user),
    method(DBUS, "GetConnectionUnixProcessID", "s", "u", get_unix_pid),
    method(
        DBUS,
        "GetAdtAuditSessionData",
        "s",
        "ay",
        get_adt_audit_session_data,
    ),
    method(
        DBUS,
        "GetConnectionSELinuxSecurityContext",
        "s",
        "ay",
        get_selinux_security_context,
    ),
    method(DBUS, "ReloadConfig", "", "", reload_config),
    method(DBUS, "GetId", "", "s", get_id),
    method(
        DBUS,
        "GetConnectionCredentials",
        "s",
        "a{sv}",
        get_credentials,
    ),
    canonical(method(PROPERTIES, "Get", "ss", "v", property_get)),
    canonical(method(PROPERTIES, "GetAll", "s", "a{sv}", property_get_all)),
    canonical(method(PROPERTIES, "Set", "ssv", "", property_set)),
    method(INTROSPECTABLE, "Introspect", "", "s", introspect_call),
    canonical(privileged(method(
        MONITORING,
        "BecomeMonitor",
        "asu",
        "",
        become_monitor,
    ))),
    uncontained(canonical(method(STATS, "GetStats", "", "a{sv}", get_stats))),
    uncontained(canonical(method(
        STATS,
        "GetConnectionStats",
        "s",
        "a{sv}",
        get_connection_stats,
    ))),
    uncontained(canonical(method(
        STATS,
        "GetAllMatchRules",
        "",
        "a{sas}",
        get_all_match_rules,
    ))),
    // bus/driver.c's containers_message_handlers, in its order.
    uncontained(canonical(method(
        CONTAINERS,
        "AddServer",
        "ssa{sv}a{sv}",
        "oays",
        containers::add_server,
    ))),
    uncontained(canonical(method(
        CONTAINERS,
        "StopInstance",
        "o",
        "",
        containers::stop_instance,
    ))),
    uncontained(canonical(method(
        CONTAINERS,
        "StopListening",
        "o",
        "",
        containers::stop_listening,
    ))),
    canonical(method(
        CONTAINERS,
        "GetConnectionInstance",
        "s",
        "oa{sv}ssa{sv}",
        containers::get_connection_instance,
    )),
    canonical(method(
        CONTAINERS,
        "GetInstanceInfo",
        "o",
        "a{sv}ssa{sv}",
        containers::get_instance_info,
    )),
    canonical(method(
        CONTAINERS,
        "RequestHeader",
        "",
        "",
        containers::request_header,
    )),
    method(PEER, "GetMachineId", "", "s", get_machine_id),
    method(PEER, "Ping", "", "", ping),
    canonical(privileged(method(DAEMON, "Restart", "", "", restart))),
];

/// The methods as introspection lists them.
pub(crate) fn method_specs() -> impl Iterator<Item = &'static MethodSpec> + Clone {
    METHODS.iter().map(|m| &m.spec)
}

/// Which method a call goes to, after dbus-daemon's lookup rules: the
/// interfaces served at the call's path, the named one if it names one.
fn find_method(
    interface: Option<&str>,
    member: &str,
    canonical_path: bool,
) -> Result<&'static Method, BusError> {
    let mut found_interface = false;
    for iface in INTERFACES {
        if !(canonical_path || iface.any_path) {
            continue;
        }
        if interface.is_some_and(|i| i != iface.name) {
            continue;
        }
        found_interface = true;
        if let Some(method) = METHODS
            .iter()
            .find(|m| m.spec.interface == iface.name && m.spec.name == member)
        {
            return Ok(method);
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

/// The method `msg` calls, its arguments checked against its signature.
fn resolve(bus: &Bus, from: ConnId, msg: &Message) -> Result<(&'static Method, Args), BusError> {
    let member = msg.member().unwrap_or("");
    let canonical_path = msg.path() == Some(BUS_PATH);
    let method = find_method(msg.interface(), member, canonical_path)?;
    if method.spec.no_containers {
        bus.check_not_contained(from, member)?;
    }
    if method.spec.privileged {
        bus.check_privileged(from, member)?;
    }
    if !(canonical_path || method.spec.any_path) {
        return Err(BusError::new(
            errors::ACCESS_DENIED,
            format!(
                "Method '{member}' is only available at the canonical object path '{BUS_PATH}'"
            ),
        ));
    }
    if msg.signature() != method.spec.in_sig {
        return Err(BusError::new(
            errors::INVALID_ARGS,
            format!(
                "Call to {member} has wrong args ({}, expected {})\n",
                msg.signature(),
                method.spec.in_sig
            ),
        ));
    }
    let args = msg
        .body_values()
        .map_err(|e| BusError::new(errors::INVALID_ARGS, e.to_string()))?;
    Ok((method, Args(args)))
}

impl Bus {
    /// StartServiceByName of a name no known `.service` file provides,
    /// which the daemon should look for first.
    fn start_wants_rescan(&self, method: &Method, args: &Args, rescan: Rescan) -> bool {
        if method.spec.name != "StartServiceByName" || method.spec.interface != DBUS {
            return false;
        }
        match args.0.first() {
            Some(Value::String(name)) => self.wants_rescan(name, rescan),
            _ => false,
        }
    }

    /// A method call addressed to org.freedesktop.DBus. Whether it
    /// succeeded (then, as in dbus-daemon, eavesdroppers may see it now):
    /// false too when it waits for the daemon to read the service
    /// directories (see [`Bus::service_looked_up`]).
    pub(crate) fn driver_call(
        &mut self,
        from: ConnId,
        msg: &Message,
        routing: Routing,
        rescan: Rescan,
        out: &mut Vec<Action>,
    ) -> bool {
        let call = Call { from, msg, routing };
        let outcome = resolve(self, from, msg).and_then(|(method, args)| {
            if self.start_wants_rescan(method, &args, rescan) {
                return Ok(None);
            }
            (method.handler)(self, &call, args).map(Some)
        });
        let outcome = match outcome {
            Ok(None) => {
                let parked = Parked::DriverCall {
                    from,
                    msg: msg.clone(),
                };
                self.park(parked, out);
                return false;
            }
            Ok(Some(outcome)) => outcome,
            Err(err) => {
                self.error_reply(from, msg, err, routing, out);
                return false;
            }
        };
        self.peaks
            .note(from, &mut self.conns, &self.subs, &self.registry);
        let Outcome {
            reply,
            events,
            effects,
        } = outcome;
        let is_hello = msg.member() == Some("Hello");
        if is_hello {
            // The welcome comes before NameAcquired, as in dbus-daemon;
            // monitors see the call first.
            self.capture_driver_call(from, msg, routing, out);
        } else {
            // The signals a call caused come before its reply.
            self.emit(&events, None, routing, out);
        }
        // dbus-daemon stops an instance (its connections closed, its
        // InstanceRemoved sent) before it acknowledges StopInstance or
        // StopListening.
        let (stops, effects): (Vec<_>, Vec<_>) = effects
            .into_iter()
            .partition(|effect| matches!(effect, Effect::StopContainer { .. }));
        for stop in stops {
            if let Effect::StopContainer {
                path,
                close_connections,
            } = stop
            {
                self.stop_container(&path, close_connections, routing, out);
            }
        }
        let mut eavesdroppers_now = true;
        match reply {
            Reply::Now { body, fds } => self.reply(from, msg, body, fds, routing, out),
            Reply::Later => {}
            Reply::WithPidfd { body, pid, started } => {
                self.await_pidfd(from, msg, body, (pid, started), out);
                eavesdroppers_now = false;
            }
        }
        if is_hello {
            self.emit(&events, None, routing, out);
        }
        // A name just taken may be one a service was started for.
        self.names_owned(&events, routing, out);
        for effect in effects {
            match effect {
                Effect::Act(action) => out.push(action),
                Effect::BecomeMonitor(rules) => self.become_monitor(from, rules, routing, out),
                Effect::StopContainer { .. } => unreachable!("stopped before the reply"),
            }
        }
        eavesdroppers_now
    }

    /// dbus-daemon's second line of defence for dangerous methods: only
    /// root or the bus's own user may call them. A refusal is logged, as
    /// dbus-daemon logs it (`bus_driver_check_caller_is_privileged`).
    fn check_privileged(&self, from: ConnId, member: &str) -> Result<(), BusError> {
        // As dbus-daemon: a contained caller is refused first, whatever
        // its uid (containers are never privileged).
        self.check_not_contained(from, member)?;
        let Some(conn) = self.conns.get(&from) else {
            return Err(BusError::new(errors::ACCESS_DENIED, "unknown connection"));
        };
        let uid = conn.creds().uid;
        if uid == 0 || Some(uid) == self.opts.own_uid {
            return Ok(());
        }
        let name = conn.unique().as_deref().unwrap_or("(inactive)");
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
        let unique = self.conns.register(from, &self.opts.limits)?;
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

    /// Set `pairs`; in systemd mode the messages telling systemd go to
    /// `out`.
    fn update_activation_environment(
        &mut self,
        pairs: Vec<(String, String)>,
        routing: Routing,
        out: &mut Vec<Action>,
    ) -> Result<(), BusError> {
        if self.opts.bus_type == "system" {
            return Err(BusError::new(
                errors::ACCESS_DENIED,
                "Cannot change activation environment on a system bus.",
            ));
        }
        self.activations
            .set_environment(&pairs, &self.opts.limits)?;
        self.forward_environment(&pairs, routing, out);
        Ok(())
    }

    fn add_match(&mut self, from: ConnId, rule: &str) -> Result<(), BusError> {
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
        // what a privileged eavesdropper gets (see bus::policy_check).
        if rule.is_eavesdrop() {
            self.check_privileged(from, "AddMatch")?;
            self.check_mac_eavesdrop(from)?;
        }
        self.subs.add(from, rule);
        Ok(())
    }

    fn remove_match(&mut self, from: ConnId, rule: &str) -> Result<(), BusError> {
        let rule = parse_rule(rule)?;
        self.subs.remove(from, &rule)
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
                features.extend(self.mac_features().iter().map(|f| f.to_string()));
                if self.opts.systemd_activation {
                    features.push("SystemdActivation".to_owned());
                }
                // dbus-daemon's order, which happens to be alphabetical.
                features.sort();
                string_array(features)
            }
            "SupportedArguments" => string_array(
                containers::SUPPORTED_ARGUMENTS
                    .iter()
                    .map(|s| s.to_string()),
            ),
            _ => string_array(
                introspect::INTERESTING_INTERFACES
                    .iter()
                    .map(|s| s.to_string()),
            ),
        })
    }
}

fn hello(bus: &mut Bus, call: &Call<'_>, _: Args) -> Result<Outcome, BusError> {
    let mut events = Vec::new();
    let body = bus.hello(call.from, &mut events)?;
    Ok(Outcome::now(body).with_events(events))
}

fn request_name(bus: &mut Bus, call: &Call<'_>, args: Args) -> Result<Outcome, BusError> {
    let (name, flags): (String, u32) = args.decode()?;
    let mut events = Vec::new();
    let body = bus.request_name(call.from, &name, flags, &mut events)?;
    Ok(Outcome::now(body).with_events(events))
}

fn release_name(bus: &mut Bus, call: &Call<'_>, args: Args) -> Result<Outcome, BusError> {
    let (name,): (String,) = args.decode()?;
    let mut events = Vec::new();
    let body = bus.release_name(call.from, &name, &mut events)?;
    Ok(Outcome::now(body).with_events(events))
}

/// Answered at once when the service runs; otherwise when its activation
/// ends (the actions starting it follow the call's signals).
fn start_service_by_name(bus: &mut Bus, call: &Call<'_>, args: Args) -> Result<Outcome, BusError> {
    let (name, _flags): (String, u32) = args.decode()?;
    let mut actions = Vec::new();
    let started =
        bus.start_service_by_name(call.from, call.msg, &name, call.routing, &mut actions)?;
    let outcome = match started {
        Some(reply) => Outcome::now(vec![Value::Uint32(reply)]),
        None => Outcome {
            reply: Reply::Later,
            events: Vec::new(),
            effects: Vec::new(),
        },
    };
    Ok(outcome.with_actions(actions))
}

fn update_activation_environment(
    bus: &mut Bus,
    call: &Call<'_>,
    args: Args,
) -> Result<Outcome, BusError> {
    let (pairs,): (Vec<(String, String)>,) = args.decode()?;
    let mut actions = Vec::new();
    bus.update_activation_environment(pairs, call.routing, &mut actions)?;
    Ok(Outcome::empty().with_actions(actions))
}

fn name_has_owner(bus: &mut Bus, _: &Call<'_>, args: Args) -> Result<Outcome, BusError> {
    let (name,): (String,) = args.decode()?;
    let owned = name == BUS_NAME || bus.registry.has_owner(&name);
    Ok(Outcome::now(vec![Value::Bool(owned)]))
}

fn list_names(bus: &mut Bus, call: &Call<'_>, _: Args) -> Result<Outcome, BusError> {
    let names = std::iter::once(BUS_NAME)
        .chain(bus.registry.names())
        .filter(|name| bus.app_may_see(call.from, name))
        .map(str::to_owned);
    Ok(Outcome::now(vec![string_array(names)]))
}

fn list_activatable_names(bus: &mut Bus, call: &Call<'_>, _: Args) -> Result<Outcome, BusError> {
    let names = std::iter::once(BUS_NAME)
        .chain(bus.opts.activatable_names.iter().map(String::as_str))
        .filter(|name| bus.app_may_see(call.from, name))
        .map(str::to_owned);
    Ok(Outcome::now(vec![string_array(names)]))
}

fn add_match(bus: &mut Bus, call: &Call<'_>, args: Args) -> Result<Outcome, BusError> {
    let (rule,): (String,) = args.decode()?;
    bus.add_match(call.from, &rule)?;
    Ok(Outcome::empty())
}

fn remove_match(bus: &mut Bus, call: &Call<'_>, args: Args) -> Result<Outcome, BusError> {
    let (rule,): (String,) = args.decode()?;
    bus.remove_match(call.from, &rule)?;
    Ok(Outcome::empty())
}

fn get_name_owner(bus: &mut Bus, _: &Call<'_>, args: Args) -> Result<Outcome, BusError> {
    let (name,): (String,) = args.decode()?;
    Ok(Outcome::now(bus.get_name_owner(&name)?))
}

fn list_queued_owners(bus: &mut Bus, _: &Call<'_>, args: Args) -> Result<Outcome, BusError> {
    let (name,): (String,) = args.decode()?;
    Ok(Outcome::now(bus.list_queued_owners(&name)?))
}

fn get_unix_user(bus: &mut Bus, _: &Call<'_>, args: Args) -> Result<Outcome, BusError> {
    let (name,): (String,) = args.decode()?;
    Ok(Outcome::now(bus.get_unix_user(&name)?))
}

fn get_unix_pid(bus: &mut Bus, _: &Call<'_>, args: Args) -> Result<Outcome, BusError> {
    let (name,): (String,) = args.decode()?;
    Ok(Outcome::now(bus.get_unix_pid(&name)?))
}

fn get_adt_audit_session_data(
    bus: &mut Bus,
    _: &Call<'_>,
    args: Args,
) -> Result<Outcome, BusError> {
    let (name,): (String,) = args.decode()?;
    bus.subject(&name, "audit session data")?;
    Err(BusError::new(
        errors::ADT_AUDIT_DATA_UNKNOWN,
        format!("Could not determine audit session data for '{name}'"),
    ))
}

fn get_selinux_security_context(
    bus: &mut Bus,
    _: &Call<'_>,
    args: Args,
) -> Result<Outcome, BusError> {
    let (name,): (String,) = args.decode()?;
    Ok(Outcome::now(bus.get_selinux_security_context(&name)?))
}

/// The daemon reloads after the reply is out.
fn reload_config(_: &mut Bus, _: &Call<'_>, _: Args) -> Result<Outcome, BusError> {
    Ok(Outcome::empty().with_actions(vec![Action::ReloadConfig]))
}

/// Answered by the daemon once the restarted bus serves (or refused it):
/// [`Bus::restart_answered`].
fn restart(_: &mut Bus, call: &Call<'_>, _: Args) -> Result<Outcome, BusError> {
    let wants_reply = call.msg.flags() & quickbus_wire::flags::NO_REPLY_EXPECTED == 0;
    let requester = wants_reply.then_some(crate::RestartRequester {
        conn: call.from,
        serial: call.msg.serial(),
    });
    Ok(Outcome {
        reply: Reply::Later,
        events: Vec::new(),
        effects: Vec::new(),
    }
    .with_actions(vec![Action::Restart { requester }]))
}

fn get_id(bus: &mut Bus, _: &Call<'_>, _: Args) -> Result<Outcome, BusError> {
    Ok(Outcome::now(vec![Value::String(bus.opts.bus_id.clone())]))
}

fn get_credentials(bus: &mut Bus, call: &Call<'_>, args: Args) -> Result<Outcome, BusError> {
    let (name,): (String,) = args.decode()?;
    let mut outcome = Outcome::empty();
    outcome.reply = bus.get_credentials(call, &name)?;
    Ok(outcome)
}

fn property_get(bus: &mut Bus, _: &Call<'_>, args: Args) -> Result<Outcome, BusError> {
    let (iface, prop): (String, String) = args.decode()?;
    let value = bus.property_value(&iface, &prop)?;
    Ok(Outcome::now(vec![Value::Variant(Box::new(value))]))
}

fn property_get_all(bus: &mut Bus, _: &Call<'_>, args: Args) -> Result<Outcome, BusError> {
    let (iface,): (String,) = args.decode()?;
    let spec = Bus::property_interface(&iface)?;
    let mut entries = Vec::new();
    for prop in spec.properties {
        entries.push((prop.name, bus.property_value(&iface, prop.name)?));
    }
    Ok(Outcome::now(vec![dict_sv(entries)]))
}

/// Every property is read-only.
fn property_set(bus: &mut Bus, _: &Call<'_>, args: Args) -> Result<Outcome, BusError> {
    let (iface, prop, _value): (String, String, Value) = args.decode()?;
    bus.property_value(&iface, &prop)?;
    Err(BusError::new(
        errors::PROPERTY_READ_ONLY,
        format!("Property '{iface}.{prop}' cannot be set"),
    ))
}

fn introspect_call(_: &mut Bus, call: &Call<'_>, _: Args) -> Result<Outcome, BusError> {
    let xml = introspect::introspect(call.msg.path().unwrap_or("/"));
    Ok(Outcome::now(vec![Value::String(xml)]))
}

/// BecomeMonitor(as rules, u flags): the change happens after the reply.
fn become_monitor(bus: &mut Bus, call: &Call<'_>, args: Args) -> Result<Outcome, BusError> {
    // After the privilege check, before the arguments, as in dbus-daemon.
    bus.check_mac_eavesdrop(call.from)?;
    let (texts, flags): (Vec<String>, u32) = args.decode()?;
    if flags != 0 {
        return Err(BusError::new(
            errors::INVALID_ARGS,
            "BecomeMonitor does not support any flags yet",
        ));
    }
    // No rules means "everything".
    let rules = if texts.is_empty() {
        vec![parse_monitor_rule("")?]
    } else {
        texts
            .iter()
            .map(|t| parse_monitor_rule(t))
            .collect::<Result<Vec<_>, _>>()?
    };
    let mut outcome = Outcome::empty();
    outcome.effects.push(Effect::BecomeMonitor(rules));
    Ok(outcome)
}

fn get_stats(bus: &mut Bus, _: &Call<'_>, _: Args) -> Result<Outcome, BusError> {
    Ok(Outcome::now(bus.stats_view().get_stats()?))
}

fn get_connection_stats(bus: &mut Bus, _: &Call<'_>, args: Args) -> Result<Outcome, BusError> {
    let (name,): (String,) = args.decode()?;
    Ok(Outcome::now(bus.stats_view().get_connection_stats(&name)?))
}

fn get_all_match_rules(bus: &mut Bus, _: &Call<'_>, _: Args) -> Result<Outcome, BusError> {
    Ok(Outcome::now(bus.stats_view().get_all_match_rules()?))
}

fn get_machine_id(bus: &mut Bus, _: &Call<'_>, _: Args) -> Result<Outcome, BusError> {
    Ok(Outcome::now(vec![Value::String(
        bus.opts.machine_id.clone(),
    )]))
}

fn ping(_: &mut Bus, _: &Call<'_>, _: Args) -> Result<Outcome, BusError> {
    Ok(Outcome::empty())
}
