//! For tests: the process's closer of dropped `PassedFd`s
//! (`quickbus_bus::fds::set_closer`, which the daemon points at
//! `fd_closer`), here one that closes in place and remembers the inode of
//! each fd it closed, so that a test can tell a drop went through it. The
//! hook is the process's: once installed, every test's passed fds close
//! here, in place, as without one.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;

static CLOSED: Mutex<Vec<u64>> = Mutex::new(Vec::new());

fn inode(fd: impl AsFd) -> Option<u64> {
    rustix::fs::fstat(fd).ok().map(|stat| stat.st_ino)
}

fn record_then_close(fd: OwnedFd) {
    if let Some(ino) = inode(&fd) {
        CLOSED.lock().unwrap_or_else(|e| e.into_inner()).push(ino);
    }
}

/// Make every dropped `PassedFd` of this test process close here.
pub fn install() {
    quickbus_bus::fds::set_closer(record_then_close);
}

/// Whether a dropped `PassedFd` closed a descriptor of the file `fd`
/// names (by inode: a pipe's two ends have one).
pub fn closed_one_of(fd: impl AsFd) -> bool {
    let ino = inode(fd).expect("fstat");
    CLOSED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&ino)
}
