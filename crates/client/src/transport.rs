//! The client's byte stream: one read buffer that yields whole frames
//! without copying them, the fds that arrived with them, and vectored
//! writes with fds attached to the first byte.

use std::collections::VecDeque;
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use crate::error::Error;
use crate::socket::Socket;

/// Bounds of how much we ask the kernel for per `recvmsg`. The window
/// adapts to the traffic: the space is zeroed before each read (safe Rust
/// cannot read into uninitialised memory), so a small window keeps a
/// ping-pong of small messages cheap while a full window grows for bulk.
const MIN_READ: usize = 4 * 1024;
const MAX_READ: usize = 256 * 1024;
/// Most fds one `recvmsg` can carry (the kernel's SCM_MAX_FD is 253).
const MAX_FDS_PER_RECV: usize = 253;

pub(crate) struct Transport {
    pub(crate) stream: Socket,
    inbuf: BytesMut,
    in_fds: VecDeque<OwnedFd>,
    /// Current read window, between MIN_READ and MAX_READ.
    read_size: usize,
    /// Longest wait for input (None: forever).
    read_timeout: Option<Duration>,
}

impl Transport {
    /// A transport over `stream`, waiting for input as long as the
    /// stream's read time-out (SO_RCVTIMEO) says.
    pub(crate) fn new(stream: Socket) -> Result<Transport, Error> {
        let read_timeout = stream.read_timeout()?;
        Ok(Transport {
            stream,
            inbuf: BytesMut::with_capacity(MAX_READ),
            in_fds: VecDeque::new(),
            read_size: MIN_READ,
            read_timeout,
        })
    }

    /// Longest wait for input from now on (None: forever).
    pub(crate) fn set_read_timeout(&mut self, timeout: Option<Duration>) {
        self.read_timeout = timeout;
    }

    /// One `recvmsg` once the socket is readable: appends whatever the
    /// socket has (up to the read window, at least `at_least` bytes of
    /// room) to the input buffer and the fds to the fd queue. Fails with
    /// Timeout when the read time-out expires and Closed at end of stream.
    pub(crate) fn read_more(&mut self, at_least: usize) -> Result<(), Error> {
        wait_readable(self.stream.as_fd(), self.read_timeout)?;
        let start = self.inbuf.len();
        let want = at_least.max(self.read_size);
        self.inbuf.resize(start + want, 0);
        let mut space = [0u8; rustix::cmsg_space!(ScmRights(MAX_FDS_PER_RECV))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let result = loop {
            match rustix::net::recvmsg(
                &self.stream,
                &mut [IoSliceMut::new(&mut self.inbuf[start..])],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            ) {
                Err(Errno::INTR) => continue,
                other => break other,
            }
        };
        let got = match result {
            Ok(r) => r.bytes,
            Err(e) => {
                self.inbuf.truncate(start);
                return Err(e.into());
            }
        };
        self.inbuf.truncate(start + got);
        self.read_size = next_read_size(self.read_size, want, got);
        for msg in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = msg {
                self.in_fds.extend(fds);
            }
        }
        if got == 0 {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// The next complete frame from the input, reading as needed.
    pub(crate) fn read_frame(&mut self) -> Result<Bytes, Error> {
        loop {
            if let Some(total) = quickbus_wire::frame_length(&self.inbuf)? {
                if self.inbuf.len() >= total {
                    return Ok(self.inbuf.split_to(total).freeze());
                }
                let missing = total - self.inbuf.len();
                self.read_more(missing)?;
            } else {
                self.read_more(0)?;
            }
        }
    }

    /// The first `n` fds received and not yet taken.
    pub(crate) fn take_fds(&mut self, n: usize) -> Result<Vec<OwnedFd>, Error> {
        if self.in_fds.len() < n {
            return Err(Error::Protocol(format!(
                "message announces {n} unix fds but only {} arrived",
                self.in_fds.len()
            )));
        }
        Ok(self.in_fds.drain(..n).collect())
    }

    /// Received bytes not yet consumed (for the SASL exchange).
    pub(crate) fn input(&self) -> &[u8] {
        &self.inbuf
    }

    /// Drop the first `n` received bytes.
    pub(crate) fn consume(&mut self, n: usize) {
        let _ = self.inbuf.split_to(n.min(self.inbuf.len()));
    }

    /// Write all of `parts` back to back with one `sendmsg` (more only if
    /// the socket buffer fills), `fds` attached to the first byte. No heap
    /// allocation for up to MAX_PARTS parts.
    pub(crate) fn write_all(
        &mut self,
        parts: &[&[u8]],
        fds: &[BorrowedFd<'_>],
    ) -> Result<(), Error> {
        if fds.len() > MAX_FDS_PER_RECV {
            return Err(Error::Protocol(format!(
                "cannot pass {} fds in one message (at most {MAX_FDS_PER_RECV})",
                fds.len()
            )));
        }
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut written = 0;
        let mut fds = fds;
        let mut space = [0u8; rustix::cmsg_space!(ScmRights(MAX_FDS_PER_RECV))];
        while written < total || !fds.is_empty() {
            let mut on_stack = [IoSlice::new(&[]); MAX_PARTS];
            let mut on_heap = Vec::new();
            let iov = remaining_slices(parts, written, &mut on_stack, &mut on_heap);
            let mut control = SendAncillaryBuffer::new(&mut space);
            if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
                return Err(Error::Protocol(format!("cannot attach {} fds", fds.len())));
            }
            match rustix::net::sendmsg(&self.stream, iov, &mut control, SendFlags::NOSIGNAL) {
                Ok(n) => {
                    written += n;
                    fds = &[];
                }
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// Wait until `socket` has input (or end of stream), for at most
/// `timeout` (None: forever); Error::Timeout when it passes.
///
/// Why not simply block in `recvmsg`: Linux wakes a reader blocked in
/// `recvmsg` on a Unix stream socket every time the other end consumes
/// bytes this socket sent (the "write space" wake-up goes to every sleeper
/// on the socket, whatever it waits for), so a caller waiting for its
/// reply is woken, finds nothing and sleeps again when the bus reads its
/// call: one wasted wake-up, usually a cross-CPU interrupt paid by the
/// bus, per message. `poll` filters wake-ups by event. sd-bus, libdbus
/// and GLib all wait in poll too.
pub fn wait_readable(socket: BorrowedFd<'_>, timeout: Option<Duration>) -> Result<(), Error> {
    let millis = match timeout {
        None => -1,
        // Round up so that a sub-millisecond time-out still waits.
        Some(t) => i32::try_from(t.as_nanos().div_ceil(1_000_000)).unwrap_or(i32::MAX),
    };
    let mut fds = [PollFd::new(&socket, PollFlags::IN)];
    loop {
        match rustix::event::poll(&mut fds, millis) {
            Ok(0) => return Err(Error::Timeout),
            Ok(_) => return Ok(()),
            // A signal: wait again (a little longer than asked at worst).
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Grow the window when a read filled it, shrink it when reads use little.
fn next_read_size(current: usize, asked: usize, got: usize) -> usize {
    if got >= asked {
        (current * 2).min(MAX_READ)
    } else if got < current / 4 {
        (current / 2).max(MIN_READ)
    } else {
        current
    }
}

/// Most parts written without allocating an iovec array.
const MAX_PARTS: usize = 16;

/// The iovecs for what is left of `parts` after `skip` bytes.
fn remaining_slices<'a, 'b>(
    parts: &[&'a [u8]],
    mut skip: usize,
    on_stack: &'b mut [IoSlice<'a>; MAX_PARTS],
    on_heap: &'b mut Vec<IoSlice<'a>>,
) -> &'b [IoSlice<'a>] {
    let mut count = 0;
    for part in parts {
        if skip >= part.len() {
            skip -= part.len();
            continue;
        }
        let slice = IoSlice::new(&part[skip..]);
        skip = 0;
        if on_heap.is_empty() && count < MAX_PARTS {
            on_stack[count] = slice;
            count += 1;
        } else {
            if on_heap.is_empty() {
                on_heap.extend_from_slice(&on_stack[..count]);
            }
            on_heap.push(slice);
        }
    }
    if on_heap.is_empty() {
        &on_stack[..count]
    } else {
        on_heap
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    fn pair() -> (Transport, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        (Transport::new(Socket::Unix(a)).unwrap(), b)
    }

    /// Read until `n` bytes are buffered, then take them.
    fn take(t: &mut Transport, n: usize) -> Vec<u8> {
        while t.input().len() < n {
            t.read_more(0).unwrap();
        }
        let bytes = t.input()[..n].to_vec();
        t.consume(n);
        bytes
    }

    #[test]
    fn consumed_input_is_gone_and_the_rest_stays_buffered() {
        let (mut t, mut peer) = pair();
        peer.write_all(b"OK 1234\r\nl").unwrap();
        assert_eq!(take(&mut t, 9), b"OK 1234\r\n");
        assert_eq!(t.input(), b"l");
        t.consume(5);
        assert_eq!(t.input(), b"");
    }

    #[test]
    fn end_of_stream_is_closed() {
        let (mut t, peer) = pair();
        peer.shutdown(std::net::Shutdown::Write).unwrap();
        assert!(matches!(t.read_more(0), Err(Error::Closed)));
    }

    #[test]
    fn read_timeout_is_reported() {
        let (mut t, _peer) = pair();
        t.set_read_timeout(Some(Duration::from_millis(10)));
        assert!(matches!(t.read_more(0), Err(Error::Timeout)));
    }

    #[test]
    fn the_streams_read_timeout_at_creation_is_kept() {
        let (a, _peer) = UnixStream::pair().unwrap();
        a.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
        let mut t = Transport::new(Socket::Unix(a)).unwrap();
        assert!(matches!(t.read_more(0), Err(Error::Timeout)));
    }

    #[test]
    fn waiting_for_input_ends_when_it_arrives_or_the_peer_hangs_up() {
        let (t, mut peer) = pair();
        peer.write_all(b"x").unwrap();
        wait_readable(t.stream.as_fd(), Some(Duration::from_secs(60))).unwrap();
        let (t, peer) = pair();
        peer.shutdown(std::net::Shutdown::Write).unwrap();
        wait_readable(t.stream.as_fd(), None).unwrap();
    }

    #[test]
    fn vectored_write_with_fds_arrives_whole() {
        let (mut sender, peer) = pair();
        let mut receiver = Transport::new(Socket::Unix(peer)).unwrap();
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        sender
            .write_all(&[b"ab", b"", b"cd\r\n"], &[r.as_fd()])
            .unwrap();
        assert_eq!(take(&mut receiver, 6), b"abcd\r\n");
        let fd = receiver.take_fds(1).unwrap().pop().unwrap();
        assert!(receiver.take_fds(1).is_err());
        rustix::io::write(&w, b"x").unwrap();
        let mut buf = [0u8; 1];
        rustix::io::read(&fd, &mut buf).unwrap();
        assert_eq!(&buf, b"x");
    }

    #[test]
    fn remaining_slices_skip_written_bytes_and_spill_to_the_heap() {
        let parts: Vec<&[u8]> = vec![b"ab", b"", b"cde"];
        let mut stack = [IoSlice::new(&[]); MAX_PARTS];
        let mut heap = Vec::new();
        let got: Vec<Vec<u8>> = remaining_slices(&parts, 3, &mut stack, &mut heap)
            .iter()
            .map(|s| s.to_vec())
            .collect();
        assert_eq!(got, vec![b"de".to_vec()]);
        let many: Vec<&[u8]> = vec![b"x"; MAX_PARTS + 3];
        let mut stack = [IoSlice::new(&[]); MAX_PARTS];
        let mut heap = Vec::new();
        assert_eq!(
            remaining_slices(&many, 1, &mut stack, &mut heap).len(),
            MAX_PARTS + 2
        );
    }

    #[test]
    fn the_read_window_follows_the_traffic() {
        assert_eq!(next_read_size(MIN_READ, MIN_READ, MIN_READ), 2 * MIN_READ);
        assert_eq!(next_read_size(MAX_READ, MAX_READ, MAX_READ), MAX_READ);
        assert_eq!(next_read_size(64 * 1024, 64 * 1024, 100), 32 * 1024);
        assert_eq!(next_read_size(MIN_READ, MIN_READ, 1), MIN_READ);
        assert_eq!(next_read_size(64 * 1024, 64 * 1024, 20 * 1024), 64 * 1024);
    }

    #[test]
    fn many_parts_are_written_in_order() {
        let (mut sender, peer) = pair();
        let mut receiver = Transport::new(Socket::Unix(peer)).unwrap();
        let words: Vec<String> = (0..40).map(|i| format!("{i},")).collect();
        let parts: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        sender.write_all(&parts, &[]).unwrap();
        let all = words.concat();
        assert_eq!(take(&mut receiver, all.len()), all.as_bytes());
    }

    #[test]
    fn large_writes_complete() {
        let (mut sender, peer) = pair();
        let big = vec![5u8; 1 << 20];
        let reader = std::thread::spawn(move || {
            let mut t = Transport::new(Socket::Unix(peer)).unwrap();
            let mut n = 0;
            while n < (1 << 20) {
                t.read_more(0).unwrap();
                n += t.inbuf.len();
                t.inbuf.clear();
            }
            n
        });
        sender.write_all(&[&big], &[]).unwrap();
        assert_eq!(reader.join().unwrap(), 1 << 20);
    }
}
