//! The connections the bus knows, and who they are: credentials, unique
//! names, and the counts the connection limits check. Only this module
//! hands out connection ids (the daemon's mio tokens too, see
//! [`crate::Bus::next_connection_id`]) and unique names, and only it keeps the
//! counts of registered connections (GetStats, `max_completed_connections`,
//! `max_connections_per_user`) in step with the map.
//!
//! Owns: the connection map and each `Connection`'s identity (credentials,
//! unique name, fd support, client policy: read-only outside), the next
//! id and unique name, and the registered counts. A `Connection` also
//! carries slots that other nouns keep (peaks, counters, its outgoing
//! queue). May touch: nothing else; it does not know the bus.

use std::collections::HashMap;
use std::sync::Arc;

use crate::errors::{self, BusError};
use crate::overflow::OutQueue;
use crate::policy::ClientPolicy;
use crate::stats::ConnPeaks;
use crate::traffic::Traffic;
use crate::{ConnId, Credentials, FastMap, FastSet, Limits};

/// One authenticated peer.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Connection {
    /// Set by Hello ([`Peers::register`]); before that only Hello is
    /// accepted.
    unique: Option<String>,
    creds: Credentials,
    /// The peer negotiated fd passing.
    unix_fds: bool,
    /// The policy rules that apply to it (shared with every connection of
    /// the same user and groups). Not handed over: [`crate::Bus::restored`]
    /// resolves it again from the compiled policy, which shares it anew.
    #[serde(skip, default = "ClientPolicy::unresolved")]
    policy: Arc<ClientPolicy>,
    /// Its slots of other nouns' per-connection state, which those keep:
    /// peaks (`stats`), counters (`traffic`, kept by `bus::counting`), and
    /// what is queued for it with its flow-control state (`overflow`).
    pub peaks: ConnPeaks,
    pub traffic: Traffic,
    pub queue: OutQueue,
}

impl Connection {
    /// Its unique name, once Hello gave it one ([`Peers::register`]).
    #[inline]
    pub fn unique(&self) -> &Option<String> {
        &self.unique
    }

    /// What the kernel (and authentication) said about it.
    #[inline]
    pub fn creds(&self) -> &Credentials {
        &self.creds
    }

    /// It negotiated fd passing.
    #[inline]
    pub fn unix_fds(&self) -> bool {
        self.unix_fds
    }

    /// The policy rules that apply to it.
    #[inline]
    pub fn policy(&self) -> &Arc<ClientPolicy> {
        &self.policy
    }

    /// The policy was reloaded: these rules apply to it now.
    pub fn set_policy(&mut self, policy: Arc<ClientPolicy>) {
        self.policy = policy;
    }
}

/// Every connection, by id. Reads look like a map's (`get`, `[&id]`);
/// ids are given only by [`Peers::next_id`], and connections come and go,
/// and get their names, only through [`Peers::add`], [`Peers::register`]
/// and [`Peers::remove`].
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Peers {
    conns: FastMap<ConnId, Connection>,
    /// The id of the next connection; never reused.
    next_conn: u64,
    /// N of the next unique name ":1.N"; never reused.
    next_unique: u64,
    /// Connections past Hello (kept so GetStats need not count).
    registered: usize,
    /// Connections past Hello, per uid (`max_connections_per_user`).
    registered_per_uid: HashMap<u32, usize>,
}

impl Default for Peers {
    fn default() -> Peers {
        Peers {
            conns: FastMap::default(),
            next_conn: 1,
            next_unique: 0,
            registered: 0,
            registered_per_uid: HashMap::new(),
        }
    }
}

impl Peers {
    /// A new connection's id. Ids count up and are never given twice, so
    /// nothing said about a connection that left can reach another.
    pub fn next_id(&mut self) -> ConnId {
        let id = ConnId(self.next_conn);
        self.next_conn += 1;
        id
    }

    /// The connection `id` (from [`Peers::next_id`]) authenticated; it is
    /// not registered yet.
    pub fn add(
        &mut self,
        id: ConnId,
        creds: Credentials,
        unix_fds: bool,
        policy: Arc<ClientPolicy>,
        queue: OutQueue,
    ) {
        debug_assert!(id.0 < self.next_conn, "{id:?} was not given by the bus");
        self.conns.insert(
            id,
            Connection {
                unique: None,
                creds,
                unix_fds,
                peaks: ConnPeaks::default(),
                traffic: Traffic::default(),
                policy,
                queue,
            },
        );
    }

    /// Hello: give `id` its unique name, unless that would exceed the
    /// limits (dbus-daemon counts a connection once it completes Hello,
    /// and refuses the Hello that would exceed them).
    pub fn register(&mut self, id: ConnId, limits: &Limits) -> Result<String, BusError> {
        let Some(conn) = self.conns.get_mut(&id) else {
            return Err(BusError::new(errors::FAILED, "unknown connection"));
        };
        if conn.unique.is_some() {
            return Err(BusError::new(
                errors::FAILED,
                "Already handled an Hello message",
            ));
        }
        let uid = conn.creds.uid;
        if self.registered >= limits.max_completed_connections {
            return Err(BusError::new(
                errors::LIMITS_EXCEEDED,
                "The maximum number of active connections has been reached",
            ));
        }
        let of_user = self.registered_per_uid.get(&uid).copied().unwrap_or(0);
        if of_user >= limits.max_connections_per_user {
            return Err(BusError::new(
                errors::LIMITS_EXCEEDED,
                format!("The maximum number of active connections for UID {uid} has been reached"),
            ));
        }
        let unique = format!(":1.{}", self.next_unique);
        self.next_unique += 1;
        conn.unique = Some(unique.clone());
        self.registered += 1;
        *self.registered_per_uid.entry(uid).or_insert(0) += 1;
        Ok(unique)
    }

    /// Forget `id`, and count it out if it was registered.
    pub fn remove(&mut self, id: &ConnId) -> Option<Connection> {
        let conn = self.conns.remove(id)?;
        if conn.unique.is_some() {
            self.registered -= 1;
            if let Some(count) = self.registered_per_uid.get_mut(&conn.creds.uid) {
                *count -= 1;
                if *count == 0 {
                    self.registered_per_uid.remove(&conn.creds.uid);
                }
            }
        }
        Some(conn)
    }

    #[inline]
    pub fn get(&self, id: &ConnId) -> Option<&Connection> {
        self.conns.get(id)
    }

    #[inline]
    pub fn get_mut(&mut self, id: &ConnId) -> Option<&mut Connection> {
        self.conns.get_mut(id)
    }

    #[inline]
    pub fn contains_key(&self, id: &ConnId) -> bool {
        self.conns.contains_key(id)
    }

    /// Connections, with or without Hello.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Connections past Hello.
    pub fn registered(&self) -> usize {
        self.registered
    }

    /// After a restart in place: the registered counts, which crossed as
    /// numbers beside the connections, counted again from them (one
    /// below them made a departure count below zero, and wrapped, refused
    /// every Hello after), and the counters of ids and unique names
    /// checked to be past every id and name given, so that none is given
    /// twice (a new connection would take a live one's place). Each
    /// unique name must be one [`Peers::register`] writes (`:1.N`, N in
    /// decimal without a sign or leading zero) and no other connection's:
    /// two connections of one name could answer or send as each other.
    /// Returns why the state cannot be served.
    pub fn recount(&mut self) -> Result<(), String> {
        if self.next_conn == u64::MAX || self.next_unique == u64::MAX {
            return Err("the connection ids or unique names are used up".into());
        }
        let mut registered_per_uid: HashMap<u32, usize> = HashMap::new();
        let mut numbers: FastSet<u64> = FastSet::default();
        for (id, conn) in &self.conns {
            if !self.gave(*id) {
                return Err(format!(
                    "connection {} not below the next id to give, {}",
                    id.0, self.next_conn
                ));
            }
            let Some(unique) = &conn.unique else { continue };
            let number = crate::handover::number_written_after(unique, ":1.");
            let Some(number) = number.filter(|n| *n < self.next_unique) else {
                return Err(format!(
                    "the unique name {unique} is not one given before :1.{}",
                    self.next_unique
                ));
            };
            if !numbers.insert(number) {
                return Err(format!("two connections have the unique name {unique}"));
            }
            *registered_per_uid.entry(conn.creds.uid).or_default() += 1;
        }
        self.registered = registered_per_uid.values().sum();
        self.registered_per_uid = registered_per_uid;
        Ok(())
    }

    /// After a restart in place: the daemon's connections checked against
    /// these. `daemon` gives each of its connections' id, whether it has
    /// authenticated (from then on the bus knows it) and whether it said
    /// Hello (then the bus gave it its unique name). An id at or past the
    /// next to give would be given again, and the next accepted socket
    /// would replace that connection in the daemon (closing it, and
    /// taking its place in epoll); a connection past Hello that the bus
    /// does not know, or one that never said Hello, would escape the
    /// bounds on incomplete connections and `auth_timeout`; a connection
    /// of the bus without the daemon's would keep its names and have its
    /// messages queued for good. Returns why the state cannot be served.
    pub fn check_daemon_connections(
        &self,
        daemon: impl IntoIterator<Item = (ConnId, bool, bool)>,
    ) -> Result<(), String> {
        let mut authenticated: FastSet<ConnId> = FastSet::default();
        for (id, has_authenticated, said_hello) in daemon {
            let n = id.0;
            if !self.gave(id) {
                return Err(format!(
                    "the daemon's connection {n} not below the next id to give, {}",
                    self.next_conn
                ));
            }
            let known = self.conns.get(&id);
            match (has_authenticated, known) {
                (true, None) => {
                    return Err(format!(
                        "connection {n} authenticated, but the bus does not know it"
                    ))
                }
                (false, Some(_)) => {
                    return Err(format!(
                        "connection {n} is authenticating, but the bus knows it"
                    ))
                }
                _ => {}
            }
            let named = known.is_some_and(|c| c.unique.is_some());
            if said_hello != named {
                let (daemon, bus) = match said_hello {
                    true => ("said Hello", "no unique name"),
                    false => ("has not said Hello", "its unique name"),
                };
                return Err(format!(
                    "connection {n} {daemon} as the daemon sees it, but the bus gave it {bus}"
                ));
            }
            if has_authenticated {
                authenticated.insert(id);
            }
        }
        let mut unknown = self.conns.keys().filter(|id| !authenticated.contains(id));
        match unknown.next() {
            Some(id) => Err(format!(
                "connection {} of the bus has no connection in the daemon",
                id.0
            )),
            None => Ok(()),
        }
    }

    /// Whether `id` is one [`Peers::next_id`] gave (whether or not its
    /// connection is still here).
    pub fn gave(&self, id: ConnId) -> bool {
        id.0 < self.next_conn
    }

    pub fn iter(&self) -> impl Iterator<Item = (&ConnId, &Connection)> {
        self.conns.iter()
    }

    pub fn keys(&self) -> impl Iterator<Item = &ConnId> {
        self.conns.keys()
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Connection> {
        self.conns.values_mut()
    }
}

impl std::ops::Index<&ConnId> for Peers {
    type Output = Connection;

    #[inline]
    fn index(&self, id: &ConnId) -> &Connection {
        &self.conns[id]
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::Harness;
    use crate::ConnId;
    use std::collections::HashMap;

    /// A state whose registered counts fell below its connections, or
    /// whose id or name counters are not past what it gave.
    #[test]
    fn handed_over_connections_are_counted_again_and_their_counters_checked() {
        let mut h = Harness::new();
        let (a, _) = h.client();
        let (b, _) = h.client();
        h.connect(false);
        let peers = &mut h.bus.conns;
        peers.registered = 0;
        peers.registered_per_uid.clear();
        assert!(h.bus.check_handed_over().is_ok());
        let peers = &mut h.bus.conns;
        assert_eq!(peers.registered, 2);
        assert_eq!(peers.registered_per_uid, HashMap::from([(1000, 2)]));
        for gone in [a, b] {
            h.bus.remove_connection(gone, h.now, &mut Vec::new());
        }
        let peers = &mut h.bus.conns;
        assert_eq!(peers.registered, 0);
        // What was given, given again.
        let (next_conn, next_unique) = (peers.next_conn, peers.next_unique);
        let (c, c_name) = h.client();
        for (conn, unique, why) in [
            (
                c.0,
                next_unique,
                format!("connection {} not below the next id to give, {}", c.0, c.0),
            ),
            (
                next_conn + 1,
                next_unique,
                format!("the unique name {c_name} is not one given before :1.{next_unique}"),
            ),
            (
                u64::MAX,
                next_unique + 1,
                "the connection ids or unique names are used up".to_owned(),
            ),
            (
                next_conn + 1,
                u64::MAX,
                "the connection ids or unique names are used up".to_owned(),
            ),
        ] {
            let peers = &mut h.bus.conns;
            (peers.next_conn, peers.next_unique) = (conn, unique);
            assert_eq!(h.bus.check_handed_over(), Err(why));
        }
        let peers = &mut h.bus.conns;
        (peers.next_conn, peers.next_unique) = (next_conn + 1, next_unique + 1);
        assert!(h.bus.check_handed_over().is_ok());
    }

    /// A state where two connections share a unique name, or one holds a
    /// name the bus never writes (a sign, a leading zero) that parses to
    /// a number it gave.
    #[test]
    fn handed_over_unique_names_are_distinct_and_as_the_bus_writes_them() {
        let mut h = Harness::new();
        let (_, a_name) = h.client();
        let (b, b_name) = h.client();
        let b_number = b_name.strip_prefix(":1.").unwrap();
        let next = h.bus.conns.next_unique;
        for (name, why) in [
            (
                a_name.clone(),
                format!("two connections have the unique name {a_name}"),
            ),
            (
                format!(":1.+{b_number}"),
                format!("the unique name :1.+{b_number} is not one given before :1.{next}"),
            ),
            (
                format!(":1.0{b_number}"),
                format!("the unique name :1.0{b_number} is not one given before :1.{next}"),
            ),
        ] {
            h.bus.conns.get_mut(&b).unwrap().unique = Some(name);
            assert_eq!(h.bus.check_handed_over(), Err(why));
        }
        h.bus.conns.get_mut(&b).unwrap().unique = Some(b_name);
        assert!(h.bus.check_handed_over().is_ok());
    }

    /// A state whose connections' unique names are not the ones the
    /// registry gives their messages to (two swapped: each would get the
    /// other's calls), or whose registry owns a unique name no
    /// connection has. A monitor, which let go of its name, is whole.
    #[test]
    fn handed_over_unique_names_are_owned_by_their_connections() {
        let mut h = Harness::new();
        let (a, a_name) = h.client();
        let (b, b_name) = h.client();
        let (m, _) = h.client();
        h.send(m, crate::tests::become_monitor(&[]));
        h.take();
        assert!(h.bus.check_handed_over().is_ok());
        let peers = &mut h.bus.conns;
        peers.get_mut(&a).unwrap().unique = Some(b_name.clone());
        peers.get_mut(&b).unwrap().unique = Some(a_name.clone());
        // Whichever of the two the check meets first.
        let why = h.bus.check_handed_over().unwrap_err();
        let owned_by = |conn: ConnId, name: &str, owner: ConnId| {
            format!(
                "the unique name {name} of connection {} is owned by Some({owner:?})",
                conn.0
            )
        };
        assert!(
            why == owned_by(a, &b_name, b) || why == owned_by(b, &a_name, a),
            "{why}"
        );
        let peers = &mut h.bus.conns;
        peers.get_mut(&a).unwrap().unique = Some(a_name);
        peers.get_mut(&b).unwrap().unique = Some(b_name);
        assert!(h.bus.check_handed_over().is_ok());
        // Gone from the connections, still in the registry.
        h.bus.conns.remove(&b);
        assert_eq!(
            h.bus.check_handed_over(),
            Err(
                "2 unique names have owners, for 1 connections past Hello that are not monitors"
                    .into()
            )
        );
    }
}
