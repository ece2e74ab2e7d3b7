//! What a bench client needs from a connection (send raw bytes, receive
//! a parsed message), for a bus connection and for a bare D-Bus peer over
//! a socketpair (no SASL, no Hello: the floor without a bus).

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use bytes::BytesMut;
use quickbus_client::{Connection, Error};
use quickbus_wire::Message;

pub trait Endpoint: Send {
    fn send(&mut self, message: &[u8]) -> Result<(), Error>;
    fn receive(&mut self) -> Result<Message, Error>;
}

impl Endpoint for Connection {
    fn send(&mut self, message: &[u8]) -> Result<(), Error> {
        self.send_raw(message, &[])
    }

    fn receive(&mut self) -> Result<Message, Error> {
        Connection::receive(self).map(|(message, _fds)| message)
    }
}

/// Smallest read; reads grow to what a frame still needs.
const MIN_READ: usize = 4 * 1024;

/// A D-Bus message stream over an already connected socket, framed and
/// validated with quickbus-wire like the client does.
pub struct Peer {
    stream: UnixStream,
    inbuf: BytesMut,
    timeout: Duration,
}

impl Peer {
    pub fn new(stream: UnixStream, timeout: Duration) -> Peer {
        let _ = stream.set_read_timeout(Some(timeout));
        let _ = stream.set_write_timeout(Some(timeout));
        Peer {
            stream,
            inbuf: BytesMut::with_capacity(256 * 1024),
            timeout,
        }
    }

    /// Two peers connected to each other.
    pub fn pair(timeout: Duration) -> std::io::Result<(Peer, Peer)> {
        let (a, b) = UnixStream::pair()?;
        Ok((Peer::new(a, timeout), Peer::new(b, timeout)))
    }

    /// Waits in poll first, as the client does (see `wait_readable`).
    fn read_more(&mut self, at_least: usize) -> Result<(), Error> {
        quickbus_client::wait_readable(self.stream.as_fd(), Some(self.timeout))?;
        let start = self.inbuf.len();
        self.inbuf.resize(start + at_least.max(MIN_READ), 0);
        let got = loop {
            match self.stream.read(&mut self.inbuf[start..]) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        match got {
            Ok(0) => {
                self.inbuf.truncate(start);
                Err(Error::Closed)
            }
            Ok(n) => {
                self.inbuf.truncate(start + n);
                Ok(())
            }
            Err(e) => {
                self.inbuf.truncate(start);
                Err(io_error(e))
            }
        }
    }
}

impl Endpoint for Peer {
    fn send(&mut self, message: &[u8]) -> Result<(), Error> {
        self.stream.write_all(message).map_err(io_error)
    }

    fn receive(&mut self) -> Result<Message, Error> {
        loop {
            match quickbus_wire::frame_length(&self.inbuf)? {
                Some(total) if self.inbuf.len() >= total => {
                    let frame = self.inbuf.split_to(total).freeze();
                    return Ok(Message::parse(frame)?);
                }
                Some(total) => {
                    let missing = total - self.inbuf.len();
                    self.read_more(missing)?
                }
                None => self.read_more(0)?,
            }
        }
    }
}

/// A socket time-out is Error::Timeout, as the client reports it.
fn io_error(e: std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Error::Timeout,
        _ => Error::Io(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::Template;

    #[test]
    fn peers_exchange_whole_messages_of_any_size() {
        let (mut a, mut b) = Peer::pair(Duration::from_secs(10)).unwrap();
        let sender = std::thread::spawn(move || {
            for (serial, size) in [(1, 0), (2, 70_000), (3, 5)] {
                let mut t = Template::signal(size);
                t.with_serial(serial);
                a.send(t.bytes()).unwrap();
            }
            a
        });
        for serial in 1..=3 {
            assert_eq!(b.receive().unwrap().serial(), serial);
        }
        drop(sender.join().unwrap());
        assert!(matches!(b.receive(), Err(Error::Closed)));
    }
}
