//! serde `with` modules for the daemon's fields that hold descriptors: a
//! connection's or listener's socket, a queue of received fds. (The fds
//! riding on a queued message are shared between queues:
//! `quickbus_bus::handover::optional_shared_fds`.) Each descriptor is
//! written as its index in the restart's fd table
//! (`quickbus_bus::handover`), which crosses `exec` beside the state
//! (docs/restart.md).
//!
//! Owns: nothing. May touch: the handover's fd table, through
//! `quickbus_bus::handover`.

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};

use quickbus_bus::fds::PassedFd;
use quickbus_bus::handover::{refuse, restore_fd, save_fd};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::socket::{Listening, Stream};

/// Which kind of socket, and its index.
#[derive(Serialize, Deserialize)]
pub(crate) enum Socket {
    Unix(u32),
    Tcp(u32),
}

fn index<S: Serializer>(fd: impl AsFd) -> Result<u32, S::Error> {
    save_fd(fd.as_fd()).map_err(refuse::<S::Error>)
}

fn take<'de, D: Deserializer<'de>>(index: u32) -> Result<OwnedFd, D::Error> {
    restore_fd(index).map_err(quickbus_bus::handover::reject::<D::Error>)
}

/// A connection's socket.
pub mod stream {
    use super::*;

    pub fn serialize<S: Serializer>(stream: &Stream, s: S) -> Result<S::Ok, S::Error> {
        match stream {
            Stream::Unix(u) => Socket::Unix(index::<S>(u)?),
            Stream::Tcp(t) => Socket::Tcp(index::<S>(t)?),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Stream, D::Error> {
        Ok(match Socket::deserialize(d)? {
            Socket::Unix(i) => Stream::Unix(mio::net::UnixStream::from_std(
                std::os::unix::net::UnixStream::from(take::<D>(i)?),
            )),
            Socket::Tcp(i) => Stream::Tcp(mio::net::TcpStream::from_std(
                std::net::TcpStream::from(take::<D>(i)?),
            )),
        })
    }
}

/// A listening socket.
pub mod listening {
    use super::*;

    pub fn serialize<S: Serializer>(listening: &Listening, s: S) -> Result<S::Ok, S::Error> {
        match listening {
            Listening::Unix(u) => Socket::Unix(index::<S>(u)?),
            Listening::Tcp(t) => Socket::Tcp(index::<S>(t)?),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Listening, D::Error> {
        Ok(match Socket::deserialize(d)? {
            Socket::Unix(i) => Listening::Unix(mio::net::UnixListener::from_std(
                std::os::unix::net::UnixListener::from(take::<D>(i)?),
            )),
            Socket::Tcp(i) => Listening::Tcp(mio::net::TcpListener::from_std(
                std::net::TcpListener::from(take::<D>(i)?),
            )),
        })
    }
}

/// Fds received ahead of their message.
pub mod fd_queue {
    use super::*;

    pub fn serialize<S: Serializer>(fds: &VecDeque<PassedFd>, s: S) -> Result<S::Ok, S::Error> {
        let indices: Result<Vec<u32>, S::Error> = fds.iter().map(index::<S>).collect();
        indices?.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<VecDeque<PassedFd>, D::Error> {
        Vec::<u32>::deserialize(d)?
            .into_iter()
            .map(|i| take::<D>(i).map(PassedFd::from))
            .collect()
    }
}
