//! Starting a thread of the daemon's own (the pool's, the log's, the fd
//! closer's, the spawner's) with every signal blocked from its first
//! instruction on. The
//! daemon handles its signals on the loop's thread, through signal-hook's
//! pipe; a thread that could take one would have its syscalls
//! interrupted, and a signal a restart holds pending could be taken by a
//! thread that has no use for it. A thread inherits its creator's mask,
//! so the mask is blocked around the spawn (and restored after), rather
//! than by the new thread itself, which could take a signal before it got
//! to block them.

use std::io;
use std::thread::{Builder, JoinHandle};

use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};

/// `builder.spawn(f)`, the new thread starting with every signal blocked.
pub fn spawn<F, T>(builder: Builder, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let mut previous = SigSet::empty();
    let blocked = pthread_sigmask(
        SigmaskHow::SIG_BLOCK,
        Some(&SigSet::all()),
        Some(&mut previous),
    );
    let spawned = builder.spawn(f);
    if blocked.is_ok() {
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&previous), None);
    }
    spawned
}

#[cfg(test)]
mod tests {
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal};

    #[test]
    fn the_thread_starts_with_every_signal_blocked_and_the_callers_mask_is_kept() {
        let mut before = SigSet::empty();
        pthread_sigmask(SigmaskHow::SIG_SETMASK, None, Some(&mut before)).unwrap();
        let handle = super::spawn(std::thread::Builder::new(), || {
            let mut mask = SigSet::empty();
            pthread_sigmask(SigmaskHow::SIG_SETMASK, None, Some(&mut mask)).unwrap();
            [
                Signal::SIGHUP,
                Signal::SIGTERM,
                Signal::SIGUSR2,
                Signal::SIGCHLD,
            ]
            .iter()
            .all(|&s| mask.contains(s))
        })
        .unwrap();
        assert!(handle.join().unwrap(), "a signal was not blocked");
        let mut after = SigSet::empty();
        pthread_sigmask(SigmaskHow::SIG_SETMASK, None, Some(&mut after)).unwrap();
        assert_eq!(
            [Signal::SIGHUP, Signal::SIGTERM].map(|s| before.contains(s)),
            [Signal::SIGHUP, Signal::SIGTERM].map(|s| after.contains(s)),
        );
    }
}
