//! One connection's byte stream: a read buffer that yields whole frames
//! without copying them, a queue of fds received with SCM_RIGHTS, the SASL
//! replies not written yet (the bus never counts them), and the vectored
//! `sendmsg` that writes them and the bus's queue for the connection
//! ([`write_once`]: fds attached to the first byte of the message that
//! carries them).

use quickbus_bus::fds::PassedFd;
use std::collections::VecDeque;
use std::io::IoSlice;

use crate::socket::Stream;
use bytes::{Bytes, BytesMut};
pub use quickbus_bus::outbox::{OutItem, Outbox};
use quickbus_wire::Message;
use rustix::io::Errno;
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use smallvec::SmallVec;

/// Bounds of the read window: how much one `recvmsg` asks for (and so how
/// much spare capacity the input buffer keeps). It adapts: it doubles
/// while reads fill it (bulk traffic) and halves while they don't
/// (ping-pong), and grows at once to whatever a pending frame lacks.
const MIN_READ_WINDOW: usize = 4 * 1024;
const MAX_READ_WINDOW: usize = 256 * 1024;
/// Most messages a connection holds parsed ahead (`parse_ahead`): a parsed
/// message takes 160 bytes, up to seven times a frame's (the smallest, a
/// method return, is 24), and a held sender keeps what it has; the loop
/// parses the rest itself. More than a contended turn routes (16,
/// `server::turns`).
const MAX_PARSED_AHEAD: usize = 64;
/// Most fds one `sendmsg`/`recvmsg` can carry (the kernel's SCM_MAX_FD).
pub const SCM_MAX_FD: usize = 253;
/// The slices of one `sendmsg`, inline up to eight messages.
type IoVec<'a> = SmallVec<[IoSlice<'a>; 16]>;

/// Outcome of draining the socket.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadStatus {
    /// The socket has nothing more for now (EAGAIN).
    Drained,
    /// A read shorter than asked, without fds: the socket was emptied.
    Short,
    /// The read budget ran out with data possibly left: read again later.
    Budget,
    /// The peer closed its end.
    Closed,
}

/// Everything here crosses a restart in place (docs/restart.md): a
/// message read or written halfway continues where it stopped.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Transport {
    #[serde(with = "crate::handover_fields::stream")]
    pub stream: Stream,
    inbuf: BytesMut,
    #[serde(deserialize_with = "handed_over::read_window")]
    read_window: usize,
    /// Total size of the frame at the front of `inbuf` once known and
    /// incomplete, else 0.
    #[serde(deserialize_with = "handed_over::frame_need")]
    frame_need: usize,
    #[serde(with = "crate::handover_fields::fd_queue")]
    in_fds: VecDeque<PassedFd>,
    /// Whether fds the peer sends are kept: only once it authenticated
    /// and agreed on fd passing (NEGOTIATE_UNIX_FD). Before that, and on a
    /// connection that never agreed, they are closed as they arrive, as
    /// dbus-daemon's reads without SCM_RIGHTS discard them; a message that
    /// declares fds then lacks them and cuts its sender off.
    fd_passing: bool,
    /// SASL replies, which the bus does not count (it does not know the
    /// connection yet); once it does, its messages wait in the bus's
    /// queue ([`quickbus_bus::Bus::write_queue`]), after these.
    sasl_out: Outbox,
    /// Messages a worker thread split off the front of `inbuf` and parsed
    /// ahead of routing (`parse_ahead`), in order: they come before what
    /// `inbuf` holds. A restart puts their frames back in front of `inbuf`
    /// first (`unparse`), so that the new image meets them as any input,
    /// and a frame its parser refuses cuts off only its sender; the
    /// handover's format has no place for them.
    #[serde(with = "put_back_before_a_handover")]
    parsed: VecDeque<Message>,
}

impl Transport {
    pub fn new(stream: Stream) -> Transport {
        Transport {
            stream,
            // Allocated by the first read: an idle connection holds none.
            inbuf: BytesMut::new(),
            read_window: MIN_READ_WINDOW,
            frame_need: 0,
            in_fds: VecDeque::new(),
            fd_passing: false,
            sasl_out: Outbox::default(),
            parsed: VecDeque::new(),
        }
    }

    /// Unconsumed received bytes.
    pub fn input(&self) -> &[u8] {
        &self.inbuf
    }

    /// Drop `n` bytes from the front of the input (SASL lines consumed).
    pub fn consume(&mut self, n: usize) {
        let _ = self.inbuf.split_to(n.min(self.inbuf.len()));
    }

    /// Take the first `n` bytes of input as an immutable frame, no copy.
    #[inline]
    pub fn take_frame(&mut self, n: usize) -> Bytes {
        self.frame_need = 0;
        self.inbuf.split_to(n).freeze()
    }

    /// Take `n` fds received so far, in order; None if fewer arrived.
    pub fn take_fds(&mut self, n: usize) -> Option<Vec<PassedFd>> {
        if self.in_fds.len() < n {
            return None;
        }
        Some(self.in_fds.drain(..n).collect())
    }

    /// Free the read buffer if everything read was consumed, so a quiet
    /// connection holds no buffer (after a burst it could hold a 256 KiB
    /// window); the next read allocates its window anew. With 10,000 mostly
    /// idle connections this is most of the daemon's memory per connection.
    pub fn release_idle_buffer(&mut self) {
        if self.inbuf.is_empty() && self.inbuf.capacity() > 0 {
            self.inbuf = BytesMut::new();
        }
    }

    /// Bytes the read buffer holds allocated (tests, memory accounting).
    pub fn input_capacity(&self) -> usize {
        self.inbuf.capacity()
    }

    pub fn pending_fds(&self) -> usize {
        self.in_fds.len()
    }

    /// Authentication is over: keep the fds that arrive from now on if
    /// the peer negotiated fd passing, else keep closing them.
    pub fn set_fd_passing(&mut self, negotiated: bool) {
        self.fd_passing = negotiated;
    }

    pub fn fd_passing(&self) -> bool {
        self.fd_passing
    }

    /// Whether the input holds a whole message (or a framing error, which
    /// is as final): routing it needs no read.
    pub fn has_complete_frame(&self) -> bool {
        if !self.parsed.is_empty() {
            return true;
        }
        match quickbus_wire::frame_length(&self.inbuf) {
            Ok(Some(total)) => self.inbuf.len() >= total,
            Ok(None) => false,
            Err(_) => true,
        }
    }

    /// Split off and parse the whole frames at the front of the input (a
    /// worker thread's part of routing, see `server::workers`), up to
    /// [`MAX_PARSED_AHEAD`] held at once, stopping at the first one that is
    /// not whole, is larger than `max_message_size`, or does not parse: the
    /// loop meets those where it always did, and says what is wrong with
    /// them.
    pub fn parse_ahead(&mut self, max_message_size: usize) {
        while self.parsed.len() < MAX_PARSED_AHEAD {
            let Ok(Some(total)) = quickbus_wire::frame_length(&self.inbuf) else {
                return;
            };
            if total > max_message_size || self.inbuf.len() < total {
                return;
            }
            let frame = self.take_frame(total);
            match Message::parse(frame.clone()) {
                Ok(message) => self.parsed.push_back(message),
                Err(_) => {
                    // Back where the loop will find it (rare: the
                    // connection is cut off, or the message ignored).
                    let mut input = BytesMut::from(&frame[..]);
                    input.unsplit(std::mem::take(&mut self.inbuf));
                    self.inbuf = input;
                    return;
                }
            }
        }
    }

    /// Put the messages parsed ahead back in front of the input, as they
    /// were read (before a restart's handover).
    pub fn unparse(&mut self) {
        if self.parsed.is_empty() {
            return;
        }
        let frames: usize = self.parsed.iter().map(|m| m.raw().len()).sum();
        let mut input = BytesMut::with_capacity(frames + self.inbuf.len());
        for message in self.parsed.drain(..) {
            input.extend_from_slice(message.raw());
        }
        input.extend_from_slice(&self.inbuf);
        self.inbuf = input;
        // A frame waiting for its end is no longer the first: the loop
        // sizes its buffer again when it gets to it.
        self.frame_need = 0;
    }

    /// The oldest message parsed ahead, if any.
    pub fn take_parsed(&mut self) -> Option<Message> {
        self.parsed.pop_front()
    }

    /// Make room so the next read can complete a frame of `total` bytes.
    /// The input then holds only the start of that frame. A buffer too
    /// small is replaced by one of the frame's size holding a copy of that
    /// start, rather than grown with `reserve`, whose `realloc` copies the
    /// whole old block (measured: 28 % of the daemon's instructions in
    /// bursts of large signals).
    pub fn reserve_frame(&mut self, total: usize) {
        self.frame_need = total;
        if total > self.inbuf.capacity() {
            let mut fresh = BytesMut::with_capacity(total);
            fresh.extend_from_slice(&self.inbuf);
            self.inbuf = fresh;
        }
    }

    /// One `recvmsg`: appends data to the input buffer and fds to the fd queue.
    #[inline]
    pub fn read_once(&mut self) -> Result<ReadStatus, Errno> {
        // While a frame is pending, read exactly what it lacks: its buffer
        // was sized for it, and reading past it would make `reserve`
        // reallocate and copy the frame so far.
        let want = match self.frame_need.checked_sub(self.inbuf.len()) {
            Some(lacking) if lacking > 0 => lacking,
            _ => self.read_window,
        };
        if self.inbuf.capacity() - self.inbuf.len() < want {
            // A new allocation gets room for two reads: a large frame that
            // a read ends inside of then usually completes in place, where
            // otherwise `reserve_frame` would copy its start to a buffer of
            // its own (measured: 47 KiB copied per 128 KiB signal).
            self.inbuf.reserve(2 * want);
        }
        let result =
            crate::sys::recv_appending(&self.stream, &mut self.inbuf, want, &mut self.in_fds);
        let (got, got_fds) = match result {
            Ok(r) => r,
            Err(Errno::AGAIN) => return Ok(ReadStatus::Drained),
            Err(Errno::INTR) => return Ok(ReadStatus::Budget),
            Err(e) => return Err(e),
        };
        if got_fds && !self.fd_passing {
            self.in_fds.clear();
        }
        if got == want {
            self.read_window = (self.read_window * 2).min(MAX_READ_WINDOW);
        } else if got < self.read_window / 4 {
            self.read_window = (self.read_window / 2).max(MIN_READ_WINDOW);
        }
        if got == 0 {
            return Ok(ReadStatus::Closed);
        }
        // A stream socket hands over everything it holds up to the window,
        // except that a read stops where fds are attached: a short read
        // without fds means the socket is empty, and new data will raise a
        // new edge-triggered event. That saves the EAGAIN read per wake-up.
        if got < want && !got_fds {
            return Ok(ReadStatus::Short);
        }
        Ok(ReadStatus::Budget)
    }

    /// Queue a SASL reply.
    pub fn queue(&mut self, item: OutItem) {
        self.sasl_out.push(item);
    }

    /// Whether SASL replies wait to be written.
    pub fn has_output(&self) -> bool {
        !self.sasl_out.is_empty()
    }

    /// Bytes and fds queued (tests).
    #[cfg(test)]
    fn queued(&self) -> (usize, usize) {
        (self.sasl_out.bytes(), self.sasl_out.fds())
    }

    /// Write as many SASL replies as the socket takes. Ok(true) when none
    /// is left, Ok(false) when the socket is full.
    pub fn flush(&mut self) -> Result<bool, Errno> {
        let stream = &self.stream;
        self.sasl_out
            .flush(None, |outbox| write_once(stream, outbox))
    }

    /// One write of `outbox`'s next slices (see [`Outbox::next_write`]):
    /// what the socket took, None when it is full.
    pub fn write_once(&self, outbox: &Outbox) -> Result<Option<usize>, Errno> {
        write_once(&self.stream, outbox)
    }
}

/// What a restart hands over of the reading, checked: the next read asks
/// for what these say.
mod handed_over {
    use serde::{Deserialize, Deserializer};

    use super::{MAX_READ_WINDOW, MIN_READ_WINDOW};

    /// The read window, brought within its bounds: a hint the next reads
    /// adapt anyway, which outside them would ask for nothing (a read of
    /// nothing is taken for the peer hanging up) or reserve any amount.
    pub fn read_window<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        Ok(usize::deserialize(d)?.clamp(MIN_READ_WINDOW, MAX_READ_WINDOW))
    }

    /// The size of a frame read in part: no larger than a message can be
    /// (`frame_length` refuses a larger one), since the next read
    /// reserves twice what it lacks.
    pub fn frame_need<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        let need = usize::deserialize(d)?;
        if need > quickbus_wire::MAX_MESSAGE_SIZE {
            return Err(quickbus_bus::handover::reject(format!(
                "a frame of {need} bytes read in part, larger than a message can be"
            )));
        }
        Ok(need)
    }
}

/// The parsed messages' place in the handover: none (they are put back
/// into the input first, `Transport::unparse`). Serializing any is an
/// error, which refuses the restart rather than losing them; nothing is
/// written (postcard writes a unit as no bytes).
mod put_back_before_a_handover {
    use std::collections::VecDeque;

    use quickbus_wire::Message;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(
        parsed: &VecDeque<Message>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        if !parsed.is_empty() {
            // The restart's refusal names this reason (`refuse`).
            return Err(quickbus_bus::handover::refuse(
                "a message a worker parsed ahead was not put back into the input, and would \
                 be lost",
            ));
        }
        ().serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<VecDeque<Message>, D::Error> {
        <()>::deserialize(deserializer)?;
        Ok(VecDeque::new())
    }
}

/// One `sendmsg` of the front of `outbox`, retried if interrupted; None
/// when the socket is full. Never inlined: scripts/cpu-split.sh takes its
/// instructions out of the core's `Bus::write_queue`, which calls it.
#[inline(never)]
fn write_once(stream: &Stream, outbox: &Outbox) -> Result<Option<usize>, Errno> {
    // On the stack for the usual few messages (one header and one body
    // each): a heap vector here was one allocation per write.
    let mut iov = IoVec::new();
    // Sized once: growing it a step at a time, a burst's writes spent
    // more on reallocation than on filling it (callgrind, fan-out).
    iov.reserve(outbox.next_write_slices());
    let fds_to_send = outbox.next_write(|s| iov.push(s));
    let mut space;
    let mut control;
    let fd_refs: Vec<_>;
    match fds_to_send {
        Some(fds) => {
            fd_refs = fds.iter().map(std::os::fd::AsFd::as_fd).collect();
            space = vec![0u8; rustix::cmsg_space!(ScmRights(fd_refs.len()))];
            control = SendAncillaryBuffer::new(&mut space);
            control.push(SendAncillaryMessage::ScmRights(&fd_refs));
        }
        None => {
            space = Vec::new();
            control = SendAncillaryBuffer::new(&mut space);
        }
    }
    loop {
        match rustix::net::sendmsg(
            stream,
            &iov,
            &mut control,
            SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
        ) {
            Ok(n) => return Ok(Some(n)),
            Err(Errno::AGAIN) => return Ok(None),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream as StdStream;
    use std::sync::Arc;

    fn pair() -> (Transport, StdStream) {
        let (a, b) = StdStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        (
            Transport::new(Stream::Unix(mio::net::UnixStream::from_std(a))),
            b,
        )
    }

    #[test]
    fn queued_items_arrive_whole_and_in_order() {
        let (mut t, mut peer) = pair();
        for i in 0..10u8 {
            t.queue(OutItem {
                header: Bytes::from(vec![i; 8]),
                body: Bytes::from(vec![i + 100; 3]),
                fds: None,
            });
        }
        assert_eq!(t.queued().0, 110);
        assert!(t.flush().unwrap());
        assert_eq!(t.queued().0, 0);
        assert_eq!(t.queued().1, 0);
        let mut got = vec![0u8; 110];
        peer.read_exact(&mut got).unwrap();
        for i in 0..10u8 {
            let chunk = &got[i as usize * 11..(i as usize + 1) * 11];
            assert_eq!(&chunk[..8], &[i; 8]);
            assert_eq!(&chunk[8..], &[i + 100; 3]);
        }
    }

    #[test]
    fn partial_writes_resume_where_they_stopped() {
        let (mut t, mut peer) = pair();
        let big = Bytes::from(vec![7u8; 4 << 20]);
        t.queue(OutItem {
            header: Bytes::from_static(b"HEADER!!"),
            body: big.clone(),
            fds: None,
        });
        // The socket buffer is far smaller than 4 MiB: the first flush stops.
        assert!(!t.flush().unwrap());
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            peer.read_to_end(&mut all).unwrap();
            all
        });
        loop {
            match t.flush() {
                Ok(true) => break,
                Ok(false) => std::thread::yield_now(),
                Err(e) => panic!("flush: {e}"),
            }
        }
        drop(t);
        let all = reader.join().unwrap();
        assert_eq!(&all[..8], b"HEADER!!");
        assert_eq!(all.len(), 8 + (4 << 20));
        assert!(all[8..].iter().all(|&b| b == 7));
    }

    #[test]
    fn read_window_grows_for_bulk_and_short_reads_say_so() {
        use std::io::Write;
        let (mut t, mut peer) = pair();
        peer.write_all(b"ping").unwrap();
        // Short read, no fds: the socket is empty, no second syscall needed.
        assert_eq!(t.read_once().unwrap(), ReadStatus::Short);
        assert_eq!(t.input(), b"ping");
        t.consume(4);
        let bulk = vec![9u8; 100_000];
        peer.write_all(&bulk).unwrap();
        let mut reads = 0;
        while t.read_once().unwrap() == ReadStatus::Budget {
            reads += 1;
        }
        assert_eq!(t.input().len(), bulk.len());
        // 4 + 8 + 16 + 32 KiB windows filled, then the rest in one read.
        assert!(reads >= 3, "window did not start small: {reads} full reads");
        assert!(t.read_window > MIN_READ_WINDOW);
        // A frame larger than the window is read in one go once known.
        t.consume(bulk.len());
        t.reserve_frame(200_000);
        peer.write_all(&vec![1u8; 200_000]).unwrap();
        assert_eq!(t.read_once().unwrap(), ReadStatus::Budget);
        assert!(t.input().len() > 150_000, "got {}", t.input().len());
    }

    #[test]
    fn a_consumed_buffer_is_freed_and_reads_still_work() {
        use std::io::Write;
        let (mut t, mut peer) = pair();
        assert_eq!(t.input_capacity(), 0, "nothing allocated before a read");
        peer.write_all(&vec![5u8; 100_000]).unwrap();
        while t.read_once().unwrap() == ReadStatus::Budget {}
        assert!(t.input_capacity() >= 100_000);
        let frame = t.take_frame(60_000);
        t.release_idle_buffer();
        assert!(t.input_capacity() > 0, "unconsumed input is kept");
        assert_eq!(t.input().len(), 40_000);
        t.consume(40_000);
        t.release_idle_buffer();
        assert_eq!(t.input_capacity(), 0);
        assert!(
            frame.iter().all(|&b| b == 5),
            "a taken frame outlives the buffer"
        );
        peer.write_all(b"again").unwrap();
        assert_eq!(t.read_once().unwrap(), ReadStatus::Short);
        assert_eq!(t.input(), b"again");
    }

    #[test]
    fn queued_fds_are_counted_until_written() {
        let (mut t, mut peer) = pair();
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        t.queue(OutItem {
            header: Bytes::from_static(b"with fds"),
            body: Bytes::new(),
            fds: Some(Arc::new(vec![r.into(), w.into()])),
        });
        t.queue(OutItem::raw(Bytes::from_static(b"plain")));
        assert_eq!(t.queued().1, 2);
        assert_eq!(t.queued().0, 13);
        assert!(t.flush().unwrap());
        assert_eq!(t.queued().1, 0);
        let mut got = [0u8; 13];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"with fdsplain");
    }

    #[test]
    fn a_large_frame_gets_a_buffer_of_its_own_size() {
        use std::io::Write;
        let (mut t, mut peer) = pair();
        peer.write_all(b"start").unwrap();
        t.read_once().unwrap();
        t.reserve_frame(300_000);
        assert_eq!(t.input(), b"start", "the frame's start is kept");
        assert!(t.inbuf.capacity() >= 300_000);
        let rest = vec![3u8; 300_000 - 5];
        let writer = std::thread::spawn(move || peer.write_all(&rest).map(|_| peer));
        while t.input().len() < 300_000 {
            assert_ne!(t.read_once().unwrap(), ReadStatus::Closed);
        }
        let _peer = writer.join().unwrap().unwrap();
        let frame = t.take_frame(300_000);
        assert_eq!(&frame[..5], b"start");
        assert!(frame[5..].iter().all(|&b| b == 3));
    }

    /// Sends "abc" with a pipe's read end; returns the write end (the
    /// test's own read end is closed).
    fn send_abc_with_an_fd(peer: &StdStream) -> rustix::fd::OwnedFd {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        let mut space = [0u8; rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        let fds = [r.as_fd()];
        control.push(SendAncillaryMessage::ScmRights(&fds));
        rustix::net::sendmsg(
            peer,
            &[IoSlice::new(b"abc")],
            &mut control,
            SendFlags::empty(),
        )
        .unwrap();
        w
    }

    #[test]
    fn fds_are_closed_as_they_arrive_without_fd_passing() {
        // A child forked meanwhile would hold the pipe's read end.
        let _no_forks = crate::test_forks::no_forks();
        crate::test_closer::install();
        let (mut t, peer) = pair();
        let w = send_abc_with_an_fd(&peer);
        // The read still stops where the fds were attached.
        assert_eq!(t.read_once().unwrap(), ReadStatus::Budget);
        assert_eq!(t.input(), b"abc");
        assert_eq!(t.pending_fds(), 0);
        // Closed as a client's passed fds are, never in place: a close
        // can block (docs/reliability.md, "Fds clients pass").
        assert!(crate::test_closer::closed_one_of(&w));
        // Nobody holds the pipe's read end any more.
        assert_eq!(rustix::io::write(&w, b"x"), Err(Errno::PIPE));
        // After a negotiation they are kept.
        t.set_fd_passing(true);
        let _w = send_abc_with_an_fd(&peer);
        assert_eq!(t.read_once().unwrap(), ReadStatus::Budget);
        assert_eq!(t.pending_fds(), 1);
    }

    #[test]
    fn fds_and_bytes_are_received() {
        let (mut t, peer) = pair();
        t.set_fd_passing(true);
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        let mut space = [0u8; rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        let fds = [r.as_fd()];
        control.push(SendAncillaryMessage::ScmRights(&fds));
        rustix::net::sendmsg(
            &peer,
            &[IoSlice::new(b"abc")],
            &mut control,
            SendFlags::empty(),
        )
        .unwrap();
        assert_eq!(t.read_once().unwrap(), ReadStatus::Budget);
        assert_eq!(t.input(), b"abc");
        assert_eq!(t.pending_fds(), 1);
        let fd = t.take_fds(1).unwrap().pop().unwrap();
        rustix::io::write(&w, b"x").unwrap();
        let mut buf = [0u8; 1];
        rustix::io::read(&fd, &mut buf).unwrap();
        assert_eq!(&buf, b"x");
        assert_eq!(t.read_once().unwrap(), ReadStatus::Drained);
        // Shut down rather than drop: a child forked by a concurrent test
        // may hold a copy of `peer` until it execs.
        peer.shutdown(std::net::Shutdown::Write).unwrap();
        assert_eq!(t.read_once().unwrap(), ReadStatus::Closed);
        let frame = t.take_frame(2);
        assert_eq!(&frame[..], b"ab");
        assert_eq!(t.input(), b"c");
    }

    /// A method call numbered `n`, marshalled.
    fn call(n: u32) -> Bytes {
        quickbus_wire::MessageBuilder::method_call("/p", "M")
            .destination("org.example.Dest")
            .body(vec![quickbus_wire::Value::Uint32(n)])
            .build(n + 1)
            .unwrap()
    }

    /// `t` with `bytes` in its input, as a read would leave them.
    fn reading(bytes: &[u8]) -> Transport {
        use std::io::Write;
        let (mut t, mut peer) = pair();
        peer.write_all(bytes).unwrap();
        while t.input().len() < bytes.len() {
            t.read_once().unwrap();
        }
        assert!(t.input() == bytes, "the input is what was written");
        t
    }

    fn serials(t: &mut Transport) -> Vec<u32> {
        std::iter::from_fn(|| t.take_parsed())
            .map(|m| m.serial())
            .collect()
    }

    #[test]
    fn whole_frames_are_parsed_ahead_in_order_and_the_rest_stays() {
        let (a, b) = (call(1), call(2));
        let c = call(3);
        let mut input = [&a[..], &b[..], &c[..]].concat();
        input.truncate(input.len() - 3);
        let mut t = reading(&input);
        t.parse_ahead(usize::MAX);
        assert!(t.has_complete_frame(), "parsed messages wait to be routed");
        assert_eq!(t.input(), &c[..c.len() - 3], "the incomplete frame stays");
        assert_eq!(serials(&mut t), vec![2, 3]);
        assert!(!t.has_complete_frame());
    }

    /// The sizes MAX_PARSED_AHEAD's reason gives.
    #[test]
    fn a_parsed_message_is_up_to_seven_times_its_frame() {
        assert_eq!(std::mem::size_of::<Message>(), 160);
        let smallest = quickbus_wire::MessageBuilder::method_return(1)
            .build(2)
            .unwrap();
        assert_eq!(smallest.len(), 24);
        Message::parse(smallest).unwrap();
    }

    #[test]
    fn at_most_so_many_messages_wait_parsed_ahead() {
        let frames: Vec<Bytes> = (0..MAX_PARSED_AHEAD as u32 + 10).map(call).collect();
        let input = frames.concat();
        let mut t = reading(&input);
        t.parse_ahead(usize::MAX);
        assert_eq!(t.parsed.len(), MAX_PARSED_AHEAD);
        let rest: usize = frames[MAX_PARSED_AHEAD..].iter().map(|f| f.len()).sum();
        assert_eq!(t.input().len(), rest, "the rest stays as it came");
        // Taking some makes room for as many again.
        for _ in 0..5 {
            t.take_parsed().unwrap();
        }
        t.parse_ahead(usize::MAX);
        assert_eq!(t.parsed.len(), MAX_PARSED_AHEAD);
    }

    #[test]
    fn parsing_ahead_stops_at_a_frame_too_large_or_invalid_and_leaves_it_whole() {
        let (a, b) = (call(1), call(2));
        let input = [&a[..], &b[..], &a[..]].concat();
        // Too large for the limit: nothing parsed, nothing taken.
        let mut t = reading(&input);
        t.parse_ahead(a.len() - 1);
        assert_eq!(t.input(), &input[..]);
        assert_eq!(serials(&mut t), Vec::<u32>::new());
        // A second frame of an unknown type (the spec: ignored, which the
        // loop does): the first is parsed, the rest stays as it came.
        let mut unknown = b.to_vec();
        unknown[1] = 42;
        let input = [&a[..], &unknown[..], &a[..]].concat();
        let mut t = reading(&input);
        t.parse_ahead(usize::MAX);
        assert_eq!(serials(&mut t), vec![2]);
        assert_eq!(t.input(), &input[a.len()..]);
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Parsed(#[serde(with = "put_back_before_a_handover")] VecDeque<Message>);

    #[test]
    fn messages_parsed_ahead_go_back_in_front_of_the_input_for_a_handover() {
        let (a, b, c) = (call(1), call(2), call(3));
        let input = [&a[..], &b[..], &c[..c.len() - 3]].concat();
        let mut t = reading(&input);
        t.parse_ahead(usize::MAX);
        t.reserve_frame(c.len());
        let parsed: Vec<u32> = t.parsed.iter().map(|m| m.serial()).collect();
        assert_eq!(parsed, vec![2, 3]);
        t.unparse();
        assert!(t.parsed.is_empty());
        assert!(t.input() == &input[..], "the input is as it was read");
        assert_eq!(t.frame_need, 0);
    }

    /// A transport as a restart hands it over, with this read window and
    /// pending frame size, its socket `ours`: the transport, or why it
    /// was refused.
    fn handed_over(
        ours: std::os::unix::net::UnixStream,
        read_window: usize,
        frame_need: usize,
    ) -> Result<Transport, String> {
        // Its fields in order: the socket (fd 0 of the table), no input,
        // the two sizes, no fds, no fd passing, no SASL reply (no items,
        // offset 0), nothing parsed.
        let fields = (
            crate::handover_fields::Socket::Unix(0),
            Vec::<u8>::new(),
            read_window,
            frame_need,
            Vec::<u32>::new(),
            false,
            (Vec::<u8>::new(), 0usize),
            (),
        );
        let state = postcard::to_stdvec(&fields).unwrap();
        crate::restart::read_value_back(&state, vec![std::os::fd::OwnedFd::from(ours)])
    }

    /// The read window steers the next read: 0 read nothing, which the
    /// loop takes for the peer hanging up, and the most a usize holds
    /// overflowed the room the read makes.
    #[test]
    fn a_handed_over_read_window_is_brought_within_its_bounds() {
        use std::io::Write;
        for window in [0, 1, usize::MAX / 2 + 1, usize::MAX] {
            let (ours, mut peer) = std::os::unix::net::UnixStream::pair().unwrap();
            ours.set_nonblocking(true).unwrap();
            let mut t = handed_over(ours, window, 0).unwrap();
            assert!((MIN_READ_WINDOW..=MAX_READ_WINDOW).contains(&t.read_window));
            peer.write_all(b"hello").unwrap();
            assert!(!matches!(t.read_once(), Ok(ReadStatus::Closed)), "{window}");
            assert_eq!(t.input(), b"hello");
        }
    }

    /// A frame larger than any message pending: the next read would
    /// reserve twice what it lacks.
    #[test]
    fn a_handed_over_frame_larger_than_a_message_is_refused() {
        let most = quickbus_wire::MAX_MESSAGE_SIZE;
        for need in [most + 1, usize::MAX] {
            let (ours, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
            let Err(refusal) = handed_over(ours, MIN_READ_WINDOW, need) else {
                panic!("a pending frame of {need} bytes was read back");
            };
            assert!(
                refusal.ends_with(&format!(
                    "a frame of {need} bytes read in part, larger than a message can be"
                )),
                "{refusal}"
            );
        }
        let (ours, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(
            handed_over(ours, MIN_READ_WINDOW, most).unwrap().frame_need,
            most
        );
    }

    #[test]
    fn the_handover_holds_no_parsed_message_and_refuses_one_not_put_back() {
        // Nothing written.
        let written = postcard::to_stdvec(&Parsed(VecDeque::new())).unwrap();
        assert!(written.is_empty());
        let Parsed(read) = postcard::from_bytes(&written).unwrap();
        assert!(read.is_empty());
        // One left parsed: the handover fails rather than lose it.
        let left = Message::parse(call(1)).unwrap();
        assert!(postcard::to_stdvec(&Parsed(VecDeque::from([left]))).is_err());
    }
}
