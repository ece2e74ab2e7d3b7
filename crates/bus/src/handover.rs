//! What the state needs to cross an `exec` (docs/restart.md): file
//! descriptors and instants, which serde cannot write as plain data, and
//! messages, which must stay shared.
//!
//! A restart serializes the bus and the daemon's connections in one go,
//! inside [`saving`], and reads them back inside [`restoring`]. Fields
//! that hold an fd, an [`Instant`] or a message's bytes name one of the
//! `with` modules here:
//!
//! - an fd is written as its index in a table the caller gets back from
//!   [`saving`] (the daemon clears close-on-exec on those descriptors and
//!   writes their numbers next to the state); reading takes the fd with
//!   that index from the table the caller passes to [`restoring`];
//! - an instant is written as nanoseconds of `CLOCK_MONOTONIC`, which
//!   `exec` does not reset: [`Clock`] pairs an `Instant` with that
//!   reading, taken by the daemon (the core reads no clock);
//! - a message's bytes ([`Bytes`]) are written as a slice of a buffer in
//!   a second table the caller gets back ([`Saved::buffers`]), which
//!   holds each buffer once however many queues share it: a broadcast
//!   queued for 100 receivers crosses as one copy and 100 references, not
//!   100 copies. The caller writes those buffers beside the state, and
//!   passes them back to [`restoring`], one allocation each: the slices
//!   read back share them as the originals shared theirs, so the bus
//!   holds no more memory after a restart than before;
//! - the fds of a message, shared by the receivers of a broadcast
//!   ([`shared_fds`]), likewise cross once and are shared again.
//!
//! Outside those two calls, serializing such a field is an error, not a
//! silent loss (or a silent copy).
//!
//! Owns: the thread's handover scope while one of the calls runs. May
//! touch: nothing else.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::fds::PassedFd;

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
        buffers: BufferTable,
        /// Each fd list written so far (by its `Arc`'s address): its
        /// number in the order of first writing.
        fd_lists: HashMap<usize, u32>,
        /// Why the state cannot be written, once a field said so.
        refused: Option<String>,
    },
    Restoring {
        clock: Clock,
        fds: Vec<Option<OwnedFd>>,
        buffers: Vec<Bytes>,
        /// The fd lists read so far, in the order they were written.
        fd_lists: Vec<Arc<Vec<PassedFd>>>,
        /// Only while [`layout::tracing`]: what every fd index reads (a
        /// copy).
        #[cfg(feature = "handover-layout")]
        every_fd: Option<OwnedFd>,
        /// Why the state cannot be read, once a field said so.
        rejected: Option<String>,
    },
}

/// For the daemon's layout test only (the `handover-layout` feature its
/// dev-dependencies turn on): never in a daemon's build.
#[cfg(feature = "handover-layout")]
pub mod layout;

thread_local! {
    static SCOPE: RefCell<Option<Scope>> = const { RefCell::new(None) };
}

/// What a handover refers to outside its serialized state.
pub struct Saved {
    /// The fds, by index (still owned by the state: these are their
    /// numbers).
    pub fds: Vec<RawFd>,
    /// The buffers, by index: each distinct piece of memory a message's
    /// bytes lie in, once.
    pub buffers: Vec<Bytes>,
    /// Why the state could not be written, if a field refused ([`refuse`]).
    pub refused: Option<String>,
}

/// The buffers written while saving, each once, found by address: bytes
/// that lie inside a buffer already written are written as a slice of
/// it. Two live [`Bytes`] whose memory overlaps lie in one allocation, so
/// the slices read back can share one allocation too.
#[derive(Default)]
struct BufferTable {
    /// Each buffer's index, by the address of its first byte.
    by_start: BTreeMap<usize, u32>,
    buffers: Vec<Bytes>,
}

/// How bytes are written: a slice of a buffer of the table.
#[derive(Serialize, Deserialize)]
struct Slice {
    buffer: u32,
    offset: u64,
    len: u64,
}

impl BufferTable {
    fn slice_of(&mut self, bytes: &Bytes) -> Result<Slice, String> {
        if bytes.is_empty() {
            return Ok(Slice {
                buffer: 0,
                offset: 0,
                len: 0,
            });
        }
        let start = bytes.as_ptr() as usize;
        let len = bytes.len();
        // The buffer that starts closest before: it holds these bytes if
        // it reaches their end. (Bytes overlapping it otherwise, or
        // starting before it and reaching into it, get a buffer of their
        // own: a copy too many, never a wrong one.)
        if let Some((&at, &index)) = self.by_start.range(..=start).next_back() {
            if start + len <= at + self.buffers[index as usize].len() {
                return Ok(Slice {
                    buffer: index,
                    offset: (start - at) as u64,
                    len: len as u64,
                });
            }
        }
        let index = u32::try_from(self.buffers.len()).map_err(|_| "too many buffers")?;
        self.buffers.push(bytes.clone());
        self.by_start.insert(start, index);
        Ok(Slice {
            buffer: index,
            offset: 0,
            len: len as u64,
        })
    }
}

/// Runs `save` (which serializes) with fds, instants and shared buffers
/// writable; returns its result and what it referred to, by index. The
/// fds stay owned by the state: the caller only learns their numbers.
pub fn saving<R>(clock: Clock, save: impl FnOnce() -> R) -> (R, Saved) {
    SCOPE.with(|s| {
        *s.borrow_mut() = Some(Scope::Saving {
            clock,
            fds: Vec::new(),
            buffers: BufferTable::default(),
            fd_lists: HashMap::new(),
            refused: None,
        })
    });
    let result = save();
    let scope = SCOPE.with(|s| s.borrow_mut().take());
    let saved = match scope {
        Some(Scope::Saving {
            fds,
            buffers,
            refused,
            ..
        }) => Saved {
            fds,
            buffers: buffers.buffers,
            refused,
        },
        _ => Saved {
            fds: Vec::new(),
            buffers: Vec::new(),
            refused: None,
        },
    };
    (result, saved)
}

/// Runs `restore` (which deserializes) with `fds` and `buffers` as the
/// tables indices refer to (the buffers as [`Saved::buffers`] had them,
/// each in an allocation of its own). Returns its result and how many fds
/// of the table nothing took (they are closed).
pub fn restoring<R>(
    clock: Clock,
    fds: Vec<OwnedFd>,
    buffers: Vec<Bytes>,
    restore: impl FnOnce() -> R,
) -> (R, usize) {
    let fds = fds.into_iter().map(Some).collect();
    SCOPE.with(|s| {
        *s.borrow_mut() = Some(Scope::Restoring {
            clock,
            fds,
            buffers,
            fd_lists: Vec::new(),
            #[cfg(feature = "handover-layout")]
            every_fd: None,
            rejected: None,
        })
    });
    let result = restore();
    let scope = SCOPE.with(|s| s.borrow_mut().take());
    let unused = match scope {
        Some(Scope::Restoring { fds, .. }) => {
            // Closed as a message's fds are (crate::fds): one may be a
            // client's, whose close can block.
            let unused: Vec<PassedFd> = fds.into_iter().flatten().map(PassedFd::from).collect();
            unused.len()
        }
        _ => 0,
    };
    (result, unused)
}

/// The error a field's `Serialize` returns when the state cannot be
/// written, saying why. postcard keeps no text of a custom error (all it
/// says is "Serde Serialization Error"), so inside [`saving`] the first
/// reason is kept aside too, and handed back in [`Saved::refused`] for the
/// restart's refusal to name.
pub fn refuse<E: serde::ser::Error>(why: impl std::fmt::Display) -> E {
    E::custom(keep_first_reason(why))
}

/// `why`, also kept as the scope's reason unless it has one already
/// (the first reason is the one that failed the state; postcard then
/// unwinds through the fields around it).
fn keep_first_reason(why: impl std::fmt::Display) -> String {
    let why = why.to_string();
    SCOPE.with(|s| {
        let mut scope = s.borrow_mut();
        let kept = match &mut *scope {
            Some(Scope::Saving { refused, .. }) => refused,
            Some(Scope::Restoring { rejected, .. }) => rejected,
            None => return,
        };
        kept.get_or_insert_with(|| why.clone());
    });
    why
}

/// The error a field's `Deserialize` returns when what it read cannot be
/// the state, saying why: as with [`refuse`], postcard keeps no text of
/// it ("Serde Deserialization Error"), so inside [`restoring`] the first
/// reason is kept aside too, for [`explained`] to give.
pub fn reject<E: serde::de::Error>(why: impl std::fmt::Display) -> E {
    E::custom(keep_first_reason(why))
}

/// The number a counter wrote after `prefix` in `text`, as
/// `format!("{prefix}{n}")` writes it (digits only, no sign, no leading
/// zero): a handed-over name or path must be one the bus gave, and two
/// spellings of one number would be two names for it.
pub(crate) fn number_written_after(text: &str, prefix: &str) -> Option<u64> {
    let digits = text.strip_prefix(prefix)?;
    let as_written = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    as_written.then(|| digits.parse().ok()).flatten()
}

/// What `error`, from reading the state inside [`restoring`], says,
/// with the reason a field gave for it ([`reject`]) where one did.
pub fn explained(error: impl std::fmt::Display) -> String {
    let rejected = SCOPE.with(|s| match &*s.borrow() {
        Some(Scope::Restoring { rejected, .. }) => rejected.clone(),
        _ => None,
    });
    match rejected {
        Some(why) => format!("{error}: {why}"),
        None => error.to_string(),
    }
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
        #[cfg(feature = "handover-layout")]
        Some(Scope::Restoring {
            every_fd: Some(fd), ..
        }) => fd.try_clone().map_err(|e| e.to_string()),
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

fn save_bytes(bytes: &Bytes) -> Result<Slice, String> {
    SCOPE.with(|s| match &mut *s.borrow_mut() {
        Some(Scope::Saving { buffers, .. }) => buffers.slice_of(bytes),
        _ => Err("a message is written only while saving the bus for a restart".into()),
    })
}

fn restore_bytes(slice: Slice) -> Result<Bytes, String> {
    if slice.len == 0 {
        return Ok(Bytes::new());
    }
    SCOPE.with(|s| match &*s.borrow() {
        Some(Scope::Restoring { buffers, .. }) => {
            let buffer = buffers
                .get(slice.buffer as usize)
                .ok_or_else(|| format!("buffer {} of the handover is missing", slice.buffer))?;
            let range = usize::try_from(slice.offset)
                .ok()
                .zip(usize::try_from(slice.len).ok())
                .and_then(|(offset, len)| Some(offset..offset.checked_add(len)?))
                .filter(|range| range.end <= buffer.len())
                .ok_or_else(|| format!("a slice beyond buffer {} of the handover", slice.buffer))?;
            Ok(buffer.slice(range))
        }
        _ => Err("a message is read only while restoring the bus after a restart".into()),
    })
}

/// An fd list as it crosses: in full where it is first written, by its
/// number after that.
#[derive(Serialize, Deserialize)]
enum FdList {
    First(Vec<u32>),
    Again(u32),
}

fn save_fd_list(list: &Arc<Vec<PassedFd>>) -> Result<FdList, String> {
    let key = Arc::as_ptr(list) as usize;
    let seen = SCOPE.with(|s| match &*s.borrow() {
        Some(Scope::Saving { fd_lists, .. }) => Ok(fd_lists.get(&key).copied()),
        _ => Err("an fd is written only while saving the bus for a restart".to_owned()),
    })?;
    if let Some(number) = seen {
        return Ok(FdList::Again(number));
    }
    let indices = list
        .iter()
        .map(|fd| save_fd(fd.as_fd()))
        .collect::<Result<Vec<u32>, String>>()?;
    SCOPE.with(|s| {
        if let Some(Scope::Saving { fd_lists, .. }) = &mut *s.borrow_mut() {
            let number = fd_lists.len() as u32;
            fd_lists.insert(key, number);
        }
    });
    Ok(FdList::First(indices))
}

fn restore_fd_list(list: FdList) -> Result<Arc<Vec<PassedFd>>, String> {
    let read = match list {
        FdList::Again(number) => {
            return SCOPE.with(|s| match &*s.borrow() {
                Some(Scope::Restoring { fd_lists, .. }) => {
                    fd_lists.get(number as usize).cloned().ok_or_else(|| {
                        format!("fd list {number} of the handover is named before it is read")
                    })
                }
                _ => Err("an fd is read only while restoring the bus after a restart".into()),
            });
        }
        FdList::First(indices) => indices
            .into_iter()
            .map(|index| restore_fd(index).map(PassedFd::from))
            .collect::<Result<Vec<PassedFd>, String>>()?,
    };
    let read = Arc::new(read);
    SCOPE.with(|s| {
        if let Some(Scope::Restoring { fd_lists, .. }) = &mut *s.borrow_mut() {
            fd_lists.push(read.clone());
        }
    });
    Ok(read)
}

/// `#[serde(with = "handover::fd")]` for an [`OwnedFd`].
pub mod fd {
    use super::*;

    pub fn serialize<S: Serializer>(fd: &OwnedFd, s: S) -> Result<S::Ok, S::Error> {
        save_fd(fd.as_fd())
            .map_err(refuse::<S::Error>)?
            .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<OwnedFd, D::Error> {
        restore_fd(u32::deserialize(d)?).map_err(reject::<D::Error>)
    }
}

/// `#[serde(with = "handover::fds")]` for a `Vec<OwnedFd>`.
pub mod fds {
    use super::*;

    pub fn serialize<S: Serializer>(fds: &[OwnedFd], s: S) -> Result<S::Ok, S::Error> {
        let indices: Result<Vec<u32>, String> = fds.iter().map(|f| save_fd(f.as_fd())).collect();
        indices.map_err(refuse::<S::Error>)?.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<OwnedFd>, D::Error> {
        let indices = Vec::<u32>::deserialize(d)?;
        indices
            .into_iter()
            .map(|i| restore_fd(i).map_err(reject::<D::Error>))
            .collect()
    }
}

/// `#[serde(with = "handover::shared_fds")]` for an `Arc<Vec<PassedFd>>`,
/// the fds of a message: the list crosses once however many holders
/// share it (the receivers of a broadcast), and they share it again
/// afterwards, so a restart does not multiply the bus's descriptors.
pub mod shared_fds {
    use super::*;

    pub fn serialize<S: Serializer>(fds: &Arc<Vec<PassedFd>>, s: S) -> Result<S::Ok, S::Error> {
        save_fd_list(fds).map_err(refuse::<S::Error>)?.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<Vec<PassedFd>>, D::Error> {
        restore_fd_list(FdList::deserialize(d)?).map_err(reject::<D::Error>)
    }
}

/// `#[serde(with = "handover::optional_shared_fds")]` for an
/// `Option<Arc<Vec<PassedFd>>>` (as [`shared_fds`]).
pub mod optional_shared_fds {
    use super::*;

    #[derive(Serialize, Deserialize)]
    #[serde(rename = "SharedFds")]
    struct Shared(#[serde(with = "super::shared_fds")] Arc<Vec<PassedFd>>);

    pub fn serialize<S: Serializer>(
        fds: &Option<Arc<Vec<PassedFd>>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        fds.clone().map(Shared).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Arc<Vec<PassedFd>>>, D::Error> {
        Ok(Option::<Shared>::deserialize(d)?.map(|Shared(fds)| fds))
    }
}

/// `#[serde(with = "handover::shared_bytes")]` for [`Bytes`] that queues
/// may share (a message's header or body): written as a slice of the
/// handover's buffer table, read back sharing that buffer.
pub mod shared_bytes {
    use super::*;

    pub fn serialize<S: Serializer>(bytes: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        save_bytes(bytes).map_err(refuse::<S::Error>)?.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        restore_bytes(Slice::deserialize(d)?).map_err(reject::<D::Error>)
    }
}

/// `#[serde(with = "handover::shared_frame")]` for a message ready to go
/// out ([`quickbus_wire::Frame`]): its header and body as
/// [`shared_bytes`].
pub mod shared_frame {
    use super::*;
    use quickbus_wire::Frame;

    #[derive(Serialize, Deserialize)]
    #[serde(rename = "SharedFrame")]
    struct Shared(
        #[serde(with = "super::shared_bytes")] Bytes,
        #[serde(with = "super::shared_bytes")] Bytes,
    );

    pub fn serialize<S: Serializer>(frame: &Frame, s: S) -> Result<S::Ok, S::Error> {
        Shared(frame.header.clone(), frame.body.clone()).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Frame, D::Error> {
        let Shared(header, body) = Shared::deserialize(d)?;
        Ok(Frame { header, body })
    }
}

/// `#[serde(with = "handover::shared_message")]` for a received
/// [`quickbus_wire::Message`]: its bytes as [`shared_bytes`] (the body of
/// the message stamped from it is a slice of the same buffer), validated
/// again when read back.
pub mod shared_message {
    use super::*;
    use quickbus_wire::Message;

    pub fn serialize<S: Serializer>(msg: &Message, s: S) -> Result<S::Ok, S::Error> {
        super::shared_bytes::serialize(msg.raw(), s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Message, D::Error> {
        let raw = super::shared_bytes::deserialize(d)?;
        Message::parse(raw).map_err(reject::<D::Error>)
    }
}

/// `#[serde(with = "handover::instant")]` for an [`Instant`].
pub mod instant {
    use super::*;

    pub fn serialize<S: Serializer>(at: &Instant, s: S) -> Result<S::Ok, S::Error> {
        let clock = clock().map_err(refuse::<S::Error>)?;
        clock.to_monotonic(*at).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Instant, D::Error> {
        let ns = i128::deserialize(d)?;
        let clock = clock().map_err(reject::<D::Error>)?;
        clock
            .to_instant(ns)
            .ok_or_else(|| reject::<D::Error>("an instant out of this clock's range"))
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
        let clock = clock().map_err(refuse::<S::Error>)?;
        s.collect_seq(set.iter().map(|(at, t)| (clock.to_monotonic(*at), t)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de> + Ord>(
        d: D,
    ) -> Result<BTreeSet<(Instant, T)>, D::Error> {
        let clock = clock().map_err(reject::<D::Error>)?;
        Vec::<(i128, T)>::deserialize(d)?
            .into_iter()
            .map(|(ns, t)| {
                let at = clock
                    .to_instant(ns)
                    .ok_or_else(|| reject::<D::Error>("an instant out of this clock's range"))?;
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
            Some(_) => Err(refuse(
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
pub(crate) mod tests {
    #[test]
    fn a_number_is_read_only_as_a_counter_writes_it() {
        use super::number_written_after as read;
        assert_eq!(read(":1.0", ":1."), Some(0));
        assert_eq!(read(":1.42", ":1."), Some(42));
        for bad in [
            ":1.",
            ":1.+5",
            ":1.05",
            ":1.-5",
            ":1.5x",
            ":2.5",
            ":1.99999999999999999999",
        ] {
            assert_eq!(read(bad, ":1."), None, "{bad}");
        }
    }

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
        let (bytes, saved) = saving(clock_at(t0, 10_000_000_000), || {
            postcard::to_stdvec(&value).unwrap()
        });
        assert_eq!(saved.fds.len(), 1);
        // The other side of the exec: another Instant for the same
        // monotonic reading, half a second later.
        let t1 = t0 + Duration::from_secs(7);
        let (restored, unused) = restoring(
            clock_at(t1, 10_500_000_000),
            vec![std::os::unix::net::UnixStream::pair().unwrap().0.into()],
            Vec::new(),
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

    /// postcard says only "Serde Serialization Error": the reason a field
    /// refused comes back beside it, for the restart's refusal.
    #[test]
    fn a_field_that_refuses_to_be_written_says_why() {
        #[derive(Serialize)]
        struct Handling(#[serde(with = "within_an_event")] Option<u8>);
        #[allow(clippy::disallowed_methods)]
        let now = Instant::now();
        let (result, saved) = saving(clock_at(now, 0), || postcard::to_stdvec(&Handling(Some(1))));
        assert!(matches!(result, Err(postcard::Error::SerdeSerCustom)));
        assert_eq!(
            saved.refused.as_deref(),
            Some("an event is still being handled (a restart happens between events)")
        );
        let (result, saved) = saving(clock_at(now, 0), || postcard::to_stdvec(&Handling(None)));
        assert!(result.is_ok());
        assert_eq!(saved.refused, None);
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
            Vec::new(),
            || postcard::from_bytes::<Two>(&bytes),
        );
        assert!(result.is_err());
    }

    /// What a broadcast is to its receivers' queues: the same header, body
    /// and fds, shared.
    #[derive(Serialize, Deserialize)]
    struct Queued {
        #[serde(with = "shared_bytes")]
        header: Bytes,
        #[serde(with = "shared_bytes")]
        body: Bytes,
        #[serde(with = "shared_fds")]
        fds: Arc<Vec<PassedFd>>,
    }

    /// What the new process gets of `saved`, within this one: the same
    /// files open again (through /proc/self/fd; the originals stay open)
    /// and a copy of each buffer in an allocation of its own.
    #[allow(clippy::disallowed_methods)] // a test's own descriptors
    pub(crate) fn as_handed_over(saved: &Saved) -> (Vec<OwnedFd>, Vec<Bytes>) {
        let fds = saved
            .fds
            .iter()
            .map(|raw| OwnedFd::from(std::fs::File::open(format!("/proc/self/fd/{raw}")).unwrap()))
            .collect();
        let buffers = saved
            .buffers
            .iter()
            .map(|b| Bytes::copy_from_slice(b))
            .collect();
        (fds, buffers)
    }

    /// `state` read back as a `T` inside a handover without fds or
    /// buffers: the value, or why it was refused ([`explained`]).
    #[allow(clippy::disallowed_methods)] // a test's clock
    pub(crate) fn read_back<T: serde::de::DeserializeOwned>(state: &[u8]) -> Result<T, String> {
        let clock = clock_at(Instant::now(), 0);
        let (read, _) = restoring(clock, Vec::new(), Vec::new(), || {
            postcard::from_bytes::<T>(state).map_err(explained)
        });
        read
    }

    /// `value` through a handover ([`as_handed_over`]). Returns the
    /// state's size, the buffers' sizes, how many fds crossed, and what
    /// was restored.
    #[allow(clippy::disallowed_methods)] // a test's clock
    fn crossed<T: Serialize + serde::de::DeserializeOwned>(
        value: &T,
    ) -> (usize, Vec<usize>, usize, T) {
        let clock = clock_at(Instant::now(), 0);
        let (bytes, saved) = saving(clock, || postcard::to_stdvec(value).unwrap());
        let (fds, buffers) = as_handed_over(&saved);
        let (restored, unused) = restoring(clock, fds, buffers, || {
            postcard::from_bytes::<T>(&bytes).unwrap()
        });
        assert_eq!(unused, 0);
        let sizes = saved.buffers.iter().map(Bytes::len).collect();
        (bytes.len(), sizes, saved.fds.len(), restored)
    }

    #[test]
    fn a_broadcast_queued_for_many_crosses_once_and_stays_shared() {
        const RECEIVERS: usize = 100;
        const BODY: usize = 64 * 1024;
        let file = tempfile_fd();
        let one = Queued {
            header: Bytes::from(vec![1u8; 128]),
            body: Bytes::from(vec![2u8; BODY]),
            fds: Arc::new(vec![PassedFd::from(file)]),
        };
        let queues: Vec<Queued> = (0..RECEIVERS)
            .map(|_| Queued {
                header: one.header.clone(),
                body: one.body.clone(),
                fds: one.fds.clone(),
            })
            .collect();
        let (state, buffers, fds, restored) = crossed(&queues);
        // The bytes once, and a few bytes of references per queue.
        assert_eq!(buffers, vec![128, BODY]);
        assert!(state < 16 * RECEIVERS, "{state} bytes of state");
        // One descriptor, not one per receiver.
        assert_eq!(fds, 1);
        let first = &restored[0];
        assert_eq!(&first.body[..], &one.body[..]);
        assert_eq!(&first.header[..], &one.header[..]);
        for queued in &restored {
            assert_eq!(queued.body.as_ptr(), first.body.as_ptr());
            assert_eq!(queued.header.as_ptr(), first.header.as_ptr());
            assert!(Arc::ptr_eq(&queued.fds, &first.fds));
        }
        // A copy, not the original memory.
        assert_ne!(first.body.as_ptr(), one.body.as_ptr());
    }

    #[test]
    fn slices_of_one_buffer_cross_as_slices_of_one_copy() {
        // A message as received, and the body of the copy stamped from
        // it: the body lies inside the message's bytes.
        let raw = Bytes::from((0..=255u8).cycle().take(4096).collect::<Vec<u8>>());
        let parts = vec![
            raw.clone(),
            raw.slice(1000..3000),
            raw.slice(..0),
            raw.slice(4000..),
        ];
        #[derive(Serialize, Deserialize)]
        struct Parts(#[serde(with = "shared_bytes_list")] Vec<Bytes>);
        mod shared_bytes_list {
            use super::*;
            #[derive(Serialize, Deserialize)]
            struct One(#[serde(with = "super::super::shared_bytes")] Bytes);
            pub fn serialize<S: Serializer>(v: &[Bytes], s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq(v.iter().map(|b| One(b.clone())))
            }
            pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Bytes>, D::Error> {
                Ok(Vec::<One>::deserialize(d)?
                    .into_iter()
                    .map(|One(b)| b)
                    .collect())
            }
        }
        let (_, buffers, _, Parts(restored)) = crossed(&Parts(parts.clone()));
        assert_eq!(buffers, vec![4096]);
        for (before, after) in parts.iter().zip(&restored) {
            assert_eq!(before, after);
        }
        let base = restored[0].as_ptr() as usize;
        assert_eq!(restored[1].as_ptr() as usize, base + 1000);
        assert_eq!(restored[3].as_ptr() as usize, base + 4000);
    }

    #[test]
    fn a_slice_beyond_its_buffer_is_refused() {
        let bytes = postcard::to_stdvec(&Slice {
            buffer: 0,
            offset: 10,
            len: 10,
        })
        .unwrap();
        #[derive(Deserialize)]
        struct One(
            #[serde(with = "shared_bytes")]
            #[allow(dead_code)]
            Bytes,
        );
        #[allow(clippy::disallowed_methods)]
        let clock = clock_at(Instant::now(), 0);
        let (result, _) = restoring(clock, Vec::new(), vec![Bytes::from(vec![0u8; 15])], || {
            postcard::from_bytes::<One>(&bytes)
        });
        assert!(result.is_err());
    }

    /// A file of its own, unlinked at once.
    #[allow(clippy::disallowed_methods)] // a test's own file
    fn tempfile_fd() -> OwnedFd {
        let path =
            std::env::temp_dir().join(format!("quickbus-handover-shared-{}", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        OwnedFd::from(file)
    }
}
