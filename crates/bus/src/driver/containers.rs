//! `org.freedesktop.DBus.Containers1`, as dbus-daemon's bus/containers.c
//! answers it: AddServer, StopInstance, StopListening,
//! GetConnectionInstance, GetInstanceInfo, RequestHeader, with its error
//! names and texts.
//!
//! The core cannot bind a socket, so AddServer is a round trip: the
//! handler checks and records the instance and asks the daemon to listen
//! ([`Action::ListenContainer`]); the daemon answers at once with
//! [`Bus::container_listening`], which sends the reply (the instance is
//! announced from then on) or the daemon's error (the instance is
//! forgotten). Stopping goes out as [`Action::StopContainer`].
//!
//! Owns: the AddServer call waiting for the daemon's socket. May touch:
//! the containers noun, peers (the caller's uid and credentials), the
//! registry (GetConnectionInstance's subject), the options (limits), and
//! `outgoing` for the reply and InstanceRemoved.

use std::sync::Arc;
use std::time::Instant;

use quickbus_wire::{names, Message, MessageBuilder, Value};

use super::{byte_array, dict_sv, Args, Call, Effect, Outcome, Reply};
use crate::app_filter::AppFilter;
use crate::bus::Bus;
use crate::bus::Routing;
use crate::containers::Instance;
use crate::errors::{self, BusError};
use crate::policy::loginfo;
use crate::{Action, ConnId, OutMessage, BUS_PATH};

pub(crate) const CONTAINERS1: &str = "org.freedesktop.DBus.Containers1";
/// GetConnectionCredentials' key for a contained connection's instance.
pub(crate) const INSTANCE_KEY: &str = "org.freedesktop.DBus.Containers1.Instance";
/// AddServer's named argument that turns on per-app filtering (the
/// xdg-dbus-proxy rules; docs/containers.md).
pub const FILTER_ARGUMENT: &str = "org.quickbus.Filter";
/// The named arguments AddServer understands (`SupportedArguments`).
pub(crate) const SUPPORTED_ARGUMENTS: &[&str] = &[FILTER_ARGUMENT];

/// An AddServer call waiting for the daemon to listen
/// ([`Action::ListenContainer`]). Answered within the event, so never
/// handed over.
#[derive(Debug)]
pub(crate) struct AwaitingListener {
    caller: ConnId,
    call: Message,
    path: String,
}

/// Where the daemon listens for an instance: the socket's file and the
/// address to connect to (a `unix:path=` one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerSocket {
    pub path: String,
    pub address: String,
}

/// The options of AddServer's `org.quickbus.Filter` argument (a variant
/// holding `as`: xdg-dbus-proxy's policy options), read but not compiled:
/// the limits are checked first.
fn filter_options(value: &Value) -> Result<Vec<&str>, BusError> {
    let not_strings = || {
        BusError::new(
            errors::INVALID_ARGS,
            format!("Named parameter {FILTER_ARGUMENT} must be an array of strings (as)"),
        )
    };
    let value = match value {
        Value::Variant(inner) => inner.as_ref(),
        other => other,
    };
    let Value::Array { items, .. } = value else {
        return Err(not_strings());
    };
    items
        .iter()
        .map(|item| match item {
            Value::String(option) => Ok(option.as_str()),
            _ => Err(not_strings()),
        })
        .collect()
}

/// The filter every connection of the instance gets (docs/containers.md),
/// compiled from its options.
fn compile_filter(options: &[&str]) -> Result<Arc<AppFilter>, BusError> {
    AppFilter::from_proxy_options(options)
        .map(Arc::new)
        .map_err(|err| BusError::new(errors::INVALID_ARGS, err.to_string()))
}

fn not_understood(name: &str) -> BusError {
    BusError::new(
        errors::INVALID_ARGS,
        format!("Named parameter {name} is not understood"),
    )
}

fn no_such_container(path: &str) -> BusError {
    BusError::new(
        errors::NOT_CONTAINER,
        format!("There is no container with path '{path}'"),
    )
}

fn unknown_uid() -> BusError {
    BusError::new(errors::FAILED, "Unable to determine user ID of caller")
}

/// The marshalled size of an `a{sv}`, as dbus-daemon counts metadata.
fn marshalled_len(value: &Value) -> usize {
    MessageBuilder::method_return(1)
        .body(vec![value.clone()])
        .build(1)
        .ok()
        .and_then(|raw| Message::parse(raw).ok())
        .map_or(0, |msg| msg.body().len())
}

impl Bus {
    /// The caller's uid, unless it authenticated anonymously.
    fn caller_uid(&self, from: ConnId) -> Result<u32, BusError> {
        self.conns
            .get(&from)
            .filter(|c| !c.creds().anonymous)
            .map(|c| c.creds().uid)
            .ok_or_else(unknown_uid)
    }

    /// `Connection ":1.5" (uid=0 pid=1 comm="")`'s two parts, as
    /// dbus-daemon's limit errors name the caller.
    fn caller_words(&self, from: ConnId) -> (String, String) {
        let party = self.party(Some(from));
        let name = party
            .as_ref()
            .and_then(|p| p.name)
            .unwrap_or("(inactive)")
            .to_owned();
        (name, loginfo(party.as_ref(), "bus"))
    }

    /// A limit refusal of AddServer, logged as dbus-daemon logs it.
    fn container_limit(&self, text: String) -> BusError {
        tracing::warn!("{text}");
        BusError::new(errors::LIMITS_EXCEEDED, text)
    }

    /// dbus-daemon's `bus_driver_check_caller_is_not_container`: methods
    /// a contained connection may not call (nesting, stats, the
    /// privileged ones), logged as a security event.
    pub(crate) fn check_not_contained(&self, from: ConnId, member: &str) -> Result<(), BusError> {
        if self.containers.instance_of(from).is_none() {
            return Ok(());
        }
        let (name, who) = self.caller_words(from);
        let text =
            format!("rejected attempt to call {member} by connection {name} ({who}) in container");
        tracing::info!("{text}");
        Err(BusError::new(errors::ACCESS_DENIED, text))
    }

    fn add_server(
        &mut self,
        call: &Call<'_>,
        (kind, name, metadata, named): (String, String, Value, Value),
    ) -> Result<Outcome, BusError> {
        let from = call.from;
        let path = self.containers.next_path().ok_or_else(|| {
            BusError::new(
                errors::LIMITS_EXCEEDED,
                "Too many containers created during the lifetime of this bus",
            )
        })?;
        let uid = self.caller_uid(from)?;
        if !names::is_valid_interface(&kind) {
            return Err(BusError::new(
                errors::INVALID_ARGS,
                "The container type identifier must have the syntax of an interface name",
            ));
        }
        let size = marshalled_len(&metadata) + kind.len() + name.len();
        let limit = self.opts.limits.max_container_metadata_bytes;
        if size > limit {
            let (me, who) = self.caller_words(from);
            return Err(self.container_limit(format!(
                "Connection \"{me}\" ({who}) is not allowed to set {size} bytes of container metadata (max_container_metadata_bytes={limit})"
            )));
        }
        let mut filter_options_given = None;
        if let Value::Array { items, .. } = &named {
            for item in items {
                let Value::DictEntry(key, value) = item else {
                    continue;
                };
                let Value::String(key) = key.as_ref() else {
                    continue;
                };
                if key == FILTER_ARGUMENT {
                    filter_options_given = Some(filter_options(value)?);
                } else {
                    return Err(not_understood(key));
                }
            }
        }
        // The filter is the launcher's too: its options count against the
        // same limit as the metadata (each with a terminating NUL, as in
        // the message), so no caller makes the bus compile and keep an
        // unbounded rule set.
        let filter_size: usize = filter_options_given
            .iter()
            .flatten()
            .map(|option| option.len() + 1)
            .sum();
        if filter_size > 0 && size + filter_size > limit {
            let (me, who) = self.caller_words(from);
            let total = size + filter_size;
            return Err(self.container_limit(format!(
                "Connection \"{me}\" ({who}) is not allowed to set {total} bytes of container metadata and {FILTER_ARGUMENT} options (max_container_metadata_bytes={limit})"
            )));
        }
        let limit = self.opts.limits.max_containers;
        if self.containers.len() >= limit {
            let (me, who) = self.caller_words(from);
            return Err(self.container_limit(format!(
                "Connection \"{me}\" ({who}) is not allowed to create more container servers (max_containers={limit})"
            )));
        }
        let limit = self.opts.limits.max_containers_per_user;
        if limit == 0 || self.containers.count_of(uid) >= limit {
            let (me, who) = self.caller_words(from);
            return Err(self.container_limit(format!(
                "Connection \"{me}\" ({who}) is not allowed to create more container servers for uid {uid} (max_containers_per_user={limit})"
            )));
        }
        // Compiled last, once every limit let the call through.
        let filter = filter_options_given
            .map(|options| compile_filter(&options))
            .transpose()?;
        let creator_creds = self
            .conns
            .get(&from)
            .map(|c| c.creds().clone())
            .unwrap_or_default();
        self.containers.insert(Instance {
            path: path.clone(),
            kind,
            name,
            metadata,
            creator: from,
            creator_creds,
            uid,
            listening: true,
            announced: false,
            connections: Default::default(),
            filter,
        });
        let awaiting = AwaitingListener {
            caller: from,
            call: call.msg.clone(),
            path: path.clone(),
        };
        if let Some(earlier) = self.awaiting_listener.replace(awaiting) {
            tracing::error!("an AddServer call waiting for its socket was dropped: {earlier:?}");
        }
        Ok(Outcome {
            reply: Reply::Later,
            events: Vec::new(),
            effects: vec![Effect::Act(Action::ListenContainer { path, uid })],
        })
    }

    /// The daemon's answer to [`Action::ListenContainer`]: the waiting
    /// AddServer gets its reply `(o instance, ay socket path with its NUL,
    /// s address)`, and the instance is announced from now on; or the
    /// daemon's error, and the instance is forgotten.
    pub fn container_listening(
        &mut self,
        result: Result<ContainerSocket, BusError>,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let routing = Routing::by_bus(now);
        let Some(AwaitingListener { caller, call, path }) = self.awaiting_listener.take() else {
            return;
        };
        let socket = match result {
            Ok(socket) => socket,
            Err(err) => {
                if let Some(instance) = self.containers.get_mut(&path) {
                    instance.listening = false;
                }
                self.containers.remove_if_unused(&path);
                self.error_reply(caller, &call, err, routing, out);
                return;
            }
        };
        if let Some(instance) = self.containers.get_mut(&path) {
            instance.announced = true;
        }
        let mut socket_path = socket.path.into_bytes();
        socket_path.push(0);
        let body = vec![
            Value::ObjectPath(path),
            byte_array(&socket_path),
            Value::String(socket.address),
        ];
        self.reply(caller, &call, body, Vec::new(), routing, out);
        self.pass_to_eavesdroppers(caller, &call, routing, out);
    }

    /// The instance `path` for a caller that may stop it.
    fn instance_to_stop(&self, from: ConnId, path: &str) -> Result<(), BusError> {
        let instance = self
            .containers
            .get(path)
            .ok_or_else(|| no_such_container(path))?;
        let uid = self.caller_uid(from)?;
        if uid != instance.uid {
            return Err(BusError::new(
                errors::ACCESS_DENIED,
                format!(
                    "User {uid} cannot stop a container server started by user {}",
                    instance.uid
                ),
            ));
        }
        Ok(())
    }

    /// Stop listening on instance `path`'s socket (the daemon closes and
    /// removes it); with `close_connections`, its connections are closed
    /// too. The instance goes once nothing keeps it.
    pub(crate) fn stop_container(
        &mut self,
        path: &str,
        close_connections: bool,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        let Some(instance) = self.containers.get_mut(path) else {
            return;
        };
        let was_listening = std::mem::replace(&mut instance.listening, false);
        if was_listening || close_connections {
            out.push(Action::StopContainer {
                path: path.to_owned(),
                close_connections,
            });
        }
        self.forget_container_if_unused(path, routing, out);
    }

    /// Remove instance `path` if neither its socket nor a connection keeps
    /// it, announcing InstanceRemoved if AddServer's reply announced it.
    pub(crate) fn forget_container_if_unused(
        &mut self,
        path: &str,
        routing: Routing,
        out: &mut Vec<Action>,
    ) {
        let Some(instance) = self.containers.remove_if_unused(path) else {
            return;
        };
        if instance.announced {
            let builder = MessageBuilder::signal(BUS_PATH, CONTAINERS1, "InstanceRemoved")
                .body(vec![Value::ObjectPath(instance.path)]);
            self.broadcast_from_bus(builder, routing, out);
        }
    }

    /// A connection leaves the bus: its instances stop listening (dbus-
    /// daemon ties a server to its creator), and the instance it came
    /// through may go.
    pub(crate) fn containers_lose(&mut self, id: ConnId, routing: Routing, out: &mut Vec<Action>) {
        if !self.containers.is_empty() {
            for path in self.containers.listening_created_by(id) {
                self.stop_container(&path, false, routing, out);
            }
        }
        if let Some(path) = self.containers.leave(id) {
            self.forget_container_if_unused(&path, routing, out);
        }
    }

    /// The peer `id` finished authenticating on instance `path`'s socket:
    /// [`Bus::add_connection_as`], in the instance for good. False (and
    /// the bus does not know it) when the instance is gone meanwhile: the
    /// daemon closes it.
    pub fn add_contained_connection(
        &mut self,
        id: ConnId,
        creds: crate::Credentials,
        unix_fds: bool,
        path: &str,
    ) -> bool {
        if self.containers.get(path).is_none() {
            return false;
        }
        self.add_connection_as(id, creds, unix_fds);
        if let Some(filter) = self.containers.get(path).and_then(|i| i.filter.clone()) {
            self.set_app_filter(id, filter);
        }
        self.containers.join(id, path)
    }

    /// The instance path connection `id` came through, if any.
    pub fn container_instance_of(&self, id: ConnId) -> Option<&str> {
        self.containers.instance_of(id)
    }

    /// `msg` as receiver `to` gets it: with header field 10 naming the
    /// sender's container instance (`/` for none, and for the bus) when
    /// `to` asked for it (RequestHeader). Only such receivers pay for the
    /// copy of the header.
    pub(crate) fn with_container_header(&self, to: ConnId, msg: OutMessage) -> OutMessage {
        if !self.containers.wants_header(to) {
            return msg;
        }
        let mut whole = Vec::with_capacity(msg.frame.header.len() + msg.frame.body.len());
        whole.extend_from_slice(&msg.frame.header);
        whole.extend_from_slice(&msg.frame.body);
        let sender = Message::parse(whole.into())
            .ok()
            .and_then(|m| m.sender().map(str::to_owned));
        let path = sender
            .and_then(|s| self.registry.owner(&s))
            .and_then(|id| self.containers.instance_of(id))
            .unwrap_or("/");
        OutMessage {
            frame: msg.frame.with_container_instance(path),
            ..msg
        }
    }

    /// GetInstanceInfo's reply without the path: `(a{sv} creator, s type,
    /// s name, a{sv} metadata)`.
    fn instance_info(&self, path: &str) -> Result<Vec<Value>, BusError> {
        let instance = self
            .containers
            .get(path)
            .ok_or_else(|| no_such_container(path))?;
        let creator = super::credentials::entries_of(&instance.creator_creds);
        Ok(vec![
            dict_sv(creator),
            Value::String(instance.kind.clone()),
            Value::String(instance.name.clone()),
            instance.metadata.clone(),
        ])
    }

    fn get_connection_instance(&self, name: &str) -> Result<Vec<Value>, BusError> {
        let id = match self.subject(name, "container instance")? {
            super::credentials::Subject::Bus => {
                return Err(BusError::new(
                    errors::NOT_CONTAINER,
                    "The message bus is not in a container",
                ))
            }
            super::credentials::Subject::Peer(id) => id,
        };
        let path = self.containers.instance_of(id).ok_or_else(|| {
            BusError::new(
                errors::NOT_CONTAINER,
                format!("Connection '{name}' is not in a container"),
            )
        })?;
        let mut body = vec![Value::ObjectPath(path.to_owned())];
        body.extend(self.instance_info(path)?);
        Ok(body)
    }
}

pub(super) fn add_server(bus: &mut Bus, call: &Call<'_>, args: Args) -> Result<Outcome, BusError> {
    let parts: (String, String, Value, Value) = args.decode()?;
    bus.add_server(call, parts)
}

/// StopInstance: the socket closes and so do its connections.
pub(super) fn stop_instance(
    bus: &mut Bus,
    call: &Call<'_>,
    args: Args,
) -> Result<Outcome, BusError> {
    stop(bus, call, args, true)
}

/// StopListening: only the socket closes.
pub(super) fn stop_listening(
    bus: &mut Bus,
    call: &Call<'_>,
    args: Args,
) -> Result<Outcome, BusError> {
    stop(bus, call, args, false)
}

fn stop(
    bus: &mut Bus,
    call: &Call<'_>,
    args: Args,
    close_connections: bool,
) -> Result<Outcome, BusError> {
    let (path,): (String,) = args.decode()?;
    bus.instance_to_stop(call.from, &path)?;
    let mut outcome = Outcome::empty();
    outcome.effects.push(Effect::StopContainer {
        path,
        close_connections,
    });
    Ok(outcome)
}

pub(super) fn get_connection_instance(
    bus: &mut Bus,
    _: &Call<'_>,
    args: Args,
) -> Result<Outcome, BusError> {
    let (name,): (String,) = args.decode()?;
    Ok(Outcome::now(bus.get_connection_instance(&name)?))
}

pub(super) fn get_instance_info(
    bus: &mut Bus,
    _: &Call<'_>,
    args: Args,
) -> Result<Outcome, BusError> {
    let (path,): (String,) = args.decode()?;
    Ok(Outcome::now(bus.instance_info(&path)?))
}

/// From now on every message this connection receives carries the
/// sender's container instance (`/` for none) in header field 10.
pub(super) fn request_header(bus: &mut Bus, call: &Call<'_>, _: Args) -> Result<Outcome, BusError> {
    bus.containers.request_header(call.from);
    Ok(Outcome::empty())
}
