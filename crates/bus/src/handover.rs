//! What the state needs to cross an `exec` (docs/restart.md): file
//! descriptors and instants, which serde cannot write as plain data.
//!
//! A restart serializes the bus and the daemon's connections in one go,
//! inside [`saving`], and reads them back inside [`restoring`]. Fields
//! that hold an fd or an [`Instant`] name one of the `with` modules here:
//!
//! - an fd is written as its index in a table the caller gets back from
//!   [`saving`] (the daemon clears close-on-exec on those descriptors and
//!   writes their numbers next to the state); reading takes the fd with
//!   that index from the table the caller passes to [`restoring`];
//! - an instant is written as nanoseconds of `CLOCK_MONOTONIC`, which
//!   `exec` does not reset: [`Clock`] pairs an `Instant` with that
//!   reading, taken by the daemon (the core reads no clock).
//!
//! Outside those two calls, serializing such a field is an error, not a
//! silent loss.
//!
//! Owns: the thread's handover scope while one of the calls runs. May
//! touch: nothing else.

use std::cell::RefCell;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One moment read from both clocks: `Instant` (this process's) and
/// `CLOCK_MONOTONIC` in nanoseconds (the machine's, the same on both sides
/// of an exec).
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub instant: Instant,
    pub monotonic_ns: u64,
}

impl Clock {
    fn to_monotonic(self, at: Instant) -> i128 {
        let base = i128::from(self.monotonic_ns);
        if at >= self.instant {
            base + (at - self.instant).as_nanos() as i128
        } else {
            base - (self.instant - at).as_nanos() as i128
        }
    }

    fn to_instant(self, ns: i128) -> Option<Instant> {
        let delta = ns - i128::from(self.monotonic_ns);
        let magnitude = Duration::from_nanos(u64::try_from(delta.unsigned_abs()).ok()?);
        if delta >= 0 {
            self.instant.checked_add(magnitude)
        } else {
            self.instant.checked_sub(magnitude)
        }
    }
}

enum Scope {
    Saving {
        clock: Clock,
        fds: Vec<RawFd>,
    },
    Restoring {
        clock: Clock,
        fds: Vec<Option<OwnedFd>>,
    },
}

thread_local! {
    static SCOPE: RefCell<Option<Scope>> = const { RefCell::new(None) };
}

/// Runs `save` (which serializes) with fds and instants writable; returns
/// its result and the fds it referred to, by index. The fds stay owned by
/// the state: the caller only learns their numbers.
pub fn saving<R>(clock: Clock, save: impl FnOnce() -> R) -> (R, Vec<RawFd>) {
    SCOPE.with(|s| {
        *s.borrow_mut() = Some(Scope::Saving {
            clock,
            fds: Vec::new(),
        })
    });
    let result = save();
    let scope = SCOPE.with(|s| s.borrow_mut().take());
    match scope {
        Some(Scope::Saving { fds, .. }) => (result, fds),
        _ => (result, Vec::new()),
    }
}

/// Runs `restore` (which deserializes) with `fds` as the table indices
/// refer to. Returns its result and how many fds of the table nothing
/// took (they are closed).
pub fn restoring<R>(clock: Clock, fds: Vec<OwnedFd>, restore: impl FnOnce() -> R) -> (R, usize) {
    let fds = fds.into_iter().map(Some).collect();
    SCOPE.with(|s| *s.borrow_mut() = Some(Scope::Restoring { clock, fds }));
    let result = restore();
    let scope = SCOPE.with(|s| s.borrow_mut().take());
    let unused = match scope {
        Some(Scope::Restoring { fds, .. }) => fds.iter().filter(|f| f.is_some()).count(),
        _ => 0,
    };
    (result, unused)
}

/// `fd`'s index in the table of the handover being saved, for fields
/// the `with` modules here do not cover.
pub fn save_fd(fd: BorrowedFd<'_>) -> Result<u32, String> {
    SCOPE.with(|s| match &mut *s.borrow_mut() {
        Some(Scope::Saving { fds, .. }) => {
            fds.push(fd.as_raw_fd());
            u32::try_from(fds.len() - 1).map_err(|_| "too many fds".to_owned())
        }
        _ => Err("an fd is written only while saving the bus for a restart".into()),
    })
}

/// The fd at `index` of the table of the handover being restored (each
/// index is taken once).
pub fn restore_fd(index: u32) -> Result<OwnedFd, String> {
    SCOPE.with(|s| match &mut *s.borrow_mut() {
        Some(Scope::Restoring { fds, .. }) => fds
            .get_mut(index as usize)
            .and_then(Option::take)
            .ok_or_else(|| format!("fd {index} of the handover is missing or taken twice")),
        _ => Err("an fd is read only while restoring the bus after a restart".into()),
    })
}

fn clock() -> Result<Clock, String> {
    SCOPE.with(|s| match &*s.borrow() {
        Some(Scope::Saving { clock, .. } | Scope::Restoring { clock, .. }) => Ok(*clock),
        None => Err("an instant is written only inside a handover".into()),
    })
}

/// `#[serde(with = "handover::fd")]` for an [`OwnedFd`].
pub mod fd {
    use super::*;

    pub fn serialize<S: Serializer>(fd: &OwnedFd, s: S) -> Result<S::Ok, S::Error> {
        save_fd(fd.as_fd()).map_err(S::Error::custom)?.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<OwnedFd, D::Error> {
        restore_fd(u32::deserialize(d)?).map_err(D::Error::custom)
    }
}

/// `#[serde(with = "handover::fds")]` for a `Vec<OwnedFd>`.
pub mod fds {
    use super::*;

    pub fn serialize<S: Serializer>(fds: &[OwnedFd], s: S) -> Result<S::Ok, S::Error> {
        let indices: Result<Vec<u32>, String> = fds.iter().map(|f| save_fd(f.as_fd())).collect();
        indices.map_err(S::Error::custom)?.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<OwnedFd>, D::Error> {
        let indices = Vec::<u32>::deserialize(d)?;
        indices
            .into_iter()
            .map(|i| restore_fd(i).map_err(D::Error::custom))
            .collect()
    }
}

/// `#[serde(with = "handover::shared_fds")]` for an `Arc<Vec<OwnedFd>>`.
/// Each holder writes its own copy of the indices, and each gets its own
/// fds back (the daemon duplicates the descriptor per index): what a
/// receiver is sent is the same open file either way.
pub mod shared_fds {
    use super::*;

    pub fn serialize<S: Serializer>(fds: &Arc<Vec<OwnedFd>>, s: S) -> Result<S::Ok, S::Error> {
        super::fds::serialize(fds, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<Vec<OwnedFd>>, D::Error> {
        super::fds::deserialize(d).map(Arc::new)
    }
}

/// `#[serde(with = "handover::instant")]` for an [`Instant`].
pub mod instant {
    use super::*;

    pub fn serialize<S: Serializer>(at: &Instant, s: S) -> Result<S::Ok, S::Error> {
        let clock = clock().map_err(S::Error::custom)?;
        clock.to_monotonic(*at).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Instant, D::Error> {
        let ns = i128::deserialize(d)?;
        let clock = clock().map_err(D::Error::custom)?;
        clock
            .to_instant(ns)
            .ok_or_else(|| D::Error::custom("an instant out of this clock's range"))
    }
}

/// `#[serde(with = "handover::timed_set")]` for a `BTreeSet<(Instant, T)>`
/// (deadlines in order).
pub mod timed_set {
    use super::*;
    use std::collections::BTreeSet;

    pub fn serialize<S: Serializer, T: Serialize>(
        set: &BTreeSet<(Instant, T)>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let clock = clock().map_err(S::Error::custom)?;
        s.collect_seq(set.iter().map(|(at, t)| (clock.to_monotonic(*at), t)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de> + Ord>(
        d: D,
    ) -> Result<BTreeSet<(Instant, T)>, D::Error> {
        let clock = clock().map_err(D::Error::custom)?;
        Vec::<(i128, T)>::deserialize(d)?
            .into_iter()
            .map(|(ns, t)| {
                let at = clock
                    .to_instant(ns)
                    .ok_or_else(|| D::Error::custom("an instant out of this clock's range"))?;
                Ok((at, t))
            })
            .collect()
    }
}

/// `#[serde(with = "handover::optional_instant")]` for an `Option<Instant>`.
pub mod optional_instant {
    use super::*;

    #[derive(Serialize, Deserialize)]
    struct At(#[serde(with = "super::instant")] Instant);

    pub fn serialize<S: Serializer>(at: &Option<Instant>, s: S) -> Result<S::Ok, S::Error> {
        at.map(At).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Instant>, D::Error> {
        Ok(Option::<At>::deserialize(d)?.map(|At(at)| at))
    }
}

/// `#[serde(with = "handover::within_an_event")]` for an `Option` that is
/// set only while one event is handled (the daemon answers it before the
/// next), so None where a restart happens. It crosses as nothing; a value
/// makes the handover fail rather than be lost.
pub mod within_an_event {
    use super::*;

    pub fn serialize<S: Serializer, T>(value: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            None => s.serialize_unit(),
            Some(_) => Err(S::Error::custom(
                "an event is still being handled (a restart happens between events)",
            )),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T>(d: D) -> Result<Option<T>, D::Error> {
        <()>::deserialize(d)?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Deserialize)]
    struct Timed {
        #[serde(with = "instant")]
        at: Instant,
        #[serde(with = "optional_instant")]
        maybe: Option<Instant>,
        #[serde(with = "fds")]
        fds: Vec<OwnedFd>,
    }

    fn clock_at(instant: Instant, monotonic_ns: u64) -> Clock {
        Clock {
            instant,
            monotonic_ns,
        }
    }

    #[test]
    fn instants_keep_their_distance_from_the_monotonic_clock() {
        #[allow(clippy::disallowed_methods)]
        let t0 = Instant::now();
        let (a, _) = std::os::unix::net::UnixStream::pair().unwrap();
        let value = Timed {
            at: t0 + Duration::from_millis(1500),
            maybe: Some(t0 - Duration::from_millis(20)),
            fds: vec![a.into()],
        };
        let (bytes, fds) = saving(clock_at(t0, 10_000_000_000), || {
            postcard::to_stdvec(&value).unwrap()
        });
        assert_eq!(fds.len(), 1);
        // The other side of the exec: another Instant for the same
        // monotonic reading, half a second later.
        let t1 = t0 + Duration::from_secs(7);
        let (restored, unused) = restoring(
            clock_at(t1, 10_500_000_000),
            vec![std::os::unix::net::UnixStream::pair().unwrap().0.into()],
            || postcard::from_bytes::<Timed>(&bytes).unwrap(),
        );
        assert_eq!(unused, 0);
        assert_eq!(restored.at, t1 + Duration::from_millis(1000));
        assert_eq!(restored.maybe, Some(t1 - Duration::from_millis(520)));
        assert_eq!(restored.fds.len(), 1);
    }

    #[test]
    fn outside_a_handover_fds_and_instants_are_refused() {
        #[allow(clippy::disallowed_methods)]
        let value = Timed {
            at: Instant::now(),
            maybe: None,
            fds: Vec::new(),
        };
        let err = postcard::to_stdvec(&value).unwrap_err();
        assert!(matches!(err, postcard::Error::SerdeSerCustom));
    }

    #[test]
    fn an_fd_index_is_taken_once() {
        #[derive(Serialize, Deserialize)]
        struct Two(#[serde(with = "fd")] OwnedFd, #[serde(with = "fd")] OwnedFd);
        let bytes = postcard::to_stdvec(&(0u32, 0u32)).unwrap();
        #[allow(clippy::disallowed_methods)]
        let now = Instant::now();
        let (result, _) = restoring(
            clock_at(now, 0),
            vec![std::os::unix::net::UnixStream::pair().unwrap().0.into()],
            || postcard::from_bytes::<Two>(&bytes),
        );
        assert!(result.is_err());
    }
}
