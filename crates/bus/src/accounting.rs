//! Per-user accounting of what the bus has queued for peers: bytes and
//! fds waiting to be written to a user's connections, and how long its
//! receivers may still hold other users' senders back. Each connection
//! keeps the [`UserSlot`] of its user, so updating the tally costs no
//! lookup per message; the tally goes when the user's last connection
//! does, and its slot is then reused for a new user.
//!
//! Owns: the per-user tallies (`Users`), with the receivers each user's
//! draining concerns. May touch: the user's
//! [`crate::hold_budget::HoldBudget`].

use std::time::{Duration, Instant};

use crate::hold_budget::HoldBudget;
use crate::{ConnId, FastMap};

/// What one user's connections have queued.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct UserTally {
    pub uid: u32,
    pub out_bytes: usize,
    pub out_fds: usize,
    /// Its connections: the tally goes with the last one.
    connections: usize,
    /// How long its receivers may still hold other users' senders.
    hold_budget: HoldBudget,
    /// Its receivers in an overflow episode, each once: what they are
    /// owed (MessagesLost) and their return to normal may wait for its
    /// queues to drain (see `overflow::Queues::watch`).
    pub watched: Vec<ConnId>,
    /// One of them lost a signal since they were last looked at.
    pub unseen_losses: bool,
}

impl UserTally {
    pub fn queued(&mut self, bytes: usize, fds: usize) {
        self.out_bytes += bytes;
        self.out_fds += fds;
    }

    pub fn sent(&mut self, bytes: usize, fds: usize) {
        self.out_bytes = self.out_bytes.saturating_sub(bytes);
        self.out_fds = self.out_fds.saturating_sub(fds);
    }

    /// What its receivers may still hold another user's sender for.
    pub fn hold_available(&mut self, per_minute: Duration, now: Instant) -> Duration {
        self.hold_budget.available(per_minute, now)
    }

    /// Spend up to `wanted` of its hold budget; returns what was spent.
    pub fn take_hold(&mut self, wanted: Duration, per_minute: Duration, now: Instant) -> Duration {
        self.hold_budget.take(wanted, per_minute, now)
    }

    /// A hold ended before its time: the rest comes back to the budget.
    pub fn give_back_hold(&mut self, unused: Duration) {
        self.hold_budget.give_back(unused);
    }
}

/// Where a user's tally is in [`Users`]. Valid while the user has a
/// connection: every holder of a slot is (or belongs to) one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct UserSlot(usize);

/// The tallies of users with connections.
#[derive(Debug, Default, serde::Serialize)]
pub(crate) struct Users {
    slots: Vec<Option<UserTally>>,
    free: Vec<usize>,
    by_uid: FastMap<u32, usize>,
}

/// [`Users`] as a restart hands them over. The free slots and the slot of
/// each uid are indices into the tallies: they are found again from the
/// tallies rather than taken from the state, where one out of range
/// would make the next new user or the next connection of a user index
/// past the end, and one naming a live tally would give it to another
/// user.
#[derive(serde::Deserialize)]
#[serde(rename = "Users")]
struct HandedUsers {
    slots: Vec<Option<UserTally>>,
    #[allow(dead_code)] // crosses, and is found again (above)
    free: Vec<usize>,
    #[allow(dead_code)] // likewise
    by_uid: std::collections::HashMap<u32, usize>,
}

impl<'de> serde::Deserialize<'de> for Users {
    /// Two tallies of one uid cannot be, and say so (a restart's log
    /// names it: [`crate::handover::reject`]).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Users, D::Error> {
        Users::handed_back(HandedUsers::deserialize(d)?).map_err(crate::handover::reject)
    }
}

impl Users {
    /// The tallies a restart handed over, with the free slots and the
    /// slot of each uid found again.
    fn handed_back(handed: HandedUsers) -> Result<Users, String> {
        let slots = handed.slots;
        let mut free = Vec::new();
        let mut by_uid = FastMap::default();
        for (index, slot) in slots.iter().enumerate() {
            match slot {
                None => free.push(index),
                Some(tally) => {
                    if by_uid.insert(tally.uid, index).is_some() {
                        return Err(format!("two tallies of uid {}", tally.uid));
                    }
                }
            }
        }
        Ok(Users {
            slots,
            free,
            by_uid,
        })
    }

    /// A new connection of `uid` shares its user's tally.
    pub fn join(&mut self, uid: u32) -> UserSlot {
        let index = match self.by_uid.get(&uid) {
            Some(&index) => index,
            None => {
                let tally = Some(UserTally {
                    uid,
                    ..UserTally::default()
                });
                let index = match self.free.pop() {
                    Some(index) => {
                        self.slots[index] = tally;
                        index
                    }
                    None => {
                        self.slots.push(tally);
                        self.slots.len() - 1
                    }
                };
                self.by_uid.insert(uid, index);
                index
            }
        };
        if let Some(tally) = &mut self.slots[index] {
            tally.connections += 1;
        }
        UserSlot(index)
    }

    /// A connection of the user in `slot` left, taking `bytes` and `fds`
    /// still queued for it; the tally goes with the user's last one.
    /// Returns whether the user has connections left.
    pub fn leave(&mut self, slot: UserSlot, bytes: usize, fds: usize) -> bool {
        let Some(tally) = &mut self.slots[slot.0] else {
            return false;
        };
        tally.sent(bytes, fds);
        tally.connections -= 1;
        if tally.connections > 0 {
            return true;
        }
        // The tests run debug builds: a tally that leaks fails them.
        debug_assert!(
            tally.out_bytes == 0 && tally.out_fds == 0,
            "uid {}'s last connection left {} bytes, {} fds in its tally",
            tally.uid,
            tally.out_bytes,
            tally.out_fds
        );
        self.by_uid.remove(&tally.uid);
        self.slots[slot.0] = None;
        self.free.push(slot.0);
        false
    }

    /// After a restart in place: each user's queued bytes and fds and its
    /// connections, set to what `queues` (each connection's user slot,
    /// the uid of its credentials, and the bytes and fds its queue holds)
    /// add up to. They crossed as numbers beside the queues, and a tally
    /// that drifted from them would judge the user's flow control wrongly
    /// from then on. Returns the users whose numbers were wrong, or why
    /// the state cannot be made whole: a connection of a user slot without
    /// a tally, or with another uid's (its queue would count toward that
    /// user's bounds and spend its hold budget).
    pub fn recount(
        &mut self,
        queues: impl IntoIterator<Item = (UserSlot, u32, usize, usize)>,
    ) -> Result<Vec<u32>, String> {
        // Per slot: bytes, fds, connections.
        let mut sums = vec![(0, 0, 0); self.slots.len()];
        for (slot, uid, bytes, fds) in queues {
            let sum = match (sums.get_mut(slot.0), self.slots.get(slot.0)) {
                (Some(sum), Some(Some(tally))) if tally.uid == uid => sum,
                (Some(_), Some(Some(tally))) => {
                    return Err(format!(
                        "a connection of uid {uid} counted in user slot {}, uid {}'s tally",
                        slot.0, tally.uid
                    ))
                }
                _ => {
                    return Err(format!(
                        "a connection of user slot {}, which has no tally",
                        slot.0
                    ))
                }
            };
            *sum = (sum.0 + bytes, sum.1 + fds, sum.2 + 1);
        }
        let mut wrong = Vec::new();
        for (tally, (bytes, fds, connections)) in self.slots.iter_mut().zip(sums) {
            let Some(tally) = tally else { continue };
            if (tally.out_bytes, tally.out_fds, tally.connections) != (bytes, fds, connections) {
                wrong.push(tally.uid);
                (tally.out_bytes, tally.out_fds, tally.connections) = (bytes, fds, connections);
            }
        }
        Ok(wrong)
    }

    /// Whether `slot` holds a tally: a hold a restart handed over is
    /// charged to one (`overflow::Queues::recount`).
    pub fn has_tally(&self, slot: UserSlot) -> bool {
        matches!(self.slots.get(slot.0), Some(Some(_)))
    }

    pub fn get(&self, slot: UserSlot) -> &UserTally {
        self.slots[slot.0]
            .as_ref()
            .expect("a user slot outlives its connections")
    }

    pub fn get_mut(&mut self, slot: UserSlot) -> &mut UserTally {
        self.slots[slot.0]
            .as_mut()
            .expect("a user slot outlives its connections")
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_uid.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_of_one_user_share_a_tally() {
        let mut users = Users::default();
        let a = users.join(1000);
        let b = users.join(1000);
        let other = users.join(1001);
        assert_eq!(a, b);
        users.get_mut(a).queued(100, 1);
        users.get_mut(b).queued(50, 2);
        assert_eq!((users.get(a).out_bytes, users.get(a).out_fds), (150, 3));
        assert_eq!(
            (users.get(other).out_bytes, users.get(other).out_fds),
            (0, 0)
        );
        users.get_mut(b).sent(120, 3);
        assert_eq!((users.get(a).out_bytes, users.get(a).out_fds), (30, 0));
        // Never below zero, whatever the order of events.
        users.get_mut(a).sent(1000, 1000);
        assert_eq!(users.get(b).out_bytes, 0);
    }

    #[test]
    fn a_user_is_forgotten_with_its_last_connection_and_its_slot_reused() {
        let mut users = Users::default();
        let a = users.join(7);
        let b = users.join(7);
        users.get_mut(a).queued(10, 0);
        users.leave(a, 10, 0);
        assert_eq!(users.len(), 1);
        users.leave(b, 0, 0);
        assert_eq!(users.len(), 0);
        // A new user takes the slot, from zero.
        let c = users.join(8);
        assert_eq!(c, a);
        assert_eq!((users.get(c).uid, users.get(c).out_bytes), (8, 0));
    }

    /// The free slots and each uid's slot are found again from the
    /// tallies: the state's could index past them, or give one user's
    /// tally to another.
    #[test]
    fn handed_over_tallies_find_their_free_slots_and_uids_again() {
        let mut users = Users::default();
        let (a, gone, b) = (users.join(7), users.join(8), users.join(9));
        users.leave(gone, 0, 0);
        let handed = HandedUsers {
            slots: std::mem::take(&mut users.slots),
            free: vec![99, a.0],
            by_uid: [(7, 42), (9, a.0)].into(),
        };
        let state = postcard::to_stdvec(&(&handed.slots, &handed.free, &handed.by_uid)).unwrap();
        let mut users: Users = postcard::from_bytes(&state).unwrap();
        assert_eq!(users.join(9), b, "uid 9 keeps its own tally");
        assert_eq!(users.join(7), a);
        assert_eq!(users.join(10), gone, "the free slot is reused");
        assert_eq!(users.join(11), UserSlot(3), "and then a new one");
        assert_eq!(users.len(), 4);
        // Two tallies of one uid cannot be.
        let tally = || {
            Some(UserTally {
                uid: 7,
                connections: 1,
                ..UserTally::default()
            })
        };
        let no_uids: std::collections::HashMap<u32, usize> = Default::default();
        let state =
            postcard::to_stdvec(&(vec![tally(), tally()], Vec::<usize>::new(), no_uids)).unwrap();
        assert_eq!(
            crate::handover::tests::read_back::<Users>(&state).unwrap_err(),
            "Serde Deserialization Error: two tallies of uid 7"
        );
    }

    #[test]
    fn a_recount_sets_each_tally_to_what_its_queues_hold_and_names_the_wrong_ones() {
        let mut users = Users::default();
        let (a, b) = (users.join(7), users.join(7));
        let other = users.join(8);
        users.get_mut(a).queued(30, 1);
        users.get_mut(other).queued(5, 0);
        // User 7's connections hold 10 + 20 bytes and one fd: right. User
        // 8's one connection holds 6 bytes: its tally drifted.
        let queues = [(a, 7, 10, 1), (b, 7, 20, 0), (other, 8, 6, 0)];
        assert_eq!(users.recount(queues), Ok(vec![8]));
        assert_eq!(
            (users.get(other).out_bytes, users.get(other).out_fds),
            (6, 0)
        );
        assert_eq!(users.recount(queues), Ok(vec![]));
        // Its connections are counted too: with one left, the next leave
        // forgets the user.
        assert_eq!(
            users.recount([(a, 7, 30, 1), (other, 8, 6, 0)]),
            Ok(vec![7])
        );
        assert!(!users.leave(a, 30, 1));
        // A connection of a user without a tally cannot be served.
        assert!(users.recount([(UserSlot(9), 7, 0, 0)]).is_err());
        // Nor one counted in another user's tally.
        assert_eq!(
            users.recount([(other, 7, 0, 0)]),
            Err(format!(
                "a connection of uid 7 counted in user slot {}, uid 8's tally",
                other.0
            ))
        );
    }
}
