//! The floor of what any bus adds to a round trip: a thread that only
//! moves bytes between two sockets, woken by epoll, with no parsing,
//! routing or anything else a bus does. Its round trip and its CPU time
//! per message are what a daemon costs at the very least on this machine.

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;

use rustix::event::epoll;

/// A running relay between the two sockets it hands out.
pub struct Relay {
    thread: JoinHandle<()>,
    /// The thread's kernel id, to read its CPU time.
    tid: i32,
}

impl Relay {
    /// A relay and its two ends: what is written to one comes out of the
    /// other. It stops when either end is closed.
    pub fn start() -> io::Result<(Relay, UnixStream, UnixStream)> {
        let (near, relay_near) = UnixStream::pair()?;
        let (relay_far, far) = UnixStream::pair()?;
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let _ = tid_tx.send(rustix::thread::gettid().as_raw_nonzero().get());
            let _ = relay([relay_near, relay_far]);
        });
        let tid = tid_rx
            .recv()
            .map_err(|_| io::Error::other("the relay thread did not start"))?;
        Ok((Relay { thread, tid }, near, far))
    }

    /// The relay thread's CPU time so far, in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        let path = format!("/proc/self/task/{}/schedstat", self.tid);
        std::fs::read_to_string(path)
            .ok()
            .and_then(|text| text.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0.0, |ns| ns as f64 / 1e9)
    }

    /// Wait for the thread (after an end was closed).
    pub fn join(self) {
        let _ = self.thread.join();
    }
}

/// Forward whatever either socket has to the other until one closes.
fn relay(mut sockets: [UnixStream; 2]) -> io::Result<()> {
    let poll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
    for (i, socket) in sockets.iter().enumerate() {
        epoll::add(
            &poll,
            socket.as_fd(),
            epoll::EventData::new_u64(i as u64),
            epoll::EventFlags::IN,
        )?;
    }
    let mut events = epoll::EventVec::with_capacity(2);
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        epoll::wait(&poll, &mut events, -1)?;
        for event in &events {
            let from = event.data.u64() as usize;
            let got = sockets[from].read(&mut buf)?;
            if got == 0 {
                return Ok(());
            }
            sockets[1 - from].write_all(&buf[..got])?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_cross_both_ways_and_a_closed_end_stops_it() {
        let (relay, mut near, mut far) = Relay::start().unwrap();
        near.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        far.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        far.write_all(b"pong").unwrap();
        near.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"pong");
        // Its thread ran: the scheduler has counted time for it.
        assert!(relay.cpu_seconds() > 0.0);
        drop(near);
        relay.join();
    }
}
