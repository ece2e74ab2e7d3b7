//! The message buffers of a handover, as the new image holds them: large
//! ones stay in the memfd and are read through a mapping, small ones are
//! copied out of it.
//!
//! Copying a large backlog out of the memfd was most of the pause of a
//! restart that carries one (issue 24: about 1 ms per MiB on a 2-core VM,
//! spent in page faults and the copy). Mapped, a buffer costs nothing
//! until its bytes are written to a socket, after the pause. Each large
//! buffer starts on a page of its own (`format` lays them out), so once
//! the last message lying in it is gone its pages are punched out of the
//! memfd: the bus gives that memory back as it would have given back the
//! buffer's allocation, and holds no more than before the restart.
//!
//! Punching starts only once the new image serves ([`Buffers::serving`]):
//! until then the previous binary may still need the handover whole, to
//! go back to (docs/restart.md, "Failure paths").
//!
//! Owns: the mapping and the memfd behind the buffers. May touch: nothing
//! else.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use crate::sys::MappedMemfd;

/// The smallest buffer that is mapped rather than copied, in pages: its
/// page-aligned start costs at most a page of padding in the memfd.
const LARGE_IN_PAGES: usize = 16;

/// Where a buffer of `len` bytes goes in the buffer area when the one
/// before it ends at `at`: a large one on the next page boundary, a small
/// one right there. Writer and reader both lay the buffers out by this.
pub fn place(at: usize, len: usize, page: usize) -> usize {
    if is_large(len, page) {
        at.next_multiple_of(page)
    } else {
        at
    }
}

pub fn is_large(len: usize, page: usize) -> bool {
    len >= LARGE_IN_PAGES * page
}

/// The handover's buffer area, mapped.
pub struct Buffers {
    map: MappedMemfd,
    /// A descriptor of the memfd's own, kept to punch drained buffers out
    /// of it.
    memfd: OwnedFd,
    /// The area's offset in the memfd.
    base: u64,
    page: usize,
    /// Whether drained buffers are punched out (the new image serves).
    serving: AtomicBool,
}

impl Buffers {
    /// Map the `len` bytes of `memfd` from `base` (page-aligned).
    pub fn map(memfd: &OwnedFd, base: u64, len: usize, page: usize) -> io::Result<Arc<Buffers>> {
        Ok(Arc::new(Buffers {
            map: MappedMemfd::map(memfd.as_fd(), base, len)?,
            memfd: memfd.try_clone()?,
            base,
            page,
            serving: AtomicBool::new(false),
        }))
    }

    /// The buffer of `len` bytes at `at` in the area: a large one in
    /// place, a small one copied.
    pub fn buffer(self: &Arc<Buffers>, at: usize, len: usize) -> Bytes {
        if is_large(len, self.page) {
            Bytes::from_owner(InPlace {
                area: self.clone(),
                at,
                len,
            })
        } else {
            Bytes::copy_from_slice(&self.map.bytes()[at..at + len])
        }
    }

    /// The new image serves: from now on, the pages of a buffer nothing
    /// refers to any more are given back.
    pub fn serving(&self) {
        self.serving.store(true, Ordering::Relaxed);
    }
}

/// One large buffer, read where it lies in the mapping.
struct InPlace {
    area: Arc<Buffers>,
    at: usize,
    len: usize,
}

impl AsRef<[u8]> for InPlace {
    fn as_ref(&self) -> &[u8] {
        &self.area.map.bytes()[self.at..self.at + self.len]
    }
}

impl Drop for InPlace {
    fn drop(&mut self) {
        if !self.area.serving.load(Ordering::Relaxed) {
            return;
        }
        // Its pages, to the page where the next large buffer may start
        // (a small buffer there was copied out at restore).
        let len = self.len.next_multiple_of(self.area.page);
        let _ = rustix::fs::fallocate(
            &self.area.memfd,
            rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
            self.area.base + self.at as u64,
            len as u64,
        );
    }
}
