//! Method calls waiting for a reply.
//!
//! The bus forwards a method return or an error only if it answers a call
//! it forwarded (dbus-daemon drops the others), and it answers the caller
//! itself with `NoReply` when the callee disconnects or the reply time-out
//! passes. Every lookup is by hash or by ordered deadline: no scan over all
//! pending calls.
//!
//! Owns: the calls waiting for a reply, by caller and callee, with their
//! deadlines. May touch: nothing else.

use std::collections::BTreeSet;
use std::time::Instant;

use crate::{ConnId, FastMap, FastSet};

/// A call is named by who made it and its serial there.
pub type CallKey = (ConnId, u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
/// A name of its own for the handover's layout test, which tells
/// serialized types by name (postcard writes none).
#[serde(rename = "PendingReply")]
struct Pending {
    callee: ConnId,
    #[serde(with = "crate::handover::optional_instant")]
    deadline: Option<Instant>,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct PendingReplies {
    calls: FastMap<CallKey, Pending>,
    /// Per connection, kept (possibly empty) until it disconnects, so a
    /// call does not allocate and free a set each time.
    by_caller: FastMap<ConnId, FastSet<u32>>,
    by_callee: FastMap<ConnId, FastSet<CallKey>>,
    #[serde(with = "crate::handover::timed_set")]
    deadlines: BTreeSet<(Instant, CallKey)>,
}

impl PendingReplies {
    pub fn new() -> PendingReplies {
        PendingReplies::default()
    }

    /// How many replies `caller` waits for.
    pub fn waiting(&self, caller: ConnId) -> usize {
        self.by_caller
            .get(&caller)
            .map_or(0, |serials| serials.len())
    }

    pub fn len(&self) -> usize {
        self.calls.len()
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Remember that `callee` owes `caller` a reply to `serial`. A caller
    /// that reuses a serial still pending replaces the old call.
    pub fn expect(
        &mut self,
        caller: ConnId,
        serial: u32,
        callee: ConnId,
        deadline: Option<Instant>,
    ) {
        let key = (caller, serial);
        self.forget(key);
        let pending = Pending { callee, deadline };
        self.index(key, &pending);
        self.calls.insert(key, pending);
    }

    /// Enter a call in the indexes that see the calls another way: its
    /// caller's, its callee's and the deadlines.
    fn index(&mut self, key: CallKey, pending: &Pending) {
        let (caller, serial) = key;
        self.by_caller.entry(caller).or_default().insert(serial);
        self.by_callee
            .entry(pending.callee)
            .or_default()
            .insert(key);
        if let Some(at) = pending.deadline {
            self.deadlines.insert((at, key));
        }
    }

    /// After a restart in place: the calls each connection made and owes,
    /// and the order of their deadlines, which crossed beside the calls,
    /// built again from them (each is the calls seen another way, so it
    /// can be rebuilt exactly). A call missing from its callee's set
    /// would get no `NoReply` when the callee leaves, one missing from
    /// the deadlines would never time out, and a serial left over in its
    /// caller's set would count against `max_replies_per_connection` for
    /// good. `on_bus`: whether a connection is on the bus; a call whose
    /// caller or callee is not is refused (its reply could never come, or
    /// never be delivered). The number of calls per caller is not held
    /// to the limit: a reload may lower it below what is pending, which
    /// it keeps. Returns why the state cannot be served.
    pub fn check_handed_over(&mut self, on_bus: impl Fn(ConnId) -> bool) -> Result<(), String> {
        for (&(caller, serial), pending) in &self.calls {
            for (end, conn) in [("caller", caller), ("callee", pending.callee)] {
                if !on_bus(conn) {
                    return Err(format!(
                        "the call {serial} of connection {} waits for a reply, \
                         but its {end}, connection {}, is not on the bus",
                        caller.0, conn.0
                    ));
                }
            }
        }
        self.by_caller.clear();
        self.by_callee.clear();
        self.deadlines.clear();
        let calls = std::mem::take(&mut self.calls);
        for (&key, pending) in &calls {
            self.index(key, pending);
        }
        self.calls = calls;
        Ok(())
    }

    /// A reply from `from` to `caller`'s call `serial` arrived: true if it
    /// was expected (and it is no longer pending).
    pub fn take_reply(&mut self, from: ConnId, caller: ConnId, serial: u32) -> bool {
        match self.calls.get(&(caller, serial)) {
            Some(p) if p.callee == from => {
                self.forget((caller, serial));
                true
            }
            _ => false,
        }
    }

    /// Whether `callee` owes `caller` a reply to `serial`.
    pub fn is_pending(&self, caller: ConnId, serial: u32, callee: ConnId) -> bool {
        self.calls
            .get(&(caller, serial))
            .is_some_and(|p| p.callee == callee)
    }

    fn forget(&mut self, key: CallKey) -> Option<Pending> {
        let pending = self.calls.remove(&key)?;
        if let Some(serials) = self.by_caller.get_mut(&key.0) {
            serials.remove(&key.1);
        }
        if let Some(keys) = self.by_callee.get_mut(&pending.callee) {
            keys.remove(&key);
        }
        if let Some(at) = pending.deadline {
            self.deadlines.remove(&(at, key));
        }
        Some(pending)
    }

    /// `conn` is gone: forget the calls it made, and return the calls it
    /// owed a reply to (their callers get `NoReply`), oldest serial first.
    pub fn remove_connection(&mut self, conn: ConnId) -> Vec<CallKey> {
        if let Some(serials) = self.by_caller.remove(&conn) {
            for serial in serials {
                // Re-insert so forget() finds a consistent state.
                self.by_caller.entry(conn).or_default().insert(serial);
                self.forget((conn, serial));
            }
        }
        let mut owed: Vec<CallKey> = self
            .by_callee
            .remove(&conn)
            .map(|keys| keys.into_iter().collect())
            .unwrap_or_default();
        owed.sort_unstable();
        for &key in &owed {
            self.by_callee.entry(conn).or_default().insert(key);
            self.forget(key);
        }
        // forget() leaves the emptied sets in place: drop them with `conn`.
        self.by_caller.remove(&conn);
        self.by_callee.remove(&conn);
        owed
    }

    /// The earliest reply deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// Calls whose deadline is `now` or earlier, no longer pending.
    pub fn expire(&mut self, now: Instant) -> Vec<CallKey> {
        let mut expired = Vec::new();
        while let Some(&(at, key)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.forget(key);
            expired.push(key);
        }
        expired
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use std::time::Duration;

    const A: ConnId = ConnId(1);
    const B: ConnId = ConnId(2);
    const C: ConnId = ConnId(3);

    #[test]
    fn reply_only_from_the_callee_and_only_once() {
        let mut p = PendingReplies::new();
        p.expect(A, 7, B, None);
        assert!(!p.take_reply(C, A, 7), "third party cannot answer");
        assert!(!p.take_reply(B, A, 8), "wrong serial");
        assert!(p.take_reply(B, A, 7));
        assert!(!p.take_reply(B, A, 7), "second reply is unexpected");
        assert!(p.is_empty());
        assert_eq!(p.waiting(A), 0);
    }

    #[test]
    fn callee_disconnect_returns_owed_calls() {
        let mut p = PendingReplies::new();
        p.expect(A, 2, B, None);
        p.expect(A, 1, B, None);
        p.expect(C, 5, B, None);
        p.expect(B, 9, C, None);
        assert_eq!(p.remove_connection(B), vec![(A, 1), (A, 2), (C, 5)]);
        assert_eq!(p.len(), 0, "B's own call is forgotten too");
        assert_eq!(p.waiting(A), 0);
    }

    #[test]
    fn caller_disconnect_forgets_its_calls() {
        let mut p = PendingReplies::new();
        p.expect(A, 1, B, None);
        assert!(p.remove_connection(A).is_empty());
        assert!(!p.take_reply(B, A, 1));
    }

    #[test]
    fn a_disconnect_drops_the_per_connection_sets() {
        let mut p = PendingReplies::new();
        p.expect(A, 1, B, None);
        assert!(p.take_reply(B, A, 1));
        // Answered calls leave empty sets behind for reuse...
        assert_eq!(p.waiting(A), 0);
        p.expect(B, 7, A, None);
        assert_eq!(p.remove_connection(A), vec![(B, 7)]);
        assert_eq!(p.remove_connection(B), vec![]);
        // ...until their connection goes.
        assert!(p.by_caller.is_empty() && p.by_callee.is_empty(), "{p:?}");
    }

    #[test]
    fn deadlines_expire_in_order() {
        let t0 = Instant::now();
        let mut p = PendingReplies::new();
        p.expect(A, 1, B, Some(t0 + Duration::from_secs(2)));
        p.expect(A, 2, B, Some(t0 + Duration::from_secs(1)));
        p.expect(A, 3, B, None);
        assert_eq!(p.next_deadline(), Some(t0 + Duration::from_secs(1)));
        assert!(p.expire(t0).is_empty());
        assert_eq!(p.expire(t0 + Duration::from_secs(1)), vec![(A, 2)]);
        assert_eq!(p.expire(t0 + Duration::from_secs(5)), vec![(A, 1)]);
        assert_eq!(p.next_deadline(), None);
        assert_eq!(p.waiting(A), 1);
    }

    /// A handed-over state whose indexes of the pending calls lost a
    /// call or kept one that is gone (built again from the calls), or
    /// whose call waits on a connection that is not on the bus (refused).
    #[test]
    fn handed_over_calls_are_indexed_again_and_their_ends_checked() {
        use crate::tests::Harness;
        use quickbus_wire::MessageBuilder;
        let mut h = Harness::new();
        h.bus.set_limits(crate::Limits {
            reply_timeout: Some(Duration::from_secs(25)),
            ..crate::Limits::default()
        });
        let (a, _) = h.client();
        let (b, b_name) = h.client();
        let serial = h.send(a, MessageBuilder::method_call("/", "M").destination(b_name));
        h.take();
        let deadline = h.bus.next_deadline();
        assert!(deadline.is_some());
        let p = &mut h.bus.replies;
        p.by_caller.get_mut(&a).unwrap().insert(serial + 1);
        p.by_callee.clear();
        p.deadlines.clear();
        assert_eq!(h.bus.check_handed_over(), Ok(vec![]));
        let p = &h.bus.replies;
        assert_eq!(p.waiting(a), 1, "a serial of no call is dropped");
        assert_eq!(h.bus.next_deadline(), deadline, "the call times out");
        // b leaving answers a's call.
        assert_eq!(h.bus.replies.remove_connection(b), vec![(a, serial)]);

        let gone = ConnId(99);
        for (caller, callee, end) in [(a, gone, "callee"), (gone, a, "caller")] {
            let mut p = PendingReplies::new();
            p.expect(caller, 5, callee, None);
            h.bus.replies = p;
            assert_eq!(
                h.bus.check_handed_over(),
                Err(format!(
                    "the call 5 of connection {} waits for a reply, \
                     but its {end}, connection 99, is not on the bus",
                    caller.0
                ))
            );
        }
    }

    #[test]
    fn reused_serial_replaces_the_old_call() {
        let mut p = PendingReplies::new();
        let t0 = Instant::now();
        p.expect(A, 1, B, Some(t0));
        p.expect(A, 1, C, None);
        assert_eq!(p.len(), 1);
        assert_eq!(p.next_deadline(), None);
        assert!(p.take_reply(C, A, 1));
    }
}
