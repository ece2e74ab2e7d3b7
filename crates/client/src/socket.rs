//! The socket under a connection: unix (EXTERNAL, fd passing) or tcp
//! (ANONYMOUS, no fds). Reads and writes go through the fd either way.

use std::io;
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

#[derive(Debug)]
pub enum Socket {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Socket {
    pub fn is_unix(&self) -> bool {
        matches!(self, Socket::Unix(_))
    }

    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        match self {
            Socket::Unix(s) => s.read_timeout(),
            Socket::Tcp(s) => s.read_timeout(),
        }
    }

    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Unix(s) => s.set_read_timeout(timeout),
            Socket::Tcp(s) => s.set_read_timeout(timeout),
        }
    }

    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Unix(s) => s.set_write_timeout(timeout),
            Socket::Tcp(s) => s.set_write_timeout(timeout),
        }
    }
}

impl AsFd for Socket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Socket::Unix(s) => s.as_fd(),
            Socket::Tcp(s) => s.as_fd(),
        }
    }
}
