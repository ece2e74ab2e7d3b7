//! The fds that travel in messages ([`PassedFd`]), and who closes them.
//!
//! An fd a client passes may be the last reference to something whose
//! close blocks: a TCP socket with `SO_LINGER` set and a send queue its
//! peer never reads (`close` waits up to the linger time, which the client
//! chose), a file on FUSE or NFS (a flush on every close). Once the
//! client has closed its own copy, whoever drops the bus's copy waits
//! that long, and if that were the bus's loop (or a thread of its pool,
//! which the loop waits for), every client would wait. So a [`PassedFd`]
//! never closes where it is dropped: it hands its fd to the closer the
//! daemon registered once ([`set_closer`]), which closes it on threads of
//! its own. With none registered (this crate's tests, tools that use the
//! core alone) it closes in place.
//!
//! Owns: the type of a message's fds and the process-wide closer hook.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::OnceLock;

/// What closes a dropped [`PassedFd`], registered once per process.
static CLOSER: OnceLock<fn(OwnedFd)> = OnceLock::new();

/// Register the function every dropped [`PassedFd`] hands its fd to, for
/// the rest of the process's life; false if one was registered already
/// (which stays).
pub fn set_closer(closer: fn(OwnedFd)) -> bool {
    CLOSER.set(closer).is_ok()
}

/// An fd carried by a message: one a client passed, or one the bus
/// attaches itself (a pidfd in a credentials reply). Dropping it closes
/// it through the registered closer ([`set_closer`]), never in place
/// when one is registered.
#[derive(Debug)]
pub struct PassedFd(Option<OwnedFd>);

impl From<OwnedFd> for PassedFd {
    fn from(fd: OwnedFd) -> PassedFd {
        PassedFd(Some(fd))
    }
}

impl PassedFd {
    fn fd(&self) -> &OwnedFd {
        // Only `Drop` takes it out.
        self.0.as_ref().expect("a passed fd taken before its drop")
    }
}

impl AsFd for PassedFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd().as_fd()
    }
}

impl AsRawFd for PassedFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd().as_raw_fd()
    }
}

impl Drop for PassedFd {
    fn drop(&mut self) {
        let Some(fd) = self.0.take() else {
            return;
        };
        match CLOSER.get() {
            Some(close) => close(fd),
            None => drop(fd),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    /// A dropped fd is closed in place while no closer is registered
    /// (none is in this crate's tests): the socket's peer reads its end.
    #[test]
    fn without_a_closer_a_dropped_fd_is_closed_in_place() {
        let (ours, mut peer) = UnixStream::pair().unwrap();
        let raw = ours.as_raw_fd();
        let passed = PassedFd::from(OwnedFd::from(ours));
        assert_eq!(passed.as_raw_fd(), raw);
        assert_eq!(passed.as_fd().as_raw_fd(), raw);
        drop(passed);
        assert!(CLOSER.get().is_none());
        assert_eq!(peer.read(&mut [0; 1]).unwrap(), 0);
    }
}
