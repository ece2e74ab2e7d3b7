//! The message buffers of a handover, as the new image holds them: large
//! ones stay in the memfd and are read through a mapping, small ones are
//! copied out of it.
//!
//! Copying a large backlog out of the memfd was most of the pause of a
//! restart that carries one (page faults and the copy; docs/restart.md,
//! "With a large backlog", has the measurements and their command). Mapped, a buffer costs nothing
//! until its bytes are written to a socket, after the pause. Each large
//! buffer starts on a page of its own (`format` lays them out), so once
//! the last message lying in it is gone its pages are punched out of the
//! memfd: the bus gives that memory back as it would have given back the
//! buffer's allocation, and holds no more than before the restart. The
//! rest of the memfd (the header, the state, the small buffers, all
//! copied out) is punched out as soon as the new image serves; without a
//! large buffer the memfd is not kept at all.
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

fn is_large(len: usize, page: usize) -> bool {
    len >= large_from(page)
}

/// The size from which a buffer is large (mapped, not copied).
pub fn large_from(page: usize) -> usize {
    LARGE_IN_PAGES * page
}

/// The handover's buffer area, mapped, while large buffers lie in it.
pub struct Buffers {
    map: MappedMemfd,
    /// A descriptor of the memfd's own, kept to punch drained buffers out
    /// of it.
    memfd: OwnedFd,
    /// The area's offset in the memfd.
    base: u64,
    page: usize,
    /// The pages of the memfd no large buffer lies in (the header, the
    /// state, the small buffers, all copied out), given back as soon as
    /// the new image serves.
    unused: Vec<(u64, u64)>,
    /// Whether drained buffers are punched out (the new image serves).
    serving: AtomicBool,
}

/// The `len` bytes of `memfd` from `base` (page-aligned) hold buffers at
/// `places` (offset in the area, length): each of them, large ones read in
/// place, small ones copied; and the mapping, if a large one keeps it.
pub fn read(
    memfd: &OwnedFd,
    base: u64,
    len: usize,
    page: usize,
    places: &[(usize, usize)],
) -> io::Result<(Vec<Bytes>, Option<Arc<Buffers>>)> {
    if len == 0 {
        return Ok((places.iter().map(|_| Bytes::new()).collect(), None));
    }
    let map = MappedMemfd::map(memfd.as_fd(), base, len)?;
    if !places.iter().any(|&(_, len)| is_large(len, page)) {
        let copied = places
            .iter()
            .map(|&(at, len)| Bytes::copy_from_slice(map.slice(at, len)))
            .collect();
        return Ok((copied, None));
    }
    let mut unused = Vec::new();
    let mut free_from = 0;
    for &(at, len) in places.iter().filter(|&&(_, len)| is_large(len, page)) {
        unused.push((free_from, base + at as u64));
        free_from = base + (at + len).next_multiple_of(page) as u64;
    }
    unused.push((free_from, base + len as u64));
    let area = Arc::new(Buffers {
        map,
        memfd: memfd.try_clone()?,
        base,
        page,
        unused,
        serving: AtomicBool::new(false),
    });
    let buffers = places
        .iter()
        .map(|&(at, len)| {
            if is_large(len, page) {
                Bytes::from_owner(InPlace {
                    area: area.clone(),
                    at,
                    len,
                })
            } else {
                Bytes::copy_from_slice(area.map.slice(at, len))
            }
        })
        .collect();
    Ok((buffers, Some(area)))
}

impl Buffers {
    /// The new image serves: what it copied out of the memfd is given
    /// back now, and from now on the pages of each large buffer once
    /// nothing refers to it any more.
    pub fn serving(&self) {
        self.serving.store(true, Ordering::Relaxed);
        for &(from, to) in &self.unused {
            self.punch(from, to.saturating_sub(from));
        }
    }

    fn punch(&self, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let _ = rustix::fs::fallocate(
            &self.memfd,
            rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
            offset,
            len,
        );
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
        self.area.map.slice(self.at, self.len)
    }
}

impl Drop for InPlace {
    fn drop(&mut self) {
        if self.area.serving.load(Ordering::Relaxed) {
            // Its pages, to the page where the next large buffer may
            // start (what else lies there was copied out).
            let len = self.len.next_multiple_of(self.area.page);
            self.area.punch(self.area.base + self.at as u64, len as u64);
        }
    }
}
