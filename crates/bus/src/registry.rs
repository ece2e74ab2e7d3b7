//! The name registry: who owns each bus name and who waits in its queue.
//!
//! Follows dbus-daemon's `services.c` step by step, so that replies and the
//! order of NameLost / NameOwnerChanged / NameAcquired are the same. The
//! registry does not build messages: it appends [`NameEvent`]s in the order
//! the bus must send the signals.
//!
//! Owns: every name's owner and queue, and each connection's names. May
//! touch: nothing else (owners are `ConnId`s; policy and signals are the
//! bus's business).

use std::collections::{HashMap, VecDeque};

use crate::{ConnId, FastMap};

/// `RequestName` flags.
pub const ALLOW_REPLACEMENT: u32 = 0x1;
pub const REPLACE_EXISTING: u32 = 0x2;
pub const DO_NOT_QUEUE: u32 = 0x4;

/// `RequestName` replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum RequestReply {
    PrimaryOwner = 1,
    InQueue = 2,
    Exists = 3,
    AlreadyOwner = 4,
}

/// `ReleaseName` replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ReleaseReply {
    Released = 1,
    NonExistent = 2,
    NotOwner = 3,
}

/// A change the bus must announce, in announcement order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameEvent {
    /// Broadcast NameOwnerChanged.
    OwnerChanged {
        name: String,
        old: Option<ConnId>,
        new: Option<ConnId>,
    },
    /// NameLost to `conn`.
    Lost { conn: ConnId, name: String },
    /// NameAcquired to `conn`.
    Acquired { conn: ConnId, name: String },
}

#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
struct Owner {
    conn: ConnId,
    allow_replacement: bool,
    do_not_queue: bool,
}

impl Owner {
    fn new(conn: ConnId, flags: u32) -> Owner {
        let mut owner = Owner {
            conn,
            allow_replacement: false,
            do_not_queue: false,
        };
        owner.set_flags(flags);
        owner
    }

    fn set_flags(&mut self, flags: u32) {
        self.allow_replacement = flags & ALLOW_REPLACEMENT != 0;
        self.do_not_queue = flags & DO_NOT_QUEUE != 0;
    }
}

/// Primary owner first, then the queue. Never empty while in the registry.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct NameQueue {
    owners: VecDeque<Owner>,
}

impl NameQueue {
    fn position(&self, conn: ConnId) -> Option<usize> {
        self.owners.iter().position(|o| o.conn == conn)
    }
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct NameRegistry {
    names: FastMap<String, NameQueue>,
    /// Per connection: every name it owns or waits for, with the order in
    /// which it joined (disconnect releases the newest first, so the unique
    /// name goes last, as in dbus-daemon).
    held: FastMap<ConnId, HashMap<String, u64>>,
    next_seq: u64,
}

impl NameRegistry {
    pub fn new() -> NameRegistry {
        NameRegistry::default()
    }

    /// The primary owner of `name`.
    pub fn owner(&self, name: &str) -> Option<ConnId> {
        self.names
            .get(name)
            .and_then(|q| q.owners.front())
            .map(|o| o.conn)
    }

    pub fn has_owner(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    /// Primary owner then queued connections, or None if nobody owns `name`.
    pub fn queued_owners(&self, name: &str) -> Option<Vec<ConnId>> {
        self.names
            .get(name)
            .map(|q| q.owners.iter().map(|o| o.conn).collect())
    }

    /// Every owned name (unique names included), in no particular order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.keys().map(String::as_str)
    }

    /// The well-known names `conn` is primary owner of (what a match rule's
    /// `sender` may name), `unique` left out.
    pub fn primary_names<'a>(&'a self, conn: ConnId, unique: &str) -> Vec<&'a str> {
        self.held.get(&conn).map_or_else(Vec::new, |names| {
            names
                .keys()
                .filter(|n| n.as_str() != unique && self.owner(n) == Some(conn))
                .map(String::as_str)
                .collect()
        })
    }

    /// How many names have an owner (unique names included).
    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// How many names `conn` owns or is queued for.
    pub fn count(&self, conn: ConnId) -> usize {
        self.held.get(&conn).map_or(0, HashMap::len)
    }

    /// Call `f` with every name `conn` owns or waits for, its unique name
    /// included (what a policy's send_destination or receive_sender may
    /// name).
    pub fn for_each_held(&self, conn: ConnId, f: &mut dyn FnMut(&str)) {
        if let Some(names) = self.held.get(&conn) {
            for name in names.keys() {
                f(name);
            }
        }
    }

    /// Whether `conn` owns or waits for `name`.
    pub fn holds(&self, conn: ConnId, name: &str) -> bool {
        self.held
            .get(&conn)
            .is_some_and(|names| names.contains_key(name))
    }

    /// After a restart in place: the names' queues and what each
    /// connection holds (`held`, which crossed beside them) must tell the
    /// same story, every place in a queue one held name and every held
    /// name one place. A name held but in no queue of it would be given
    /// up at the connection's exit with signals for an owner it never
    /// was; a place held by nobody would outlive its connection, which
    /// would keep the name (or its queue) for good. `may_hold`: whether a
    /// connection may own names (it is on the bus, past Hello, and no
    /// monitor); an empty queue, names held by another connection, or a
    /// join order at or past the next to give (two names would leave in
    /// no known order, and the last would overflow it) are refused too.
    /// Not counted again: the order each connection joined its names in
    /// crosses only here. Returns why the state cannot be served.
    ///
    /// One lookup per held name: each has its place, and there are as
    /// many places as held names, so no place is left over (held names
    /// are distinct, and a connection twice in a queue would leave a
    /// place over too). Looking each place up as well would double the
    /// lookups, and the state is read three times in a restart.
    pub fn check_handed_over(&self, may_hold: impl Fn(ConnId) -> bool) -> Result<(), String> {
        if self.next_seq == u64::MAX {
            return Err("the names' join order is used up".into());
        }
        let mut places = 0usize;
        for (name, queue) in &self.names {
            if queue.owners.is_empty() {
                return Err(format!("the name {name} has an empty queue"));
            }
            places += queue.owners.len();
        }
        let mut held = 0usize;
        for (conn, names) in &self.held {
            let n = conn.0;
            if !may_hold(*conn) {
                return Err(format!(
                    "connection {n} holds names, but may hold none \
                     (not on the bus past Hello, or a monitor)"
                ));
            }
            for (name, &joined) in names {
                let queued = self.names.get(name).and_then(|q| q.position(*conn));
                if queued.is_none() {
                    return Err(format!(
                        "connection {n} holds {name}, but is not in its queue"
                    ));
                }
                if joined >= self.next_seq {
                    return Err(format!(
                        "connection {n} joined {name} at {joined}, not before the next, {}",
                        self.next_seq
                    ));
                }
            }
            held += names.len();
        }
        if places != held {
            return Err(format!(
                "the name queues have {places} places, for {held} names held: \
                 a place is held by no connection, or a connection is twice in a queue"
            ));
        }
        Ok(())
    }

    fn track(&mut self, conn: ConnId, name: &str) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.held
            .entry(conn)
            .or_default()
            .entry(name.to_owned())
            .or_insert(seq);
    }

    fn untrack(&mut self, conn: ConnId, name: &str) {
        if let Some(names) = self.held.get_mut(&conn) {
            names.remove(name);
            if names.is_empty() {
                self.held.remove(&conn);
            }
        }
    }

    /// Register `conn`'s unique name (Hello). The caller checked the name is
    /// free.
    pub fn add_unique(&mut self, conn: ConnId, unique: &str, events: &mut Vec<NameEvent>) {
        self.create(conn, unique, 0, events);
    }

    /// A new name, `conn` its primary owner: NameOwnerChanged, then
    /// NameAcquired (dbus-daemon's `bus_registry_ensure`).
    fn create(&mut self, conn: ConnId, name: &str, flags: u32, events: &mut Vec<NameEvent>) {
        events.push(NameEvent::OwnerChanged {
            name: name.to_owned(),
            old: None,
            new: Some(conn),
        });
        events.push(NameEvent::Acquired {
            conn,
            name: name.to_owned(),
        });
        let mut queue = NameQueue::default();
        queue.owners.push_back(Owner::new(conn, flags));
        self.names.insert(name.to_owned(), queue);
        self.track(conn, name);
    }

    /// RequestName, once the driver validated the name and the limits.
    pub fn request(
        &mut self,
        conn: ConnId,
        name: &str,
        flags: u32,
        events: &mut Vec<NameEvent>,
    ) -> RequestReply {
        let Some(queue) = self.names.get_mut(name) else {
            self.create(conn, name, flags, events);
            return RequestReply::PrimaryOwner;
        };
        let primary = queue.owners[0];
        let do_not_queue = flags & DO_NOT_QUEUE != 0;
        let replace = flags & REPLACE_EXISTING != 0;
        if primary.conn == conn {
            queue.owners[0].set_flags(flags);
            RequestReply::AlreadyOwner
        } else if do_not_queue && (!primary.allow_replacement || !replace) {
            // It may not wait, so it leaves the queue if it was in it.
            if let Some(pos) = queue.position(conn) {
                queue.owners.remove(pos);
                self.untrack(conn, name);
            }
            RequestReply::Exists
        } else if !do_not_queue && (!replace || !primary.allow_replacement) {
            self.enqueue(conn, name, flags);
            RequestReply::InQueue
        } else {
            // Put the newcomer right behind the owner, then take the owner
            // out of the way: that sends the signals in dbus-daemon's order.
            self.enqueue(conn, name, flags);
            if primary.do_not_queue {
                self.remove_owner(primary.conn, name, events);
            } else {
                self.swap_owner(name, events);
            }
            RequestReply::PrimaryOwner
        }
    }

    /// dbus-daemon's `bus_service_add_owner` on a name that has an owner.
    fn enqueue(&mut self, conn: ConnId, name: &str, flags: u32) {
        let Some(queue) = self.names.get_mut(name) else {
            return;
        };
        let replace = flags & REPLACE_EXISTING != 0;
        match queue.position(conn) {
            Some(pos) => {
                let mut owner = queue.owners.remove(pos).unwrap_or(Owner::new(conn, flags));
                owner.set_flags(flags);
                if replace {
                    queue.owners.insert(1, owner);
                } else {
                    queue.owners.insert(pos, owner);
                }
            }
            None => {
                let owner = Owner::new(conn, flags);
                if replace {
                    queue.owners.insert(1, owner);
                } else {
                    queue.owners.push_back(owner);
                }
                self.track(conn, name);
            }
        }
    }

    /// The primary owner steps back to second place; the second becomes
    /// primary. NameLost, NameOwnerChanged, NameAcquired.
    fn swap_owner(&mut self, name: &str, events: &mut Vec<NameEvent>) {
        let Some(queue) = self.names.get_mut(name) else {
            return;
        };
        if queue.owners.len() < 2 {
            return;
        }
        let old = queue.owners[0].conn;
        let new = queue.owners[1].conn;
        queue.owners.swap(0, 1);
        events.push(NameEvent::Lost {
            conn: old,
            name: name.to_owned(),
        });
        events.push(NameEvent::OwnerChanged {
            name: name.to_owned(),
            old: Some(old),
            new: Some(new),
        });
        events.push(NameEvent::Acquired {
            conn: new,
            name: name.to_owned(),
        });
    }

    /// `conn` stops owning or waiting for `name`; the next in the queue, if
    /// any, becomes primary owner.
    fn remove_owner(&mut self, conn: ConnId, name: &str, events: &mut Vec<NameEvent>) {
        let Some(queue) = self.names.get_mut(name) else {
            return;
        };
        let Some(pos) = queue.position(conn) else {
            return;
        };
        queue.owners.remove(pos);
        if pos == 0 {
            events.push(NameEvent::Lost {
                conn,
                name: name.to_owned(),
            });
            let new = queue.owners.front().map(|o| o.conn);
            events.push(NameEvent::OwnerChanged {
                name: name.to_owned(),
                old: Some(conn),
                new,
            });
            match new {
                Some(new) => events.push(NameEvent::Acquired {
                    conn: new,
                    name: name.to_owned(),
                }),
                None => {
                    self.names.remove(name);
                }
            }
        }
        self.untrack(conn, name);
    }

    /// ReleaseName, once the driver validated the name.
    pub fn release(
        &mut self,
        conn: ConnId,
        name: &str,
        events: &mut Vec<NameEvent>,
    ) -> ReleaseReply {
        match self.names.get(name) {
            None => ReleaseReply::NonExistent,
            Some(queue) if queue.position(conn).is_none() => ReleaseReply::NotOwner,
            Some(_) => {
                self.remove_owner(conn, name, events);
                ReleaseReply::Released
            }
        }
    }

    /// Drop everything `conn` owns or waits for, newest first (its unique
    /// name, the oldest, last).
    pub fn remove_connection(&mut self, conn: ConnId, events: &mut Vec<NameEvent>) {
        let Some(held) = self.held.remove(&conn) else {
            return;
        };
        let mut names: Vec<(u64, String)> = held.into_iter().map(|(n, s)| (s, n)).collect();
        names.sort_unstable_by_key(|&(seq, _)| std::cmp::Reverse(seq));
        for (_, name) in names {
            // Re-track so remove_owner's bookkeeping stays consistent.
            self.held.entry(conn).or_default().insert(name.clone(), 0);
            self.remove_owner(conn, &name, events);
        }
        self.held.remove(&conn);
    }
}

#[cfg(test)]
mod tests;
