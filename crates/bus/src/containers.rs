//! Container instances (`org.freedesktop.DBus.Containers1`, dbus-daemon's
//! experimental bus/containers.c): each is a server socket a container
//! manager asked for with AddServer, and the connections that came in
//! through it.
//!
//! An instance lives while its socket listens or any connection that came
//! through it remains (as there: the server and each connection hold a
//! reference). It stops listening when asked (StopListening,
//! StopInstance) or when its creator leaves; once neither remains it is
//! removed and InstanceRemoved goes out, if AddServer's reply had
//! announced it.
//!
//! Owns: the instances by path, their count per uid, the next instance
//! number, which connection is in which instance (for good: a contained
//! connection is never treated as uncontained again), and the connections
//! that asked for the container-instance header field (RequestHeader).
//! May touch: nothing else; `driver::containers` and the router use it.

use std::collections::BTreeMap;
use std::sync::Arc;

use quickbus_wire::Value;

use crate::app_filter::AppFilter;
use crate::{ConnId, Credentials, FastMap, FastSet};

/// Where the instances' object paths start.
pub const PATH_PREFIX: &str = "/org/freedesktop/DBus/Containers1/c";

/// One container instance.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Instance {
    pub path: String,
    /// The container technology, with the syntax of an interface name.
    pub kind: String,
    /// The app's name as the manager gave it (may be empty).
    pub name: String,
    /// The `a{sv}` the manager gave.
    #[serde(with = "value_as_message")]
    pub metadata: Value,
    /// Who asked for it: what GetInstanceInfo says of its creator, as it
    /// was then (the creator may leave before the instance does).
    pub creator: ConnId,
    pub creator_creds: Credentials,
    /// The creator's uid: only this uid may connect, or stop it.
    pub uid: u32,
    /// The daemon listens on its socket.
    pub listening: bool,
    /// AddServer's reply went out: its removal is announced.
    pub announced: bool,
    /// The connections that came in through its socket and are still on
    /// the bus.
    pub connections: FastSet<ConnId>,
    /// AddServer's `org.quickbus.Filter`: every connection that comes in
    /// through the socket is filtered by it (docs/containers.md).
    pub filter: Option<Arc<AppFilter>>,
}

/// Every container instance on the bus.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Containers {
    instances: BTreeMap<String, Instance>,
    per_uid: FastMap<u32, usize>,
    /// The number in the next instance's path (`c0`, `c1`, ...): never
    /// given twice in the bus's lifetime.
    next_number: u64,
    /// Connection -> the path of the instance it came through.
    contained: FastMap<ConnId, String>,
    /// Connections that want every message they receive to carry the
    /// sender's container instance (header field 10).
    header_requesters: FastSet<ConnId>,
}

impl Containers {
    pub fn get(&self, path: &str) -> Option<&Instance> {
        self.instances.get(path)
    }

    pub fn len(&self) -> usize {
        self.instances.len()
    }

    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
    }

    /// Instances created by `uid` and not yet removed.
    pub fn count_of(&self, uid: u32) -> usize {
        self.per_uid.get(&uid).copied().unwrap_or(0)
    }

    /// The path the next instance gets, or None once the numbers ran out
    /// (dbus-daemon's "Too many containers created during the lifetime
    /// of this bus").
    pub fn next_path(&self) -> Option<String> {
        (self.next_number < u64::MAX).then(|| format!("{PATH_PREFIX}{}", self.next_number))
    }

    /// After a restart in place: the instances of each uid counted again
    /// from the instances (the counts crossed as numbers beside them, and
    /// one below them made a removal count below zero), and the number of
    /// the next path checked to be past every instance's, so that no path
    /// is given twice (a new instance would take a live one's place).
    /// Each path must be one [`Containers::next_path`] writes (no sign, no
    /// leading zero: `c05` would be a second `c5`) and the one its
    /// instance says it has (its removal is announced by that path).
    /// Returns why the state cannot be served.
    pub fn recount(&mut self) -> Result<(), String> {
        let mut per_uid: FastMap<u32, usize> = FastMap::default();
        for (path, instance) in &self.instances {
            let number = crate::handover::number_written_after(path, PATH_PREFIX);
            if number.is_none_or(|n| n >= self.next_number) {
                return Err(format!(
                    "the container instance {path} is not one given before {PATH_PREFIX}{}",
                    self.next_number
                ));
            }
            if instance.path != *path {
                return Err(format!(
                    "the container instance {path} says its path is {}",
                    instance.path
                ));
            }
            *per_uid.entry(instance.uid).or_default() += 1;
        }
        self.per_uid = per_uid;
        Ok(())
    }

    /// After a restart in place: which connection is in which instance
    /// crossed twice, in each instance's set and in `contained`, and the
    /// two must agree: a connection one instance counts but that came
    /// through another (or none) would keep that instance alive after it
    /// left, and one in two instances' sets would be filtered by one and
    /// announced by the other. `on_bus`: whether a connection is on the
    /// bus; a contained connection or one that asked for the header field
    /// must be, and a listening instance's creator too (its leaving stops
    /// the listening, so an instance listening for a creator that left
    /// would listen for good). Returns why the state cannot be served.
    pub fn check_connections(&self, on_bus: impl Fn(ConnId) -> bool) -> Result<(), String> {
        for (conn, path) in &self.contained {
            let n = conn.0;
            if !on_bus(*conn) {
                return Err(format!(
                    "connection {n} of the container instance {path} is not on the bus"
                ));
            }
            let counted = self
                .instances
                .get(path)
                .map(|i| i.connections.contains(conn));
            match counted {
                None => {
                    return Err(format!(
                        "connection {n} came through {path}, which is no container instance"
                    ))
                }
                Some(false) => {
                    return Err(format!(
                        "connection {n} came through {path}, which does not count it"
                    ))
                }
                Some(true) => {}
            }
        }
        for (path, instance) in &self.instances {
            for conn in &instance.connections {
                let came_through = self.contained.get(conn);
                if came_through != Some(path) {
                    return Err(format!(
                        "the container instance {path} counts connection {}, \
                         which came through {}",
                        conn.0,
                        came_through.map_or("none", String::as_str)
                    ));
                }
            }
            if instance.listening && !on_bus(instance.creator) {
                return Err(format!(
                    "the container instance {path} listens, but its creator, \
                     connection {}, left",
                    instance.creator.0
                ));
            }
        }
        if let Some(conn) = self.header_requesters.iter().find(|&&c| !on_bus(c)) {
            return Err(format!(
                "connection {} asked for the container instance header field, \
                 but is not on the bus",
                conn.0
            ));
        }
        Ok(())
    }

    /// Add `instance` (its path from [`Containers::next_path`]), listening.
    pub fn insert(&mut self, instance: Instance) {
        self.next_number += 1;
        *self.per_uid.entry(instance.uid).or_default() += 1;
        self.instances.insert(instance.path.clone(), instance);
    }

    pub fn get_mut(&mut self, path: &str) -> Option<&mut Instance> {
        self.instances.get_mut(path)
    }

    /// The instance `path` if nothing keeps it any longer (not listening,
    /// no connection), taken out.
    pub fn remove_if_unused(&mut self, path: &str) -> Option<Instance> {
        let unused = self
            .instances
            .get(path)
            .is_some_and(|i| !i.listening && i.connections.is_empty());
        if !unused {
            return None;
        }
        let instance = self.instances.remove(path)?;
        if let Some(count) = self.per_uid.get_mut(&instance.uid) {
            *count -= 1;
            if *count == 0 {
                self.per_uid.remove(&instance.uid);
            }
        }
        Some(instance)
    }

    /// The paths of the listening instances `creator` made.
    pub fn listening_created_by(&self, creator: ConnId) -> Vec<String> {
        self.instances
            .values()
            .filter(|i| i.creator == creator && i.listening)
            .map(|i| i.path.clone())
            .collect()
    }

    /// Connection `conn` came in through instance `path`; false if there
    /// is no such instance any more.
    pub fn join(&mut self, conn: ConnId, path: &str) -> bool {
        let Some(instance) = self.instances.get_mut(path) else {
            return false;
        };
        instance.connections.insert(conn);
        self.contained.insert(conn, path.to_owned());
        true
    }

    /// The instance path of `conn`, if it came through a container socket.
    pub fn instance_of(&self, conn: ConnId) -> Option<&str> {
        self.contained.get(&conn).map(String::as_str)
    }

    /// `conn` left the bus: the path of its instance, which it no longer
    /// keeps (if it was in one).
    pub fn leave(&mut self, conn: ConnId) -> Option<String> {
        self.header_requesters.remove(&conn);
        let path = self.contained.remove(&conn)?;
        if let Some(instance) = self.instances.get_mut(&path) {
            instance.connections.remove(&conn);
        }
        Some(path)
    }

    pub fn request_header(&mut self, conn: ConnId) {
        self.header_requesters.insert(conn);
    }

    /// Whether any connection asked for the container-instance header
    /// field.
    #[inline]
    pub fn has_header_requesters(&self) -> bool {
        !self.header_requesters.is_empty()
    }

    /// Whether `conn` asked for the container-instance header field.
    #[inline]
    pub fn wants_header(&self, conn: ConnId) -> bool {
        self.has_header_requesters() && self.header_requesters.contains(&conn)
    }
}

/// A [`Value`] written as the body of a tiny message, the one marshalling
/// quickbus-wire offers, and read back from it. (The daemon's handover
/// layout test writes a sample through it: `handover::layout::Metadata`.)
pub(crate) mod value_as_message {
    use quickbus_wire::{Message, MessageBuilder, Value};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// The message's bytes: a newtype, which postcard writes as its
    /// content, so that the layout test can give a sample that parses.
    #[derive(Serialize, Deserialize)]
    struct MetadataMessage(Vec<u8>);

    pub fn serialize<S: Serializer>(value: &Value, s: S) -> Result<S::Ok, S::Error> {
        let bytes = MessageBuilder::method_return(1)
            .body(vec![value.clone()])
            .build(1)
            .map_err(crate::handover::refuse::<S::Error>)?;
        MetadataMessage(bytes.to_vec()).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        let MetadataMessage(bytes) = MetadataMessage::deserialize(d)?;
        let msg = Message::parse(bytes.into()).map_err(crate::handover::reject::<D::Error>)?;
        let mut values = msg
            .body_values()
            .map_err(crate::handover::reject::<D::Error>)?;
        values
            .pop()
            .ok_or_else(|| crate::handover::reject::<D::Error>("an empty metadata message"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(path: String, creator: ConnId, uid: u32) -> Instance {
        Instance {
            path,
            kind: "com.example.NotFlatpak".into(),
            name: "app".into(),
            metadata: Value::Array {
                elem_sig: "{sv}".into(),
                items: vec![],
            },
            creator,
            creator_creds: Credentials::default(),
            uid,
            listening: true,
            announced: true,
            connections: FastSet::default(),
            filter: None,
        }
    }

    /// A state whose counts per uid fell below its instances, or whose
    /// next path is not past every instance's.
    #[test]
    fn handed_over_instances_are_counted_again_and_their_next_path_checked() {
        let mut c = Containers::default();
        for uid in [1000, 1000, 1001] {
            let path = c.next_path().unwrap();
            c.insert(instance(path, ConnId(1), uid));
        }
        c.per_uid.clear();
        assert_eq!(c.recount(), Ok(()));
        assert_eq!(c.count_of(1000), 2);
        assert_eq!(c.count_of(1001), 1);
        for path in [0, 1] {
            let path = format!("{PATH_PREFIX}{path}");
            c.get_mut(&path).unwrap().listening = false;
            assert!(c.remove_if_unused(&path).is_some());
        }
        assert_eq!(c.count_of(1000), 0);
        // The next path is c3: c2 was given, c3 not yet.
        c.next_number = 2;
        assert_eq!(
            c.recount(),
            Err(format!(
                "the container instance {PATH_PREFIX}2 is not one given before {PATH_PREFIX}2"
            ))
        );
        c.next_number = 3;
        assert_eq!(c.recount(), Ok(()));
    }

    /// A state with a path the bus never writes, which names a number it
    /// gave (a second instance of that number), or an instance filed
    /// under another path than its own.
    #[test]
    fn handed_over_instance_paths_are_as_the_bus_writes_them() {
        let mut c = Containers::default();
        for _ in 0..2 {
            let path = c.next_path().unwrap();
            c.insert(instance(path, ConnId(1), 1000));
        }
        let c1 = format!("{PATH_PREFIX}1");
        for odd in [format!("{PATH_PREFIX}01"), format!("{PATH_PREFIX}+1")] {
            let mut moved = c.instances.remove(&c1).unwrap();
            moved.path = odd.clone();
            c.instances.insert(odd.clone(), moved);
            assert_eq!(
                c.recount(),
                Err(format!(
                    "the container instance {odd} is not one given before {PATH_PREFIX}2"
                ))
            );
            let mut back = c.instances.remove(&odd).unwrap();
            back.path = c1.clone();
            c.instances.insert(c1.clone(), back);
        }
        assert_eq!(c.recount(), Ok(()));
        c.get_mut(&c1).unwrap().path = format!("{PATH_PREFIX}0");
        assert_eq!(
            c.recount(),
            Err(format!(
                "the container instance {c1} says its path is {PATH_PREFIX}0"
            ))
        );
    }

    /// A handed-over state whose instances' connections and the
    /// connections' instances disagree, or that names connections no
    /// longer on the bus.
    #[test]
    fn handed_over_contained_connections_must_agree_with_their_instances() {
        let mut c = Containers::default();
        let paths: Vec<String> = (0..2)
            .map(|_| {
                let path = c.next_path().unwrap();
                c.insert(instance(path.clone(), ConnId(1), 1000));
                path
            })
            .collect();
        let (c0, c1) = (&paths[0], &paths[1]);
        assert!(c.join(ConnId(2), c0));
        assert!(c.join(ConnId(3), c1));
        c.request_header(ConnId(3));
        let on_bus = |id: ConnId| (1..=3).contains(&id.0);
        assert_eq!(c.check_connections(on_bus), Ok(()));
        let refused = |c: &Containers, why: String| {
            assert_eq!(c.check_connections(on_bus), Err(why));
        };
        // Connection 2 in both instances' sets.
        c.get_mut(c1).unwrap().connections.insert(ConnId(2));
        refused(
            &c,
            format!("the container instance {c1} counts connection 2, which came through {c0}"),
        );
        c.get_mut(c1).unwrap().connections.remove(&ConnId(2));
        // Counted by none, or by an instance that is not there.
        c.get_mut(c0).unwrap().connections.remove(&ConnId(2));
        refused(
            &c,
            format!("connection 2 came through {c0}, which does not count it"),
        );
        c.get_mut(c0).unwrap().connections.insert(ConnId(2));
        c.contained.insert(ConnId(2), format!("{PATH_PREFIX}7"));
        refused(
            &c,
            format!("connection 2 came through {PATH_PREFIX}7, which is no container instance"),
        );
        c.contained.insert(ConnId(2), c0.clone());
        // An instance counting a connection that came through none.
        c.get_mut(c0).unwrap().connections.insert(ConnId(3));
        c.contained.remove(&ConnId(3));
        c.get_mut(c1).unwrap().connections.remove(&ConnId(3));
        refused(
            &c,
            format!("the container instance {c0} counts connection 3, which came through none"),
        );
        c.get_mut(c0).unwrap().connections.remove(&ConnId(3));
        assert!(c.join(ConnId(3), c1));
        // Connections that left: a contained one, one that asked for the
        // header field, a listening instance's creator.
        let without = |gone: u64| move |id: ConnId| on_bus(id) && id.0 != gone;
        for (gone, why) in [
            (
                2,
                format!("connection 2 of the container instance {c0} is not on the bus"),
            ),
            (
                1,
                format!("the container instance {c0} listens, but its creator, connection 1, left"),
            ),
        ] {
            assert_eq!(c.check_connections(without(gone)), Err(why));
        }
        c.leave(ConnId(3));
        c.request_header(ConnId(3));
        assert_eq!(
            c.check_connections(without(3)),
            Err(
                "connection 3 asked for the container instance header field, \
                 but is not on the bus"
                    .into()
            )
        );
        for path in [c0, c1] {
            c.get_mut(path).unwrap().listening = false;
        }
        assert_eq!(c.check_connections(without(1)), Ok(()));
    }

    #[test]
    fn paths_count_up_and_are_never_given_twice() {
        let mut c = Containers::default();
        let first = c.next_path().unwrap();
        assert_eq!(first, "/org/freedesktop/DBus/Containers1/c0");
        c.insert(instance(first.clone(), ConnId(1), 1000));
        c.get_mut(&first).unwrap().listening = false;
        assert!(c.remove_if_unused(&first).is_some());
        assert_eq!(
            c.next_path().unwrap(),
            "/org/freedesktop/DBus/Containers1/c1"
        );
    }

    #[test]
    fn an_instance_stays_while_a_connection_remains() {
        let mut c = Containers::default();
        let path = c.next_path().unwrap();
        c.insert(instance(path.clone(), ConnId(1), 1000));
        assert!(c.join(ConnId(2), &path));
        c.get_mut(&path).unwrap().listening = false;
        assert!(c.remove_if_unused(&path).is_none());
        assert_eq!(c.count_of(1000), 1);
        assert_eq!(c.leave(ConnId(2)), Some(path.clone()));
        assert!(c.remove_if_unused(&path).is_some());
        assert_eq!(c.count_of(1000), 0);
        assert!(c.is_empty());
    }

    #[test]
    fn a_connection_cannot_join_a_removed_instance() {
        let mut c = Containers::default();
        assert!(!c.join(ConnId(2), "/org/freedesktop/DBus/Containers1/c9"));
        assert_eq!(c.instance_of(ConnId(2)), None);
    }

    #[test]
    fn metadata_crosses_serde() {
        let mut c = Containers::default();
        let path = c.next_path().unwrap();
        let mut i = instance(path.clone(), ConnId(1), 7);
        i.metadata = crate::driver::dict_sv(vec![("Species", Value::String("Martes".into()))]);
        c.insert(i);
        let json = postcard::to_allocvec(&c).unwrap();
        let back: Containers = postcard::from_bytes(&json).unwrap();
        assert_eq!(
            back.get(&path).unwrap().metadata,
            c.get(&path).unwrap().metadata
        );
    }
}
