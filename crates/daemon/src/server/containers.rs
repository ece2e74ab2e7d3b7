//! The loop's side of container instances (Containers1): listening on an
//! instance's socket when the bus asks ([`Action::ListenContainer`],
//! answered at once with `Bus::container_listening`), accepting on it
//! (`max_connections_per_container`, counted over every connection that
//! came through it, authenticating or not, as dbus-daemon counts), the
//! creator's uid checked once the peer authenticated, and stopping
//! ([`Action::StopContainer`]: the socket closed and its file removed, and
//! for StopInstance every connection that came through it closed). The
//! sockets cross a restart in place with the rest of the loop; at exit
//! their files are removed, as dbus-daemon removes them.
//!
//! Owns: the container listeners, in slots whose tokens sit below the
//! configured listeners'. May touch: the server's connections and the bus.
//!
//! [`Action::ListenContainer`]: quickbus_bus::Action::ListenContainer
//! [`Action::StopContainer`]: quickbus_bus::Action::StopContainer

use std::io;
use std::path::PathBuf;
use std::time::Instant;

use mio::{Interest, Token};
use quickbus_bus::ContainerSocket;
use serde::{Deserialize, Serialize};
use tracing::{debug, warn};

use super::{Server, LAST_LISTENER, MAX_LISTENERS};
use crate::socket::Listening;

/// Listener index of container slot 0: configured listeners take the
/// indices below, container sockets the ones from here.
pub(super) const FIRST_CONTAINER_SLOT: usize = MAX_LISTENERS / 2;

/// The mio token of container slot `slot`.
fn slot_token(slot: usize) -> Token {
    Token(LAST_LISTENER - FIRST_CONTAINER_SLOT - slot)
}

/// A container instance's listening socket.
#[derive(Serialize, Deserialize)]
pub(super) struct ContainerListen {
    #[serde(with = "crate::handover_fields::listening")]
    socket: Listening,
    /// The instance's object path.
    instance: String,
    /// Only this uid may connect.
    uid: u32,
    /// The socket's file.
    file: PathBuf,
}

/// The container instance a connection came through.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Contained {
    pub instance: String,
    /// The creator's uid, the only one that may authenticate.
    pub uid: u32,
    /// It came from the creator's uid and holds one of the instance's
    /// `max_connections_per_container` places. Another user's connection
    /// (refused at BEGIN) holds none, so it cannot lock the app out; like
    /// every connection still authenticating it counts against its own
    /// user's share of `max_incomplete_connections`.
    pub counted: bool,
}

impl Server {
    /// The bus asked for instance `instance`'s socket: bind, register, and
    /// answer the bus before anything else reaches it.
    pub(super) fn listen_container(&mut self, instance: String, uid: u32) {
        let result = self.bind_container(&instance, uid);
        self.bus
            .container_listening(result, Instant::now(), &mut self.actions);
    }

    fn bind_container(
        &mut self,
        instance: &str,
        uid: u32,
    ) -> Result<ContainerSocket, quickbus_bus::errors::BusError> {
        use quickbus_bus::errors::{BusError, FAILED, LIMITS_EXCEEDED};
        let slot = match self.container_listeners.iter().position(Option::is_none) {
            Some(free) => free,
            None if self.container_listeners.len() < MAX_LISTENERS - FIRST_CONTAINER_SLOT => {
                self.container_listeners.push(None);
                self.container_listeners.len() - 1
            }
            None => {
                return Err(BusError::new(
                    LIMITS_EXCEEDED,
                    "Too many container servers listening",
                ))
            }
        };
        let switched_user = self.opts.setup.current_config().user.is_some();
        let bound = crate::container_sockets::bind(&self.opts.auth.guid, switched_user)?;
        let failed = |e: io::Error, file: &PathBuf| {
            let _ = std::fs::remove_file(file);
            BusError::new(FAILED, format!("cannot listen on {}: {e}", file.display()))
        };
        let mut socket = match bound.socket.into_mio() {
            Ok(socket) => socket,
            Err(e) => return Err(failed(e, &bound.file)),
        };
        if let Err(e) =
            self.poll
                .registry()
                .register(&mut socket, slot_token(slot), Interest::READABLE)
        {
            return Err(failed(e, &bound.file));
        }
        debug!("container instance {instance} listens on {}", bound.address);
        let answer = ContainerSocket {
            path: bound.file.to_string_lossy().into_owned(),
            address: bound.address,
        };
        self.container_listeners[slot] = Some(ContainerListen {
            socket,
            instance: instance.to_owned(),
            uid,
            file: bound.file,
        });
        Ok(answer)
    }

    /// Accept what waits on container slot `slot`, up to the instance's
    /// `max_connections_per_container`; one past it is closed at once
    /// (dbus-daemon cannot tell it why either).
    pub(super) fn accept_container(&mut self, slot: usize) {
        loop {
            let Some(Some(listen)) = self.container_listeners.get(slot) else {
                return;
            };
            let accepted = listen.socket.accept();
            let (instance, uid) = (listen.instance.clone(), listen.uid);
            let stream = match self.accepted(accepted) {
                super::Accepted::Stream(stream) => stream,
                super::Accepted::Again => continue,
                super::Accepted::NoMore => return,
            };
            let peer_uid = rustix::net::sockopt::get_socket_peercred(&stream)
                .map(|cred| cred.uid.as_raw())
                .ok();
            let contained = Contained {
                counted: peer_uid == Some(uid),
                instance,
                uid,
            };
            let limit = self.opts.limits.max_connections_per_container;
            if contained.counted && self.places_taken(&contained.instance) >= limit {
                self.log_limiter.warn(
                    "container connection over the limit",
                    format_args!(
                        "Closing connection to container server {} because it would exceed resource limit (max_connections_per_container={limit})",
                        contained.instance
                    ),
                );
                continue;
            }
            self.add_connection(stream, None, Some(contained));
        }
    }

    /// How many of instance `instance`'s `max_connections_per_container`
    /// places are taken.
    fn places_taken(&self, instance: &str) -> usize {
        self.container_places.get(instance).copied().unwrap_or(0)
    }

    /// A connection that holds a place of `instance` came (`1`) or went
    /// (`-1`).
    pub(super) fn container_places_taken(&mut self, instance: &str, change: isize) {
        let taken = self
            .container_places
            .entry(instance.to_owned())
            .or_default();
        *taken = taken.saturating_add_signed(change);
        if *taken == 0 {
            self.container_places.remove(instance);
        }
    }

    /// Count the places taken from the connections (after a restart, or
    /// a restart that failed and gave the state back).
    pub(super) fn count_container_places(&mut self) {
        self.container_places.clear();
        let held: Vec<String> = self
            .conns
            .values()
            .filter_map(|c| c.contained.as_ref().filter(|c| c.counted))
            .map(|c| c.instance.clone())
            .collect();
        for instance in held {
            self.container_places_taken(&instance, 1);
        }
    }

    /// The connections that came through instance `instance`'s socket,
    /// authenticated or not.
    fn connections_through<'a>(
        &'a self,
        instance: &'a str,
    ) -> impl Iterator<Item = quickbus_bus::ConnId> + 'a {
        self.conns
            .iter()
            .filter(move |(_, c)| c.contained.as_ref().is_some_and(|c| c.instance == instance))
            .map(|(&id, _)| id)
    }

    /// The bus stopped instance `instance`: its socket closes and its file
    /// goes; with `close_connections`, every connection that came through
    /// it is closed too.
    pub(super) fn stop_container(&mut self, instance: &str, close_connections: bool) {
        let slot = self
            .container_listeners
            .iter()
            .position(|l| l.as_ref().is_some_and(|l| l.instance == instance));
        if let Some(mut listen) = slot.and_then(|s| self.container_listeners[s].take()) {
            let _ = self.poll.registry().deregister(&mut listen.socket);
            remove_socket_file(&listen.file);
        }
        if close_connections {
            let ids: Vec<_> = self.connections_through(instance).collect();
            for id in ids {
                self.close(id, "its container instance was stopped");
            }
        }
    }

    /// At exit: every container socket's file goes (the sockets close
    /// with the process).
    pub(super) fn remove_container_sockets(&mut self) {
        for listen in self.container_listeners.iter().flatten() {
            remove_socket_file(&listen.file);
        }
    }

    /// Register every container socket (a new loop, after a restart).
    pub(super) fn register_container_listeners(&mut self) -> io::Result<()> {
        for (slot, listen) in self.container_listeners.iter_mut().enumerate() {
            if let Some(listen) = listen {
                self.poll.registry().register(
                    &mut listen.socket,
                    slot_token(slot),
                    Interest::READABLE,
                )?;
            }
        }
        Ok(())
    }
}

fn remove_socket_file(file: &PathBuf) {
    if let Err(e) = std::fs::remove_file(file) {
        if e.kind() != io::ErrorKind::NotFound {
            warn!("cannot remove container socket {}: {e}", file.display());
        }
    }
}
