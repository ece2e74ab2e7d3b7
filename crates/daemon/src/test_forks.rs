//! Test threads that start programs, kept apart from test threads that
//! need every copy of a descriptor to be their own.
//!
//! A child forked by one test thread holds a copy of every descriptor of
//! the test process until it executes its program. In that moment a
//! script another thread has just written is still open for writing in
//! it (running the script fails with ETXTBSY), and a pipe end another
//! thread has just closed is not closed yet (a write does not see EPIPE).

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

static FORKS: RwLock<()> = RwLock::new(());

/// Held while a test starts programs; any number at once.
pub fn starting_programs() -> RwLockReadGuard<'static, ()> {
    FORKS.read().unwrap_or_else(|e| e.into_inner())
}

/// Held while no test thread may fork.
pub fn no_forks() -> RwLockWriteGuard<'static, ()> {
    FORKS.write().unwrap_or_else(|e| e.into_inner())
}
