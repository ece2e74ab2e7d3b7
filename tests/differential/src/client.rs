//! A raw client connection: SASL EXTERNAL (with or without fd passing),
//! then whole frames written and read as bytes with their fds. No Hello
//! unless the scenario says so, and no judgement of what arrives: a frame
//! that does not parse is still recorded.

use std::io::{IoSlice, IoSliceMut, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quickbus_client::sasl::{self, Mode, Progress, SaslClient};
use quickbus_client::Message;
use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// What reading from the bus gave.
pub enum Incoming {
    /// One whole frame and the fds that came for it.
    Frame(Vec<u8>, Vec<OwnedFd>),
    /// The bus closed the connection (or reset it).
    Closed,
    /// Nothing within the time limit.
    Timeout,
}

pub struct RawClient {
    stream: UnixStream,
    inbuf: Vec<u8>,
    fds: Vec<OwnedFd>,
    pub unix_fds: bool,
}

impl RawClient {
    /// Connects and authenticates; `unix_fds` says whether to negotiate fd
    /// passing.
    pub fn connect(socket: &Path, unix_fds: bool) -> RawClient {
        RawClient::connect_in(socket, unix_fds, Mode::Pipelined)
    }

    /// [`RawClient::connect`] with the SASL commands sent as `mode` says
    /// (xdg-dbus-proxy 0.1.4 drops a client whose first read after the
    /// nul byte holds the whole pipelined exchange: it needs StepByStep).
    pub fn connect_in(socket: &Path, unix_fds: bool, mode: Mode) -> RawClient {
        let mut stream = UnixStream::connect(socket)
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", socket.display()));
        let mut out = Vec::new();
        let mut sasl = SaslClient::start(sasl::current_uid(), mode, unix_fds, &mut out);
        stream.write_all(&out).expect("send SASL");
        let mut client = RawClient {
            stream,
            inbuf: Vec::new(),
            fds: Vec::new(),
            unix_fds: false,
        };
        loop {
            out.clear();
            match sasl.feed(&client.inbuf, &mut out).expect("SASL exchange") {
                Progress::Done { consumed, outcome } => {
                    client.inbuf.drain(..consumed);
                    // Step by step, BEGIN goes after the last reply.
                    if !out.is_empty() {
                        client.stream.write_all(&out).expect("send SASL");
                    }
                    client.unix_fds = outcome.unix_fd;
                    return client;
                }
                Progress::NeedMore { consumed } => {
                    client.inbuf.drain(..consumed);
                    if !out.is_empty() {
                        client.stream.write_all(&out).expect("send SASL");
                    }
                    match client.read_more(Instant::now() + crate::TIMEOUT) {
                        Ok(true) => {}
                        _ => panic!("the bus ended or stalled the SASL exchange"),
                    }
                }
            }
        }
    }

    /// Writes `bytes` with `fds` attached; false when the bus has closed
    /// the connection.
    pub fn send(&mut self, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> bool {
        let mut written = 0;
        let mut fds = fds;
        let mut space = [0u8; rustix::cmsg_space!(ScmRights(8))];
        while written < bytes.len() {
            let mut control = SendAncillaryBuffer::new(&mut space);
            if !fds.is_empty() {
                assert!(control.push(SendAncillaryMessage::ScmRights(fds)));
            }
            let iov = [IoSlice::new(&bytes[written..])];
            match rustix::net::sendmsg(&self.stream, &iov, &mut control, SendFlags::NOSIGNAL) {
                Ok(n) => {
                    written += n;
                    fds = &[];
                }
                Err(Errno::INTR) => {}
                Err(_) => return false,
            }
        }
        true
    }

    /// Closes the connection (both directions).
    pub fn shutdown(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    /// Tells the bus we send nothing more; it still may send to us.
    pub fn shutdown_write(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
    }

    /// The next frame, waiting at most until `deadline`.
    pub fn receive(&mut self, deadline: Instant) -> Incoming {
        loop {
            match quickbus_wire::frame_length(&self.inbuf) {
                Ok(Some(total)) if self.inbuf.len() >= total => {
                    let frame: Vec<u8> = self.inbuf.drain(..total).collect();
                    // The fds that belong to this message: as many as its
                    // UNIX_FDS field says (a read may span several
                    // messages and bring the fds of a later one).
                    let wanted = Message::parse(Bytes::copy_from_slice(&frame))
                        .map(|m| m.unix_fds() as usize)
                        .unwrap_or(0);
                    let fds = self.fds.drain(..wanted.min(self.fds.len())).collect();
                    return Incoming::Frame(frame, fds);
                }
                Ok(_) => {}
                // Framing the bus itself would never send: treat as the end.
                Err(_) => return Incoming::Closed,
            }
            match self.read_more(deadline) {
                Ok(true) => {}
                Ok(false) => return Incoming::Closed,
                Err(()) => return Incoming::Timeout,
            }
        }
    }

    /// One recvmsg: Ok(false) at end of stream (or reset), Err at the
    /// deadline.
    fn read_more(&mut self, deadline: Instant) -> Result<bool, ()> {
        let left = deadline.saturating_duration_since(Instant::now());
        if !wait_readable(self.stream.as_fd(), left) {
            return Err(());
        }
        let mut buf = vec![0u8; 64 * 1024];
        let mut space = [0u8; rustix::cmsg_space!(ScmRights(253))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = loop {
            match rustix::net::recvmsg(
                &self.stream,
                &mut [IoSliceMut::new(&mut buf)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            ) {
                Err(Errno::INTR) => continue,
                Ok(r) => break r.bytes,
                Err(_) => return Ok(false),
            }
        };
        for msg in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = msg {
                self.fds.extend(fds);
            }
        }
        self.inbuf.extend_from_slice(&buf[..got]);
        Ok(got > 0)
    }
}

fn wait_readable(socket: BorrowedFd<'_>, timeout: Duration) -> bool {
    let millis = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    let mut fds = [PollFd::new(&socket, PollFlags::IN)];
    loop {
        match rustix::event::poll(&mut fds, millis) {
            Ok(0) => return false,
            Ok(_) => return true,
            Err(Errno::INTR) => continue,
            Err(_) => return true,
        }
    }
}
