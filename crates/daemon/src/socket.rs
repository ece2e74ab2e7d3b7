//! The two kinds of stream socket the daemon serves: unix (local, with
//! peer credentials and fd passing) and tcp (neither). Everything after
//! accept reads and writes through the fd, so the rest of the daemon only
//! asks which kind it has where the kinds differ.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use mio::event::Source;
use mio::{Interest, Registry, Token};
use quickbus_bus::fds::PassedFd;

/// A listening socket, before the loop takes it.
#[derive(Debug)]
pub enum ListenSocket {
    Unix(std::os::unix::net::UnixListener),
    Tcp(std::net::TcpListener),
}

impl ListenSocket {
    pub fn try_clone(&self) -> io::Result<ListenSocket> {
        Ok(match self {
            ListenSocket::Unix(l) => ListenSocket::Unix(l.try_clone()?),
            ListenSocket::Tcp(l) => ListenSocket::Tcp(l.try_clone()?),
        })
    }

    /// The loop's non-blocking version.
    pub fn into_mio(self) -> io::Result<Listening> {
        Ok(match self {
            ListenSocket::Unix(l) => {
                l.set_nonblocking(true)?;
                Listening::Unix(mio::net::UnixListener::from_std(l))
            }
            ListenSocket::Tcp(l) => {
                l.set_nonblocking(true)?;
                Listening::Tcp(mio::net::TcpListener::from_std(l))
            }
        })
    }
}

/// A listening socket registered with the loop.
pub enum Listening {
    Unix(mio::net::UnixListener),
    Tcp(mio::net::TcpListener),
}

impl Listening {
    pub fn accept(&self) -> io::Result<Stream> {
        Ok(match self {
            Listening::Unix(l) => Stream::Unix(l.accept()?.0),
            Listening::Tcp(l) => {
                let stream = l.accept()?.0;
                // Small messages go out at once (libdbus writes whole
                // messages; Nagle would only add latency to round trips).
                stream.set_nodelay(true)?;
                Stream::Tcp(stream)
            }
        })
    }
}

/// An accepted connection's socket.
#[derive(Debug)]
pub enum Stream {
    Unix(mio::net::UnixStream),
    Tcp(mio::net::TcpStream),
}

impl Stream {
    /// Whether it can carry fds and tell who the peer is.
    pub fn is_unix(&self) -> bool {
        matches!(self, Stream::Unix(_))
    }
}

/// A unix socket's unread input may hold fds a client passed, released
/// by the socket's last close, which then blocks as long as closing them
/// does (a lingering socket: docs/reliability.md, "Fds clients pass"). A
/// connection cut off before the bus read all it sent leaves such input.
/// So the last close is the fd closer's: it gets a copy, and the close
/// here is not the last. (A registered connection is deregistered before
/// it is dropped, `Server::close`: epoll forgets a socket only at its
/// last close.)
impl Drop for Stream {
    fn drop(&mut self) {
        if let Stream::Unix(socket) = self {
            if let Ok(copy) = socket.as_fd().try_clone_to_owned() {
                drop(PassedFd::from(copy));
            }
        }
    }
}

impl AsFd for Stream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Unix(s) => s.as_fd(),
            Stream::Tcp(s) => s.as_fd(),
        }
    }
}

/// Registration is the inner socket's.
macro_rules! delegate_source {
    ($type:ident, $a:ident, $b:ident) => {
        impl Source for $type {
            fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
                match self {
                    $type::$a(s) => s.register(r, t, i),
                    $type::$b(s) => s.register(r, t, i),
                }
            }

            fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
                match self {
                    $type::$a(s) => s.reregister(r, t, i),
                    $type::$b(s) => s.reregister(r, t, i),
                }
            }

            fn deregister(&mut self, r: &Registry) -> io::Result<()> {
                match self {
                    $type::$a(s) => s.deregister(r),
                    $type::$b(s) => s.deregister(r),
                }
            }
        }
    };
}

delegate_source!(Stream, Unix, Tcp);
delegate_source!(Listening, Unix, Tcp);

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_unix_connections_last_close_is_the_fd_closers() {
        // A child forked meanwhile would hold the pipe's read end.
        let _no_forks = crate::test_forks::no_forks();
        crate::test_closer::install();
        let (ours, peer) = UnixStream::pair().unwrap();
        // A pipe's read end in the socket's unread input, the sender's
        // copy closed.
        let (read_end, write_end) = rustix::pipe::pipe().unwrap();
        let fds = [read_end.as_fd()];
        let mut space = vec![0u8; rustix::cmsg_space!(ScmRights(1))];
        let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
        assert!(control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)));
        rustix::net::sendmsg(
            &peer,
            &[io::IoSlice::new(b"x")],
            &mut control,
            rustix::net::SendFlags::empty(),
        )
        .unwrap();
        drop(read_end);
        let stream = Stream::Unix(mio::net::UnixStream::from_std(ours));
        let socket = stream.as_fd().try_clone_to_owned().unwrap();
        drop(stream);
        assert!(crate::test_closer::closed_one_of(&socket));
        drop(socket);
        // The read end went with the socket's last close.
        assert_eq!(
            rustix::io::write(&write_end, b"x"),
            Err(rustix::io::Errno::PIPE)
        );
    }
}
