//! The handover on the wire: a sealed memfd holding
//!
//! ```text
//! "QUICKBUS" | version: u32 LE | fd count: u32 LE | fd numbers: i32 LE each
//!            | buffer count: u32 LE | buffer lengths: u64 LE each
//!            | payload length: u64 LE | payload (postcard)
//!            | zeros to a page boundary | buffers
//! ```
//!
//! The payload is the state, serialized with serde into postcard: what
//! the restart keeps of the start-up, the launcher and its children, the
//! requesters of the restart, the loop's connections, the bus, and whether
//! the old image was dumpable. Every descriptor in it is an index into the
//! fd numbers, every message's bytes a slice of one of the buffers, every
//! instant a `CLOCK_MONOTONIC` reading (see `quickbus_bus::handover`). The
//! buffers follow in order, each once however many queues share it, and
//! without passing through postcard: a small one right after the one
//! before, a large one on the next page boundary (`mapped::place`), where
//! the new image maps it instead of copying it.
//!
//! Owns: the layout. May touch: nothing else.

use std::io::{self, BufReader, BufWriter, Read, Seek, Write};
use std::os::fd::{OwnedFd, RawFd};
use std::sync::Arc;

use bytes::Bytes;
use quickbus_bus::handover::Clock;
use quickbus_bus::{Bus, RestartRequester};

use super::{mapped, Setup, HANDOVER_VERSION};
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
    write_state_then(handover, |payload| {
        if super::check::corrupts_for_tests() {
            // The last field, `dumpable`: a bool no reader takes, read
            // after everything else.
            if let Some(last) = payload.last_mut() {
                *last = 2;
            }
        }
    })
}

/// What [`write_handover`] does, for any state.
#[cfg(test)]
fn write_state<T: serde::Serialize>(state: &T) -> io::Result<(OwnedFd, Vec<RawFd>)> {
    write_state_then(state, |_| ())
}

/// [`write_state`], with `then` given the payload before it is written.
fn write_state_then<T: serde::Serialize>(
    state: &T,
    then: impl FnOnce(&mut Vec<u8>),
) -> io::Result<(OwnedFd, Vec<RawFd>)> {
    let (payload, saved) =
        quickbus_bus::handover::saving(clock_now(), || postcard::to_stdvec(state));
    // postcard's error says only that a field refused; the field's reason
    // is in `saved`.
    let mut payload = payload.map_err(|e| {
        io::Error::other(format!(
            "cannot serialize: {}",
            saved.refused.unwrap_or_else(|| e.to_string())
        ))
    })?;
    then(&mut payload);
    let memfd = rustix::fs::memfd_create(
        "quickbus-handover",
        rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
    )?;
    // Large buffers go straight to the memfd (a BufWriter writes
    // through what is at least its capacity); small ones are gathered
    // first, so that many small messages are not a write each.
    let page = rustix::param::page_size();
    let mut out = BufWriter::with_capacity(mapped::large_from(page), std::fs::File::from(memfd));
    let header = header(&saved.fds, &saved.buffers, payload.len());
    out.write_all(&header)?;
    out.write_all(&payload)?;
    // The buffer area starts on a page, and each large buffer in it too,
    // so that the new image can map them (`mapped`).
    let head = header.len() + payload.len();
    pad(&mut out, head.next_multiple_of(page) - head)?;
    let mut at = 0;
    for buffer in &saved.buffers {
        let start = mapped::place(at, buffer.len(), page);
        pad(&mut out, start - at)?;
        out.write_all(buffer)?;
        at = start + buffer.len();
    }
    let mut file = out.into_inner().map_err(|e| e.into_error())?;
    file.rewind()?;
    // Its size and contents are fixed from here on. (Not sealed against
    // writing: the new image punches drained buffers out of it.)
    rustix::fs::fcntl_add_seals(
        &file,
        rustix::fs::SealFlags::SHRINK | rustix::fs::SealFlags::GROW | rustix::fs::SealFlags::SEAL,
    )?;
    Ok((file.into(), saved.fds))
}

/// `n` zero bytes.
fn pad(out: &mut impl Write, n: usize) -> io::Result<()> {
    io::copy(&mut io::repeat(0).take(n as u64), out).map(|_| ())
}

/// Everything before the payload.
fn header(fds: &[RawFd], buffers: &[Bytes], payload_len: usize) -> Vec<u8> {
    let mut header = Vec::with_capacity(32 + 4 * fds.len() + 8 * buffers.len());
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&HANDOVER_VERSION.to_le_bytes());
    header.extend_from_slice(&(fds.len() as u32).to_le_bytes());
    for fd in fds {
        header.extend_from_slice(&fd.to_le_bytes());
    }
    header.extend_from_slice(&(buffers.len() as u32).to_le_bytes());
    for buffer in buffers {
        header.extend_from_slice(&(buffer.len() as u64).to_le_bytes());
    }
    header.extend_from_slice(&(payload_len as u64).to_le_bytes());
    header
}

/// A handover as read: the fd numbers it names, the bytes to deserialize
/// and the buffers their messages lie in (both inside
/// `quickbus_bus::handover::restoring`).
pub struct HandedOver {
    pub fds: Vec<RawFd>,
    pub payload: Vec<u8>,
    pub buffers: Vec<Bytes>,
    /// Where the large buffers lie, if any.
    mapped: Option<Arc<mapped::Buffers>>,
}

impl HandedOver {
    /// The new image serves: the memory of buffers that drain is given
    /// back from now on (until then the handover stays whole, for the
    /// way back).
    pub fn serving(&self) {
        if let Some(mapped) = &self.mapped {
            mapped.serving();
        }
    }
}

/// Read the handover in `memfd`: the header and the state are read, the
/// buffers mapped (`mapped`: large ones stay where they are, small ones
/// are copied out).
pub fn read_handover(memfd: &OwnedFd) -> io::Result<HandedOver> {
    let mut file = std::fs::File::from(memfd.try_clone()?);
    file.rewind()?;
    let size = file.metadata()?.len();
    let mut input = Fields {
        input: BufReader::with_capacity(1 << 16, file),
        left: size,
    };
    let (fds, lengths, payload) = read_head(&mut input)?;
    let page = rustix::param::page_size();
    let area = (size - input.left).next_multiple_of(page as u64);
    // Each buffer's place in the area, checked against the memfd's size.
    let mut places = Vec::with_capacity(lengths.len());
    let room = size.saturating_sub(area);
    let mut at = 0usize;
    for len in lengths {
        // `at` stays within the memfd, so nothing below overflows.
        if len > room - at as u64 {
            return Err(bad("the handover is cut short"));
        }
        let start = mapped::place(at, len as usize, page);
        at = start + len as usize;
        if at as u64 > room {
            return Err(bad("the handover is cut short"));
        }
        places.push((start, len as usize));
    }
    let (buffers, mapped) = mapped::read(memfd, area, at, page, &places)?;
    Ok(HandedOver {
        fds,
        payload,
        buffers,
        mapped,
    })
}

/// What precedes the buffers: the fd numbers, the buffers' lengths, and
/// the state.
fn read_head(input: &mut Fields<impl Read>) -> io::Result<(Vec<RawFd>, Vec<u64>, Vec<u8>)> {
    if input.bytes(8)? != MAGIC {
        return Err(bad("not a quickbus handover"));
    }
    let version = input.u32()?;
    if version != HANDOVER_VERSION {
        return Err(bad(&format!(
            "handover version {version}, this binary reads {HANDOVER_VERSION}"
        )));
    }
    let count = input.u32()?;
    let fds = (0..count)
        .map(|_| input.u32().map(|n| n as RawFd))
        .collect::<io::Result<_>>()?;
    let count = input.u32()?;
    let lengths = (0..count)
        .map(|_| input.u64())
        .collect::<io::Result<Vec<u64>>>()?;
    let payload_len = input.u64()?;
    let payload = input.bytes(payload_len)?;
    Ok((fds, lengths, payload))
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

/// The handover's fields in order, from a reader of a known size: no
/// length may claim more than is left (a broken handover must not make
/// the new image allocate what is not there).
struct Fields<R> {
    input: R,
    left: u64,
}

impl<R: Read> Fields<R> {
    fn bytes(&mut self, n: u64) -> io::Result<Vec<u8>> {
        if n > self.left {
            return Err(bad("the handover is cut short"));
        }
        self.left -= n;
        let mut bytes = vec![0u8; usize::try_from(n).map_err(|_| bad("a field too large"))?];
        self.input
            .read_exact(&mut bytes)
            .map_err(|_| bad("the handover is cut short"))?;
        Ok(bytes)
    }

    fn u32(&mut self) -> io::Result<u32> {
        let bytes = self.bytes(4)?;
        Ok(u32::from_le_bytes(bytes.try_into().unwrap_or_default()))
    }

    fn u64(&mut self) -> io::Result<u64> {
        let bytes = self.bytes(8)?;
        Ok(u64::from_le_bytes(bytes.try_into().unwrap_or_default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::sync::Arc;

    use crate::transport::{OutItem, Outbox};

    /// A handover laid out as the old image lays it out (small buffers).
    fn framed(version: u32, fds: &[i32], buffers: &[&[u8]], payload: &[u8]) -> Vec<u8> {
        let buffers: Vec<Bytes> = buffers.iter().map(|b| Bytes::copy_from_slice(b)).collect();
        let mut v = header(fds, &buffers, payload.len());
        v[8..12].copy_from_slice(&version.to_le_bytes());
        v.extend_from_slice(payload);
        v.resize(v.len().next_multiple_of(rustix::param::page_size()), 0);
        for buffer in &buffers {
            v.extend_from_slice(buffer);
        }
        v
    }

    /// `all` in a memfd sealed as the old image seals it, read back.
    fn parse(all: &[u8]) -> io::Result<HandedOver> {
        let memfd = rustix::fs::memfd_create(
            "quickbus-handover-test",
            rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
        )
        .unwrap();
        let mut file = std::fs::File::from(memfd);
        file.write_all(all).unwrap();
        rustix::fs::fcntl_add_seals(&file, rustix::fs::SealFlags::SHRINK).unwrap();
        read_handover(&file.into())
    }

    #[test]
    fn the_header_carries_the_fd_numbers_the_payload_and_the_buffers() {
        let all = framed(
            HANDOVER_VERSION,
            &[7, 12],
            &[b"one", b"", b"three"],
            b"state",
        );
        let read = parse(&all).unwrap();
        assert_eq!(read.fds, vec![7, 12]);
        assert_eq!(read.payload, b"state");
        assert_eq!(read.buffers, vec![&b"one"[..], b"", b"three"]);
        // Small buffers are copied out: the memfd is not kept for them.
        assert!(read.mapped.is_none());
    }

    #[test]
    fn another_version_a_foreign_file_or_a_cut_are_refused() {
        let Err(other) = parse(&framed(HANDOVER_VERSION + 1, &[], &[], b"")) else {
            panic!("another version was read");
        };
        assert!(other.to_string().contains("handover version"), "{other}");
        assert!(parse(b"NOTQUICKxxxxxxxxxxxxxxxx").is_err());
        let whole = framed(HANDOVER_VERSION, &[3], &[b"buffer"], b"payload");
        assert!(parse(&whole[..whole.len() - 1]).is_err());
        // A length claiming more than the handover holds allocates nothing.
        let mut huge = framed(HANDOVER_VERSION, &[], &[b"x"], b"");
        let at = 8 + 4 + 4 + 4;
        huge[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(parse(&huge).is_err());
    }

    /// Issue 24: a broadcast queued for many receivers crossed once per
    /// receiver, so a restart with a large backlog wrote, read and held
    /// it many times over.
    #[test]
    fn a_broadcast_queued_for_many_receivers_crosses_once_and_stays_shared() {
        const RECEIVERS: usize = 100;
        const BODY: usize = 64 * 1024;
        let message = OutItem {
            header: Bytes::from(vec![b'h'; 64]),
            body: Bytes::from(vec![b'b'; BODY]),
            fds: Some(Arc::new(vec![std::os::fd::OwnedFd::from(
                std::fs::File::open("/dev/null").unwrap(),
            )
            .into()])),
        };
        // The receivers' queues, as the bus holds them.
        let queues: Vec<Outbox> = (0..RECEIVERS)
            .map(|_| {
                let mut queue = Outbox::default();
                queue.push(message.clone());
                queue
            })
            .collect();
        let (memfd, numbers) = write_state(&queues).unwrap();
        let size = rustix::fs::fstat(&memfd).unwrap().st_size as usize;
        assert!(
            size < 2 * BODY + 64 * RECEIVERS,
            "{size} bytes for one {BODY}-byte message queued {RECEIVERS} times"
        );
        // The new image's side: the same descriptors, the memfd read.
        let read = read_handover(&memfd).unwrap();
        assert_eq!(read.fds, numbers);
        let shared_fd = message.fds.as_ref().unwrap()[0].as_fd();
        let fds = numbers
            .iter()
            .map(|&n| {
                assert_eq!(std::os::fd::AsRawFd::as_raw_fd(&shared_fd), n);
                shared_fd.try_clone_to_owned().unwrap()
            })
            .collect();
        let (restored, unused) = crate::restart::check::read_state::<Vec<Outbox>>(
            clock_now(),
            fds,
            read.buffers,
            &read.payload,
        );
        let restored = restored.unwrap();
        assert_eq!(unused, 0);
        // The message's fd crossed once, and is shared again.
        assert_eq!(numbers.len(), 1);
        let items: Vec<&OutItem> = restored.iter().map(|q| q.items().next().unwrap()).collect();
        let first = items[0];
        assert_eq!(first.body, message.body);
        assert_eq!(first.header, message.header);
        for item in &items {
            assert_eq!(item.body.as_ptr(), first.body.as_ptr());
            assert_eq!(item.header.as_ptr(), first.header.as_ptr());
            assert!(Arc::ptr_eq(
                item.fds.as_ref().unwrap(),
                first.fds.as_ref().unwrap()
            ));
        }
    }

    /// A connection still holding a message its worker parsed ahead
    /// (`Transport::unparse` not called, a bug): the restart is refused,
    /// and the refusal the log and a Restart caller get says so, not
    /// just postcard's "Serde Serialization Error".
    #[test]
    fn a_message_left_parsed_ahead_refuses_the_handover_saying_why() {
        use crate::socket::Stream;
        use crate::transport::Transport;
        let (ours, mut peer) = std::os::unix::net::UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let mut transport = Transport::new(Stream::Unix(mio::net::UnixStream::from_std(ours)));
        let call = quickbus_wire::MessageBuilder::method_call("/p", "M")
            .destination("org.example.Dest")
            .build(1)
            .unwrap();
        peer.write_all(&call).unwrap();
        while transport.input().len() < call.len() {
            transport.read_once().unwrap();
        }
        transport.parse_ahead(usize::MAX);
        assert!(transport.input().is_empty(), "the call was parsed ahead");
        let Err(refusal) = write_state(&transport) else {
            panic!("a handover was written with a message left parsed ahead");
        };
        assert_eq!(
            refusal.to_string(),
            "cannot serialize: a message a worker parsed ahead was not put back into \
             the input, and would be lost"
        );
    }

    /// The bytes of the memfd backed by memory.
    fn allocated(memfd: &OwnedFd) -> u64 {
        rustix::fs::fstat(memfd).unwrap().st_blocks as u64 * 512
    }

    #[test]
    fn a_large_buffer_is_read_in_place_and_given_back_once_drained_after_the_restart() {
        const LARGE: usize = 1 << 20;
        let big = Bytes::from(vec![b'x'; LARGE]);
        let small = Bytes::from(vec![b's'; 100]);
        #[derive(serde::Serialize, serde::Deserialize)]
        struct Two(
            #[serde(with = "quickbus_bus::handover::shared_bytes")] Bytes,
            #[serde(with = "quickbus_bus::handover::shared_bytes")] Bytes,
        );
        let (memfd, _) = write_state(&Two(small.clone(), big.clone())).unwrap();
        let whole = allocated(&memfd);
        assert!(whole >= LARGE as u64);
        let restore = |read: &HandedOver| {
            let buffers = read.buffers.clone();
            let (two, _) = crate::restart::check::read_state::<Two>(
                clock_now(),
                Vec::new(),
                buffers,
                &read.payload,
            );
            two.unwrap()
        };
        // Restored and dropped before the new image serves (a failed
        // restore): the handover stays whole for the way back.
        let read = read_handover(&memfd).unwrap();
        let Two(s, b) = restore(&read);
        assert_eq!((s, b), (small.clone(), big.clone()));
        drop(read);
        assert_eq!(allocated(&memfd), whole);
        // Serving, the large buffer's memory goes once its message does.
        let read = read_handover(&memfd).unwrap();
        let Two(s, b) = restore(&read);
        read.serving();
        drop(read);
        assert_eq!(b, big);
        drop(b);
        // Nothing else of the handover was kept.
        assert_eq!(allocated(&memfd), 0);
        assert_eq!(s, small, "a small buffer was copied out");
    }
}
