//! The handover on the wire: a sealed memfd holding
//!
//! ```text
//! "QUICKBUS" | version: u32 LE | fd count: u32 LE | fd numbers: i32 LE each
//!            | payload length: u64 LE | payload (postcard)
//! ```
//!
//! The payload is the state, serialized with serde into postcard: what
//! the restart keeps of the start-up, the launcher and its children, the
//! requesters of the restart, the loop's connections, the bus, and whether
//! the old image was dumpable. Every descriptor in it is an index into the
//! fd numbers (see `quickbus_bus::handover`), every instant a
//! `CLOCK_MONOTONIC` reading.
//!
//! Owns: the layout. May touch: nothing else.

use std::io::{self, Read, Seek, Write};
use std::os::fd::{OwnedFd, RawFd};

use quickbus_bus::handover::Clock;
use quickbus_bus::{Bus, RestartRequester};

use super::{Setup, HANDOVER_VERSION};
use crate::activation::Launcher;
use crate::server::LoopState;

const MAGIC: &[u8; 8] = b"QUICKBUS";

/// What the old image writes, borrowed.
#[derive(serde::Serialize)]
pub struct Handover<'a> {
    /// When the restart began (`CLOCK_MONOTONIC`, ns): the new image
    /// reports the pause.
    pub began: u64,
    pub setup: &'a Setup,
    pub launcher: &'a Launcher,
    pub requesters: &'a [RestartRequester],
    pub state: &'a LoopState,
    pub bus: &'a Bus,
    /// Whether the old image was dumpable (`dumpable`).
    pub dumpable: bool,
}

/// What the new image reads: the same fields, owned.
#[derive(serde::Deserialize)]
pub struct Restored {
    pub began: u64,
    pub setup: Setup,
    pub launcher: Launcher,
    pub requesters: Vec<RestartRequester>,
    pub state: LoopState,
    pub bus: Bus,
    pub dumpable: bool,
}

/// `CLOCK_MONOTONIC` now, with the `Instant` of the same moment.
pub fn clock_now() -> Clock {
    let instant = std::time::Instant::now();
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    Clock {
        instant,
        monotonic_ns: now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64,
    }
}

/// Milliseconds of `CLOCK_MONOTONIC` since `began_ns`.
pub fn since_ms(began_ns: u64) -> f64 {
    clock_now().monotonic_ns.saturating_sub(began_ns) as f64 / 1_000_000.0
}

/// Serialize `handover` into a new sealed memfd; returns it (close-on-exec
/// still set) and the descriptors the state names.
pub fn write_handover(handover: &Handover<'_>) -> io::Result<(OwnedFd, Vec<RawFd>)> {
    let (payload, fds) =
        quickbus_bus::handover::saving(clock_now(), || postcard::to_stdvec(handover));
    let payload = payload.map_err(|e| io::Error::other(format!("cannot serialize: {e}")))?;
    let memfd = rustix::fs::memfd_create(
        "quickbus-handover",
        rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
    )?;
    let mut file = std::fs::File::from(memfd);
    let mut header = Vec::with_capacity(24 + 4 * fds.len());
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&HANDOVER_VERSION.to_le_bytes());
    header.extend_from_slice(&(fds.len() as u32).to_le_bytes());
    for fd in &fds {
        header.extend_from_slice(&fd.to_le_bytes());
    }
    header.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    file.write_all(&header)?;
    file.write_all(&payload)?;
    file.rewind()?;
    // Nobody changes it from here on: the new image reads what was written.
    rustix::fs::fcntl_add_seals(
        &file,
        rustix::fs::SealFlags::SHRINK
            | rustix::fs::SealFlags::GROW
            | rustix::fs::SealFlags::WRITE
            | rustix::fs::SealFlags::SEAL,
    )?;
    Ok((file.into(), fds))
}

/// The handover's header and payload: the fd numbers it names, and the
/// bytes to deserialize (inside `quickbus_bus::handover::restoring`).
pub fn read_handover(memfd: &OwnedFd) -> io::Result<(Vec<RawFd>, Vec<u8>)> {
    let mut file = std::fs::File::from(memfd.try_clone()?);
    file.rewind()?;
    let mut all = Vec::new();
    file.read_to_end(&mut all)?;
    parse(&all)
}

fn parse(all: &[u8]) -> io::Result<(Vec<RawFd>, Vec<u8>)> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
    let mut at = 0usize;
    let mut take = |n: usize| -> io::Result<&[u8]> {
        let slice = all
            .get(at..at + n)
            .ok_or_else(|| bad("the handover is cut short"))?;
        at += n;
        Ok(slice)
    };
    if take(8)? != MAGIC {
        return Err(bad("not a quickbus handover"));
    }
    let version = u32::from_le_bytes(take(4)?.try_into().unwrap_or_default());
    if version != HANDOVER_VERSION {
        return Err(bad(&format!(
            "handover version {version}, this binary reads {HANDOVER_VERSION}"
        )));
    }
    let count = u32::from_le_bytes(take(4)?.try_into().unwrap_or_default()) as usize;
    let mut fds = Vec::with_capacity(count);
    for _ in 0..count {
        fds.push(i32::from_le_bytes(take(4)?.try_into().unwrap_or_default()));
    }
    let len = u64::from_le_bytes(take(8)?.try_into().unwrap_or_default());
    let len = usize::try_from(len).map_err(|_| bad("payload too large"))?;
    let payload = take(len)?.to_vec();
    Ok((fds, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(version: u32, fds: &[i32], payload: &[u8]) -> Vec<u8> {
        let mut v = MAGIC.to_vec();
        v.extend_from_slice(&version.to_le_bytes());
        v.extend_from_slice(&(fds.len() as u32).to_le_bytes());
        for fd in fds {
            v.extend_from_slice(&fd.to_le_bytes());
        }
        v.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn the_header_carries_the_fd_numbers_and_the_payload() {
        let (fds, payload) = parse(&framed(HANDOVER_VERSION, &[7, 12], b"state")).unwrap();
        assert_eq!(fds, vec![7, 12]);
        assert_eq!(payload, b"state");
    }

    #[test]
    fn another_version_a_foreign_file_or_a_cut_are_refused() {
        let other = parse(&framed(HANDOVER_VERSION + 1, &[], b"")).unwrap_err();
        assert!(other.to_string().contains("handover version"), "{other}");
        assert!(parse(b"NOTQUICKxxxxxxxxxxxxxxxx").is_err());
        let whole = framed(HANDOVER_VERSION, &[3], b"payload");
        assert!(parse(&whole[..whole.len() - 1]).is_err());
    }
}
