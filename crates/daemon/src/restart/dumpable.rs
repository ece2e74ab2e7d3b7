//! The process's dumpable flag across the exec of a restart in place.
//!
//! A bus that switched to its `<user>` is not dumpable: the kernel clears
//! the flag when the ids change, so no other process of that user may
//! ptrace the bus, read `/proc/PID/mem` or take its sockets with
//! `pidfd_getfd` (its `/proc/PID` files belong to root). Executing a
//! binary the process may read sets the flag again, so the new image
//! clears it before anything else, and takes the old image's flag back
//! once the handover says what it was: the restarted bus is exactly as
//! dumpable as the fresh one.
//!
//! Owns: that flag. May touch: nothing else.

use rustix::process::{dumpable_behavior, set_dumpable_behavior, DumpableBehavior};

/// Whether this process is dumpable by its own user now (what the
/// handover carries). A process the kernel made dumpable by root only
/// (`fs.suid_dumpable=2`, which systemd-coredump sets) is not: prctl
/// cannot set that value again, so the new image stays non-dumpable,
/// which gives its user no more than root-only did.
pub fn current() -> bool {
    matches!(dumpable_behavior(), Ok(DumpableBehavior::Dumpable))
}

/// Not dumpable, until [`restore`]: the first thing a new image does.
pub fn conceal() {
    if let Err(e) = set_dumpable_behavior(DumpableBehavior::NotDumpable) {
        tracing::warn!("cannot make the bus non-dumpable: {e}");
    }
}

/// The flag the previous image had.
pub fn restore(dumpable: bool) {
    if dumpable {
        if let Err(e) = set_dumpable_behavior(DumpableBehavior::Dumpable) {
            tracing::warn!("cannot make the bus dumpable again: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concealing_and_restoring_round_trips() {
        let was = current();
        conceal();
        assert!(!current());
        restore(true);
        assert!(current());
        conceal();
        restore(was);
        assert_eq!(current(), was);
    }
}
